"""The seams of the layout: `lsp_server` knows LSP and text and never imports torch (the local engine is
imported lazily, only when a command or the local backend needs it); `engine` knows tokens and tensors and
never imports pygls, lsprotocol or the server; and the server proper (`lsp_server/` outside `app/`) never
imports the application around it (`lsp_server.app`: the command line, its commands, the demo) or `bench`.

Checked twice: statically, over every import statement in `engine/`, and by importing every module of each
package in a fresh interpreter and looking at what ended up in `sys.modules`.

Two rules keep the folders layered, checked statically over every import statement (at module level, lazy in
a function, and under `if TYPE_CHECKING:` alike, since a type-only import is still an arrow a reader follows
and a refactor can turn into a runtime one):

- No loop between folders. Every folder below `lsp_server/` or `engine/` (`lsp_server/context/`,
  `engine/drafters/`, `engine/train/`, `lsp_server/app/commands/`, ...) counts as one node, as a whole; every
  module directly in `lsp_server/` or `engine/` (`lsp_server/config.py`, `engine/models.py`) is a node of its
  own. An import draws an arrow from the importer's node to the imported module's node; the graph has no
  cycle. So a folder is a layer: nothing it imports imports it back, directly or through other modules (the
  top-level modules, which wire the folders together, are not one node, or the graph would be all one loop).
- Training is a consumer of the runtime engine, never a part of it: `engine.train` is imported only from
  `engine/train/` itself and from the application (`lsp_server/app/`, whose `specls train` runs it). Every
  other module of `engine/` and of the server proper stays free of it. `bench/` and `tests/`, outside both
  packages, may import it (the benchmarks take the held-out split from `engine.train.corpus`).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
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


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every module of `packages` under `root` (a package by its
    `__init__.py`); the bundled model folder holds no code of ours."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if "bundled" not in parts:
                modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def folder_graph(root: Path, packages: tuple[str, ...]) -> dict[str, dict[str, set[str]]]:
    """node -> node it imports -> the imports that draw that arrow ("file:line name"). A node is a folder
    below a top-level package ("lsp_server/context/"), or a module directly in one ("lsp_server/config.py").
    Every import counts, wherever it stands (module level, in a function, under TYPE_CHECKING); one of a
    module outside `packages` draws no arrow, and neither does one within a node."""
    modules = module_files(root, packages)

    def node(module: str) -> str:
        path = modules[module].relative_to(root)
        return f"{path.parent.as_posix()}/" if len(path.parts) > 2 else path.as_posix()

    def resolved(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for module, path in modules.items():
        for statement in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(statement, ast.Import):
                names = [alias.name for alias in statement.names]
            elif isinstance(statement, ast.ImportFrom) and statement.module and statement.level == 0:
                # `from package import submodule` imports the submodule; `from module import name`, the module
                names = [f"{statement.module}.{alias.name}" for alias in statement.names]
            else:
                continue
            for name in names:
                target = resolved(name)
                if target is not None and node(target) != node(module):
                    where = f"{path.relative_to(root).as_posix()}:{statement.lineno} {target}"
                    graph[node(module)][node(target)].add(where)
    return graph


def loops(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted: every import cycle."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(start: str) -> None:
        order[start] = low[start] = len(order)
        stack.append(start)
        for target in graph.get(start, {}):
            if target not in order:
                visit(target)
                low[start] = min(low[start], low[target])
            elif target in stack:
                low[start] = min(low[start], order[target])
        if low[start] == order[start]:
            component = stack[stack.index(start) :]
            del stack[stack.index(start) :]
            if len(component) > 1:
                found.append(sorted(component))

    for start in sorted(graph):
        if start not in order:
            visit(start)
    return found


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


def test_no_import_closes_a_loop_between_folders() -> None:
    graph = folder_graph(ROOT, ("lsp_server", "engine"))
    assert {"lsp_server/context/", "lsp_server/config.py", "engine/train/", "engine/models.py"} <= set(graph)
    assert "engine/drafters/" in graph["engine/service.py"]  # the arrows were drawn
    report = {
        " <-> ".join(loop): sorted(
            where for source in loop for target in loop for where in graph[source].get(target, set())
        )
        for loop in loops(graph)
    }
    assert report == {}


def test_the_loop_check_sees_type_checking_imports_and_folders(tmp_path: Path) -> None:
    for name, text in {
        "pkg/__init__.py": "",
        "pkg/top.py": "from pkg.sub.one import f\n",
        "pkg/other.py": "import pkg.sub.two\n",
        "pkg/sub/__init__.py": "from pkg.sub.one import f\n",
        "pkg/sub/one.py": "from pkg.sub import two\n",
        "pkg/sub/two.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.top import g\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = folder_graph(tmp_path, ("pkg",))
    # a loop through the folder as a whole: top -> sub/one, sub/two -> top; within sub/ no arrows are drawn
    assert loops(graph) == [["pkg/sub/", "pkg/top.py"]]
    assert graph["pkg/sub/"]["pkg/top.py"] == {"pkg/sub/two.py:3 pkg.top"}
    assert set(graph["pkg/other.py"]) == {"pkg/sub/"} and "pkg/sub/" not in graph["pkg/sub/"]


def test_only_training_and_the_app_import_engine_train() -> None:
    def may_import_training(path: Path) -> bool:
        parts = path.relative_to(ROOT).parts
        return parts[:2] in (("engine", "train"), ("lsp_server", "app"))

    def is_training(module: str) -> bool:
        return module == "engine.train" or module.startswith("engine.train.")

    files = module_files(ROOT, ("engine", "lsp_server")).values()
    users = {path for path in files if any(map(is_training, imported_modules(path)))}
    offenders = sorted(str(path.relative_to(ROOT)) for path in users if not may_import_training(path))
    assert offenders == []
    assert ROOT / "lsp_server" / "app" / "commands" / "train.py" in users  # the check sees the real users


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


def _imports_between(importer: str, imported: str) -> list[str]:
    """Files of `importer` (a folder) with an import statement, at any depth, of `imported` (a package)."""
    return sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / importer).rglob("*.py")
        if any(name == imported or name.startswith(imported + ".") for name in imported_modules(path))
    )


def test_no_import_cycle_between_the_app_and_bench() -> None:
    # `specls bench` (the app) lists bench's plug-ins, so bench must not import the app back: what both use
    # (the replay client, the model flags) lives where both import it.
    assert _imports_between("lsp_server/app", "bench"), "the app no longer reaches bench: update this test"
    assert not _imports_between("bench", "lsp_server.app")
