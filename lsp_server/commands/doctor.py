"""`specls doctor`: check the environment, say what is wrong and how to fix it; exit 1 on any problem.

Checks, in the order a problem in one makes the next pointless: Python, torch and its device, the pinned
library versions, the model pair (paths, sizes, tokenizer compatibility, FIM tokens), the tree-sitter
grammars, and finally a real `specls serve` answering one completion. `specls info --json` stays the
machine-readable description of the pair; this is for people.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lsp_server.commands.model_args import add_model_arguments

Status = Literal["ok", "warn", "fail", "skip"]
PROJECT_ROOT = Path(__file__).resolve().parents[2]
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
PROBE_PREFIX = "def greet(name):\n    message = "


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--device", default="auto", help="the device the server would use (default: auto)")
    parser.add_argument("--no-server", action="store_true", help="skip starting the server")
    parser.add_argument(
        "--server-timeout", type=float, default=300, help="seconds for the server to load and answer"
    )


def run(args: argparse.Namespace) -> int:
    checks: list[Check] = []

    def report(name: str, check: Callable[[], list[Check]]) -> None:
        try:
            new = check()
        except Exception as exc:  # a check that cannot even run (a missing package) is a problem to show
            new = [Check(name, "fail", f"the check itself failed: {type(exc).__name__}: {exc}", INSTALL_FIX)]
        for item in new:
            checks.append(item)
            print(format_check(item), flush=True)

    print("specls doctor")
    report("python", check_python)
    report("torch", lambda: check_torch(args.device))
    report("versions", lambda: check_versions(pinned_requirements()))
    report("model pair", lambda: check_model_pair(args.target, args.draft))
    report("dtype", lambda: check_dtype(args.target, args.device, args.dtype))
    report("runtime", lambda: check_runtime(args.target, args.device))
    report("tree-sitter grammars", check_grammars)
    if args.no_server:
        report("server", lambda: [Check("server", "skip", "not started (--no-server)")])
    elif any(check.status == "fail" for check in checks):
        report("server", lambda: [Check("server", "skip", "not started: fix the problems above first")])
    else:
        report(
            "server",
            lambda: check_server(args.target, args.draft, args.device, args.server_timeout, args.dtype),
        )
    problems = sum(check.status == "fail" for check in checks)
    warnings = sum(check.status == "warn" for check in checks)
    if problems:
        print(f"\n{problems} problem{'s' if problems > 1 else ''} found; see the fixes above.")
        return 1
    print(f"\neverything looks fine{f' ({warnings} warnings)' if warnings else ''}.")
    return 0


def format_check(check: Check) -> str:
    label = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "skip": "skip"}[check.status]
    lines = [f"  {label}  {check.name}: {check.detail}"]
    if check.fix:
        lines.append(f"        fix: {check.fix}")
    return "\n".join(lines)


# --- environment ---


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


# --- models ---


def check_model_pair(target: str | None, draft: str | None) -> list[Check]:
    """Each model's folder and size, then whether the two speak the same tokens and carry FIM tokens."""
    from engine.models import (
        NO_DRAFT,
        ModelLoadError,
        Role,
        check_model_folder,
        default_draft,
        describe_model,
        resolve_model_path,
    )

    checks: list[Check] = []
    sources = {}
    roles: tuple[Role, ...] = ("target", "draft")
    draft = draft if draft is not None else default_draft(target)
    for role, spec in zip(roles, (target, draft), strict=True):
        if role == "draft" and spec == NO_DRAFT:
            checks.append(Check("draft model", "ok", "none: lookup, suffix and stale drafting only"))
            continue
        try:
            source = resolve_model_path(spec, role)
            if source.is_local:
                check_model_folder(Path(source.location), role)
                info = describe_model(source)
                detail = (
                    f"{source.location}: {info.get('model_type')}, {info.get('params', 0):,} params, "
                    f"{info.get('bytes', 0) / 1e6:.1f} MB, context {info.get('context_length')}"
                )
            else:
                detail = f"hub id {source.location!r} (downloaded on first use; needs the network once)"
        except ModelLoadError as exc:
            checks.append(Check(f"{role} model", "fail", str(exc), _model_fix(role, spec)))
            continue
        except Exception as exc:  # a corrupt safetensors header, an unreadable folder
            checks.append(
                Check(f"{role} model", "fail", f"{type(exc).__name__}: {exc}", _model_fix(role, spec))
            )
            continue
        sources[role] = source
        checks.append(Check(f"{role} model", "ok", detail))
    if len(sources) == 2 and all(source.is_local for source in sources.values()):
        checks.extend(check_tokenizers(sources["target"].location, sources["draft"].location))
    elif draft == NO_DRAFT and "target" in sources and sources["target"].is_local:
        from engine.models import special_tokens

        checks.append(check_fim(tuple(special_tokens(Path(sources["target"].location)))))
    elif len(sources) < 2:
        checks.append(Check("tokenizers", "skip", "needs both models"))
    return checks


def _model_fix(role: str, spec: str | None) -> str:
    if spec in (None, "bundled"):
        return (
            f"train the bundled pair with `specls train` (it writes engine/bundled/{role}), "
            f"or point --{role} at a Hugging Face model folder"
        )
    return f"pass --{role} a folder that holds config.json, model.safetensors and the tokenizer files"


