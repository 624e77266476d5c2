"""Other-file snippets: imported definitions, identifier overlap, recency, stable order."""

from __future__ import annotations

import time

import pytest

from lsp_server.context.snippets import imports_of, select_snippets
from lsp_server.documents import DocumentStore


def _count(text: str) -> int:
    return len(text) // 4 + 1


def _select(store: DocumentStore, uri: str, offset: int, max_snippets: int = 3) -> list[str]:
    snippets = select_snippets(
        store.get(uri),
        offset,
        store.all_documents(),
        max_snippets=max_snippets,
        budget_tokens=500,
        count_tokens=_count,
    )
    return [f"{s.path}::{s.text}" for s in snippets]


@pytest.mark.parametrize(
    ("language", "uri", "text", "current_uri", "current", "expected"),
    [
        (
            "python",
            "file:///w/pkg/util.py",
            "import os\n\ndef helper(a, b):\n    return a + b\n\ndef unused():\n    pass\n",
            "file:///w/main.py",
            "from pkg.util import helper\n\nx = ",
            "def helper(a, b):\n    return a + b",
        ),
        (
            "typescript",
            "file:///w/src/math.ts",
            "export function add(a: number, b: number): number {\n  return a + b;\n}\nexport const z = 0;\n",
            "file:///w/src/main.ts",
            "import { add } from './math';\nconst y = ",
            "export function add(a: number, b: number): number {\n  return a + b;\n}",
        ),
        (
            "rust",
            "file:///w/src/geo/shapes.rs",
            "pub struct Point {\n    pub x: f64,\n}\n\npub fn origin() -> Point {\n    Point { x: 0.0 }\n}\n",
            "file:///w/src/main.rs",
            "use crate::geo::shapes::{Point, origin};\nfn main() {\n",
            "pub struct Point {\n    pub x: f64,\n}\npub fn origin() -> Point {\n    Point { x: 0.0 }\n}",
        ),
        (
            "go",
            "file:///w/mathx/mathx.go",
            "package mathx\n\nfunc Double(x int) int {\n\treturn 2 * x\n}\n",
            "file:///w/main.go",
            'package main\n\nimport (\n\t"example.com/m/mathx"\n)\n\nfunc main() {\n',
            "func Double(x int) int {",
        ),
    ],
)
def test_imported_definitions_from_open_files(
    language: str, uri: str, text: str, current_uri: str, current: str, expected: str
) -> None:
    store = DocumentStore()
    store.open(uri, language, 1, text)
    store.open(current_uri, language, 1, current)
    chosen = _select(store, current_uri, len(current))
    assert len(chosen) == 1
    path, body = chosen[0].split("::", 1)
    assert uri.endswith(path)
    assert body == expected
    assert "unused" not in body


def test_ranked_by_shared_identifiers_then_recency_in_stable_order() -> None:
    store = DocumentStore()
    store.open(
        "file:///w/db.py", "python", 1, "def connect(database_url):\n    return open_session(database_url)\n"
    )
    store.open("file:///w/ui.py", "python", 1, "def render(widget):\n    return paint(widget)\n")
    store.open("file:///w/db2.py", "python", 1, "def reconnect(database_url):\n    close_session()\n")
    current = "session = open_session(database_url)\nresult = session.query()\n\n"
    store.open("file:///w/main.py", "python", 1, current)
    chosen = _select(store, "file:///w/main.py", len(current), max_snippets=2)
    assert [c.split("::")[0] for c in chosen] == ["w/db.py", "w/db2.py"]  # ui.py shares nothing


def test_recency_breaks_ties_between_equally_related_files() -> None:
    store = DocumentStore()
    store.open("file:///w/a.py", "python", 1, "x = open_session(database_url)\n")
    store.open("file:///w/b.py", "python", 1, "y = open_session(database_url)\n")
    current = "session = open_session(database_url)\n\n"
    store.open("file:///w/main.py", "python", 1, current)
    for recent in ("file:///w/a.py", "file:///w/b.py"):
        time.sleep(0.01)
        store.touch(recent)
        chosen = _select(store, "file:///w/main.py", len(current), max_snippets=1)
        assert [c.split("::")[0] for c in chosen] == [recent.removeprefix("file:///")]


def test_typing_on_the_cursor_line_does_not_reshuffle_snippets() -> None:
    store = DocumentStore()
    store.open("file:///w/a.py", "python", 1, "alpha_value = 1\nbeta_value = 2\n")
    store.open("file:///w/b.py", "python", 1, "gamma_value = 3\n")
    current = "print(alpha_value)\nbeta_value = gamma_"
    store.open("file:///w/main.py", "python", 1, current)
    before = _select(store, "file:///w/main.py", len(current) - len("gamma_"))
    after = _select(store, "file:///w/main.py", len(current))
    assert before == after


@pytest.mark.parametrize(
    ("language", "source", "expected"),
    [
        ("python", "from a.b import c, d\nimport e.f\n", [(("a/b.py", "a/b/__init__.py"), ("c", "d")),
                                                          (("e/f.py", "e/f/__init__.py"), ())]),
        ("javascript", "import x, { y as z } from './lib/m';\nimport React from 'react';\n",
         [(tuple("lib/m" + ext for ext in (".ts", ".tsx", ".js", ".jsx", ".mjs", "/index.ts", "/index.js")),
           ("x", "y"))]),
        ("rust", "use crate::a::b::Thing;\n", [(("a/b.rs", "a/b/mod.rs"), ("Thing",))]),
    ],
)  # fmt: skip
def test_imports_of(language: str, source: str, expected: list[object]) -> None:
    assert imports_of(source, language) == expected
