"""Indentation of a suggestion as inserted at the cursor: the file's style, no doubled indentation, later
lines kept relative to the cursor's line; and the check the line-start benchmark scores with."""

from __future__ import annotations

import pytest

from engine.api import BackendInfo
from engine.tokens import SPECIAL_TOKENS
from lsp_server.context import ContextSettings, build_completion_context, finalize_completion
from lsp_server.context.indentation import (
    IndentStyle,
    detect_indent_style,
    indentation_ok,
    reindent,
    restyle,
)
from lsp_server.documents import DocumentStore

TABS, FOUR, TWO = IndentStyle("\t"), IndentStyle("    "), IndentStyle("  ")


@pytest.mark.parametrize(
    ("text", "style"),
    [
        ("def f():\n    if x:\n        return 1\n", FOUR),
        ("def f():\n  if x:\n    return 1\n  return 2\n", TWO),
        ("func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n", TABS),
        ("x = 1\ny = 2\n", FOUR),  # nothing indented: the default
        # Continuation lines aligned to a bracket do not outvote the real step.
        ("def f(a,\n      b):\n    x = g(a,\n          b)\n    if x:\n        return x\n    pass\n", FOUR),
    ],
)
def test_detect_indent_style(text: str, style: IndentStyle) -> None:
    assert detect_indent_style(text) == style


def test_restyle_keeps_the_width_in_the_file_s_character() -> None:
    assert restyle("        ", TABS) == "\t\t"
    assert restyle("      ", TABS) == "\t  "  # alignment spaces stay
    assert restyle("\t\t", FOUR) == "        "
    assert restyle("\t\t", TWO) == "    "  # a tab is one level of the file
    assert restyle("\t  ", FOUR) == "      "


@pytest.mark.parametrize(
    ("text", "line_before", "style", "expected"),
    [
        # Doubled indentation on the first line is dropped; later lines are already in place.
        ("    return a + b", "    ", FOUR, "return a + b"),
        ("return x\n    y = 1", "    ", FOUR, "return x\n    y = 1"),
        # Later lines keep their place: the model indents them relative to the cursor's line.
        ("    if x:\n        y()", "    ", FOUR, "if x:\n        y()"),
        # A tab-indented file gets tabs, a space-indented one spaces.
        ("if x:\n        y()", "\t", TABS, "if x:\n\t\ty()"),
        ("if x:\n\t\ty()", "    ", FOUR, "if x:\n        y()"),
        ("if x:\n\t\ty()", "  ", TWO, "if x:\n    y()"),
        # Mid-line: the first line is left alone.
        (" 1 + 2", "x =", FOUR, " 1 + 2"),
        # Column 0: the model's own indentation of the first line is the indentation, in the file's style.
        ("    pass", "", TABS, "\tpass"),
        ("", "    ", FOUR, ""),
    ],
)
def test_reindent(text: str, line_before: str, style: IndentStyle, expected: str) -> None:
    assert reindent(text, line_before, style) == expected
    assert indentation_ok(expected, line_before, style)


@pytest.mark.parametrize(
    ("suggestion", "line_before", "style"),
    [
        ("  return t", "    ", FOUR),  # over-indented: the line gets six spaces
        ("\treturn t", "\t", TABS),
        ("if x:\n\ty()", "    ", FOUR),  # a tab in a file indented with spaces
        ("if x:\n        y()", "\t", TABS),  # spaces in a file indented with tabs
    ],
)
def test_indentation_ok_fails_on_wrong_indentation(
    suggestion: str, line_before: str, style: IndentStyle
) -> None:
    assert not indentation_ok(suggestion, line_before, style)
    assert indentation_ok(reindent(suggestion, line_before, style), line_before, style)


def test_the_server_finalizes_in_the_file_s_indentation() -> None:
    store = DocumentStore()
    text = "func main() {\n\tif ok {\n\t\trun()\n\t}\n\t\n}\n"
    store.open("file:///w/a.go", "go", 1, text)
    cursor = text.index("\t\n}") + 1
    info = BackendInfo("fake", "t", None, SPECIAL_TOKENS, 1024, "cpu")
    ctx = build_completion_context(store, "file:///w/a.go", cursor, info, ContextSettings(), len)
    assert ctx.indent_style == TABS
    assert (
        finalize_completion("    for i := range xs {\n        use(i)\n    }", ctx)
        == "for i := range xs {\n\t\tuse(i)\n\t}"
    )
