"""Everything the scheduler knows about one open document, in one `DocumentState`, forgotten as a whole when
the document closes. `DocumentStates` holds them in the order their generations were last set, so that the
oldest generations can be let go once more than `keep_generations` documents hold one.

Only the coordinator changes these; the policies read them."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass

from lsp_server.jobs import Generation


@dataclass(eq=False)
class DocumentState:
    uri: str
    # The document's latest model call, running or finished: a running one serves typing that agrees with
    # it; a finished one's text is the next generation's `previous_completion` (its suggestion itself is
    # served from the suggestion cache, the one home of finished suggestions).
    generation: Generation | None = None
    # The suggestion after the one on screen, computed as if that one were accepted, until a request takes
    # it (then it becomes `generation`) or an edit that does not fit it drops it.
    prefetch: Generation | None = None
    cursor: int | None = None  # the last known cursor offset
    # Counts the document's requests: a request that waited (debounce) or a timer it set (the idle warm-up)
    # goes on only while no newer request came.
    requests: int = 0

    @property
    def running(self) -> Generation | None:
        return self.generation if self.generation is not None and not self.generation.done else None


class DocumentStates:
    def __init__(self, keep_generations: int) -> None:
        self._keep_generations = keep_generations
        self._states: collections.OrderedDict[str, DocumentState] = collections.OrderedDict()

    def get(self, uri: str) -> DocumentState | None:
        return self._states.get(uri)

    def of(self, uri: str) -> DocumentState:
        """The document's state, new if it has none yet."""
        state = self._states.get(uri)
        if state is None:
            state = self._states[uri] = DocumentState(uri)
        return state

    def forget(self, uri: str) -> DocumentState | None:
        return self._states.pop(uri, None)

    def set_generation(self, state: DocumentState, generation: Generation) -> None:
        """`generation` is now the document's latest; past `keep_generations` documents, the oldest let go."""
        state.generation = generation
        self._states.move_to_end(state.uri)
        holding = [other for other in self._states.values() if other.generation is not None]
        for other in holding[: max(0, len(holding) - self._keep_generations)]:
            other.generation = None

    def cursor(self, uri: str) -> int | None:
        state = self._states.get(uri)
        return state.cursor if state is not None else None

    def let_go_finished(self) -> None:
        """Forget finished generations (their suggestions were made under settings that changed)."""
        for state in self._states.values():
            if state.generation is not None and state.generation.done:
                state.generation = None

    def take_generations(self) -> list[Generation]:
        """Every document's latest generation, which the documents no longer hold."""
        taken = list(self.generations())
        for state in self._states.values():
            state.generation = None
        return taken

    def __iter__(self) -> Iterator[DocumentState]:
        return iter(list(self._states.values()))

    def generations(self) -> Iterator[Generation]:
        return (state.generation for state in self if state.generation is not None)
