"""The coordinator: the only code that decides what changes in scheduling state. It reaches the engine
worker through `BackendLink` (load, warm, stop, and the worker's reports), its `Generations` (queue,
cancel, answer waiters) and the `Prefetcher`.

It runs on the event loop. Each document's state is one `DocumentState` (`document_state.py`); finished
suggestions live in the `SuggestionCache`; what to do is decided by pure policies that take the frozen
`SchedulingSettings`: `answers` (answer without a model call), `waiting` (whole, first-line and partial
answers), `prefetch` and `warmups`. This module applies their decisions: it submits, cancels, resolves
waiters, counts (`Statistics.record_*`) and reports to the server through its callbacks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from engine.api import BackendInfo, CompletionBackend
from lsp_server.config import ServerSettings
from lsp_server.context import build_completion_context, finalize_completion
from lsp_server.documents import DocumentStore, PositionError, UnknownDocumentError
from lsp_server.jobs import Generation, is_current, suggestion_id
from lsp_server.scheduling import answers, prefetch, waiting
from lsp_server.scheduling.answers import Source, Suggestion
from lsp_server.scheduling.backend_link import BackendLink
from lsp_server.scheduling.document_state import DocumentStates
from lsp_server.scheduling.prefetcher import Prefetcher
from lsp_server.scheduling.reasons import BackendState, EmptyReason
from lsp_server.scheduling.settings import SchedulingSettings
from lsp_server.scheduling.warmups import WarmTrigger, suggest_at_rest
from lsp_server.scheduling.worker import ContextBuilder, Finalizer, PromptSteps
from lsp_server.statistics import Statistics
from lsp_server.suggestion_cache import SuggestionCache


class Scheduler:
    def __init__(
        self,
        store: DocumentStore,
        settings: ServerSettings,
        backend_factory: Callable[[ServerSettings], CompletionBackend],
        *,
        build_context: ContextBuilder = build_completion_context,
        finalize: Finalizer = finalize_completion,
        on_state: Callable[[BackendState, str], None] = lambda state, message: None,
        on_log: Callable[[int, str], None] = lambda level, message: None,
        on_completion: Callable[[], None] = lambda: None,
        on_grown: Callable[[Generation], None] = lambda generation: None,
        cache_documents: int = 64,
    ) -> None:
        self.store, self.stats, self._client_refreshes = store, Statistics(), False
        self._on_log, self._on_completion, self._on_grown = on_log, on_completion, on_grown
        self._use(settings)
        self._documents = DocumentStates(keep_generations=cache_documents)
        self._suggestions = SuggestionCache()  # the one home of finished suggestions
        self._last_uri: str | None = None  # the document last opened, asked in or pointed at
        # Held by the loop while it edits documents and by the worker while it copies them.
        self.store_lock = threading.Lock()
        prompts, policy = PromptSteps(build_context, finalize), lambda: self.policy
        self._backend = BackendLink(
            store, self.store_lock, backend_factory, lambda: self.settings, prompts, policy, self.stats,
            on_state, on_ready=self._warm_last, on_warmed=on_completion, on_log=on_log,
            on_ended=self._generation_ended,
        )  # fmt: skip
        self._generations = self._backend.generations
        self._prefetches = Prefetcher(
            self._documents, self._suggestions, self._generations, self._backend, policy, self.stats
        )

    def _use(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.policy = SchedulingSettings.of(settings, client_refreshes=self._client_refreshes)

    @property
    def client_refreshes(self) -> bool:
        """Set at initialize when the client asks again on `specls/suggestionGrown`."""
        return self._client_refreshes

    @client_refreshes.setter
    def client_refreshes(self, refreshes: bool) -> None:
        self._client_refreshes = refreshes
        self._use(self.settings)

    @property
    def state(self) -> BackendState:
        return self._backend.state

    @property
    def info(self) -> BackendInfo | None:
        return self._backend.info

    # --- lifecycle ---

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._backend.start(loop)

    def load(self, settings: ServerSettings) -> None:
        """(Re)load the backend on the worker; requests are answered empty until it is ready."""
        self._use(settings)
        self._backend.load(settings, self._cancel_everything)

    def update_settings(self, settings: ServerSettings) -> None:
        """Apply settings that need no reload; they hold from the next job, and finished suggestions made
        under the old ones are no longer served."""
        if settings != self.settings:
            self._documents.let_go_finished()
            self._suggestions.clear()
        self._use(settings)

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel everything and end the engine thread, waiting up to `timeout` s for it (see `join`)."""
        self._cancel_everything()
        self._backend.stop(timeout)

    def join(self, timeout: float) -> bool:
        """Wait for the engine thread to end (after `stop`): it stops at the engine's next cancel check."""
        return self._backend.join(timeout)

    @property
    def generating(self) -> bool:
        return any(not generation.done for generation in self._documents.generations())

    @contextmanager
    def editing(self) -> Iterator[DocumentStore]:
        """Edit documents without racing the worker's copying them."""
        with self.store_lock:
            yield self.store

    # --- document events ---

    def document_changed(self, uri: str) -> None:
        """Stop the document's generation unless the edit only typed characters that agree with it."""
        state = self._documents.get(uri)
        if state is None:
            return
        document = self.store.find(uri)
        ahead = state.prefetch
        text = document.text if document is not None else None
        if ahead is not None and not ahead.done and not prefetch.still_fits(ahead, text):
            self._prefetches.drop(state)
        generation = state.running
        if generation is None:
            return
        if self._generations.withdraw(uri, EmptyReason.EDITED_BEFORE_START):
            return  # it had not started: its prompt was already stale, and the client will ask again
        typed = answers.typed_after(generation, document.text, document.version) if document else None
        if typed is not None and waiting.keeps_going(generation.text, typed):
            generation.agreed_typing = typed
            return
        self._generations.cancel(generation, EmptyReason.EDITED)

    def document_opened(self, uri: str) -> None:
        self._last_uri = uri
        workspace, document = self.store.workspace, self.store.find(uri)
        wanted = self.settings.context.import_definitions
        if wanted and workspace is not None and document is not None and document.language == "python":
            workspace.prepare(document)  # aside: the first keystroke at its imports finds the index built
        self._backend.warm(uri, self._documents.cursor(uri), WarmTrigger.OPEN)

    def document_saved(self, uri: str) -> None:
        self._backend.warm(uri, self._documents.cursor(uri), WarmTrigger.SAVE)

    def cursor_moved(self, uri: str, line: int, character: int) -> None:
        """The client says where the cursor rests (focus, selection or visible range): suggest there."""
        try:
            offset = self.store.offset_at(uri, line, character)
        except (UnknownDocumentError, PositionError):
            return
        state, self._last_uri = self._documents.of(uri), uri
        state.cursor, document = offset, self.store.find(uri) if self.state == "ready" else None
        if document and suggest_at_rest(self.policy, state, document, self._suggestions):
            self._submit(uri, document.version, document.text, offset, at_rest=True)  # idle time makes it
            return
        self._backend.warm(uri, offset, WarmTrigger.CURSOR)

    def document_closed(self, uri: str) -> None:
        """Forget everything about the document: its state, its suggestions, its running generations."""
        self._suggestions.forget(uri)
        state = self._documents.forget(uri)
        if state is None:
            return
        self._prefetches.drop(state)
        if state.running is not None:
            self._generations.withdraw(uri, EmptyReason.CLOSED)
            self._generations.cancel(state.running, EmptyReason.CLOSED)

    # --- requests ---

    async def complete(self, uri: str, line: int, character: int) -> Suggestion | None:
        """Answer one completion request: a suggestion, or None for an empty answer."""
        started = time.monotonic()
        self.stats.record_request()
        answer = await self._complete(uri, line, character)
        suggestion = answer if isinstance(answer, Suggestion) and answer.text else None
        why = None if suggestion else answer if isinstance(answer, str) else EmptyReason.NOTHING_LEFT
        self.stats.record_answer((time.monotonic() - started) * 1000, why)
        self._on_completion()
        return suggestion

    async def _complete(self, uri: str, line: int, character: int) -> Suggestion | str:
        """A suggestion, or why the answer is empty."""
        if self.state != "ready":
            return EmptyReason.backend_not_ready(self.state)
        try:
            document = self.store.servable(uri)  # not one whose copy may differ from the client's
            offset = self.store.offset_at(uri, line, character)
        except (UnknownDocumentError, PositionError) as exc:
            self._on_log(logging.WARNING, f"completion at {uri}:{line}:{character} not served: {exc}")
            return EmptyReason.BAD_POSITION
        version, text = document.version, document.text
        self.store.touch(uri)
        state = self._documents.of(uri)
        state.cursor, state.requests, self._last_uri = offset, state.requests + 1, uri
        self._backend.warm_when_idle(state, lambda: self._documents.get(uri) is state)

        found = answers.typed_ahead(state, text, version, offset)
        for ahead in found:
            if ahead.takes_prefetch:
                self._prefetches.take(state, ahead.generation)
            if not ahead.wait:
                continue  # finished (served from the cache below) or diverged
            generation, typed = ahead.generation, ahead.typed
            generation.agreed_typing = typed
            plan = waiting.plan_typed_ahead(self.policy, generation.doc_text, generation.anchor, typed)
            answer = await self._generations.wait(generation, typed, plan)
            if answer:
                self.stats.record_typed_ahead_hit()
                return Suggestion(answer, suggestion_id(generation.id, typed))
            if answer is not None:
                return generation.end_reason or EmptyReason.NOTHING_LEFT
            if not is_current(self.store, uri, version):
                return EmptyReason.SUPERSEDED  # a newer edit arrived while we waited; its request owns it

        served = answers.serve_finished(self._suggestions.find(uri, text, offset), found)
        if served is not None and not served.text:
            return EmptyReason.GENERATED_NOTHING  # a finished generation here had nothing sure to say
        if served is not None:
            self.stats.record_served(
                typed_ahead=served.source is Source.TYPED_AHEAD,
                prefetched=served.source is Source.CACHED_PREFETCH,
            )
            if served.prefetch_next:  # Tab after Tab
                self._prefetches.start(state, text, offset, served.text)
            return Suggestion(served.text, served.suggestion_id)

        if self.policy.debounce_ms > 0:
            asked = state.requests
            await asyncio.sleep(self.policy.debounce_ms / 1000)
            if state.requests != asked or not is_current(self.store, uri, version):
                return EmptyReason.SUPERSEDED  # superseded while we waited

        generation = self._submit(uri, version, text, offset)
        answer = await self._generations.wait(
            generation, "", waiting.plan_new_request(self.policy, text, offset)
        )
        if answer is None:
            return EmptyReason.DIVERGED  # the typing went elsewhere while it generated
        if not answer:
            return generation.end_reason or EmptyReason.NOTHING_LEFT
        return Suggestion(answer, suggestion_id(generation.id))

    def _submit(self, uri: str, version: int, text: str, offset: int, *, at_rest: bool = False) -> Generation:
        """Start a generation at the cursor: newest wins, and every replaced request is still answered.
        `at_rest`: started where the cursor rests, before a request (its budget is tighter)."""
        self._prefetches.drop_all()  # a real request goes first
        state = self._documents.of(uri)
        previous = state.generation
        if previous is not None and not previous.done:
            self._generations.cancel(previous, EmptyReason.SUPERSEDED)
        previous_text = previous.text if previous else ""
        generation = self._generations.new(uri, version, text, offset, previous_text, at_rest=at_rest)
        self._documents.set_generation(state, generation)
        for other in self._documents.generations():  # nobody waits on them: another document goes first
            if other.uri != uri and not other.done and not other.waiters:
                other.end_reason = EmptyReason.ORPHANED
                other.cancel.cancel()
        self._generations.queue(generation)
        return generation

    # --- what follows a generation (`Generations` runs them) ---

    def _generation_ended(self, generation: Generation) -> None:
        """What follows a generation's end: a finished suggestion is kept, and the next one prefetched while
        it is on screen; one answered in part is announced whole."""
        finished_empty = generation.end_reason == EmptyReason.GENERATED_NOTHING
        if not generation.failed and (generation.text or finished_empty):
            prefetched = bool(generation.assumed_accepted)
            self._suggestions.put(
                generation.uri, generation.doc_text, generation.anchor, generation.text, generation.id,
                prefetched=prefetched,
            )  # fmt: skip
            state = self._documents.get(generation.uri)
            if state is not None and state.generation is generation:
                self._prefetches.start(state, generation.doc_text, generation.anchor, generation.text)
        if generation.answered_short and not generation.failed and generation.text:
            self._on_grown(generation)  # the client may ask again, and get the whole suggestion at once

    def _cancel_everything(self) -> None:
        self._suggestions.clear()
        self._prefetches.drop_all()
        self._generations.cancel_all(self._documents.take_generations(), EmptyReason.RELOADED)

    def _warm_last(self) -> None:
        """The backend is ready: warm the document opened, asked in or pointed at while it loaded."""
        if self._last_uri is not None:
            self._backend.warm(self._last_uri, self._documents.cursor(self._last_uri), WarmTrigger.OPEN)
