"""Completion mode from the syntax tree (with an indentation/bracket fallback for other languages).

- "none": in the middle of a word; inside an ordinary string literal (unless `suppress_in_strings` is off);
  inside a comment or docstring only when `suppress_in_comments` is on;
- "single-line": inside a comment or a docstring (prose: one line at a time, as Copilot and llama.vim do);
- "multi-line": on an empty line (after a block opener or between statements), or at the end of a line that
  opens a block, when nothing but closing brackets follows the cursor;
- "single-line": everywhere else, i.e. in the middle of a line or after code that does not open a block.

A docstring is a string literal that is a statement of its own (the first line under a `def`, `class` or module).
"""

from __future__ import annotations

from typing import Literal

from tree_sitter import Node, Tree

from engine.words import is_word_char
from lsp_server.languages import LanguageSpec, language_spec

Mode = Literal["none", "single-line", "multi-line"]
LiteralKind = Literal["comment", "docstring", "string"]

OPENERS = "([{"
CLOSERS = ")]}"
MATCHING = {")": "(", "]": "[", "}": "{"}

# Line endings that open a block, for languages without a grammar (and to double-check the tree).
_FALLBACK_BLOCK_ENDINGS = ("{", ":", "(", "[", " do", " then", "=>", "->")


def node_at(tree: Tree, byte_offset: int) -> Node | None:
    """The smallest node containing the byte just before the cursor (the one the user is typing in)."""
    root = tree.root_node
    if byte_offset == 0:
        return root
    return root.descendant_for_byte_range(byte_offset - 1, byte_offset)


def literal_at(tree: Tree, byte_offset: int, spec: LanguageSpec) -> LiteralKind | None:
    """The comment, docstring or string the cursor sits in (strictly inside a string literal), or None."""
    node = node_at(tree, byte_offset)
    while node is not None:
        if node.type in spec.comment_types:
            # A line comment ends at the newline; a cursor after it is no longer in the comment.
            inside = node.start_byte < byte_offset <= node.end_byte and not (
                node.end_byte == byte_offset and node.text is not None and node.text.endswith(b"\n")
            )
            return "comment" if inside else None
        if node.type in spec.string_types and node.parent is not None:
            # Inside means after the opening quote and before the closing one (or an unterminated string).
            top = node
            while top.parent is not None and top.parent.type in spec.string_types:
                top = top.parent
            closed = top.end_byte > top.start_byte + 1 and not top.has_error
            inside = top.start_byte < byte_offset < top.end_byte or (
                not closed and byte_offset >= top.end_byte
            )
            if not inside:
                return None
            statement = top.parent
            if (
                statement is not None
                and statement.type == "expression_statement"
                and statement.named_child_count == 1
            ):
                return "docstring"
            # A docstring still being typed swallows the code up to the next triple quote, and the parser
            # glues that code on (`"""Doc ... and x`, or an ERROR node): still a statement that starts with
            # the triple quote, where an argument or an assigned string starts after something else.
            return "docstring" if _opens_a_glued_statement(top) else "string"
        node = node.parent
    return None


def _opens_a_glued_statement(string: Node) -> bool:
    """A triple-quoted string first on its line whose enclosing nodes, up to a statement or parse error,
    all start where it starts."""
    if not _triple_quoted(string):
        return False
    outer, statement_like = string, False
    while outer.parent is not None and outer.parent.start_byte == string.start_byte:
        outer = outer.parent
        statement_like = statement_like or outer.type in ("expression_statement", "ERROR")
    before = outer.prev_sibling
    first_on_line = before is None or before.end_point.row < string.start_point.row
    return statement_like and first_on_line


def _triple_quoted(node: Node) -> bool:
    # Python's grammar gives the opening quote (with its prefix) a node of its own: read that, not the whole
    # string, which in a docstring being typed runs on to the next triple quote of the file.
    # (A quote just typed can make a string node with no children: tree-sitter's `child(0)` then raises.)
    opener = node.child(0) if node.child_count else None
    head = opener.text if opener is not None and opener.type == "string_start" else node.text
    return (head or b"")[:8].lstrip(b"rRbBuUfF").startswith((b'"""', b"'''"))


