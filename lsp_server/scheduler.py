"""Who runs which completion, when: newest-wins per document, the cancel bridge, typed-ahead reuse.

Threads. The event loop owns every `Generation` field that changes after creation (streamed text, waiters,
done) and the document store. One engine worker thread (`engine_worker.py`) owns the backend: it loads it,
builds each prompt and runs `backend.complete`. It reports back only through `loop.call_soon_threadsafe`,
and the loop talks to a running generation only through its `CancelToken`, which the engine polls every
speculative round.

Policy.
- One pending job per document; a newer request replaces it, and the replaced one is answered empty.
  Documents are served in the order their first pending job arrived, so one busy file cannot starve another.
- A newer request or a `didChange` stops the document's running generation, unless the user only typed
  characters that agree with what it generated: then it keeps going and later requests are answered from
  it.
- Finished suggestions are cached by the text around their cursor (`suggestion_cache.py`): backspace, undo
  or coming back to a spot shows one again, and typing that matches its start is answered at once with the
  remainder, without a model call. On divergence a new generation starts and gets the old suggestion as
  `previous_completion`, so the stale drafter can re-verify it in one pass.
- Prefetch: when a suggestion is finished and the engine is idle, the next one is computed as if it were
  accepted (a `Generation` with `assumed_accepted`). Accepting it, or typing it out, is answered from that
  prefetch; any other edit, or a real request, cancels it.
- Every request gets an answer: a suggestion, an empty one, or (after `$/cancelRequest`, done by pygls when
  the awaiting task is cancelled) error -32800.
- While the user is idle the engine warms its KV cache with the prompt the next request will need: when a
  file opens (the cursor unknown: its longest start that fits the budget), when the client reports the
  cursor (`specls/cursor`), on save, and `warmIdleMs` after the last request (which resumes a prefill that
  typing cancelled). Any real request pre-empts a warm-up; what it computed stays cached.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from engine.api import BackendInfo, CompletionBackend, CompletionResult, WarmResult
from lsp_server.config import ServerSettings
from lsp_server.context import build_completion_context, finalize_completion
from lsp_server.documents import DocumentStore, PositionError, UnknownDocumentError
from lsp_server.engine_worker import ContextBuilder, EngineWorker, Finalizer, PromptSteps, WarmJob
from lsp_server.jobs import Generation, Waiter, is_current, suggestion_id
from lsp_server.statistics import Statistics
from lsp_server.suggestion_cache import SuggestionCache
from lsp_server.typed_ahead import (
    complete_first_line,
    remainder_after,
    still_agrees,
    typed_since,
)

BackendState = Literal["idle", "loading", "ready", "error"]
# A prefetch's prompt is built from the document with its suggestion inserted, which the syntax tree must
# re-parse; in a file this big that takes seconds the next keystroke would wait for (measured: 2.8 s for
# the key after a completion on a 2 MB line, tests/e2e/test_faults_inputs.py).
PREFETCH_MAX_CHARS = 200_000


@dataclass
class Suggestion:
    text: str  # to insert at the cursor
    suggestion_id: str


# --- the scheduler ---


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
        self.store = store
        self.settings = settings
        self.stats = Statistics()
        self.state: BackendState = "idle"
        self.info: BackendInfo | None = None
        self._on_state = on_state
        self._on_log = on_log
        self._on_completion = on_completion
        self._on_grown = on_grown
        # Set at initialize when the client re-asks on `specls/suggestionGrown`: only then may a request be
        # answered with a mid-line part, since a client that never re-asks would keep showing just that part.
        self.client_refreshes = False
        self._cache_documents = cache_documents
        self._ids = itertools.count(1)
        self._latest: collections.OrderedDict[str, Generation] = collections.OrderedDict()
        self._suggestions = SuggestionCache()
        # uri -> the prefetch made there, until a request takes it
        self._prefetches: dict[str, Generation] = {}
        self._debounce_seq: collections.Counter[str] = collections.Counter()
        self._request_seq: collections.Counter[str] = collections.Counter()  # for the idle warm-up
        self._cursors: dict[str, int] = {}  # the last known cursor offset per document
        self._last_uri: str | None = None
        # Held by the loop while it edits documents and by the worker while it builds a prompt.
        self.store_lock = threading.Lock()
        self._worker = EngineWorker(
            store,
            self.store_lock,
            backend_factory,
            lambda: self.settings,
            PromptSteps(build_context, finalize),
            events=self,
        )

    # --- lifecycle (event loop) ---

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._worker.start(loop)

    def load(self, settings: ServerSettings) -> None:
        """(Re)load the backend on the worker; requests are answered empty until it is ready."""
        self.settings = settings
        self._set_state("loading", f"loading {settings.backend} backend")
        self._cancel_everything()
        self._worker.load(settings)

    def update_settings(self, settings: ServerSettings) -> None:
        """Apply settings that need no reload (decoding and context knobs); they hold from the next job,
        and finished suggestions made under the old ones are no longer served."""
        if settings != self.settings:
            for uri in [uri for uri, generation in self._latest.items() if generation.done]:
                del self._latest[uri]
            self._suggestions.clear()
        self.settings = settings

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel everything and end the engine thread, waiting up to `timeout` s for it (see `join`)."""
        self._cancel_everything()
        self._worker.stop(timeout)

    def join(self, timeout: float) -> bool:
        """Wait for the engine thread to end (after `stop`): it stops at the engine's next cancel check."""
        return self._worker.join(timeout)

    @property
    def generating(self) -> bool:
        return any(not generation.done for generation in self._latest.values())

    @contextmanager
    def editing(self) -> Iterator[DocumentStore]:
        """Edit documents without racing the worker's prompt building."""
        with self.store_lock:
            yield self.store

    # --- document events (event loop) ---

    def document_changed(self, uri: str) -> None:
        """Stop the document's generation unless the edit only typed characters that agree with it."""
        prefetch = self._prefetches.get(uri)
        if prefetch is not None and not prefetch.done and not self._prefetch_still_fits(prefetch):
            self._cancel_prefetches(uri)
        generation = self._latest.get(uri)
        if generation is None or generation.done:
            return
        queued = self._worker.withdraw(uri)
        if queued is not None:  # not started yet: its prompt is already stale, the client will ask again
            self._finish(queued, cancelled=True, reason="edited-before-start")
            return
        typed = self._typed_after(generation)
        if typed is not None and still_agrees(generation.text, typed):
            generation.agreed_typing = typed
            return
        self._cancel(generation, "edited")

    def document_opened(self, uri: str) -> None:
        self._last_uri = uri
        self._warm(uri, self._cursors.get(uri), "open")

    def document_saved(self, uri: str) -> None:
        self._warm(uri, self._cursors.get(uri), "save")

    def cursor_moved(self, uri: str, line: int, character: int) -> None:
        """The client says where the cursor is (focus, selection or visible range): warm there."""
        try:
            offset = self.store.offset_at(uri, line, character)
        except (UnknownDocumentError, PositionError):
            return
        self._cursors[uri] = offset
        self._last_uri = uri
        self._warm(uri, offset, "cursor")

    def document_closed(self, uri: str) -> None:
        self._cursors.pop(uri, None)
        self._suggestions.forget(uri)
        self._cancel_prefetches(uri)
        generation = self._latest.pop(uri, None)
        if generation is not None and not generation.done:
            self._worker.withdraw(uri)
            self._cancel(generation, "closed")

    # --- requests (event loop) ---

    async def complete(self, uri: str, line: int, character: int) -> Suggestion | None:
        """Answer one completion request: a suggestion, or None for an empty answer."""
        started = time.monotonic()
        self.stats.requests += 1
        answer = await self._complete(uri, line, character)
        suggestion = answer if isinstance(answer, Suggestion) and answer.text else None
        if suggestion is None:
            self.stats.answered_empty += 1
            # Why, counted: `specls/stats` and the keystroke benchmark show what keeps ghost text away.
            self.stats.empty_reasons[answer if isinstance(answer, str) else "nothing-left"] += 1
        self.stats.latencies_ms.append((time.monotonic() - started) * 1000)
        self._on_completion()
        return suggestion

    async def _complete(self, uri: str, line: int, character: int) -> Suggestion | str:
        """A suggestion, or why the answer is empty."""
        if self.state != "ready":
            return f"backend-{self.state}"
        located = self._locate(uri, line, character)
        if located is None:
            return "bad-position"
        version, text, offset = located
        self.store.touch(uri)
        self._cursors[uri] = offset
        self._last_uri = uri
        self._request_seq[uri] += 1
        self._schedule_idle_warm(uri, self._request_seq[uri])

        prefetch = self._prefetches.get(uri)
        for previous in (self._latest.get(uri), prefetch):
            if previous is None:
                continue
            typed = self._typed_after(previous, text, version)
            if typed is not None and offset == previous.anchor + len(typed):
                if previous is prefetch:
                    self._take_prefetch(prefetch)  # the user took the suggestion it assumed
                reused = await self._reuse(previous, typed)
                if reused is not None:
                    return reused
                if not self._is_current(uri, version):
                    return "superseded"  # a newer edit arrived while we waited; a newer request owns it

        cached = self._suggestions.find(uri, text, offset)
        if cached is not None:
            self.stats.cache_hits += 1
            if cached.suggestion.prefetched:
                self.stats.prefetch_hits += 1
            if not cached.typed:
                self._prefetch(uri, text, offset, cached.remainder)  # Tab after Tab
            return Suggestion(cached.remainder, cached.suggestion_id)

        if self.settings.debounce_ms > 0:
            self._debounce_seq[uri] += 1
            seq = self._debounce_seq[uri]
            await asyncio.sleep(self.settings.debounce_ms / 1000)
            if self._debounce_seq[uri] != seq or not self._is_current(uri, version):
                return "superseded"  # superseded while we waited

        generation = self._submit(uri, version, text, offset, self._latest.get(uri))
        answer = await self._wait(generation, "", self._partial_after(text, offset))
        if answer is None:
            return "diverged"  # the typing went elsewhere while it generated
        return (
            Suggestion(answer, suggestion_id(generation.id))
            if answer
            else generation.end_reason or "nothing-left"
        )

    def _locate(self, uri: str, line: int, character: int) -> tuple[int, str, int] | None:
        """(version, text, cursor offset) of a request, or None (logged) when it points nowhere."""
        try:
            document = self.store.servable(uri)  # not one whose copy may differ from the client's
            offset = self.store.offset_at(uri, line, character)
        except (UnknownDocumentError, PositionError) as exc:
            self._on_log(logging.WARNING, f"completion at {uri}:{line}:{character} not served: {exc}")
            return None
        return document.version, document.text, offset

    def _is_current(self, uri: str, version: int) -> bool:
        return is_current(self.store, uri, version)

    async def _reuse(self, generation: Generation, typed: str) -> Suggestion | str | None:
        """Serve from a generation the user's typing still agrees with.

        None means "start a new generation"; a string is a final empty answer and says why."""
        id_typed_ahead = suggestion_id(generation.id, typed)
        if generation.done:
            remainder = remainder_after(generation.text, typed)
            if generation.failed or not remainder:
                return None
            self.stats.typed_ahead_hits += 1
            return Suggestion(remainder, id_typed_ahead)
        if not still_agrees(generation.text, typed):
            return None
        generation.agreed_typing = typed
        partial = self._partial_after(generation.doc_text, generation.anchor, typed)
        answer = await self._wait(generation, typed, 0.0 if partial is not None else None)
        if answer is None:
            return None
        if not answer:
            return generation.end_reason or "nothing-left"
        self.stats.typed_ahead_hits += 1
        return Suggestion(answer, id_typed_ahead)

    def _submit(
        self, uri: str, version: int, text: str, offset: int, previous: Generation | None
    ) -> Generation:
        self._cancel_prefetches()  # a real request goes first
        if previous is not None and not previous.done:
            self._cancel(previous, "superseded")  # newest wins
        generation = Generation(
            id=next(self._ids),
            uri=uri,
            version=version,
            doc_text=text,
            anchor=offset,
            previous_completion=previous.text if previous is not None else "",
        )
        self._latest[uri] = generation
        self._latest.move_to_end(uri)
        while len(self._latest) > self._cache_documents:
            self._latest.popitem(last=False)
        self._stop_orphans(except_uri=uri)
        replaced = self._worker.submit(generation)
        if replaced is not None:
            self._finish(replaced, cancelled=True, reason="superseded")
        return generation

    # --- prefetch (event loop) ---

    def _prefetch(self, uri: str, doc_text: str, anchor: int, suggestion: str) -> None:
        """With `suggestion` shown at `anchor` and the engine idle, compute the next one as if it were taken."""
        if not self.settings.prefetch or not suggestion or self.state != "ready" or self._worker.busy:
            return
        if len(doc_text) > PREFETCH_MAX_CHARS:
            return
        running = self._prefetches.get(uri)
        if running is not None and not running.done:
            return
        assumed_text = doc_text[:anchor] + suggestion + doc_text[anchor:]
        if self._suggestions.find(uri, assumed_text, anchor + len(suggestion)) is not None:
            return  # already known
        prefetch = Generation(
            id=next(self._ids),
            uri=uri,
            version=-1,  # no version of the client's document holds this text (yet)
            doc_text=assumed_text,
            anchor=anchor + len(suggestion),
            previous_completion="",
            assumed_accepted=suggestion,
        )
        self._prefetches[uri] = prefetch
        self.stats.prefetches += 1
        self._worker.submit(prefetch)

    def _take_prefetch(self, prefetch: Generation) -> None:
        """A request is served from `prefetch`: from now on it is the document's generation."""
        self._prefetches.pop(prefetch.uri, None)
        self._latest[prefetch.uri] = prefetch
        self._latest.move_to_end(prefetch.uri)
        self.stats.prefetch_hits += 1
        if prefetch.done and not prefetch.failed:  # Tab after Tab (a running one prefetches when it ends)
            self._prefetch(prefetch.uri, prefetch.doc_text, prefetch.anchor, prefetch.text)

    def _prefetch_still_fits(self, prefetch: Generation) -> bool:
        """The document is on the way to the text the prefetch assumed (its suggestion partly typed or
        accepted), or past it with typing its own text agrees with."""
        try:
            text = self.store.get(prefetch.uri).text
        except UnknownDocumentError:
            return False
        if prefetch.assumed_part_typed(text) is not None:
            return True
        typed = typed_since(prefetch.doc_text, prefetch.anchor, text)
        return typed is not None and still_agrees(prefetch.text, typed)

    def _cancel_prefetches(self, uri: str | None = None) -> None:
        for prefetch in [p for p in self._prefetches.values() if uri is None or p.uri == uri]:
            del self._prefetches[prefetch.uri]
            if prefetch.done:
                continue
            queued = self._worker.withdraw_if_queued(prefetch)
            if queued is not None:
                self._finish(queued, cancelled=True, reason="prefetch-dropped")
            else:
                self._cancel(prefetch, "prefetch-dropped")

    def _partial_after(self, text: str, offset: int, typed: str = "") -> float | None:
        """Seconds after which a request may be answered with the text generated so far: mid-line only,
        where people type on (at a line start they pause, and wait for a whole line)."""
        if not self.client_refreshes or self.settings.partial_after_ms <= 0:
            return None
        line_before = text[text.rfind("\n", 0, offset) + 1 : offset] + typed
        if not line_before.strip() or "\n" in typed:
            return None
        return self.settings.partial_after_ms / 1000

    async def _wait(
        self, generation: Generation, typed: str, partial_after: float | None = None
    ) -> str | None:
        """The answer for a request that waits on `generation`: its whole text when it finishes in time, its
        first line once `firstLineMs` have passed (at once with `firstLineFirst`), and mid-line whatever it
        has after `partial_after` seconds (None: never)."""
        loop = asyncio.get_running_loop()
        first_line_now = self.settings.first_line_first or self.settings.first_line_ms <= 0
        waiter = Waiter(typed, first_line_now, loop.create_future())
        generation.waiters.append(waiter)

        def due(flag: str) -> None:
            setattr(waiter, flag, True)
            if waiter in generation.waiters:
                self._evaluate(generation, waiter)

        if not first_line_now:
            loop.call_later(self.settings.first_line_ms / 1000, due, "first_line_only")
        if partial_after is not None and partial_after <= 0:
            waiter.partial_due = True
        elif partial_after is not None:
            loop.call_later(partial_after, due, "partial_due")
        self._evaluate(generation, waiter)
        try:
            return await waiter.future
        except asyncio.CancelledError:  # $/cancelRequest: pygls answers -32800
            self._detach(generation, waiter)
            raise

    def _detach(self, generation: Generation, waiter: Waiter) -> None:
        if waiter in generation.waiters:
            generation.waiters.remove(waiter)
        if generation.waiters or generation.done:
            return
        queued = self._worker.withdraw_if_queued(generation)
        if queued is not None:
            self._finish(queued, cancelled=True, reason="client-cancelled")
        # A running generation with nobody waiting may still serve typed-ahead, so it keeps going until other
        # work arrives (_stop_orphans), the document changes against it, or it finishes.

    def _stop_orphans(self, except_uri: str) -> None:
        for generation in self._latest.values():
            if generation.uri != except_uri and not generation.done and not generation.waiters:
                generation.end_reason = "orphaned"
                generation.cancel.cancel()

    # --- waiters (event loop) ---

    def _evaluate(self, generation: Generation, waiter: Waiter) -> None:
        """Resolve `waiter` if the generation already has what it needs."""
        if waiter.future.done():
            return
        remainder = remainder_after(generation.text, waiter.typed_when_asked)
        if generation.done:
            waiter.future.set_result("" if generation.failed else remainder)
        elif not still_agrees(generation.text, waiter.typed_when_asked):
            waiter.future.set_result(None)
        elif waiter.first_line_only and remainder is not None and complete_first_line(remainder) is not None:
            waiter.future.set_result(complete_first_line(remainder))
            generation.answered_short = True
        elif waiter.partial_due and remainder is not None and remainder.strip():
            # Mid-line, past the deadline: what is there now beats nothing before the next key; the
            # generation goes on and the next request is served from it.
            waiter.future.set_result(remainder.split("\n", 1)[0] if "\n" in remainder.strip() else remainder)
            generation.answered_short = True
        if waiter.future.done():
            generation.waiters.remove(waiter)

    def generation_text(self, generation: Generation, text: str) -> None:
        if generation.done:
            return
        generation.text = text
        if not still_agrees(text, generation.agreed_typing):
            # The user typed something else meanwhile (we could not tell while nothing was generated yet).
            # The request made after that typing starts again; the older ones are stale and get empty answers.
            for waiter in list(generation.waiters):
                if waiter.typed_when_asked == generation.agreed_typing:
                    waiter.future.set_result(None)
                    generation.waiters.remove(waiter)
            self._cancel(generation, "diverged")
            return
        for waiter in list(generation.waiters):
            self._evaluate(generation, waiter)

    def generation_done(
        self, generation: Generation, text: str, result: CompletionResult | None, error: str | None
    ) -> None:
        self.stats.finished_generations += 1
        if result is not None:
            self.stats.record_engine(result)
            if result.finish_reason == "cancelled":
                self.stats.cancelled_generations += 1
        if error is not None:
            self.stats.failed_generations += 1
            self.stats.last_error = f"completion failed: {error}"
            self._on_log(logging.ERROR, f"completion failed: {error}")
        cancelled = result is not None and result.finish_reason == "cancelled"
        why = result.stats.empty_reason if result is not None else "failed"
        if cancelled or error is not None:
            self._finish(generation, cancelled=True, failed=error is not None, reason=why or "cancelled")
        else:
            generation.text = text
            self._finish(generation, reason=why or ("" if text else "generated-nothing"))

    def _finish(
        self, generation: Generation, *, cancelled: bool = False, failed: bool = False, reason: str = ""
    ) -> None:
        if generation.done:
            return
        generation.done = True
        generation.end_reason = generation.end_reason or reason
        generation.failed = failed or cancelled  # a cut-off suggestion is not served from the cache
        for waiter in list(generation.waiters):
            self._evaluate(generation, waiter)
        if not generation.failed:
            self._suggestions.put(
                generation.uri,
                generation.doc_text,
                generation.anchor,
                generation.text,
                generation.id,
                prefetched=bool(generation.assumed_accepted),
            )
            if self._latest.get(generation.uri) is generation:  # on screen: prefetch the one after it
                self._prefetch(generation.uri, generation.doc_text, generation.anchor, generation.text)
        if generation.answered_short and not generation.failed and generation.text:
            self._on_grown(generation)  # the client may ask again, and get the whole suggestion at once

    def _cancel(self, generation: Generation, reason: str) -> None:
        """Stop a generation (the engine sees the cancel within one round) and answer its waiters now."""
        generation.cancel.cancel()
        self._finish(generation, cancelled=True, reason=reason)

    def _cancel_everything(self) -> None:
        self._suggestions.clear()
        self._cancel_prefetches()
        for queued in self._worker.drain():
            self._finish(queued, cancelled=True, reason="reloaded")
        for generation in self._latest.values():
            self._cancel(generation, "reloaded")
        self._latest.clear()

    def _typed_after(
        self, generation: Generation, text: str | None = None, version: int | None = None
    ) -> str | None:
        if text is None:
            try:
                document = self.store.get(generation.uri)
            except UnknownDocumentError:
                return None
            text, version = document.text, document.version
        if version == generation.version:
            return ""
        return typed_since(generation.doc_text, generation.anchor, text)

    def _set_state(self, state: BackendState, message: str) -> None:
        self.state = state
        self._on_state(state, message)

    # --- warming the cache (event loop) ---

    def _warm(self, uri: str, offset: int | None, reason: str) -> None:
        if not self.settings.warm or self.state != "ready":
            return
        try:
            version = self.store.get(uri).version
        except UnknownDocumentError:
            return
        self._worker.warm(WarmJob(uri, version, offset, reason))

    def _schedule_idle_warm(self, uri: str, seq: int) -> None:
        if not self.settings.warm:
            return

        def when_idle() -> None:
            generation = self._latest.get(uri)
            if self._request_seq[uri] != seq or (generation is not None and not generation.done):
                return  # a newer request, or the engine is still on this one
            if not self._worker.busy and uri in self._cursors:
                self._warm(uri, self._cursors[uri], "idle")

        asyncio.get_running_loop().call_later(self.settings.warm_idle_ms / 1000, when_idle)

    def cache_warmed(self, job: WarmJob, result: WarmResult) -> None:
        self.stats.warmups[job.reason] += 1
        self.stats.warm_cached = (result.cached_tokens, result.prompt_tokens)
        self._on_completion()  # a status update: "warming, x% cached"

    # --- reports from the worker (event loop) ---

    def backend_loaded(self, info: BackendInfo | None, error: str | None, epoch: int) -> None:
        if epoch != self._worker.load_epoch:  # a newer load superseded this one
            return
        if info is None:
            self.info = None
            self._set_state("error", f"model failed to load: {error}")
            return
        self.info = info
        self._set_state("ready", f"{info.name} backend ready: {info.target}")
        if self._last_uri is not None:  # a file opened while the model loaded
            self._warm(self._last_uri, self._cursors.get(self._last_uri), "open")

    def generation_started(self) -> None:
        self.stats.generations += 1

    def cancelled_to_idle(self, ms: float) -> None:
        self.stats.cancel_to_idle_ms.append(ms)
