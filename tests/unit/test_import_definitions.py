"""At a line among a Python file's imports, the prompt names where the workspace defines what the file uses."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lsp_server.context import build_completion_context
from lsp_server.context import workspace as workspace_module
from lsp_server.context.builder import ContextSettings
from lsp_server.context.definitions import (
    in_import_block,
    top_level_definitions,
    unbound_names,
    without_line_at,
)
from lsp_server.context.workspace import AMBIGUOUS_MODULES, MAX_FILE_BYTES, WorkspaceFiles
from lsp_server.documents import DocumentStore, new_document
from tests.unit.steering_support import QWEN

# A backend whose tokenizer has Qwen2.5-Coder's FIM tokens (test_context_fim checks how they are detected).
HEADER = "# Copyright 2025\n\n"
USES = '\n\n\ndef run(rows):\n    """Scale the rows."""\n    return scale_rows(rows, DEFAULT_FACTOR)\n'


def _count(text: str) -> int:
    return len(text) // 4 + 1


def _project(root: Path, main: str) -> Path:
    """pkg/ with a module defining scale_rows and DEFAULT_FACTOR, re-exported by the package, and `main`."""
    (root / "pkg" / "matrices").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "matrices" / "__init__.py").write_text(
        "from .scaling import DEFAULT_FACTOR, scale_rows\n"
    )
    (root / "pkg" / "matrices" / "scaling.py").write_text(
        "import os\n\nDEFAULT_FACTOR = 2\n\n\ndef scale_rows(matrix, factor):\n    return matrix\n"
    )
    path = root / "pkg" / "main.py"
    path.write_text(main)
    return path


def _context(path: Path, root: Path | None, offset: int, settings: ContextSettings | None = None):  # type: ignore[no-untyped-def]
    store = DocumentStore()
    store.workspace = WorkspaceFiles([root]) if root is not None else None
    store.open(path.as_uri(), "python", 1, path.read_text())
    return build_completion_context(store, path.as_uri(), offset, QWEN, settings or ContextSettings(), _count)


def test_the_names_a_file_uses_but_does_not_bind() -> None:
    text = (
        "from .tools import helper as aid\nimport os.path\n\n"
        "__all__ = ['Exported', \"helper_two\"]\n\n"
        "LIMIT = 3\ndefault_label: str\n\n"
        "def run(rows, *, factor=2):\n"
        '    """Run the Pipeline over rows (a docstring names no code)."""\n'
        "    # a Comment names none either\n"
        "    for row in rows:\n"
        "        Pipeline(row, retries=LIMIT).start(aid(row), os.sep, factor, default_label)\n"
        "    return make_report(len(rows))\n"
    )
    names = unbound_names(text)
    assert names == ("Pipeline", "make_report", "Exported", "helper_two")
    # keyword arguments, module paths, parameters, loop targets, builtins, aliases and attributes are not names
    # the file needs from elsewhere
    assert not {
        "retries",
        "tools",
        "path",
        "rows",
        "row",
        "factor",
        "len",
        "aid",
        "start",
        "sep",
        "label",
    } & set(names)


def test_prose_the_blanking_missed_is_not_taken_for_names() -> None:
    # Lines of an unclosed docstring the blanking took for code (the user is typing it): plain lowercase words
    # are prose unless called or dotted into.
    text = "The service runs\nthe model and its pull record.\nreturn catalog.find(Path(name))\n"
    names = unbound_names(text)
    assert "catalog" in names and "Path" in names
    assert not {"service", "runs", "model", "pull", "record", "name"} & set(names)


def test_top_level_definitions_and_what_a_package_reexports() -> None:
    module = "import os\n\nLIMIT: int = 3\n\n\nclass Table(Base):\n    size = 1\n\n    def rows(self):\n        pass\n\n\nasync def fetch(url):\n    pass\n"
    assert top_level_definitions(module) == {
        "LIMIT": "LIMIT: int = 3",
        "Table": "class Table(Base):",
        "fetch": "async def fetch(url):",
    }
    package = "from .tables import Table\nfrom .io import (\n    fetch,\n    store,  # writes\n)\n"
    assert top_level_definitions(package) == {}
    assert set(top_level_definitions(package, reexports=True)) == {"Table", "fetch", "store"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (HEADER + "import os\n|\nfrom typing import Any\n", True),  # a line start between imports
        (HEADER + "|\nimport os\n", True),  # above the first import
        ('"""Docstring."""\n|', True),  # nothing but a docstring above
        ("|", True),  # an empty file
        (HEADER + "import os\nfrom .io import |\n\n\ndef f():\n    pass\n", True),  # typing an import
        (HEADER + "import os\nfr|\n", True),
        ("x = 1\n|\nimport sys", True),  # the last line, with no line break after it, counts too
        (HEADER + "import os\n\nresult = |\n", False),  # typing code after the imports
        ("import os\n\n\ndef f():\n    x = 1\n    |\n    return x\n", False),  # a function's body
    ],
)
def test_a_line_among_the_imports(text: str, expected: bool) -> None:
    assert in_import_block(text.replace("|", ""), text.index("|")) is expected


def test_the_workspace_says_where_the_names_are_defined(tmp_path: Path) -> None:
    main = _project(tmp_path, HEADER + "import os\n\n" + USES)
    (tmp_path / "outside.py").write_text("def scale_rows():\n    pass\n")  # the import root is tmp_path
    offset = len(HEADER + "import os\n")
    workspace = WorkspaceFiles([tmp_path])
    path, snippets = workspace.definition_snippets(
        new_document(main.as_uri(), "python", 1, main.read_text()), offset
    )
    assert path == "pkg/main.py"
    # The package's __init__ re-exports both: what a package exports is imported from the package.
    assert snippets == [("pkg/matrices/__init__.py", "from .scaling import DEFAULT_FACTOR, scale_rows")]
    elsewhere = WorkspaceFiles([tmp_path / "pkg" / "matrices"])  # the file lies outside this workspace
    assert elsewhere.definition_snippets(new_document(main.as_uri(), "python", 1, ""), 0) == ("", [])


def test_a_name_many_modules_define_says_nothing(tmp_path: Path) -> None:
    main = _project(tmp_path, HEADER + "\n\nlogger.info(scale_rows)\n")
    for n in range(AMBIGUOUS_MODULES + 1):
        (tmp_path / "pkg" / f"part{n}.py").write_text("logger = object()\n")
    document = new_document(main.as_uri(), "python", 1, main.read_text())
    _, snippets = WorkspaceFiles([tmp_path]).definition_snippets(document, len(HEADER))
    assert "logger" not in "".join(text for _, text in snippets)
    assert "scale_rows" in "".join(text for _, text in snippets)


def test_the_prompt_names_the_file_and_the_definitions_at_an_import_line(tmp_path: Path) -> None:
    main = _project(tmp_path, HEADER + "import os\n\n" + USES)
    ctx = _context(main, tmp_path, len(HEADER + "import os\n"))
    head = "<|file_sep|>pkg/matrices/__init__.py\nfrom .scaling import DEFAULT_FACTOR, scale_rows\n"
    assert ctx.prompt.startswith(head + "<|file_sep|>pkg/main.py\n<|fim_prefix|>" + HEADER)


def test_no_definitions_in_code_without_a_workspace_or_with_the_setting_off(tmp_path: Path) -> None:
    main = _project(tmp_path, HEADER + "import os\n\n" + USES)
    in_body = main.read_text().index("    return")
    at_import = len(HEADER + "import os\n")
    for ctx in (
        _context(main, tmp_path, in_body),
        _context(main, None, at_import),
        _context(main, tmp_path, at_import, ContextSettings(import_definitions=False)),
    ):
        assert "scale_rows(matrix" not in ctx.prompt and "<|file_sep|>" not in ctx.prompt
        assert ctx.prompt.startswith("<|fim_prefix|>")


def test_typing_the_import_keeps_the_prompts_head(tmp_path: Path) -> None:
    # The line being typed binds the name it imports; the definitions it had come from stay in the prompt
    # until the line is left, so the prompt's start (the cached part) does not change under the user's keys.
    start = HEADER + "import os\n"
    main = _project(tmp_path, start + "\n" + USES)
    heads = []
    for typed in ("from pkg.", "from pkg.matrices import ", "from pkg.matrices import scale_rows"):
        main.write_text(start + typed + "\n" + USES)
        ctx = _context(main, tmp_path, len(start + typed))
        heads.append(ctx.prompt[: ctx.prompt.index("<|fim_prefix|>")])
    assert heads[0] == heads[1] == heads[2] and "scale_rows" in heads[0]


def test_the_line_at_the_cursor_is_left_out() -> None:
    assert without_line_at("a\nbc\nd", 3) == "a\nd"
    assert without_line_at("a\nbc", 4) == "a\n"


def test_the_index_reads_only_the_projects_own_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "pkg").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret_values.py").write_text("def read_secret():\n    pass\n")
    (root / "pkg" / "linked.py").symlink_to(outside / "secret_values.py")  # a link leading out
    for folder in (".venv", "node_modules", "site-packages", "build"):
        (root / "pkg" / folder).mkdir()
        (root / "pkg" / folder / "vendored.py").write_text("def vendored_helper():\n    pass\n")
    (root / "pkg" / "big.py").write_text("def big_helper():\n    pass\n" + "x = 1\n" * 50_000)
    for n in range(5):
        (root / "pkg" / f"m{n}.py").write_text(f"def helper_{n}():\n    pass\n")
    main = root / "pkg" / "main.py"
    main.write_text(
        "\n" + "\n".join(f"{name}()" for name in ("read_secret", "vendored_helper", "big_helper"))
    )
    document = new_document(main.as_uri(), "python", 1, main.read_text())
    assert WorkspaceFiles([root]).definition_snippets(document, 0) == ("main.py", [])
    # At most MAX_INDEXED_FILES files, nearest the root first, in name order.
    monkeypatch.setattr("lsp_server.context.workspace.MAX_INDEXED_FILES", 3)
    main.write_text("\n" + "\n".join(f"helper_{n}()" for n in range(5)))
    document = new_document(main.as_uri(), "python", 1, main.read_text())
    _, snippets = WorkspaceFiles([root]).definition_snippets(document, 0)
    assert [path for path, _ in snippets] == ["m0.py", "m1.py"]  # big.py, m0.py, m1.py were indexed


def test_a_package_that_reexports_from_the_file_being_written_says_nothing(tmp_path: Path) -> None:
    # pkg/__init__.py imports Table from pkg/tables.py: at the top of tables.py that says only that this file
    # defines Table, not where to import it from (and a benchmark's finished repository would leak it).
    (tmp_path / "pkg").mkdir()
    for line in ("from .tables import Table", "from pkg.tables import Table"):
        (tmp_path / "pkg" / "__init__.py").write_text(line + "\n")
        tables = tmp_path / "pkg" / "tables.py"
        tables.write_text("import os\n\n\nrows: list = []\n\n\ndef first():\n    return Table(rows)\n")
        document = new_document(tables.as_uri(), "python", 1, tables.read_text())
        assert WorkspaceFiles([tmp_path]).definition_snippets(document, 0) == ("pkg/tables.py", [])
    (tmp_path / "pkg" / "__init__.py").write_text("from .frames import Table\n")  # elsewhere: it says where
    _, snippets = WorkspaceFiles([tmp_path]).definition_snippets(document, 0)
    assert snippets == [("pkg/__init__.py", "from .frames import Table")]


def test_a_name_that_is_a_module_gives_that_module(tmp_path: Path) -> None:
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "__init__.py").write_text("")
    (tmp_path / "flows" / "identity.py").write_text('"""Who the agent is."""\n\nPROCESSOR = object()\n')
    main = tmp_path / "flows" / "runner.py"
    main.write_text("from . import contents\n\n\nSTEPS = [contents.PROCESSOR, identity.PROCESSOR]\n")
    document = new_document(main.as_uri(), "python", 1, main.read_text())
    path, snippets = WorkspaceFiles([tmp_path]).definition_snippets(document, len("from . import contents\n"))
    assert path == "flows/runner.py"
    assert snippets == [("flows/identity.py", "PROCESSOR = object()")]


def test_memory_stays_flat_across_many_import_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("lsp_server.context.workspace.MAX_INDEXES", 2)
    workspace = WorkspaceFiles([tmp_path])
    for n in range(4):  # four script folders: four import roots
        folder = tmp_path / f"script{n}"
        folder.mkdir()
        (folder / "tool.py").write_text(f"def helper_{n}():\n    pass\n")
        main = folder / "main.py"
        main.write_text(f"\n\nhelper_{n}()\n")
        document = new_document(main.as_uri(), "python", 1, main.read_text())
        assert workspace.definition_snippets(document, 0) == ("main.py", [("tool.py", f"def helper_{n}():")])
    assert len(workspace._indexes) == 2


def test_only_the_text_near_the_cursor_is_read() -> None:
    # Imports right above the cursor in a long file still count; a body far below them does not. Below a
    # header longer than the window the top of the file is out of sight, so the cursor is not taken for it
    # (a license or docstring of 4,000 characters; the usual ones are far shorter).
    body = "\n".join(f"    value_{n} = compute({n})" for n in range(2000))
    text = "import os\n" + "x = 1\n" * 1000 + "import sys\n\n" + "def f():\n" + body + "\n"
    assert in_import_block(text, text.index("\n", text.index("import sys")) + 1)
    assert not in_import_block(text, text.index("    value_1500"))
    short_header, long_header = "# words\n" * 10 + "\n", "# words\n" * 1000 + "\n"
    assert in_import_block(short_header, len(short_header))
    assert not in_import_block(long_header, len(long_header))


def test_a_file_too_large_to_index_gets_no_definitions(tmp_path: Path) -> None:
    main = _project(tmp_path, HEADER + "import os\n\n" + USES + "# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    document = new_document(main.as_uri(), "python", 1, main.read_text())
    assert WorkspaceFiles([tmp_path]).definition_snippets(document, len(HEADER)) == ("", [])


def _blocked_listing(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[str]]:
    """Make listing a project wait for the returned event; the list names the threads that listed one."""
    release, listed_on = threading.Event(), []
    list_files = workspace_module._python_files

    def listing(root: Path) -> tuple[list[Path], bool]:
        listed_on.append(threading.current_thread().name)
        assert release.wait(timeout=10)
        return list_files(root)

    monkeypatch.setattr(workspace_module, "_python_files", listing)
    return release, listed_on


def _wait_for(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("not within 5 s")


def test_opening_a_file_indexes_its_project_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main = _project(tmp_path, HEADER + "import os\n\n" + USES)
    document = new_document(main.as_uri(), "python", 1, main.read_text())
    workspace = WorkspaceFiles([tmp_path])
    release, listed_on = _blocked_listing(monkeypatch)
    workspace.prepare(document)  # returns while the listing waits
    workspace.prepare(document)  # one build a project at a time
    _wait_for(lambda: bool(listed_on))
    release.set()
    _wait_for(lambda: bool(workspace._indexes))
    assert listed_on == ["specls-workspace-index"]
    _, snippets = workspace.definition_snippets(document, len(HEADER + "import os\n"))
    assert snippets == [("pkg/matrices/__init__.py", "from .scaling import DEFAULT_FACTOR, scale_rows")]
    assert listed_on == ["specls-workspace-index"]  # the request read the index built aside


def test_an_old_index_answers_at_once_and_is_refreshed_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = _project(tmp_path, HEADER + "import os\n\n" + USES + "\nload_table()\n")
    document = new_document(main.as_uri(), "python", 1, main.read_text())
    offset = len(HEADER + "import os\n")
    workspace = WorkspaceFiles([tmp_path])
    before = workspace.definition_snippets(document, offset)  # never prepared: built in the request
    (tmp_path / "pkg" / "tables.py").write_text("def load_table():\n    pass\n")
    monkeypatch.setattr(workspace_module, "RESOLVE_TTL_S", 0.0)  # every index is old from now on
    release, listed_on = _blocked_listing(monkeypatch)
    assert workspace.definition_snippets(document, offset) == before  # the old index, while the listing waits
    _wait_for(lambda: bool(listed_on))
    assert listed_on == ["specls-workspace-index"]
    release.set()
    _wait_for(lambda: not workspace._refreshing)
    _, snippets = workspace.definition_snippets(document, offset)
    assert ("pkg/tables.py", "def load_table():") in snippets
