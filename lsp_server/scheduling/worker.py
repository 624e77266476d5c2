"""The engine worker: the one thread that owns the backend.

It loads the backend and runs jobs one at a time: a queued generation first (`backend.complete`), else the
pending warm-up (`backend.warm`). Both become a prompt the same way (`_prompt`): copy the documents under
the store lock, build the context from the copy, adopt the syntax trees it parsed. The prompt's policies
are pure functions it calls (`prefetch.untyped_rest`, `warmups.warm_offset`); what to run, and when, the
coordinator decides. The worker reports back only through `loop.call_soon_threadsafe` (`WorkerEvents`),
and the loop talks to a running job only through its `CancelToken`, which the engine polls every
speculative round and between a forward's layers. What the draft-length policy learned about the loaded
model lives with the model, in the engine (`LocalEngine.draft_acceptance`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from engine.api import (
    BackendInfo,
    CancelToken,
    CompletionBackend,
    CompletionResult,
    EngineStats,
    FinishReason,
    PromptCachingBackend,
    WarmingBackend,
    WarmResult,
)
from lsp_server.config import ServerSettings
from lsp_server.context import CompletionContext, ContextSettings
from lsp_server.documents import DocumentStore, OutOfSyncError, UnknownDocumentError
from lsp_server.engine_request import engine_request, without_lone_surrogates
from lsp_server.jobs import FairQueue, Generation, is_current
from lsp_server.scheduling.budget import affordable_prompt_tokens, needs_smaller_prompt
from lsp_server.scheduling.prefetch import untyped_rest
from lsp_server.scheduling.reasons import EmptyReason, mode_none
from lsp_server.scheduling.warmups import WarmTrigger, warm_offset

logger = logging.getLogger(__name__)

ContextBuilder = Callable[
    [DocumentStore, str, int, BackendInfo, ContextSettings, Callable[[str], int]], CompletionContext
]
Finalizer = Callable[[str, CompletionContext], str]


@dataclass(frozen=True)
class PromptSteps:
    """How a request becomes a prompt (`build_context`) and a generated text becomes what is shown
    (`finalize`): the server's own context builder, or a simpler one a test chooses."""

    build_context: ContextBuilder
    finalize: Finalizer


class WorkerEvents(Protocol):
    """What the worker reports. Every call is made on the event loop, never on the worker's thread."""

    def backend_loaded(self, info: BackendInfo | None, error: str | None, epoch: int) -> None:
        """Exactly one of info and error is set; `epoch` is the load call's."""

    def generation_started(self) -> None:
        """A prompt was built and handed to the backend."""

    def generation_text(self, generation: Generation, text: str) -> None:
        """The text generated so far."""

    def generation_done(
        self, generation: Generation, text: str, result: CompletionResult | None, error: str | None
    ) -> None:
        """The final text; result is None exactly when error is set."""

    def cancelled_to_idle(self, ms: float) -> None:
        """How long a cancelled generation took to stop."""

    def cache_warmed(self, job: WarmJob, result: WarmResult) -> None:
        """After every warm-up that ran: what it left cached."""


@dataclass
class WarmJob:
    """Fill the KV cache with the prompt a request at `offset` of `uri` (at `version`) would send.
    `offset` None: the cursor is unknown (a file just opened); warm the longest start of the file that
    fits the prompt budget, which every cursor in it shares with a prefix-first prompt."""

    uri: str
    version: int
    offset: int | None
    reason: WarmTrigger  # for the statistics
    cancel: CancelToken = field(default_factory=CancelToken)


