"""Finished suggestions, kept by the text around the cursor they were made for.

A generation that finished with nothing to show (the confidence gate or a stop rule dropped it) is kept too,
as an empty suggestion found only at its own cursor: asking there again (a resting cursor, a prefetch or
warm-up planned there) gets the same nothing at once instead of a second generation.

Backspace, undo, or coming back to a spot finds the suggestion made there and shows it again without a model
call; typing that agrees with a cached suggestion is answered with the rest of it (the scheduler's typed-ahead
does this for the running generation, the cache for finished ones). The key is the text just before and just
after the cursor: the part of the prompt that decides the suggestion.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from lsp_server.jobs import suggestion_id

PREFIX_CHARS = 2048  # text before the cursor in a key
SUFFIX_CHARS = 512  # text after the cursor in a key
TYPED_AHEAD_CHARS = 256  # how far before the cursor a cached suggestion's own cursor may lie


@dataclass(frozen=True)
class CachedSuggestion:
    text: str
    generation_id: int
    prefetched: bool = False  # made by a prefetch, before the user asked


@dataclass(frozen=True)
class CacheHit:
    suggestion: CachedSuggestion
    typed: str  # what was typed since the cached suggestion's cursor (a start of its text)

    @property
    def remainder(self) -> str:
        return self.suggestion.text[len(self.typed) :]

    @property
    def suggestion_id(self) -> str:
        return suggestion_id(self.suggestion.generation_id, self.typed)


def context_key(uri: str, text: str, offset: int, suffix: str | None = None) -> tuple[str, str, str]:
    """The cache key of a cursor at `offset` in `text` (`suffix`: the text after it, when already cut)."""
    after = text[offset : offset + SUFFIX_CHARS] if suffix is None else suffix
    return uri, text[max(0, offset - PREFIX_CHARS) : offset], after


class SuggestionCache:
    """The most recently used `capacity` suggestions over all documents."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._entries: collections.OrderedDict[tuple[str, str, str], CachedSuggestion] = (
            collections.OrderedDict()
        )

    def __len__(self) -> int:
        return len(self._entries)

    def put(
        self,
        uri: str,
        text: str,
        offset: int,
        suggestion: str,
        generation_id: int,
        *,
        prefetched: bool = False,
    ) -> None:
        key = context_key(uri, text, offset)
        self._entries[key] = CachedSuggestion(suggestion, generation_id, prefetched)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def find(self, uri: str, text: str, offset: int) -> CacheHit | None:
        """The suggestion made at this cursor, or at one up to TYPED_AHEAD_CHARS before it on the way here
        when what was typed since starts it (and leaves something to show); the nearest one wins."""
        suffix = text[offset : offset + SUFFIX_CHARS]
        for back in range(min(TYPED_AHEAD_CHARS, offset) + 1):
            entry = self._entries.get(context_key(uri, text, offset - back, suffix))
            if entry is None:
                continue
            typed = text[offset - back : offset]
            nothing_here = not entry.text and not back  # the model had nothing sure to say at this cursor
            if nothing_here or (entry.text.startswith(typed) and len(entry.text) > len(typed)):
                self._entries.move_to_end(context_key(uri, text, offset - back, suffix))
                return CacheHit(entry, typed)
        return None

    def forget(self, uri: str) -> None:
        for key in [key for key in self._entries if key[0] == uri]:
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()
