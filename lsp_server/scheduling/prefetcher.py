"""Carrying out `prefetch.py`'s decisions on the event loop: start a document's prefetch, hand it over to a
request that takes it (it becomes the document's generation), drop it. The coordinator says when."""

from __future__ import annotations

from collections.abc import Callable

from lsp_server.jobs import Generation
from lsp_server.scheduling import prefetch
from lsp_server.scheduling.backend_link import BackendLink
from lsp_server.scheduling.document_state import DocumentState, DocumentStates
from lsp_server.scheduling.generations import Generations
from lsp_server.scheduling.reasons import EmptyReason
from lsp_server.scheduling.settings import SchedulingSettings
from lsp_server.statistics import Statistics
from lsp_server.suggestion_cache import SuggestionCache


class Prefetcher:
    def __init__(
        self,
        documents: DocumentStates,
        suggestions: SuggestionCache,
        generations: Generations,
        backend: BackendLink,
        policy: Callable[[], SchedulingSettings],
        stats: Statistics,
    ) -> None:
        self._documents = documents
        self._suggestions = suggestions
        self._generations = generations
        self._backend = backend
        self._policy = policy
        self._stats = stats

    def start(self, state: DocumentState, doc_text: str, anchor: int, suggestion: str) -> None:
        """With `suggestion` shown at `anchor` and the engine idle, compute the next one as if it were taken."""
        running = state.prefetch is not None and not state.prefetch.done
        plan = prefetch.plan_prefetch(
            self._policy(), doc_text, anchor, suggestion,
            ready=self._backend.ready, engine_busy=self._backend.busy, prefetch_running=running,
        )  # fmt: skip
        if plan is None or self._suggestions.find(state.uri, plan.assumed_text, plan.anchor) is not None:
            return  # nothing to do now, or already known
        # No version of the client's document holds this text (yet): version -1.
        state.prefetch = self._generations.new(
            state.uri, -1, plan.assumed_text, plan.anchor, "", assumed_accepted=suggestion
        )
        self._stats.record_prefetch_started()
        self._generations.queue(state.prefetch)

    def take(self, state: DocumentState, taken: Generation) -> None:
        """A request is served from the prefetch `taken`: from now on it is the document's generation."""
        if state.prefetch is taken:
            state.prefetch = None
        self._documents.set_generation(state, taken)
        self._stats.record_prefetch_taken()
        if taken.done and not taken.failed:  # Tab after Tab (a running one prefetches when it ends)
            self.start(state, taken.doc_text, taken.anchor, taken.text)

    def drop(self, state: DocumentState) -> None:
        dropped, state.prefetch = state.prefetch, None
        if dropped is not None:
            self._generations.drop(dropped, EmptyReason.PREFETCH_DROPPED)

    def drop_all(self) -> None:
        for state in self._documents:
            self.drop(state)
