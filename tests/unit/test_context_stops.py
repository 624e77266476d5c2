"""Generated text + the file around the cursor -> the completion that is kept, per language.

Each case runs the stop check the way the engine does (on the growing text, stopping at the first cut) and
then finalize_completion; the same cases also go through finalize_completion alone.
"""

from __future__ import annotations

import pytest

from engine.api import BackendInfo
from engine.tokens import SPECIAL_TOKENS
from lsp_server.context import (
    CompletionContext,
    ContextSettings,
    build_completion_context,
    finalize_completion,
)
from lsp_server.context.stops import first_repetition
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
    # A line closing a nested call, above the suffix's line closing the outer one: indented apart, both kept
    (
        "python",
        "x = Part(\n    root=FilePart(\n        file=f,\n█\n)\n",
        "    )\n",
        "    )",
    ),
    # ... where the suffix's closer is at the opening line's indentation, it is that bracket's: not written twice
    ("python", "x = Part(\n    root=f,\n█\n)\n", ")\n", ""),
    ("python", "    raise E(\n        message=m,\n        █\n    )\n", ")\n", ""),
    # A docstring later in the file is prose: its apostrophe and bracket close nothing opened before the cursor
    (
        "python",
        'x = torch.empty(█\n\ndef g():\n    """The model\'s first line (a\n    step) is read."""\n',
        "rows, n + 2)",
        "rows, n + 2)",
    ),
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


COMMENT_CASES = [
    # a comment after code ends the suggestion after the code; a comment line of its own is kept
    ("python", "def f(x):\n    █\n", "y = x + 1  # add one\n    return y\n", "y = x + 1"),
    (
        "python",
        "def f(x):\n    █\n",
        "# add one\n    y = x + 1\n    return y\n",
        "# add one\n    y = x + 1\n    return y",
    ),
    ("python", "def f(x):\n    █\n", "y = x + 1\n    return y  # done\n", "y = x + 1\n    return y"),
    # a hash inside a string is not a comment
    ("python", "def f(x):\n    █\n", 'y = "#1" + x  # first\n', 'y = "#1" + x'),
    # the code before the cursor counts: a comment is all that is left
    ("python", "x = compute()█\n", "  # the answer\n", ""),
    # a tool's directive too: at the line starts of bench/results the models only ever invented them
    ("python", "█\n\nprint(os)\n", "import os  # noqa: F401\n", "import os"),
    ("python", "def f(x):\n    █\n", "return g(x)  # type: ignore[no-any-return]\n", "return g(x)"),
    # a marker right after a word is left alone (in a shell, `${#items[@]}` holds no comment)
    ("python", "def f(x):\n    █\n", "return x#1\n", "return x#1"),
    ("python", "def f(x):\n    █\n", "return g(x)  # not typed\n", "return g(x)"),
    # in a comment the cursor is writing, a later hash is the author's prose
    ("python", "x = 1  # one █\n", "or # two", "or # two"),
    ("javascript", "function f(a) {\n  █\n}\n", "return a + 1; // plus one\n}\n", "return a + 1;"),
]


@pytest.mark.parametrize(("language", "marked", "generated", "expected"), CASES + COMMENT_CASES)
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


# --- Degeneration guard (rule 6) ---------------------------------------------------------------
LOOPS = [  # (generated after "def f(x):\n    ", kept)
    ("return t + (self.length - self.length - self.length - self.length", "return t + (self.length -"),
    (
        "path = join(path, 'a')\n    path = join(path, 'a')\n    path = join(path, 'a')",
        "path = join(path, 'a')",
    ),
    (
        "total = f(a)\n    count = g(b)\n    total = f(a)\n    count = g(b)\n    z = 1",
        "total = f(a)\n    count = g(b)",
    ),
    ("if x:\n        pass\n        pass\n        pass", "if x:\n        pass"),
    ("log('x') or log('x') or log('x') or done", "log('x') or"),
]
# Repetition that is code, not a loop: none of these may be cut (negative controls).
NOT_LOOPS = [
    "print(a[0], a[1], a[2], a[3], a[4], a[5])",
    "zeros = [0, 0, 0, 0, 0, 0, 0, 0]",
    "return (None, None, None, None, None)",
    "# ------------------------------\n    line = '-' * 72",  # a rule of dashes in a comment line of its own
    "fmt = '%s %s %s %s %s' % (a, b, c, d, e)",
    "data = b'\\x00\\x00\\x00\\x00\\x00\\x00'",
    "uid = 'ffffffff-ffff-ffff-ffff-ffffffffffff'",
    "big = 1e99999999999999",
    "return x + x + x",
    "self.x = x\n    self.y = y\n    self.z = z",
    "if a:\n        return 1\n    if b:\n        return 2",
    "try:\n        f()\n    except A:\n        pass\n    except B:\n        pass",
    "for i in range(3):\n        for j in range(3):\n            for k in range(3):\n                pass",
    "data = 'aaaaaaaaaaaaaaaaaaaa'",
]


@pytest.mark.parametrize(("generated", "kept"), LOOPS)
def test_a_completion_that_repeats_itself_is_cut_at_the_first_repeat(generated: str, kept: str) -> None:
    ctx = _context("python", "def f(x):\n    █\n")
    assert _streamed(ctx, generated) == kept
    assert ctx.stop_rules is not None and "repetition" in ctx.stop_rules.fired
    assert first_repetition(generated, "    ") is not None


@pytest.mark.parametrize("generated", NOT_LOOPS)
def test_repetition_that_is_code_is_kept(generated: str) -> None:
    ctx = _context("python", "def f(x):\n    █\n", max_lines=20)
    assert _streamed(ctx, generated + "\n") == generated
    assert ctx.stop_rules is not None and "repetition" not in ctx.stop_rules.fired
    assert first_repetition(generated, "    ", final=True) is None


def test_the_first_line_is_compared_with_the_code_before_the_cursor() -> None:
    assert first_repetition("run()\n    run()\n", "    ") == len("run()")
    assert first_repetition("run()\n    run()\n", "x = ") is None  # "x = run()" is another line
    assert first_repetition("run()\n    run()", "    ") is None  # the second copy is not complete yet
    assert first_repetition("run()\n    run()", "    ", final=True) == len("run()")


# --- No marker text (rule 0) ----------------------------------------------------------------------
@pytest.mark.parametrize("marker", ["<|fim_middle|>", "<fim_suffix>", "<|im_end|>", "<|endoftext|>", "<SUF>"])
def test_marker_text_from_any_backend_ends_the_completion(marker: str) -> None:
    ctx = _context("python", "def f(x):\n    █\n")
    assert _streamed(ctx, f"return x{marker}\n    return y") == "return x"
    assert finalize_completion(f"return x{marker} + 1", ctx) == "return x"
    assert ctx.stop_rules is not None and "marker" in ctx.stop_rules.fired


def test_the_comment_rule_names_itself_among_the_rules_that_fired() -> None:
    ctx = _context("python", "def f(x):\n    █\n")
    assert _streamed(ctx, "y = x + 1  # add one\n") == "y = x + 1"
    assert ctx.stop_rules is not None and ctx.stop_rules.fired == {"comment"}