def check_tokenizers(target_dir: str, draft_dir: str) -> list[Check]:
    import json

    from transformers import AutoTokenizer

    from engine.models import ModelLoadError, check_same_tokenizer

    try:
        target = AutoTokenizer.from_pretrained(target_dir)
        draft = AutoTokenizer.from_pretrained(draft_dir)
    except Exception as exc:
        return [
            Check("tokenizers", "fail", f"cannot load: {exc}", "copy the tokenizer files next to the weights")
        ]
    try:
        check_same_tokenizer(target, draft)
    except ModelLoadError as exc:
        return [Check("tokenizers", "fail", str(exc), "use a draft from the target's model family")]
    checks = [
        Check(
            "tokenizers", "ok", f"target and draft share one vocabulary of {len(target.get_vocab()):,} tokens"
        )
    ]
    sizes = [
        json.loads((Path(folder) / "config.json").read_text())["vocab_size"]
        for folder in (target_dir, draft_dir)
    ]
    if sizes[0] != sizes[1]:
        checks.append(
            Check(
                "vocab size",
                "warn",
                f"target outputs {sizes[0]} logits, draft {sizes[1]}; only the shared ids can be proposed",
            )
        )
    checks.append(check_fim(tuple(target.all_special_tokens)))
    return checks


def check_fim(special_tokens: tuple[str, ...]) -> Check:
    from lsp_server.context.fim import detect_fim_template

    template = detect_fim_template(special_tokens)
    if template is None:
        return Check(
            "fill-in-the-middle",
            "warn",
            "the tokenizer has no FIM tokens: prompts are prefix-only; the text after the cursor still "
            "drives the stop rules",
            "for fill-in-the-middle use a code model trained with FIM (the bundled pair, Qwen2.5-Coder, ...)",
        )
    return Check("fill-in-the-middle", "ok", f"{template.name} template")


def check_dtype(target: str | None, device: str, requested: str) -> list[Check]:
    """The precision the server would run in, and the evidence for it (CPU flags, model size)."""
    from engine.models import (
        choose_dtype,
        cpu_bf16_support,
        pick_device,
        resolve_model_path,
        safetensors_params,
    )

    source = resolve_model_path(target, "target")
    params = safetensors_params(Path(source.location)) if source.is_local else None
    name, reason = choose_dtype(requested, pick_device(device).type, params, cpu_bf16_support())
    lossless = "greedy speculative output is token-identical to plain decoding"
    if name == "bf16":
        lossless = (
            "greedy speculative output may differ from plain decoding only at near-ties (--dtype fp32: never)"
        )
    return [Check("dtype", "ok", f"{name} ({reason}); {lossless}")]


def check_runtime(target: str | None, device: str) -> list[Check]:
    """What would decode the target (llama.cpp in process, or torch) and why; never loads the model."""
    from engine.llama_cpp_decoder import find_gguf, llama_cpp_available
    from engine.models import pick_device, resolve_model_path
    from engine.runtime import choose_runtime, llama_cpp_blocker

    source = resolve_model_path(target, "target")
    gguf = find_gguf(Path(source.location)) if source.is_local else None
    blocker = llama_cpp_blocker(pick_device(device).type, gguf, llama_cpp_available())
    runtime, reason = choose_runtime("auto", "none", blocker)
    if runtime == "llama.cpp" and gguf is not None:
        detail = (
            f"llama.cpp in process over {gguf.name} ({reason}); greedy speculative output may differ from "
        )
        detail += "plain decoding only at near-ties"
        return [Check("runtime", "ok", detail)]
    return [Check("runtime", "ok", f"torch ({reason})")]


# --- grammars ---


def check_grammars() -> list[Check]:
    from lsp_server.context.languages import canonical_language, new_parser

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


# --- the server itself ---


def check_server(
    target: str | None, draft: str | None, device: str, timeout_s: float, dtype: str = "auto"
) -> list[Check]:
    server_args = ["--backend", "local", "--device", device, "--dtype", dtype]
    server_args += [
        part for flag, value in (("--target", target), ("--draft", draft)) if value for part in (flag, value)
    ]
    try:
        probe = asyncio.run(_probe_server(server_args, timeout_s))
    except Exception as exc:
        return [
            Check(
                "server",
                "fail",
                f"{type(exc).__name__}: {exc}",
                "run `specls serve --log-file specls.log --log-level DEBUG` and read the log",
            )
        ]
    detail = (
        f"started and loaded in {probe.load_s:.1f} s; first completion in {probe.first_ms:.0f} ms, "
        f"the next in {probe.warm_ms:.0f} ms"
    )
    if not probe.answer.strip():
        return [
            Check(
                "server", "warn", f"{detail}, but the suggestion was empty", "try `specls demo` to see more"
            )
        ]
    last_line = PROBE_PREFIX.splitlines()[-1].strip()
    return [Check("server", "ok", f"{detail}; after {last_line!r} it suggested {_short(probe.answer)!r}")]


def _short(text: str, width: int = 40) -> str:
    from lsp_server.demo.view import one_line

    return one_line(text, width)


@dataclass(frozen=True)
class _Probe:
    answer: str
    load_s: float
    first_ms: float  # includes one-time costs of the first forward passes
    warm_ms: float  # the same prompt in a second document: what a keystroke costs once running


async def _probe_server(server_args: list[str], timeout_s: float) -> _Probe:
    from lsp_server.demo.client import ServerSession

    session = ServerSession()
    started = time.monotonic()
    try:
        await session.start(server_args)
        await session.wait_ready(timeout_s)
        loaded = time.monotonic() - started
        answers, latencies = [], []
        for name in ("probe.py", "probe_again.py"):
            uri = f"file:///specls-doctor/{name}"
            session.open(uri, PROBE_PREFIX, "python")
            asked = time.monotonic()
            answers.append(
                await asyncio.wait_for(session.inline_completion(uri, len(PROBE_PREFIX)), timeout_s)
            )
            latencies.append((time.monotonic() - asked) * 1000)
            session.close(uri)
        return _Probe(answers[0], loaded, latencies[0], latencies[1])
    finally:
        await session.stop()
