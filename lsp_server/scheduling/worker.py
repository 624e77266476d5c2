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
    AsideWarmingBackend,
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
from lsp_server.context import CompletionContext, ContextSettings, full_prompt_tokens
from lsp_server.documents import DocumentStore, OutOfSyncError, UnknownDocumentError
from lsp_server.engine_request import engine_request, without_lone_surrogates
from lsp_server.jobs import FairQueue, Generation, is_current
from lsp_server.scheduling.budget import (
    AT_REST_SUGGESTION_S,
    FIRST_SUGGESTION_S,
    affordable_prompt_tokens,
    needs_smaller_prompt,
)
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


# A growth keeps the engine this long before a generation, and once started before a request pre-empts it.
# Between keys 120 ms apart the engine is seldom idle: on AVX2 (emulated) a growth that only used idle time
# read 1,100 tokens in 10-16 s; with a 100 ms hold before each generation, in ~4 s. On a real AVX2 CPU (prompts
# at ~240 tokens/s) 100 ms left a generation too little of the gap between keys: 50 ms put ghost text on screen
# at 53% of keys against 46% and saved as many characters (docs/line-starts.md, "Where the ghost text went").
GROW_HOLD_S = 0.05


class HeldCancelToken(CancelToken):
    """A cancel that takes effect only once the job has held the engine for `hold_s` since `start()` (not
    before it starts: a job asked to yield at once still gets its hold)."""

    def __init__(self, hold_s: float = GROW_HOLD_S, linked: CancelToken | None = None) -> None:
        super().__init__()
        self.hold_s = hold_s
        self.linked = linked  # a token whose cancel counts as this one's (the warm-up a growth stands for)
        self._started: float | None = None

    def start(self) -> None:
        self._started = time.monotonic()

    @property
    def cancelled(self) -> bool:
        asked = super().cancelled or (self.linked is not None and self.linked.cancelled)
        if not asked or self._started is None:
            return False
        return time.monotonic() - self._started >= self.hold_s


@dataclass
class GrowJob:
    """Read, into the engine's second cache, the full-size prompt for the line at `offset` of `uri`, while
    the document still begins with `before` (its text up to `offset`: typing on the line keeps it valid).

    Why: where the prompt budget is tight (a CPU that reads prompts at ~350 tokens/s) a request reads only
    what it can before the next key, and the prompt then stays that small while the user types on (the
    start stays put for the cache's sake). The full prompt, read aside, takes over once read: on six of this
    project's files an AVX2 typist saved 15.0% of characters with it against 11.5% without
    (docs/performance-history.md, 2026-12-04 evening)."""

    uri: str
    offset: int
    before: str
    cancel: HeldCancelToken = field(default_factory=HeldCancelToken)


def growth_at_line(uri: str, text: str, offset: int, cancel: HeldCancelToken | None = None) -> GrowJob:
    """The growth of `uri`'s prompt for the start of the line at `offset`, valid while the text up to there
    stays as it is."""
    line_start = text.rfind("\n", 0, offset) + 1
    return GrowJob(uri, line_start, text[:line_start], cancel if cancel is not None else HeldCancelToken())


