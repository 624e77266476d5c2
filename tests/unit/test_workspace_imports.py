"""Imported files read from the workspace on disk: found, limited to the workspace, cached until changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lsprotocol import types

from engine.api import BackendInfo
from lsp_server.context import build_completion_context
from lsp_server.context.builder import ContextSettings
from lsp_server.context.workspace import MAX_FILE_BYTES, WorkspaceFiles
from lsp_server.documents import DocumentStore
from lsp_server.handlers.lifecycle import workspace_uris

INFO = BackendInfo("fake", "t", None, ("<|endoftext|>",), 4096, "cpu")
ON = ContextSettings(imported_files=True)  # off by default (measured: it lowered the exact next line)
HELPER = "def scale_rows(matrix, factor):\n    return [[v * factor for v in row] for row in matrix]\n"


def _count(text: str) -> int:
    return len(text) // 4 + 1


def _project(root: Path, main: str) -> Path:
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "matrices.py").write_text("import os\n\n\n" + HELPER)
    path = root / "pkg" / "main.py"
    path.write_text(main)
    return path


def _open(path: Path, root: Path | None) -> DocumentStore:
    store = DocumentStore()
    store.workspace = WorkspaceFiles([root]) if root is not None else None
    store.open(path.as_uri(), "python", 1, path.read_text())
    return store


@pytest.mark.parametrize("line", ["from pkg.matrices import scale_rows", "from .matrices import scale_rows"])
def test_an_imported_file_that_is_not_open_gives_its_definition(tmp_path: Path, line: str) -> None:
    main = _project(tmp_path, f"{line}\n\nresult = ")
    store = _open(main, tmp_path)
    ctx = build_completion_context(store, main.as_uri(), len(main.read_text()), INFO, ON, _count)
    assert "def scale_rows(matrix, factor):" in ctx.prompt
    assert "def scale_rows(matrix, factor):" in "".join(ctx.lookup_snippets)


def test_without_a_workspace_or_with_the_setting_off_nothing_is_read(tmp_path: Path) -> None:
    main = _project(tmp_path, "from pkg.matrices import scale_rows\n\nresult = ")
    offset = len(main.read_text())
    alone = build_completion_context(_open(main, None), main.as_uri(), offset, INFO, ON, _count)
    unset = build_completion_context(
        _open(main, tmp_path), main.as_uri(), offset, INFO, ContextSettings(), _count
    )
    assert "scale_rows(matrix" not in alone.prompt
    assert "scale_rows(matrix" not in unset.prompt


def test_an_open_document_wins_over_its_copy_on_disk(tmp_path: Path) -> None:
    main = _project(tmp_path, "from pkg.matrices import scale_rows\n\nresult = ")
    store = _open(main, tmp_path)
    edited = (tmp_path / "pkg" / "matrices.py").as_uri()
    store.open(edited, "python", 1, "def scale_rows(matrix, factor, clip):\n    pass\n")
    ctx = build_completion_context(store, main.as_uri(), len(main.read_text()), INFO, ON, _count)
    assert "def scale_rows(matrix, factor, clip):" in ctx.prompt
    assert "return [[v * factor" not in ctx.prompt


def test_files_outside_the_workspace_and_large_files_are_not_read(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secrets.py").write_text("TOKEN = 'do-not-read'\n")
    (root / "secrets.py").symlink_to(outside / "secrets.py")  # a link leading out of the workspace
    (root / "big.py").write_text("x = 1\n" * (MAX_FILE_BYTES // 6 + 10))
    main = root / "main.py"
    main.write_text("import secrets\nimport big\n\n")
    store = _open(main, root)
    assert store.workspace is not None
    assert store.workspace.imported_documents(store.get(main.as_uri()), [main.as_uri()]) == []


def test_a_changed_file_is_read_again_and_an_unchanged_one_is_not(tmp_path: Path) -> None:
    main = _project(tmp_path, "from pkg.matrices import scale_rows\n")
    store = _open(main, tmp_path)
    workspace, current = store.workspace, store.get(main.as_uri())
    assert workspace is not None
    first = workspace.imported_documents(current, [current.uri])
    again = workspace.imported_documents(current, [current.uri])
    assert [doc.text for doc in first] == [doc.text for doc in again] and first[0] is again[0]
    module = tmp_path / "pkg" / "matrices.py"
    module.write_text("def scale_rows(matrix):\n    pass\n")
    later = os.stat(module).st_mtime_ns + 1_000_000_000
    os.utime(module, ns=(later, later))
    changed = workspace.imported_documents(current, [current.uri])
    assert changed[0].text.startswith("def scale_rows(matrix):")


def test_the_workspace_comes_from_the_clients_folders(tmp_path: Path) -> None:
    folders = [types.WorkspaceFolder(uri=tmp_path.as_uri(), name="w")]
    params = types.InitializeParams(capabilities=types.ClientCapabilities(), workspace_folders=folders)
    assert workspace_uris(params) == [tmp_path.as_uri()]
    rooted = types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=tmp_path.as_uri())
    assert workspace_uris(rooted) == [tmp_path.as_uri()]
    assert workspace_uris(types.InitializeParams(capabilities=types.ClientCapabilities())) == []
    assert WorkspaceFiles.from_uris([]) is None
    assert WorkspaceFiles.from_uris(["untitled:Untitled-1", (tmp_path / "missing").as_uri()]) is None
    reader = WorkspaceFiles.from_uris([tmp_path.as_uri()])
    assert reader is not None and reader.roots == (tmp_path.resolve(),)
