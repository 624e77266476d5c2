"""The `Check` every `specls doctor` check returns, and the checks of the environment: Python, torch and its
device, the pinned library versions, the tree-sitter grammars."""

from __future__ import annotations

import importlib.metadata
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Status = Literal["ok", "warn", "fail", "skip"]
PROJECT_ROOT = Path(__file__).resolve().parents[3]
# The versions this release is tested with, when no installed metadata or pyproject.toml says otherwise.
PINNED = {
    "torch": "==2.13.0",
    "transformers": "==5.24.*",
    "tokenizers": "==0.23.*",
    "pygls": "==2.1.1",
    "lsprotocol": "==2025.0.0",
    "tree-sitter": "==0.26.1",
}
INSTALL_FIX = (
    "reinstall the pinned versions: `pip install -e .` in the specls checkout (see scripts/setup.sh)"
)
# One small, valid program per grammar: it must parse without an error node.
GRAMMAR_SAMPLES = {
    "python": ("python", "def add(a, b):\n    return a + b\n"),
    "javascript": ("javascript", "function add(a, b) {\n  return a + b;\n}\n"),
    "typescript": ("typescript", "function add(a: number, b: number): number {\n  return a + b;\n}\n"),
    "tsx": ("typescriptreact", "const App = () => <div className='x'>{1 + 2}</div>;\n"),
    "go": ("go", "package main\n\nfunc add(a int, b int) int {\n\treturn a + b\n}\n"),
    "rust": ("rust", "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n"),
}


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


def check_python() -> list[Check]:
    version = ".".join(str(part) for part in sys.version_info[:3])
    return [Check("python", "ok", f"{version} at {sys.executable}")]


def check_torch(device: str) -> list[Check]:
    try:
        import torch
    except ImportError as exc:
        return [Check("torch", "fail", f"cannot import torch: {exc}", INSTALL_FIX)]
    detail = f"{torch.__version__}, {torch.get_num_threads()} CPU threads"
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        try:
            probe = torch.ones(64, 64, device="cuda")
            float((probe @ probe).sum().item())
        except Exception as exc:  # a driver or build mismatch shows up on the first kernel
            return [
                Check(
                    "torch",
                    "fail",
                    f"{detail}; CUDA device {name} is visible but a test kernel failed: {exc}",
                    "install the torch build that matches your CUDA driver, or run with --device cpu",
                )
            ]
        return [Check("torch", "ok", f"{detail}; CUDA: {name} ({torch.cuda.device_count()} device(s))")]
    if device.startswith("cuda"):
        return [
            Check(
                "torch",
                "fail",
                f"{detail}; --device {device} was asked for but CUDA is not available",
                "install a CUDA build of torch on a machine with an NVIDIA GPU, or use --device cpu",
            )
        ]
    return [
        Check(
            "torch", "ok", f"{detail}; no CUDA, the server runs on the CPU (the bundled pair is made for it)"
        )
    ]


def pinned_requirements() -> dict[str, str]:
    """Distribution name -> version specifier, from the installed specls metadata, else pyproject.toml."""
    from packaging.requirements import Requirement

    lines: list[str] = []
    try:
        lines = importlib.metadata.requires("specls") or []
    except importlib.metadata.PackageNotFoundError:
        pyproject = PROJECT_ROOT / "pyproject.toml"
        if pyproject.is_file():
            import tomllib

            lines = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    wanted = dict(PINNED)
    for line in lines:
        requirement = Requirement(line)
        if requirement.name in wanted and not requirement.marker:
            wanted[requirement.name] = str(requirement.specifier)
    return wanted


def check_versions(wanted: dict[str, str]) -> list[Check]:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    checks: list[Check] = []
    fitting: list[str] = []
    for name, specifier in wanted.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            checks.append(Check(name, "fail", "not installed", INSTALL_FIX))
            continue
        try:
            # Local build tags (+cpu, +cu124) do not change the API; compare the public version.
            fits = Version(Version(installed).public) in SpecifierSet(specifier)
        except InvalidVersion:
            fits = False
        if fits:
            fitting.append(f"{name} {installed}")
        else:
            checks.append(
                Check(name, "warn", f"{installed} installed, specls is tested with {specifier}", INSTALL_FIX)
            )
    if fitting:
        checks.insert(0, Check("versions", "ok", ", ".join(fitting)))
    return checks


def check_grammars() -> list[Check]:
    from lsp_server.languages import canonical_language, new_parser

    ok: list[str] = []
    checks: list[Check] = []
    for name, (language_id, sample) in GRAMMAR_SAMPLES.items():
        try:
            parser = new_parser(canonical_language(language_id))
            if parser is None:
                raise LookupError("no grammar registered")
            tree = parser.parse(sample.encode("utf-8"))
            if tree.root_node.has_error:
                raise ValueError("a valid sample parsed with errors")
        except Exception as exc:
            wheel = "tree-sitter-typescript" if name == "tsx" else f"tree-sitter-{name}"
            checks.append(
                Check(
                    f"grammar {name}",
                    "warn",
                    f"{type(exc).__name__}: {exc}; {name} files get indentation-based stop rules only",
                    f"`pip install {wheel}` (the version pinned in pyproject.toml)",
                )
            )
            continue
        ok.append(name)
    if ok:
        checks.insert(0, Check("tree-sitter grammars", "ok", ", ".join(ok)))
    return checks
