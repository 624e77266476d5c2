"""Generated text + the file around the cursor -> the completion that is kept, per language.

Each case runs the stop check the way the engine does (on the growing text, stopping at the first cut) and
then finalize_completion; the same cases also go through finalize_completion alone.
"""

from __future__ import annotations

import pytest

from engine.api import BackendInfo
from engine.train.tokenizer import SPECIAL_TOKENS
from lsp_server.context import (
    CompletionContext,
    ContextSettings,
    build_completion_context,
    finalize_completion,
)
from lsp_server.documents import DocumentStore

CURSOR = "█"
EXTENSIONS = {"python": "py", "javascript": "js", "typescript": "ts", "go": "go", "rust": "rs", "lua": "lua"}
INFO = BackendInfo("fake", "target", None, SPECIAL_TOKENS, 1024, "cpu")


def _count(text: str) -> int:
    return len(text) // 3 + 1


def _context(language: str, marked: str, **settings: object) -> CompletionContext:
    offset = marked.index(CURSOR)
    store = DocumentStore()
    uri = f"file:///w/a.{EXTENSIONS[language]}"
    store.open(uri, language, 1, marked.replace(CURSOR, ""))
    return build_completion_context(store, uri, offset, INFO, ContextSettings(**settings), _count)  # type: ignore[arg-type]


def _streamed(ctx: CompletionContext, generated: str) -> str:
    """Feed the text one character at a time, as a decode loop would, and cut where the check says."""
    text = generated
    for end in range(1, len(generated) + 1):
        cut = ctx.stop_check(generated[:end])
        if cut is not None:
            text = generated[:cut]
            break
    return finalize_completion(text, ctx)


CASES = [
    # --- Python: dedent ends the block; next line and rest of line are not duplicated
    (
        "python",
        "def f(x):\n    █\n",
        "y = x + 1\n    return y\n\ndef g():\n    pass\n",
        "y = x + 1\n    return y",
    ),
    ("python", "def f(x):█\n", "\n    return x * 2\nprint(f(3))", "\n    return x * 2"),
    ("python", "def f(x):\n    █\n    return y\n", "y = x + 1\n    return y\n", "y = x + 1"),
    ("python", "def f(x):\n    y = foo(█)\n", "x, 2)\n", "x, 2"),
    ("python", "def f(x):\n    y = foo(█)\n", "bar(x), 2)", "bar(x), 2"),
    ("python", "def f(x):\n    if █ > 0:\n", "not x > 0:", "not x"),
    ("python", "x = █\n", "compute()   \nmore()", "compute()"),
    ("python", "x = [█]\n", '"a]b", 1]', '"a]b", 1'),
    (
        "python",
        "class K:\n    def m(self):\n        █\n",
        "a = 1\n        b = 2\n    def n(self):",
        "a = 1\n        b = 2",
    ),
    # --- JavaScript: a closing brace the suffix lacks is kept; one the suffix has is not generated
    ("javascript", "function f(a) {\n  █\n}\n", "return a + 1;\n}\n", "return a + 1;"),
    ("javascript", "function f(a) {█\n", "\n  return a;\n}\nfunction g() {}", "\n  return a;\n}"),
    ("javascript", "function f(a) {█}\n", "\n  return a;\n}", "\n  return a;\n"),
    ("javascript", "if (a) {█\n", "\n  x();\n} else {\n  y();\n}\nz();", "\n  x();\n} else {\n  y();\n}"),
    ("javascript", "const x = f(█);\n", "1, g(2));", "1, g(2)"),
    ("javascript", "const x = █;\n", "a + b;", "a + b"),
    # --- TypeScript
    (
        "typescript",
        "interface A {\n  █\n}\n",
        "name: string;\n  age: number;\n}\n",
        "name: string;\n  age: number;",
    ),
    ("typescript", "function f(a: number): █ {\n}\n", "number {", "number"),
    # --- Go
    (
        "go",
        "package main\n\nfunc main() {\n\t█\n}\n",
        "x := 1\n\tfmt.Println(x)\n}\n\nfunc g() {}",
        "x := 1\n\tfmt.Println(x)",
    ),
    ("go", "package main\n\nfunc main() {\n\tx := max(█)\n}\n", "1, 2)\n", "1, 2"),
    # --- Rust
    (
        "rust",
        "fn main() {\n    █\n}\n",
        'let x = 1;\n    println!("{}", x);\n}\n',
        'let x = 1;\n    println!("{}", x);',
    ),
    ("rust", "fn main() {\n    let v = vec![█];\n}\n", "1, 2, 3];", "1, 2, 3"),
    ("rust", 'fn main() {\n    let s = "}";\n    █\n}\n', 'let t = "}";\n}', 'let t = "}";'),
    # --- No grammar (lua): indentation and brackets still apply
    ("lua", "function f()\n  █\nend\n", "return 1\nend\nfunction g()", "return 1"),
    ("lua", "local t = {█}\n", "\n  a = 1,\n}", "\n  a = 1,\n"),
]


@pytest.mark.parametrize(("language", "marked", "generated", "expected"), CASES)
def test_truncated_completion(language: str, marked: str, generated: str, expected: str) -> None:
    ctx = _context(language, marked)
    assert ctx.mode != "none"
    assert _streamed(ctx, generated) == expected
    assert finalize_completion(generated, ctx) == expected


def test_max_lines_and_single_line_mode() -> None:
    ctx = _context("python", "def f():\n    █\n", max_lines=3)
    generated = "a = 1\n    b = 2\n    c = 3\n    d = 4\n"
    assert _streamed(ctx, generated) == "a = 1\n    b = 2\n    c = 3"
    ctx = _context("python", "x = █\n")
    assert ctx.mode == "single-line"
    assert ctx.stop_check("1 + 2\ny = 3") == len("1 + 2")


def test_nothing_left_after_trimming_is_an_empty_completion() -> None:
    ctx = _context("python", "def f(x):\n    █\n    return y\n")
    assert finalize_completion("   \n", ctx) == ""
    assert finalize_completion("return y", ctx) == ""
