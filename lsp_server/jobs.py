"""What the scheduler and the engine worker pass between them: one `Generation` per model call, the requests
waiting on it, and the fair queue of generations not started yet."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

from engine.api import CancelToken
from lsp_server.documents import DocumentStore, UnknownDocumentError
from lsp_server.typed_ahead import part_typed


@dataclass
class Waiter:
    """A completion request waiting on a generation."""

    typed_when_asked: str  # what the user had typed after the generation's anchor when the request arrived
    first_line_only: bool
    future: asyncio.Future[str | None]  # the text to answer with, or None: diverged, start a new generation
    partial_due: bool = False  # past the partial-answer deadline: any non-blank text so far will do


@dataclass
class Generation:
    """One model call for one cursor position, and what it produced so far.

    The worker reads only the fields set at creation and `cancel`; the rest belong to the event loop."""

    id: int
    uri: str
    version: int
    doc_text: str  # the document when it was requested (a reference, not a copy)
    anchor: int  # the cursor, as an index into doc_text
    previous_completion: str
    cancel: CancelToken = field(default_factory=CancelToken)
    text: str = ""  # completion text so far (streamed; finalized when done)
    agreed_typing: str = ""  # the latest typing after the anchor that this generation still agrees with
    done: bool = False
    failed: bool = False
    end_reason: str = ""  # why it ended without text to serve (for the empty-answer counts)
    # A prefetch: `doc_text` is the document with this suggestion assumed accepted just before `anchor`.
    assumed_accepted: str = ""
    answered_short: bool = False  # a request got only its first line or a mid-line part, before it finished
    at_rest: bool = False  # started where the cursor came to rest, before any request: a tighter budget
    waiters: list[Waiter] = field(default_factory=list)

    def assumed_part_typed(self, text: str) -> int | None:
        """For a prefetch: how much of its assumed suggestion the client's document `text` holds by now
        (typed or accepted), or None when the document went elsewhere."""
        inserted = self.assumed_accepted
        return part_typed(self.doc_text, self.anchor - len(inserted), inserted, text)


def suggestion_id(generation_id: int, typed_since: str | None = None) -> str:
    """The id a client gets with a suggestion (the argument of its `specls.accept` command): the generation,
    and for one served to typing ahead, how many characters were typed since it was asked."""
    return str(generation_id) if typed_since is None else f"{generation_id}+{len(typed_since)}"


def generation_of(suggestion_id: str) -> str:
    """The generation a suggestion id names (as `specls/suggestionGrown` gives it)."""
    return suggestion_id.split("+", 1)[0]


class FairQueue:
    """At most one pending generation per document, served in order of arrival per document."""

    def __init__(self) -> None:
        self._pending: collections.OrderedDict[str, Generation] = collections.OrderedDict()

    def put(self, generation: Generation) -> Generation | None:
        """Queue `generation`; return the older pending one for the same document that it replaces."""
        replaced = self._pending.get(generation.uri)
        self._pending[generation.uri] = generation  # keeps the document's place in line
        return replaced

    def remove(self, uri: str) -> Generation | None:
        return self._pending.pop(uri, None)

    def holds(self, generation: Generation) -> bool:
        return self._pending.get(generation.uri) is generation

    def pop(self) -> Generation | None:
        return self._pending.popitem(last=False)[1] if self._pending else None

    def __len__(self) -> int:
        return len(self._pending)


def is_current(store: DocumentStore, uri: str, version: int) -> bool:
    """True while the document is open, still at `version` and in sync with the client."""
    try:
        document = store.get(uri)
        return document.version == version and document.servable
    except UnknownDocumentError:
        return False