class EngineWorker:
    """Runs queued generations one at a time; every method but the thread's own runs on the event loop."""

    def __init__(
        self,
        store: DocumentStore,
        store_lock: threading.Lock,
        backend_factory: Callable[[ServerSettings], CompletionBackend],
        settings: Callable[[], ServerSettings],
        prompts: PromptSteps,
        events: WorkerEvents,
    ) -> None:
        self._store = store
        self._store_lock = store_lock
        self._backend_factory = backend_factory
        self._settings = settings
        self._prompts = prompts
        self._events = events
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.load_epoch = 0  # read and written on the loop only

        # Shared with the thread, guarded by _cond.
        self._cond = threading.Condition()
        self._queue = FairQueue()
        self._load_settings: ServerSettings | None = None
        self._stopping = False
        self._warm: WarmJob | None = None  # the one pending warm-up; it runs only when no job waits
        self._warming: WarmJob | None = None  # the one running

        # The thread's own.
        self._backend: CompletionBackend | None = None
        self._info: BackendInfo | None = None

    # --- the event loop's side ---

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name="specls-engine", daemon=True)
            self._thread.start()

    def load(self, settings: ServerSettings) -> None:
        """Load (or reload) the backend; `events.backend_loaded` reports it with the epoch this call started."""
        with self._cond:
            self.load_epoch += 1
            self._load_settings = settings
            self._cond.notify()

    def submit(self, generation: Generation) -> Generation | None:
        """Queue `generation`; return the document's older queued one that it replaces. A running warm-up
        gives way at once (what it computed stays cached, and this generation's prefill goes on from it)."""
        with self._cond:
            replaced = self._queue.put(generation)
            if self._warming is not None:
                self._warming.cancel.cancel()
            self._cond.notify()
        return replaced

    def warm(self, job: WarmJob) -> None:
        """Warm the cache for `job` when the engine is idle; it replaces a pending or running warm-up."""
        with self._cond:
            if self._warm is not None:
                self._warm.cancel.cancel()
            if self._warming is not None:
                self._warming.cancel.cancel()
            self._warm = job
            self._cond.notify()

    @property
    def busy(self) -> bool:
        """A generation is queued (read on the loop: a hint, not a promise)."""
        with self._cond:
            return bool(len(self._queue))

    def withdraw(self, uri: str) -> Generation | None:
        """Take the document's generation off the queue (None when none is waiting to start)."""
        with self._cond:
            return self._queue.remove(uri)

    def withdraw_if_queued(self, generation: Generation) -> Generation | None:
        with self._cond:
            return self._queue.remove(generation.uri) if self._queue.holds(generation) else None

    def drain(self) -> list[Generation]:
        """Empty the queue, returning what was waiting."""
        with self._cond:
            return [generation for generation in iter(self._queue.pop, None)]

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to end after its current job (whose cancel the caller has set) and wait up to
        `timeout` seconds for it (0: do not wait; `join` later)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if timeout > 0:
            self.join(timeout)

    def join(self, timeout: float) -> bool:
        """Wait for the thread to end; True when it has (or never started)."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    # --- the thread ---

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # a closed loop: the server is shutting down
            self._loop.call_soon_threadsafe(callback, *args)

    def _main(self) -> None:
        while True:
            with self._cond:
                while (
                    not self._stopping
                    and self._load_settings is None
                    and not len(self._queue)
                    and self._warm is None
                ):
                    self._cond.wait()
                if self._stopping:
                    break
                to_load, epoch = self._load_settings, self.load_epoch
                self._load_settings = None
                generation = self._queue.pop() if to_load is None else None
                warm = None
                if to_load is None and generation is None:
                    warm, self._warm = self._warm, None
                    self._warming = warm
            if to_load is not None:
                self._load_backend(to_load, epoch)
            elif generation is not None:
                self._run(generation)
            elif warm is not None:
                self._run_warm(warm)
                with self._cond:
                    self._warming = None
        if self._backend is not None:
            self._backend.close()

    def _load_backend(self, settings: ServerSettings, epoch: int) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend, self._info = None, None
        try:
            backend = self._backend_factory(settings)
            info = backend.info()
        except Exception as exc:  # report it; the server answers empty until settings change
            logger.exception("backend failed to load")
            self._post(self._events.backend_loaded, None, f"{type(exc).__name__}: {exc}", epoch)
            return
        self._backend, self._info = backend, info
        self._post(self._events.backend_loaded, info, None, epoch)

    def _run(self, generation: Generation) -> None:
        backend, info, settings = self._backend, self._info, self._settings()
        if backend is None or info is None or generation.cancel.cancelled:
            self._report_empty(generation, "cancelled", EmptyReason.CANCELLED_BEFORE_START)
            return
        try:
            prompt = self._prompt(
                backend,
                info,
                settings,
                generation.uri,
                generation.anchor,
                lambda: self._snapshot_for(generation),
                keystroke=True,
            )
            if isinstance(prompt, str):  # stale (the client asks again) or no completion belongs here
                finish: FinishReason = "cancelled" if prompt == EmptyReason.STALE_CONTEXT else "stop"
                self._report_empty(generation, finish, prompt)
                return
            request = engine_request(prompt.ctx, settings, previous_completion=generation.previous_completion)
            self._post(self._events.generation_started)
            result = backend.complete(
                request,
                on_text=lambda text: self._post(self._events.generation_text, generation, text),
                cancel=generation.cancel,
            )
            cancelled_at = generation.cancel.cancelled_at
            if result.finish_reason == "cancelled" and cancelled_at is not None:
                self._post(self._events.cancelled_to_idle, (time.monotonic() - cancelled_at) * 1000)
            text = (
                result.text
                if result.finish_reason == "cancelled"
                else self._prompts.finalize(result.text, prompt.ctx)
            )
            if prompt.ctx.stop_rules is not None and prompt.ctx.stop_rules.fired:  # for the statistics
                result.stats.stop_rules_fired = sorted(prompt.ctx.stop_rules.fired)
        except Exception as exc:  # a fault in one request must not take the worker down
            logger.exception("completion failed")
            self._post(self._events.generation_done, generation, "", None, f"{type(exc).__name__}: {exc}")
            return
        self._post(self._events.generation_done, generation, text, result, None)

    def _run_warm(self, job: WarmJob) -> None:
        backend, info, settings = self._backend, self._info, self._settings()
        if not isinstance(backend, WarmingBackend) or info is None or job.cancel.cancelled:
            return
        try:
            prompt = self._prompt(
                backend, info, settings, job.uri, job.offset, lambda: self._snapshot_at(job)
            )
            if isinstance(prompt, str):
                return
            request = engine_request(prompt.ctx, settings, previous_completion="")
            started = time.monotonic()
            result = backend.warm(request, cancel=job.cancel)
            logger.info(
                "warm-up (%s) at %s:%s: %d of %d prompt tokens cached after %.0f ms%s",
                job.reason,
                job.uri,
                prompt.offset,
                result.cached_tokens,
                result.prompt_tokens,
                (time.monotonic() - started) * 1000,
                " (pre-empted)" if job.cancel.cancelled else "",
            )
        except Exception:  # a warm-up is only an optimisation: log it, never take the worker down
            logger.exception("warm-up failed")
            return
        self._post(self._events.cache_warmed, job, result)

    def _prompt(
        self,
        backend: CompletionBackend,
        info: BackendInfo,
        settings: ServerSettings,
        uri: str,
        offset: int | None,
        take_snapshot: Callable[[], DocumentStore | None],
        *,
        keystroke: bool = False,
    ) -> Prompt | str:
        """The one path from a job to its prompt, for generations and warm-ups alike: snapshot (under the
        store lock) → build the context from the copy → adopt the trees it parsed. Returns why not when the
        document went stale or no completion belongs at the cursor. `offset` None: the cursor is unknown.
        A `keystroke` (a generation, not a warm-up) gets a prompt it can read in time (`budget`)."""
        # The lock is held only to copy the documents: the prompt is built from the copy while the event
        # loop goes on applying edits (a slow prompt must never hold up a keystroke).
        with self._store_lock:
            snapshot = take_snapshot()
        if snapshot is None:  # edited or closed since the job was made
            return EmptyReason.STALE_CONTEXT

        def count(text: str) -> int:
            return backend.count_tokens(without_lone_surrogates(text))

        if offset is None:
            offset = warm_offset(snapshot.get(uri).text, settings.context.max_prompt_tokens, count)
        ctx = self._prompts.build_context(snapshot, uri, offset, info, settings.context, count)
        configured = settings.context.max_prompt_tokens
        tight = affordable_prompt_tokens(info, configured) < configured  # else no peek (an encode per key)
        if keystroke and tight and isinstance(backend, PromptCachingBackend) and ctx.mode != "none":
            # A prompt the engine cannot read before the next key is worth less than a shorter one it can.
            cached, total = backend.prompt_tokens_cached(without_lone_surrogates(ctx.prompt))
            smaller = needs_smaller_prompt(cached, total, info, configured)
            if smaller is not None:
                shorter = replace(settings.context, max_prompt_tokens=smaller)
                ctx = self._prompts.build_context(snapshot, uri, offset, info, shorter, count)
        with self._store_lock:
            self._store.adopt_trees(snapshot)
        if ctx.mode == "none":
            return mode_none(ctx.why_none)
        return Prompt(ctx, offset)

    def _snapshot_at(self, job: WarmJob) -> DocumentStore | None:
        """A copy of the documents while `job`'s document is still at its version (under the store lock)."""
        return self._store.snapshot() if is_current(self._store, job.uri, job.version) else None

    def _snapshot_for(self, generation: Generation) -> DocumentStore | None:
        """A copy of the documents to build `generation`'s prompt from (under the store lock), or None when
        its context is stale. A prefetch's copy gets the part of its suggestion not yet typed or accepted."""
        if not generation.assumed_accepted:
            current = is_current(self._store, generation.uri, generation.version)
            return self._store.snapshot() if current else None
        try:
            document = self._store.servable(generation.uri)
        except (UnknownDocumentError, OutOfSyncError):
            return None
        rest = untyped_rest(generation, document.text)
        if rest is None:
            return None
        snapshot = self._store.snapshot()
        at, untyped = rest
        if untyped:
            snapshot.assume_inserted(generation.uri, at, untyped)
        return snapshot

    def _report_empty(self, generation: Generation, finish: FinishReason, why: str) -> None:
        """Report a generation that ended before the model ran, with why (counted under `empty_reasons`)."""
        result = CompletionResult("", finish, stats=EngineStats(empty_reason=why))
        self._post(self._events.generation_done, generation, "", result, None)


@dataclass(frozen=True)
class Prompt:
    ctx: CompletionContext
    offset: int  # the cursor it was built for (a warm-up's unknown cursor, resolved)
