"""Indentation of a suggestion as it is inserted at the cursor: pure functions.

A suggestion is inserted after the text before the cursor, so its first line continues the cursor's line and
its later lines start at column 0 and carry their whole indentation. Rules:
1. After nothing but indentation on the cursor's line, the first line starts with code: indentation the
   model wrote again is dropped (it would indent the line twice). The model writes it at a token boundary
   ("   " + "  return"), not by shifting its block, so later lines keep their width: the model saw the
   cursor line's indentation and indents them relative to it.
2. Indentation is written the way the file writes it: tabs in a file indented with tabs, spaces (one level
   per tab) in a file indented with spaces. Widths are kept; spaces after tabs (alignment) stay spaces.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from lsp_server.context.syntax import indent_width, indentation

DEFAULT_UNIT = "    "
SAMPLE_CHARS = 20_000  # of the text on each side of the cursor: enough to see how a file indents


@dataclass(frozen=True)
class IndentStyle:
    unit: str = DEFAULT_UNIT  # one level: "\t", or some spaces

    @property
    def tabs(self) -> bool:
        return self.unit == "\t"


def detect_indent_style(text: str) -> IndentStyle:
    """Tabs when more lines start with a tab than with a space. Otherwise spaces: one level is the
    smallest indentation that at least a tenth of the space-indented lines have (continuation lines aligned
    to a bracket are rarer than any level), 4 when no line is indented."""
    tab_lines = 0
    widths: collections.Counter[int] = collections.Counter()
    space_lines = 0
    for line in text.split("\n"):
        if line[:1] == "\t":  # a blank line counts too: the cursor's own new line may be the only one
            tab_lines += 1
        elif line[:1] == " ":
            space_lines += 1
            if line.strip():
                widths[len(line) - len(line.lstrip(" "))] += 1
    if tab_lines > space_lines:
        return IndentStyle("\t")
    common = [width for width, count in widths.items() if count * 10 >= sum(widths.values())]
    return IndentStyle(" " * min(common)) if common else IndentStyle()


def indent_style_around(text: str, offset: int) -> IndentStyle:
    """The indent style of the text near `offset` (a bounded sample, so a huge file costs no more)."""
    return detect_indent_style(text[max(0, offset - SAMPLE_CHARS) : offset + SAMPLE_CHARS])


def restyle(indent: str, style: IndentStyle, tab_size: int = 4) -> str:
    """`indent` written in `style`, the same width: tabs become levels of spaces, or groups of `tab_size`
    leading spaces become tabs."""
    if style.tabs:
        width = indent_width(indent, tab_size)
        return "\t" * (width // tab_size) + " " * (width % tab_size)
    leading_tabs = len(indent) - len(indent.lstrip("\t"))
    return style.unit * leading_tabs + indent[leading_tabs:].replace("\t", " " * tab_size)


def reindent(text: str, line_before: str, style: IndentStyle, tab_size: int = 4) -> str:
    """The suggestion with rules 1 and 2 of the module docstring applied."""
    lines = text.split("\n")
    if line_before and not line_before.strip():
        lines[0] = lines[0].lstrip(" \t")
    elif not line_before:
        lines[0] = restyle(indentation(lines[0]), style, tab_size) + lines[0].lstrip(" \t")
    lines[1:] = [restyle(indentation(line), style, tab_size) + line.lstrip(" \t") for line in lines[1:]]
    return "\n".join(lines)


def indentation_ok(suggestion: str, line_before: str, style: IndentStyle, tab_size: int = 4) -> bool:
    """Is `suggestion`, inserted after `line_before`, indented as the file is? Its first line does not indent
    a line that already has its indentation, and its later lines indent with the file's character: spaces
    alone, or tabs followed by fewer than `tab_size` alignment spaces."""
    lines = suggestion.split("\n")
    if line_before and not line_before.strip() and lines[0][:1] in (" ", "\t"):
        return False
    for line in lines[1:]:
        indent = indentation(line)
        if style.tabs and (len(indent.lstrip("\t")) >= tab_size or "\t" in indent.lstrip("\t")):
            return False
        if not style.tabs and "\t" in indent:
            return False
    return True
