"""The seams of the layout: `lsp_server` knows LSP and text and never imports torch (the local engine is
imported lazily, only when a command or the local backend needs it); `engine` knows tokens and tensors and
never imports pygls, lsprotocol or the server; and the server proper (`lsp_server/` outside `app/`) never
imports the application around it (`lsp_server.app`: the command line, its commands, the demo) or `bench`.

Checked twice: statically, over every import statement in `engine/`, and by importing every module of each
package in a fresh interpreter and looking at what ended up in `sys.modules`.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LSP_ONLY = ("pygls", "lsprotocol", "lsp_server")
TENSOR_ONLY = ("torch", "transformers")

IMPORT_ALL = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
names = [info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names, "loaded": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def imported_roots(path: Path) -> set[str]:
    """The top-level package of every import statement in a file, at any depth (lazy imports too)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def imported_modules(path: Path) -> set[str]:
    """The full dotted name of every absolute import in a file, at any depth."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _is_app(module: str) -> bool:
    return any(module == root or module.startswith(root + ".") for root in ("lsp_server.app", "bench"))


def import_everything(package: str) -> tuple[list[str], set[str]]:
    """(modules of `package`, top-level packages loaded) after importing all of it in a new interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, package],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["modules"], set(report["loaded"])


def test_no_engine_file_imports_the_lsp_side() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_roots(path) & set(LSP_ONLY))
        for path in sorted((ROOT / "engine").rglob("*.py"))
        if "bundled" not in path.parts
    }
    assert {path: roots for path, roots in offenders.items() if roots} == {}


def test_the_server_proper_imports_neither_the_app_nor_bench() -> None:
    server = ROOT / "lsp_server"
    offenders = {
        str(path.relative_to(ROOT)): sorted(filter(_is_app, imported_modules(path)))
        for path in sorted(server.rglob("*.py"))
        if path.relative_to(server).parts[0] != "app"
    }
    assert len(offenders) > 30  # the whole server was read
    assert {path: names for path, names in offenders.items() if names} == {}
    assert (
        _is_app("lsp_server.app.cli") and _is_app("bench.metrics") and not _is_app("lsp_server.application")
    )


def test_the_static_check_sees_lazy_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from pygls.server import LanguageServer\n    import torch.nn\n")
    assert imported_roots(sample) == {"pygls", "torch"}


@pytest.mark.timeout(300)
def test_importing_all_of_lsp_server_loads_no_torch() -> None:
    modules, loaded = import_everything("lsp_server")
    assert "lsp_server.scheduler" in modules and "lsp_server.backends.openai" in modules
    assert "pygls" in loaded  # the import really happened
    assert loaded.isdisjoint(TENSOR_ONLY), sorted(loaded & set(TENSOR_ONLY))


@pytest.mark.timeout(300)
def test_importing_all_of_engine_loads_no_lsp_code() -> None:
    modules, loaded = import_everything("engine")
    assert "engine.speculative" in modules and "engine.service" in modules
    assert "torch" in loaded  # the import really happened
    assert loaded.isdisjoint(LSP_ONLY), sorted(loaded & set(LSP_ONLY))