# Grow a prompt only while it is below this share of the configured budget: a grown prompt fills ~3/4 of it
# (`context.builder.STICKY_FILL`), so it is not grown again.
GROW_BELOW_FRACTION = 0.6
# ... and only where the budget cuts deep: what a request can read in time is below this share of the
# configured prompt (AVX2 in W8A8: ~0.2). With AMX in bf16 (~0.5) growing saved the same characters (17.0%
# against 17.2% and 17.0%) and made the first suggestion after a 1 s pause slower (481 ms against 275-374 ms).
GROW_WHERE_AFFORDABLE_BELOW = 1 / 3


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
        self._warming: WarmJob | GrowJob | None = None  # the one running
        self._grow: GrowJob | None = None  # the one pending growth: it runs only when nothing else waits

        # The thread's own.
        self._backend: CompletionBackend | None = None
        self._info: BackendInfo | None = None
        self._grown: dict[str, int] = {}  # uri -> start line of a prompt read aside in full, not yet taken

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
                    and self._grow is None
                ):
                    self._cond.wait()
                if self._stopping:
                    break
                to_load, epoch = self._load_settings, self.load_epoch
                self._load_settings = None
                generation = self._queue.pop() if to_load is None else None
                dropped = first = None
                # Only the document being typed in grows first; another's growth waits for idle time.
                if generation is not None and self._grow is not None and self._grow.uri == generation.uri:
                    if generation.assumed_accepted:
                        # Growing the prompt comes before guessing ahead: prefetches took half the engine's
                        # time on a CPU whose budget cut the prompt.
                        dropped, generation = generation, None
                    else:  # the growth goes first, for its hold, then the generation
                        first, self._grow = self._grow, None
                        first.cancel.cancel()
                        self._warming = first
                warm: WarmJob | GrowJob | None = None
                if to_load is None and generation is None:
                    warm, self._warm = self._warm, None
                    if warm is None:
                        warm, self._grow = self._grow, None
                    self._warming = warm
            if dropped is not None:
                self._report_empty(dropped, "cancelled", EmptyReason.PREFETCH_DROPPED)
            if to_load is not None:
                self._load_backend(to_load, epoch)
            elif generation is not None:
                if first is not None:
                    self._run_grow(first)
                    with self._cond:
                        self._warming = None
                self._run(generation)
            elif warm is not None:
                if isinstance(warm, GrowJob):
                    self._run_grow(warm)
                else:
                    self._run_warm(warm)
                with self._cond:
                    self._warming = None
        if self._backend is not None:
            self._backend.close()

    def _load_backend(self, settings: ServerSettings, epoch: int) -> None:
        self._grown.clear()
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
                at_rest=generation.at_rest,
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
        if job.offset is not None and self._grows(backend, info, settings):
            # Where requests read cut prompts, a full-size warm-up would evict the one they are served from:
            # it is read aside instead, as a growth, and taken once read.
            grown = self._run_grow(self._growth_for(job))
            if grown is not None:
                self._post(self._events.cache_warmed, job, grown)
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
        grow: bool = False,
        at_rest: bool = False,
    ) -> Prompt | str:
        """The one path from a job to its prompt, for generations and warm-ups alike: snapshot (under the
        store lock) → build the context from the copy → adopt the trees it parsed. Returns why not when the
        document went stale or no completion belongs at the cursor. `offset` None: the cursor is unknown.
        A `keystroke` (a generation, not a warm-up) gets a prompt it can read in time (`budget`), and where
        that is smaller than the configured one, the full one is planned to be read aside (`GrowJob`) and
        taken once read; `at_rest` (started where the cursor rests) gets the tighter budget. `grow`: the
        prompt for that, from its own start."""
        # The lock is held only to copy the documents: the prompt is built from the copy while the event
        # loop goes on applying edits (a slow prompt must never hold up a keystroke).
        with self._store_lock:
            snapshot = take_snapshot()
        if snapshot is None:  # edited or closed since the job was made
            return EmptyReason.STALE_CONTEXT

        def count(text: str) -> int:
            return backend.count_tokens(without_lone_surrogates(text))

        document = snapshot.get(uri)
        configured = full_prompt_tokens(info, settings.context.max_prompt_tokens)
        if offset is None:
            offset = warm_offset(document.text, configured, count)
        serving_start = document.prompt_start_line
        if grow:  # the prompt grown aside keeps its own start; the one requests are served from keeps theirs
            document.prompt_start_line = document.grow_start_line
        ctx = self._prompts.build_context(snapshot, uri, offset, info, settings.context, count)
        if grow:
            document.grow_start_line, document.prompt_start_line = document.prompt_start_line, serving_start
        seconds = AT_REST_SUGGESTION_S if at_rest else FIRST_SUGGESTION_S
        tight = affordable_prompt_tokens(info, configured, seconds) < configured  # else no peek (an encode)
        grows = self._grows(backend, info, settings)
        if keystroke and tight and isinstance(backend, PromptCachingBackend) and ctx.mode != "none":
            grown = self._grown.pop(uri, None)
            if grown is not None and grown != serving_start:
                # A larger prompt was read aside: take it if the engine can read its new tail in time.
                document.prompt_start_line = grown
                larger = self._prompts.build_context(snapshot, uri, offset, info, settings.context, count)
                cached, total = backend.prompt_tokens_cached(without_lone_surrogates(larger.prompt))
                if (
                    larger.mode != "none"
                    and needs_smaller_prompt(cached, total, info, configured, seconds) is None
                ):
                    logger.info("%s: the prompt grown aside takes over (%d tokens)", uri, total)
                    ctx = larger
                else:
                    document.prompt_start_line = serving_start
            # A prompt the engine cannot read before the next key is worth less than a shorter one it can.
            cached, total = backend.prompt_tokens_cached(without_lone_surrogates(ctx.prompt))
            smaller = needs_smaller_prompt(cached, total, info, configured, seconds)
            if smaller is not None:
                shorter = replace(settings.context, max_prompt_tokens=smaller)
                ctx = self._prompts.build_context(snapshot, uri, offset, info, shorter, count)
                total = smaller  # the cut prompt holds at most this many tokens: no second encode per key
                if at_rest and not grows:
                    # Cut for a suggestion at rest, with no growth planned to replace it: requests would keep
                    # its start (and its small size) for good, so they choose their own.
                    document.prompt_start_line = serving_start
            if grows and total < GROW_BELOW_FRACTION * configured and document.prompt_start_line:
                self._plan_growth(uri, document.text, offset)
        with self._store_lock:
            self._store.adopt_trees(snapshot)
        if ctx.mode == "none":
            return mode_none(ctx.why_none)
        return Prompt(ctx, offset)

    @staticmethod
    def _grows(backend: CompletionBackend, info: BackendInfo, settings: ServerSettings) -> bool:
        """Whether full-size prompts are read aside (`GrowJob`): warm-ups on, a second cache, and a budget
        that cuts deep."""
        configured = full_prompt_tokens(info, settings.context.max_prompt_tokens)
        return (
            settings.warm
            and info.reads_prompts_aside
            and isinstance(backend, AsideWarmingBackend)
            and affordable_prompt_tokens(info, configured) < GROW_WHERE_AFFORDABLE_BELOW * configured
        )

    def _plan_growth(self, uri: str, text: str, offset: int) -> None:
        """Queue the growth of `uri`'s prompt (lowest priority), for its cursor's line start."""
        with self._cond:
            self._grow = growth_at_line(uri, text, offset)
            self._cond.notify()

    def _growth_for(self, job: WarmJob) -> GrowJob:
        """The growth at a warm-up's cursor, cancelled with it (it is the running job the loop cancels)."""
        assert job.offset is not None
        with self._store_lock:
            try:
                text = self._store.get(job.uri).text
            except UnknownDocumentError:
                text = ""
        return growth_at_line(
            job.uri, text, min(job.offset, len(text)), HeldCancelToken(0.0, linked=job.cancel)
        )

    def _run_grow(self, job: GrowJob) -> WarmResult | None:
        """Read `job`'s prompt aside; what is cached aside now, or None where nothing was read."""
        backend, info, settings = self._backend, self._info, self._settings()
        if not isinstance(backend, AsideWarmingBackend) or info is None or job.cancel.cancelled:
            return None
        try:
            prompt = self._prompt(
                backend, info, settings, job.uri, job.offset, lambda: self._snapshot_before(job), grow=True
            )
            if isinstance(prompt, str):
                return None
            request = engine_request(prompt.ctx, settings, previous_completion="")
            started = time.monotonic()
            job.cancel.start()
            result = backend.warm_aside(request, cancel=job.cancel)
            done = result.cached_tokens >= result.prompt_tokens
            logger.info(
                "growth at %s:%s: %d of %d prompt tokens read aside after %.0f ms%s",
                job.uri,
                job.offset,
                result.cached_tokens,
                result.prompt_tokens,
                (time.monotonic() - started) * 1000,
                "" if done else " (pre-empted)",
            )
        except Exception:  # an optimisation only, like a warm-up
            logger.exception("growth failed")
            return None
        with self._store_lock:
            try:
                start = self._store.get(job.uri).grow_start_line
            except UnknownDocumentError:
                return result
        if done and start is not None:
            self._grown[job.uri] = start
        elif job.cancel.cancelled:
            # Pre-empted: it goes on at the next chance, unless a newer one was planned.
            with self._cond:
                if self._grow is None:
                    self._grow = GrowJob(job.uri, job.offset, job.before)
        return result

    def _snapshot_before(self, job: GrowJob) -> DocumentStore | None:
        """A copy of the documents while `job`'s document still begins with the text it was planned for."""
        try:
            document = self._store.servable(job.uri)
        except (UnknownDocumentError, OutOfSyncError):
            return None
        return self._store.snapshot() if document.text.startswith(job.before) else None

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
