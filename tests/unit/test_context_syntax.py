"""Cursor position -> completion mode, per language (the cursor is marked with █)."""

from __future__ import annotations

import pytest

from lsp_server.context.syntax import completion_mode, unclosed_quote
from lsp_server.documents import DocumentStore

CURSOR = "█"

EXTENSIONS = {"python": "py", "javascript": "js", "typescript": "ts", "go": "go", "rust": "rs", "lua": "lua"}

CASES = [
    # Python
    ("python", "def f(x):\n    █\n", "multi-line"),
    ("python", "def f(x):█\n", "multi-line"),
    ("python", "def f(x):\n    y = █\n", "single-line"),
    ("python", "def f(x):\n    y = foo(█)\n", "single-line"),
    ("python", "def f(x):\n    if █ > 0:\n        pass\n", "single-line"),
    ("python", "x = 1\n█\n", "multi-line"),
    ("python", "x = 1  # a comment█\n", "single-line"),
    ("python", 'x = "in a str█ing"\n', "none"),
    ("python", 'x = "done"█\n', "single-line"),
    ("python", "def f(x):\n    ret█urn x\n", "none"),
    ("python", 'def f():\n    """Docstring █\n    """\n', "single-line"),
    ("python", 'def f():\n    """Return the █"""\n    return 1\n', "single-line"),  # closed by the editor
    ("python", 'def f():\n    """Return the █', "single-line"),  # not closed yet
    # Not closed yet, with code and another docstring below: the parser glues that code onto the string.
    (
        "python",
        'class A:\n    def f(self, a):\n        """Insert the █\n        return a and self.b\n\n'
        '    def g(self):\n        """Other."""\n        return 2\n',
        "single-line",
    ),
    ("python", 'def f(a):\n    """Insert █\n    return a and b\n\ndef g():\n    """Doc."""\n', "single-line"),
    ("python", 'x = f("""a █\n    return 1\n\ndef g():\n    """Doc."""\n', "none"),  # an argument
    ("python", 'x = """a █\n    return 1\n\ndef g():\n    """Doc."""\n', "none"),  # an assigned string
    ("python", 'class A:\n    """A point █"""\n', "single-line"),
    ("python", 'x = "hello █', "none"),  # an ordinary string, not closed yet
    # A quote just typed before more code: the parser makes a string node with no children.
    ("python", 'def f(mode):\n    if mode == "█\n        return 1\n    return 2\n', "none"),
    ("python", 'x = f("""a █""")\n', "none"),  # a triple-quoted argument is no docstring
    ("python", "for i in range(10):█\n", "multi-line"),
    # JavaScript
    ("javascript", "function f(a) {\n  █\n}\n", "multi-line"),
    ("javascript", "function f(a) {█}\n", "multi-line"),
    ("javascript", "const x = █;\n", "single-line"),
    ("javascript", "const x = [1, █];\n", "single-line"),
    ("javascript", "// a comment █\nlet y = 1;\n", "single-line"),
    ("javascript", "const s = `templ█ate`;\n", "none"),
    ("javascript", "if (a) {\n  x();\n}\n█", "multi-line"),
    # TypeScript
    ("typescript", "interface A {\n  █\n}\n", "multi-line"),
    ("typescript", "function f(a: number): █ {\n}\n", "single-line"),
    ("typescript", "const s: string = 'a █';\n", "none"),
    ("typescript", "/* block █ comment */\n", "single-line"),
    # Go
    ("go", "package main\n\nfunc main() {\n\t█\n}\n", "multi-line"),
    ("go", "package main\n\nfunc main() {\n\tx := █\n}\n", "single-line"),
    ("go", 'package main\n\nvar s = "a █"\n', "none"),
    ("go", "package main\n\n// doc █\nfunc f() {}\n", "single-line"),
    # Rust
    ("rust", "fn main() {\n    █\n}\n", "multi-line"),
    ("rust", "fn main() {\n    let x = █;\n}\n", "single-line"),
    ("rust", 'fn main() {\n    let s = "a █";\n}\n', "none"),
    ("rust", "/// doc █\nfn f() {}\n", "single-line"),
    ("rust", "fn main() {█\n", "multi-line"),
    # No grammar: indentation and bracket rules
    ("lua", "function f()\n  █\nend\n", "multi-line"),
    ("lua", "local x = █\n", "single-line"),
    ("lua", "-- comment █\n", "single-line"),
    ("lua", "local t = {█}\n", "multi-line"),
]


@pytest.mark.parametrize(("language", "marked", "expected"), CASES)
def test_completion_mode(language: str, marked: str, expected: str) -> None:
    offset = marked.index(CURSOR)
    text = marked.replace(CURSOR, "")
    store = DocumentStore()
    uri = f"file:///w/a.{EXTENSIONS[language]}"
    store.open(uri, language, 1, text)
    doc = store.get(uri)
    mode = completion_mode(
        text, offset, tree=doc.tree, byte_offset=doc.byte_offset(offset), language=doc.language
    )
    assert mode == expected


@pytest.mark.parametrize(
    ("marked", "comments", "strings", "expected"),
    [
        ("x = 1  # a comment█", True, True, "none"),
        ('def f():\n    """Return the █"""\n', True, True, "none"),
        ('x = "in a █"\n', False, False, "single-line"),
        ('x = "in a str█ing"\n', True, True, "none"),
        ("x = 1  # a comment█", False, True, "single-line"),
    ],
)
def test_the_settings_decide_comments_docstrings_and_strings(
    marked: str, comments: bool, strings: bool, expected: str
) -> None:
    offset = marked.index(CURSOR)
    text = marked.replace(CURSOR, "")
    store = DocumentStore()
    store.open("file:///w/a.py", "python", 1, text)
    doc = store.get("file:///w/a.py")
    mode = completion_mode(
        text,
        offset,
        tree=doc.tree,
        language="python",
        suppress_in_comments=comments,
        suppress_in_strings=strings,
    )
    assert mode == expected


@pytest.mark.parametrize(
    ("line_before", "kind"),
    [
        ('x = "abc', "string"),
        ('x = "abc" + "d', "string"),
        ('x = "a\\"b', "string"),  # an escaped quote does not close it
        ('x = "abc"', None),
        ('    """Return', "docstring"),
        ('f("""abc', "string"),
        ("x = 1  # it's", "comment"),
        ("x = '#' + y", None),
    ],
)
def test_unclosed_quote(line_before: str, kind: str | None) -> None:
    assert unclosed_quote(line_before, "#") == kind
