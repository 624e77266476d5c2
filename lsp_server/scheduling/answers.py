"""The one decision "can this request be answered without a new model call?", as pure functions.

Two sources, tried in this order:
1. Typed ahead of a generation: the user only typed, at its cursor, what the document's latest generation
   (or its prefetch) is generating. A running one is waited on (`TypedAhead.wait`); reaching the text a
   prefetch assumed takes that prefetch, whatever it holds (`TypedAhead.takes_prefetch`).
2. A finished suggestion: every finished suggestion lives in one place, the suggestion cache
   (`suggestion_cache.py`), keyed by the text around its cursor. A hit there is served at once
   (`serve_finished`), and says whose it was: the document's latest generation (typed ahead of it), a
   prefetch, or an older suggestion found again (backspace, undo, coming back to a spot). The cache looks
   back `TYPED_AHEAD_CHARS` for the cursor a suggestion was made at, so typing along one is served from
   it up to that far.
Anything else starts a generation. The functions decide; the coordinator acts (waits, takes, counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from lsp_server.jobs import Generation, suggestion_id
from lsp_server.scheduling.document_state import DocumentState
from lsp_server.suggestion_cache import CacheHit
from lsp_server.typed_ahead import still_agrees, typed_since


@dataclass
class Suggestion:
    """A request's answer: the text to insert at the cursor, and the id its `specls.accept` command carries."""

    text: str
    suggestion_id: str


@dataclass(frozen=True)
class TypedAhead:
    """The request's cursor is where `generation`'s anchor is after the user typed `typed` there."""

    generation: Generation
    typed: str
    takes_prefetch: bool  # the document reached the text this prefetch assumed: it becomes the generation
    wait: bool  # running and still in agreement with the typing: wait for its answer


def typed_after(generation: Generation, text: str, version: int) -> str | None:
    """What was typed at `generation`'s anchor to make the document `text` (at `version`), or None."""
    if version == generation.version:
        return ""
    return typed_since(generation.doc_text, generation.anchor, text)


def typed_ahead(state: DocumentState, text: str, version: int, offset: int) -> list[TypedAhead]:
    """The document's generations the request at `offset` typed ahead of, latest first, then its prefetch."""
    found = []
    for generation in (state.generation, state.prefetch):
        if generation is None:
            continue
        typed = typed_after(generation, text, version)
        if typed is None or offset != generation.anchor + len(typed):
            continue
        wait = not generation.done and still_agrees(generation.text, typed)
        found.append(TypedAhead(generation, typed, generation is state.prefetch, wait))
    return found


class Source(StrEnum):
    """Where a finished suggestion came from, for the statistics."""

    TYPED_AHEAD = "typed-ahead"  # the document's latest generation: the user typed along it
    CACHED = "cached"  # an older suggestion made at this spot or on the way to it
    CACHED_PREFETCH = "cached-prefetch"  # a prefetch that was never taken as the latest, found again


@dataclass(frozen=True)
class Served:
    text: str
    suggestion_id: str
    source: Source
    prefetch_next: bool  # shown whole at its own cursor: compute the one after it (Tab after Tab)


def serve_finished(hit: CacheHit | None, typed_ahead_of: list[TypedAhead]) -> Served | None:
    """The answer a finished suggestion found in the cache gives, or None when there is none.
    `typed_ahead_of`: the generations the request typed ahead of (`typed_ahead`)."""
    if hit is None:
        return None
    if any(found.generation.id == hit.suggestion.generation_id for found in typed_ahead_of):
        source = Source.TYPED_AHEAD
    else:
        source = Source.CACHED_PREFETCH if hit.suggestion.prefetched else Source.CACHED
    prefetch_next = source is not Source.TYPED_AHEAD and not hit.typed
    return Served(
        hit.remainder, suggestion_id(hit.suggestion.generation_id, hit.typed), source, prefetch_next
    )
