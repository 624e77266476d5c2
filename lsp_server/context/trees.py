"""When a document's syntax tree is worth its parse.

A first parse costs time in proportion to the document's bytes, on the engine thread that builds every
prompt of the session: 1.2-1.9 s for a 2 MB minified line, while another document's request waits behind
it. A document that is large and made of long lines (minified code, a data file on one line) has no syntax
worth that: the prompt is built from its text alone (the completion mode falls back to the text around the
cursor), in tens of milliseconds, and such a document never blocks another's request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Tree

    from lsp_server.documents import Document

BIG_DOCUMENT = 256 * 1024  # characters; smaller documents parse in well under 0.1 s
LONG_LINES = 1000  # characters per line on average: minified code, not source written by hand
HUGE_LINE = 20_000  # characters: a cursor line this long never waits for a parse, whatever the file


def worth_parsing(doc: Document, offset: int | None = None) -> bool:
    """Whether `doc` may be parsed for a prompt (see the module docstring); `offset` is the cursor's."""
    size = len(doc.text)
    if size > BIG_DOCUMENT and size > LONG_LINES * max(1, doc.line_count):
        return False
    if offset is not None and size > HUGE_LINE:
        line = doc.line_of(offset)
        end = doc.line_start(line + 1) if line + 1 < doc.line_count else size
        if end - doc.line_start(line) > HUGE_LINE:
            return False
    return True


def tree_for_prompt(doc: Document, offset: int | None = None) -> Tree | None:
    """`doc.tree`, or None where parsing it would hold up the prompt (and every request behind it)."""
    return doc.tree if worth_parsing(doc, offset) else None
