"""A huge minified line is never parsed for a prompt: its parse (1-2 s for 2 MB) held up every request of
the session; ordinary files, large or small, keep their syntax tree."""

from __future__ import annotations

import time

from lsp_server.context.trees import tree_for_prompt, worth_parsing
from lsp_server.documents import DocumentStore


def test_only_big_documents_of_long_lines_and_huge_cursor_lines_go_without_a_tree() -> None:
    store = DocumentStore()
    store.open("file:///min.js", "javascript", 1, "var a=1;" * 262_144)  # 2 MB on one line
    store.open("file:///big.py", "python", 1, "def f(x):\n    return x + 1\n" * 20_000)  # 560 KB of code
    store.open("file:///mixed.py", "python", 1, "x = 1\n" * 100 + "data = '" + "z" * 50_000 + "'\n")
    minified, code, mixed = (store.get(u) for u in ("file:///min.js", "file:///big.py", "file:///mixed.py"))
    started = time.monotonic()
    assert tree_for_prompt(minified, len(minified.text)) is None
    assert time.monotonic() - started < 0.05  # decided without parsing
    assert worth_parsing(code) and tree_for_prompt(code, 10) is not None
    assert worth_parsing(mixed, 3)  # a small file with one long line: the tree, away from that line
    assert not worth_parsing(mixed, len(mixed.text) - 5)  # but not at the cursor inside it
