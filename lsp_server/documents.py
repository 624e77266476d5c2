"""One place that owns the text and syntax tree of every open document and applies edits.

Positions arrive in the negotiated LSP position encoding (utf-8, utf-16 or utf-32 code units). They are
validated strictly: a line or character out of range, or a position inside a multi-unit character (the
middle of a surrogate pair or of a UTF-8 sequence), raises PositionError and changes nothing.

Lines end at "\\n" (a "\\r" before it belongs to the terminator), which is also how tree-sitter counts
rows, so the line index and the tree always agree. LSP also counts a lone "\\r" as a line break: a document
holding one is marked out of sync (its positions would not match the client's) and is not served; nor is one
whose edit failed to apply or whose version did not go up, until a full-text change resyncs it. A per-line offset index in characters and in UTF-8
bytes, with a lazily applied shift, keeps a keystroke in a multi-megabyte file from costing O(lines).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tree_sitter import Parser, Point, Tree

from lsp_server.languages import canonical_language, new_parser
from lsp_server.positions import LineIndex, char_index, units, utf8_len
from lsp_server.positions import PositionError as PositionError  # raised here, caught by callers

ENCODINGS = ("utf-8", "utf-16", "utf-32")
_LONE_CR = re.compile("\r(?!\n)")
PARSE_CHUNK = 65536  # bytes handed to tree-sitter per read
PARSE_BUDGET_S = 2.0  # a (re)parse that takes longer is given up, and the document goes without a tree


class UnknownDocumentError(LookupError):
    """The URI was never opened (or was closed)."""


class OutOfSyncError(PositionError):
    """The store's copy of a document can no longer be trusted to match the client's: an edit did not
    apply, its version did not go up, or the text holds a lone carriage return (a line break to LSP, not to
    this store's line index). No position is served until a full-text change brings it back."""


@dataclass(frozen=True)
class TextChange:
    # (start_line, start_char, end_line, end_char) in the store's position encoding; None replaces all text.
    range: tuple[int, int, int, int] | None
    text: str


@dataclass
class Document:
    uri: str
    language_id: str
    version: int
    text: str
    last_touched: float
    language: str | None = None  # canonical grammar name ("python", "tsx", ...) or None
    data: bytes = b""  # text as UTF-8, what the tree is parsed from
    lines: LineIndex = field(default_factory=lambda: LineIndex(""), repr=False)
    parser: Parser | None = field(default=None, repr=False)
    # The tree is edited on every change but reparsed only when read: a reparse walks every top-level node
    # (~40 ms on a 3.6 MB Python file), so keystrokes without a completion request never pay for it.
    _tree: Tree | None = field(default=None, repr=False)
    _tree_stale: bool = field(default=True, repr=False)
    # Where the file's part of the last prompt began (a line number): the next prompt starts there too while
    # it fits, so moving down a line or typing keeps the cached KV prefix (`context.builder`).
    prompt_start_line: int | None = field(default=None, repr=False)
    # Where the larger prompt read aside in the background begins (`scheduling.worker`, `warm_aside`): it
    # keeps its own start while it grows, as the prompt requests are served from keeps its.
    grow_start_line: int | None = field(default=None, repr=False)
    # Where the last prompt's block of the lines below began, counted from the file's end (`context.builder`,
    # `linesBelowTokens`): lines typed or opened above it leave that count alone, so the block, at the prompt's
    # head, stays the same and so does the whole cached prompt.
    below_start_from_end: int | None = field(default=None, repr=False)
    in_sync: bool = True  # False after an edit that did not apply or a version that did not go up
    lone_cr: bool = False  # the text holds a "\r" not followed by "\n"

    @property
    def servable(self) -> bool:
        return self.in_sync and not self.lone_cr

    @property
    def tree(self) -> Tree | None:
        """The syntax tree of the current text (None for languages without a grammar, and for a document
        too big to parse within PARSE_BUDGET_S)."""
        if self._tree_stale and self.parser is not None:
            self._tree = self._parse(self.parser)
            self._tree_stale = False
        return self._tree

    def _parse(self, parser: Parser) -> Tree | None:
        data = self.data
        deadline = time.monotonic() + PARSE_BUDGET_S

        def read(offset: int, _point: Point) -> bytes:
            return data[offset : offset + PARSE_CHUNK]

        def progress(*_: object) -> bool:
            # Python code that tree-sitter calls every few hundred steps: it lets the event loop's thread
            # take the GIL (a parse of bytes holds it throughout: 2 s on a 2 MB line), and bounds the time.
            return time.monotonic() > deadline

        try:
            if self._tree is not None:
                return parser.parse(read, self._tree, progress_callback=progress)
            return parser.parse(read, progress_callback=progress)
        except ValueError:  # over budget: served without a syntax tree from now on (the mode falls back)
            self.parser = None
            return None

    @property
    def line_count(self) -> int:
        return len(self.lines)

    def snapshot(self) -> Document:
        """A copy that later edits of this document do not touch (text and bytes are immutable and shared;
        the line index and the tree are copied, a tree copy is cheap)."""
        tree = self._tree.copy() if self._tree is not None else None
        return dataclasses.replace(self, lines=self.lines.copy(), _tree=tree)

    def line_ending_at(self, line: int) -> str:
        """The line break the file uses near `line`: that of the line itself, else of the one before."""
        for candidate in (line, line - 1):
            if 0 <= candidate < len(self.lines) - 1:
                end = self.lines.char_start(candidate + 1) - 1  # the "\n"
                return "\r\n" if end > 0 and self.text[end - 1] == "\r" else "\n"
        return "\n"

    def line_of(self, offset: int) -> int:
        """The line holding character `offset`."""
        return self.lines.line_of_char(offset)

    def line_start(self, line: int) -> int:
        """Character offset where `line` starts."""
        return self.lines.char_start(line)

    def line_text(self, line: int) -> str:
        """Line `line` without its terminator ("\\n" or "\\r\\n")."""
        start = self.lines.char_start(line)
        end = self.lines.char_start(line + 1) - 1 if line + 1 < len(self.lines) else len(self.text)
        if end > start and self.text[end - 1] == "\r" and line + 1 < len(self.lines):
            end -= 1
        return self.text[start:end]

    def byte_offset(self, offset: int) -> int:
        """UTF-8 byte offset of character `offset`."""
        line = self.lines.line_of_char(offset)
        return self.lines.byte_start(line) + utf8_len(self.text[self.lines.char_start(line) : offset])

    def point(self, offset: int) -> Point:
        """tree-sitter (row, byte column) of character `offset`."""
        line = self.lines.line_of_char(offset)
        return Point(line, utf8_len(self.text[self.lines.char_start(line) : offset]))


class ImportedFiles(Protocol):
    """Where the files a document imports come from when they are not open, where the workspace defines the
    names it uses, and what its `from` lines may import (`context.workspace`)."""

    def imported_documents(self, current: Document, open_uris: Sequence[str]) -> list[Document]: ...

    def definition_snippets(self, current: Document, offset: int) -> tuple[str, list[tuple[str, str]]]: ...

    def import_names(self, current: Document) -> tuple[dict[str, frozenset[str]], int] | None: ...

    def submodules(self, current: Document) -> frozenset[str] | None: ...

    def wanted_imports(
        self, current: Document, offset: int
    ) -> tuple[dict[str, frozenset[str]], frozenset[str]]: ...

    def wanted_modules(self, current: Document, offset: int, elsewhere: frozenset[str]) -> frozenset[str]: ...

    def prepare(self, current: Document) -> None: ...


PromptStarts = tuple[int | None, int | None, int | None]


def prompt_starts(doc: Document) -> PromptStarts:
    """Where the document's prompts start: the served one's first line, the growth's, the lines below's."""
    return doc.prompt_start_line, doc.grow_start_line, doc.below_start_from_end


def starts_moved(new: PromptStarts, taken: PromptStarts, current: PromptStarts) -> PromptStarts:
    """Each start a copy moved since it was `taken`, the `current` one where it did not."""
    first, grow, below = (
        moved if moved != was else now for moved, was, now in zip(new, taken, current, strict=True)
    )
    return first, grow, below


class DocumentStore:
    def __init__(self, position_encoding: str = "utf-16") -> None:
        self.position_encoding = position_encoding
        self._documents: dict[str, Document] = {}
        # In a snapshot: where each document's prompts started when it was taken (`adopt_trees`).
        self._starts_taken: dict[str, PromptStarts] = {}
        # The files on disk that open documents import (None: no workspace folder, or the setting is off).
        self.workspace: ImportedFiles | None = None

    @property
    def position_encoding(self) -> str:
        return self._encoding

    @position_encoding.setter
    def position_encoding(self, value: str) -> None:
        if value not in ENCODINGS:
            raise ValueError(f"unsupported position encoding {value!r}; expected one of {ENCODINGS}")
        self._encoding = value

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self, uri: str, language_id: str, version: int, text: str) -> None:
        self._documents[uri] = new_document(uri, language_id, version, text)

    def close(self, uri: str) -> None:
        if self._documents.pop(uri, None) is None:
            raise UnknownDocumentError(uri)

    def get(self, uri: str) -> Document:
        try:
            return self._documents[uri]
        except KeyError:
            raise UnknownDocumentError(uri) from None

    def find(self, uri: str) -> Document | None:
        """The document, or None when it is not open."""
        return self._documents.get(uri)

    def touch(self, uri: str) -> None:
        self.get(uri).last_touched = time.monotonic()

    def all_documents(self) -> list[Document]:
        return list(self._documents.values())

    def snapshot(self) -> DocumentStore:
        """Every document as it is now, for building a prompt while edits go on (see EngineWorker)."""
        copy = DocumentStore(self._encoding)
        copy.workspace = self.workspace
        copy._documents = {uri: doc.snapshot() for uri, doc in self._documents.items()}
        copy._starts_taken = {uri: prompt_starts(doc) for uri, doc in self._documents.items()}
        return copy

    def assume_inserted(self, uri: str, offset: int, text: str) -> None:
        """Insert `text` at `offset` in this copy (a snapshot): the document as it would be once the user
        accepts a suggestion there, for a prefetch's prompt. `adopt_trees` never takes its tree back."""
        _replace(self.get(uri), offset, offset, text)

    def adopt_trees(self, snapshot: DocumentStore) -> None:
        """Keep the trees a snapshot parsed, for the documents not edited since it was taken, and where each
        prompt started that the snapshot's own prompt moved (a line: still the best guess after an edit, so the
        next prompt shares the cache)."""
        for uri, copy in snapshot._documents.items():
            doc = self._documents.get(uri)
            if doc is not None:
                # Only the starts this copy's prompt moved: a copy taken before another prompt moved one (the
                # growth read aside, say) must not put the older start back.
                taken = snapshot._starts_taken.get(uri)
                new = prompt_starts(copy)
                starts = new if taken is None else starts_moved(new, taken, prompt_starts(doc))
                doc.prompt_start_line, doc.grow_start_line, doc.below_start_from_end = starts
            if doc is not None and doc.data is copy.data and doc._tree_stale and not copy._tree_stale:
                doc._tree, doc._tree_stale = copy._tree, False
                if copy.parser is None:  # its parse was over budget
                    doc.parser = None

    # -- positions ------------------------------------------------------------------------------
    def servable(self, uri: str) -> Document:
        """The document, if its copy can be trusted to match the client's; OutOfSyncError if not."""
        doc = self.get(uri)
        if not doc.servable:
            reason = "a lone carriage return" if doc.in_sync else "an edit that did not apply"
            raise OutOfSyncError(f"{uri} is out of sync ({reason}); no suggestions until its full text")
        return doc

    def offset_at(self, uri: str, line: int, character: int) -> int:
        return self._offset(self.get(uri), line, character)

    def position_at(self, uri: str, offset: int) -> tuple[int, int]:
        doc = self.get(uri)
        if not 0 <= offset <= len(doc.text):
            raise PositionError(f"offset {offset} is outside a document of length {len(doc.text)}")
        line = doc.lines.line_of_char(offset)
        column = offset - doc.lines.char_start(line)
        line_text = doc.line_text(line)
        if column > len(line_text):
            raise PositionError(f"offset {offset} falls inside a line terminator")
        return line, units(line_text[:column], self._encoding)

    def _offset(self, doc: Document, line: int, character: int) -> int:
        if not 0 <= line < doc.line_count:
            raise PositionError(f"line {line} is outside a document of {doc.line_count} lines")
        return doc.lines.char_start(line) + char_index(doc.line_text(line), character, self._encoding)

    # -- edits ----------------------------------------------------------------------------------
    def change(self, uri: str, version: int, changes: Sequence[TextChange]) -> None:
        """Apply `changes` in order. Each range is validated against the text left by the previous
        change; a bad one raises PositionError and the document is restored to its state before the call."""
        doc = self.get(uri)
        # A full text resyncs, whatever came before; anything else needs a trusted copy and a newer version.
        full = max((i for i, change in enumerate(changes) if change.range is None), default=None)
        if full is not None:
            changes, doc.in_sync = changes[full:], True
        elif not doc.in_sync:
            raise OutOfSyncError(
                f"{uri} is out of sync; an incremental edit cannot apply until the full text"
            )
        elif version <= doc.version:
            doc.in_sync = False
            raise OutOfSyncError(f"{uri}: version {version} does not follow {doc.version}; edit refused")
        undo: list[tuple[int, int, str]] = []  # (start, end of inserted text, replaced text)
        try:
            for change in changes:
                if change.range is None:
                    start, end = 0, len(doc.text)
                else:
                    start_line, start_char, end_line, end_char = change.range
                    start = self._offset(doc, start_line, start_char)
                    end = self._offset(doc, end_line, end_char)
                    if end < start:
                        raise PositionError(f"range end {change.range[2:]} is before its start")
                undo.append((start, start + len(change.text), doc.text[start:end]))
                _replace(doc, start, end, change.text)
                if change.range is None:
                    doc.lone_cr = _has_lone_cr(doc.text)
                elif not doc.lone_cr:  # only the edited spot can have made one
                    doc.lone_cr = _has_lone_cr(doc.text[max(0, start - 1) : start + len(change.text) + 1])
                else:
                    doc.lone_cr = _has_lone_cr(doc.text)
        except PositionError:
            for start, end, old_text in reversed(undo):
                _replace(doc, start, end, old_text)
            if undo:
                doc._tree = None  # the tree saw the edits and their inverses; parse from scratch
            doc.in_sync = False  # the client applied it; our copy no longer matches
            raise
        doc.version = max(doc.version, version)  # never back: an old generation must not look current
        doc.last_touched = time.monotonic()