def unclosed_quote(line_before: str, line_comment: str = "") -> LiteralKind | None:
    """For text a parser could not make sense of: is the cursor inside a string opened earlier on its line
    ("docstring" when a triple quote opens the line), or in a line comment? A light lexer, no grammar."""
    quote = ""
    opened_at = 0
    index = 0
    while index < len(line_before):
        if quote:
            if line_before[index] == "\\":
                index += 2
                continue
            if line_before.startswith(quote, index):
                index += len(quote)
                quote = ""
                continue
        elif line_comment and line_before.startswith(line_comment, index):
            return "comment"
        elif line_before[index] in "\"'`":
            triple = line_before[index] * 3
            quote = triple if line_before.startswith(triple, index) else line_before[index]
            opened_at = index
            index += len(quote)
            continue
        index += 1
    if not quote:
        return None
    return "docstring" if len(quote) == 3 and not line_before[:opened_at].strip() else "string"


def opens_block(line_before_cursor: str) -> bool:
    """Does the code before the cursor on its line end with something that opens a block?"""
    stripped = line_before_cursor.rstrip()
    return stripped.endswith(_FALLBACK_BLOCK_ENDINGS)


def literal_kind(
    text: str,
    offset: int,
    *,
    tree: Tree | None = None,
    byte_offset: int | None = None,
    language: str | None = None,
) -> LiteralKind | None:
    """The comment, docstring or string literal the cursor at character `offset` is in, or None (code)."""
    before = text[text.rfind("\n", 0, offset) + 1 : offset]
    spec = language_spec(language)
    if spec is not None and tree is not None:
        if byte_offset is None:
            byte_offset = len(text[:offset].encode("utf-8", "surrogatepass"))
        kind = literal_at(tree, byte_offset, spec)
        if kind is None and tree.root_node.has_error:  # an unterminated literal the parser could not place
            kind = unclosed_quote(before, spec.line_comment)
        return kind
    return "comment" if _fallback_in_line_comment(before) else None


def completion_mode(
    text: str,
    offset: int,
    *,
    tree: Tree | None = None,
    byte_offset: int | None = None,
    language: str | None = None,
    suppress_in_comments: bool = False,
    suppress_in_strings: bool = True,
) -> Mode:
    """Decide how much to complete at character `offset` of `text` (see the module docstring)."""
    line_start = text.rfind("\n", 0, offset) + 1
    line_end = text.find("\n", offset)
    if line_end == -1:
        line_end = len(text)
    before = text[line_start:offset]
    after = text[offset:line_end].rstrip("\r")

    if offset < len(text) and is_word_char(text[offset]) and before and is_word_char(before[-1]):
        return "none"  # the cursor splits a word: a completion would glue onto it
    kind = literal_kind(text, offset, tree=tree, byte_offset=byte_offset, language=language)
    if kind is not None:
        suppressed = suppress_in_strings if kind == "string" else suppress_in_comments
        return "none" if suppressed else "single-line"

    rest_is_closers = all(ch in CLOSERS or ch in " \t;,\"'`" for ch in after)
    if not rest_is_closers or after.lstrip()[:1] in (")", "]"):
        return "single-line"  # mid-line, or inside `(...)` / `[...]` closed on this line
    if not before.strip():
        return "multi-line"  # an empty line (or only indentation): statements may follow
    if opens_block(before):
        return "multi-line"
    return "single-line"


def _fallback_in_line_comment(before: str) -> bool:
    stripped = before.lstrip()
    return stripped.startswith(("#", "//", "--", ";"))


def indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_width(line: str, tab_size: int = 4) -> int:
    width = 0
    for ch in line:
        if ch == " ":
            width += 1
        elif ch == "\t":
            width += tab_size - width % tab_size
        else:
            break
    return width