def new_document(uri: str, language_id: str, version: int, text: str) -> Document:
    """A document holding `text`, with its grammar's parser (the tree is parsed when first read)."""
    language = canonical_language(language_id, uri)
    return Document(
        uri=uri,
        language_id=language_id,
        version=version,
        text=text,
        last_touched=time.monotonic(),
        language=language,
        data=text.encode("utf-8", "surrogatepass"),
        lines=LineIndex(text),
        parser=new_parser(language),
        lone_cr=_has_lone_cr(text),
    )


def _has_lone_cr(text: str) -> bool:
    return "\r" in text and _LONE_CR.search(text) is not None


def _replace(doc: Document, start: int, end: int, text: str) -> None:
    """Replace characters [start, end) of `doc` with `text`: text, bytes, line index and a tree edit."""
    start_line = doc.lines.line_of_char(start)
    end_line = doc.lines.line_of_char(end)
    start_byte = doc.byte_offset(start)
    end_byte = doc.byte_offset(end)
    start_point = doc.point(start)
    old_end_point = doc.point(end)
    new_bytes = text.encode("utf-8", "surrogatepass")
    deltas = (len(text) - (end - start), len(new_bytes) - (end_byte - start_byte))
    doc.lines.replace(start_line, end_line, text, start, start_byte, deltas)
    doc.text = doc.text[:start] + text + doc.text[end:]
    doc.data = doc.data[:start_byte] + new_bytes + doc.data[end_byte:]
    doc._tree_stale = True
    if doc._tree is not None:
        doc._tree.edit(
            start_byte=start_byte,
            old_end_byte=end_byte,
            new_end_byte=start_byte + len(new_bytes),
            start_point=start_point,
            old_end_point=old_end_point,
            new_end_point=doc.point(start + len(text)),
        )
