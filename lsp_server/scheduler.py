"""Who runs which completion, when: newest-wins per document, the cancel bridge, typed-ahead reuse.

Threads. The event loop owns every `Generation` field that changes after creation (streamed text, waiters,
done) and the document store. One engine worker thread owns the backend: it loads it, builds each prompt
(under `store_lock`, so it reads a consistent document) and runs `backend.complete`, which is CPU-bound and
never touches the loop. The worker reports back only through `loop.call_soon_threadsafe`, and the loop talks
to a running generation only through its `CancelToken`, which the engine polls every speculative round.

Policy.
- One pending job per document; a newer request replaces it, and the replaced one is answered empty.
  Documents are served in the order their first pending job arrived, so one busy file cannot starve another.
- A newer request or a `didChange` stops the document's running generation, unless the user only typed
  characters that agree with it: then it keeps going and later requests are answered from it.
- A finished suggestion is cached per document; typing that matches its start is answered at once with the
  remainder, without a model call. On divergence a new generation starts and gets the old suggestion as
  `previous_completion`, so the stale drafter can re-verify it in one pass.
- Every request gets an answer: a suggestion, an empty one, or (after `$/cancelRequest`, done by pygls when
  the awaiting task is cancelled) error -32800.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.api import BackendInfo, CancelToken, CompletionBackend, CompletionRequest, CompletionResult
from lsp_server.config import ServerSettings
from lsp_server.context import (
    CompletionContext,
    ContextSettings,
    SyntaxAcceptance,
    build_completion_context,
    finalize_completion,
    shared_learning,
)
from lsp_server.documents import DocumentStore, PositionError, UnknownDocumentError

logger = logging.getLogger(__name__)

BackendState = Literal["idle", "loading", "ready", "error"]
ContextBuilder = Callable[
    [DocumentStore, str, int, BackendInfo, ContextSettings, Callable[[str], int]], CompletionContext
]
Finalizer = Callable[[str, CompletionContext], str]


# --- pure helpers: the typed-ahead arithmetic ---


def typed_since(old_text: str, anchor: int, new_text: str) -> str | None:
    """The characters inserted at `anchor` that turn `old_text` into `new_text`; None for any other edit."""
    grown = len(new_text) - len(old_text)
    if grown < 0 or anchor > len(old_text):
        return None
    if new_text[:anchor] != old_text[:anchor] or new_text[anchor + grown :] != old_text[anchor:]:
        return None
    return new_text[anchor : anchor + grown]


def remainder_after(suggestion: str, typed: str) -> str | None:
    """What is left of `suggestion` once the user typed `typed`, or None when the typing diverged from it."""
    return suggestion[len(typed) :] if suggestion.startswith(typed) else None


def still_agrees(generated: str, typed: str) -> bool:
    """True while a generation that has produced `generated` so far may still match `typed`."""
    return generated.startswith(typed) or typed.startswith(generated)


def complete_first_line(text: str) -> str | None:
    """`text` up to the first line break that follows some non-blank content; None if no such line yet."""
    seen_content = False
    for index, char in enumerate(text):
        if char == "\n":
            if seen_content:
                return text[:index]
        elif not char.isspace():
            seen_content = True
    return None


# --- state ---


@dataclass
class Suggestion:
    text: str  # to insert at the cursor
    suggestion_id: str


@dataclass
class _Waiter:
    typed: str  # what the user had typed after the generation's anchor when this request arrived
    first_line_only: bool
    future: asyncio.Future[str | None]  # the text to answer with, or None: diverged, start a new generation


@dataclass
class Generation:
    """One model call for one cursor position, and what it produced so far."""

    id: int
    uri: str
    version: int
    doc_text: str  # the document when it was requested (a reference, not a copy)
    anchor: int  # the cursor, as an index into doc_text
    previous_completion: str
    requested_at: float
    token: CancelToken = field(default_factory=CancelToken)
    text: str = ""  # completion text so far (streamed; finalized when done)
    typed: str = ""  # the latest typing after the anchor that this generation still agrees with
    done: bool = False
    failed: bool = False
    waiters: list[_Waiter] = field(default_factory=list)


@dataclass
class Statistics:
    """Local counters for `specls/stats` and `specls/status`. Never sent anywhere else."""

    requests: int = 0
    answered_empty: int = 0
    typed_ahead_hits: int = 0
    generations: int = 0
    cancelled_generations: int = 0
    failed_generations: int = 0
    shown: int = 0
    accepted: int = 0
    partially_accepted: int = 0
    rejected: int = 0
    latencies_ms: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=500))
    engine_totals: collections.Counter[str] = field(default_factory=collections.Counter)
    # From a cancel to the engine returning (the worker is free again), per cancelled generation.
    cancel_to_idle_ms: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=500))
    last_engine_stats: dict[str, Any] = field(default_factory=dict)
    last_finish_reason: str | None = None
    # Completions each stop rule cut, by rule name ("repetition" is the degeneration guard).
    stop_rules_fired: collections.Counter[str] = field(default_factory=collections.Counter)

    def record_engine(self, result: CompletionResult) -> None:
        self.last_finish_reason = result.finish_reason
        self.last_engine_stats = dict(result.stats)
        for key in (
            "target_forwards",
            "drafted",
            "accepted",
            "prompt_tokens",
            "reused_prompt_tokens",
            "new_tokens",
            "forced_tokens",
        ):
            value = result.stats.get(key)
            if isinstance(value, int | float):
                self.engine_totals[key] += int(value)

    def acceptance_rate(self) -> float | None:
        decided = self.accepted + self.rejected
        return self.accepted / decided if decided else None

    def as_dict(self) -> dict[str, Any]:
        ordered = sorted(self.latencies_ms)

        def percentile(p: float) -> float | None:
            return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 2) if ordered else None

        return {
            "requests": self.requests,
            "answered_empty": self.answered_empty,
            "typed_ahead_hits": self.typed_ahead_hits,
            "generations": self.generations,
            "cancelled_generations": self.cancelled_generations,
            "failed_generations": self.failed_generations,
            "shown": self.shown,
            "accepted": self.accepted,
            "partially_accepted": self.partially_accepted,
            "rejected": self.rejected,
            "acceptance_rate": self.acceptance_rate(),
            "latency_ms": {
                "p50": percentile(0.5),
                "p90": percentile(0.9),
                "p99": percentile(0.99),
                "count": len(ordered),
            },
            "engine_totals": dict(self.engine_totals),
            "cancel_to_idle_ms": list(self.cancel_to_idle_ms),
            "last_engine_stats": self.last_engine_stats,
            "last_finish_reason": self.last_finish_reason,
            "stop_rules_fired": dict(self.stop_rules_fired),
        }


class _FairQueue:
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
        cache_documents: int = 64,
    ) -> None:
        self.store = store
        self.settings = settings
        self.stats = Statistics()
        self.state: BackendState = "idle"
        self.info: BackendInfo | None = None
        self._backend_factory = backend_factory
        self._build_context = build_context
        self._finalize = finalize
        self._on_state = on_state
        self._on_log = on_log
        self._on_completion = on_completion
        self._cache_documents = cache_documents
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ids = itertools.count(1)
        self._latest: collections.OrderedDict[str, Generation] = collections.OrderedDict()
        self._debounce_seq: collections.Counter[str] = collections.Counter()

        # Shared with the worker thread, guarded by _cond.
        self._cond = threading.Condition()
        self._queue = _FairQueue()
        self._load_settings: ServerSettings | None = None
        self._load_epoch = 0
        self._stopping = False
        self._backend: CompletionBackend | None = None
        self._worker: threading.Thread | None = None
        # What the syntax draft-length policy learned about the loaded model; only the worker touches it.
        self._draft_acceptance = SyntaxAcceptance()
        # Held by the loop while it edits documents and by the worker while it builds a prompt.
        self.store_lock = threading.Lock()

    # --- lifecycle (event loop) ---

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        if self._worker is None:
            self._worker = threading.Thread(target=self._worker_main, name="specls-engine", daemon=True)
            self._worker.start()

    def load(self, settings: ServerSettings) -> None:
        """(Re)load the backend on the worker; requests are answered empty until it is ready."""
        self.settings = settings
        self._set_state("loading", f"loading {settings.backend} backend")
        self._cancel_everything()
        with self._cond:
            self._load_settings = settings
            self._load_epoch += 1
            self._cond.notify()

    def update_settings(self, settings: ServerSettings) -> None:
        """Apply settings that need no reload (decoding and context knobs); they hold from the next job,
        and finished suggestions made under the old ones are no longer served."""
        if settings != self.settings:
            for uri in [uri for uri, generation in self._latest.items() if generation.done]:
                del self._latest[uri]
        self.settings = settings

    def stop(self) -> None:
        self._cancel_everything()
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._worker is not None:
            self._worker.join(timeout=5)

    @contextmanager
    def editing(self) -> Iterator[DocumentStore]:
        """Edit documents without racing the worker's prompt building."""
        with self.store_lock:
            yield self.store

    # --- document events (event loop) ---

    def document_changed(self, uri: str) -> None:
        """Stop the document's generation unless the edit only typed characters that agree with it."""
        generation = self._latest.get(uri)
        if generation is None or generation.done:
            return
        with self._cond:
            queued = self._queue.remove(uri)
        if queued is not None:  # not started yet: its prompt is already stale, the client will ask again
            self._finish(queued, cancelled=True)
            return
        typed = self._typed_after(generation)
        if typed is not None and still_agrees(generation.text, typed):
            generation.typed = typed
            return
        self._cancel(generation)

    def document_closed(self, uri: str) -> None:
        generation = self._latest.pop(uri, None)
        if generation is not None and not generation.done:
            with self._cond:
                self._queue.remove(uri)
            self._cancel(generation)

    # --- requests (event loop) ---

    async def complete(self, uri: str, line: int, character: int) -> Suggestion | None:
        """Answer one completion request: a suggestion, or None for an empty answer."""
        started = time.monotonic()
        self.stats.requests += 1
        answer = await self._complete(uri, line, character)
        if answer is None or not answer.text:
            self.stats.answered_empty += 1
            answer = None
        self.stats.latencies_ms.append((time.monotonic() - started) * 1000)
        self._on_completion()
        return answer

    async def _complete(self, uri: str, line: int, character: int) -> Suggestion | None:
        if self.state != "ready":
            return None
        located = self._locate(uri, line, character)
        if located is None:
            return None
        version, text, offset = located
        self.store.touch(uri)

        previous = self._latest.get(uri)
        if previous is not None:
            typed = self._typed_after(previous, text, version)
            if typed is not None and offset == previous.anchor + len(typed):
                reused = await self._reuse(previous, typed)
                if reused is not None:
                    return reused
                if not self._is_current(uri, version):
                    return None  # a newer edit arrived while we waited; a newer request owns the document

        if self.settings.debounce_ms > 0:
            self._debounce_seq[uri] += 1
            seq = self._debounce_seq[uri]
            await asyncio.sleep(self.settings.debounce_ms / 1000)
            if self._debounce_seq[uri] != seq or not self._is_current(uri, version):
                return None  # superseded while we waited

        generation = self._submit(uri, version, text, offset, self._latest.get(uri))
        answer = await self._wait(generation, typed="")
        return Suggestion(answer, f"{generation.id}") if answer else None

    def _locate(self, uri: str, line: int, character: int) -> tuple[int, str, int] | None:
        """(version, text, cursor offset) of a request, or None (logged) when it points nowhere."""
        try:
            document = self.store.get(uri)
            offset = self.store.offset_at(uri, line, character)
        except (UnknownDocumentError, PositionError) as exc:
            self._on_log(logging.WARNING, f"completion at {uri}:{line}:{character} not served: {exc}")
            return None
        return document.version, document.text, offset

    def _is_current(self, uri: str, version: int) -> bool:
        try:
            return self.store.get(uri).version == version
        except UnknownDocumentError:
            return False

    async def _reuse(self, generation: Generation, typed: str) -> Suggestion | None:
        """Serve from a generation the user's typing still agrees with.

        None means "start a new generation"; a Suggestion with empty text is a final empty answer."""
        suggestion_id = f"{generation.id}+{len(typed)}"
        if generation.done:
            remainder = remainder_after(generation.text, typed)
            if generation.failed or not remainder:
                return None
            self.stats.typed_ahead_hits += 1
            return Suggestion(remainder, suggestion_id)
        if not still_agrees(generation.text, typed):
            return None
        generation.typed = typed
        answer = await self._wait(generation, typed)
        if answer is None:
            return None
        if answer:
            self.stats.typed_ahead_hits += 1
        return Suggestion(answer, suggestion_id)

    def _submit(
        self, uri: str, version: int, text: str, offset: int, previous: Generation | None
    ) -> Generation:
        if previous is not None and not previous.done:
            self._cancel(previous)  # newest wins
        generation = Generation(
            id=next(self._ids),
            uri=uri,
            version=version,
            doc_text=text,
            anchor=offset,
            previous_completion=previous.text if previous is not None else "",
            requested_at=time.monotonic(),
        )
        self._latest[uri] = generation
        self._latest.move_to_end(uri)
        while len(self._latest) > self._cache_documents:
            self._latest.popitem(last=False)
        self._stop_orphans(except_uri=uri)
        with self._cond:
            replaced = self._queue.put(generation)
            self._cond.notify()
        if replaced is not None:
            self._finish(replaced, cancelled=True)
        return generation

    async def _wait(self, generation: Generation, typed: str) -> str | None:
        waiter = _Waiter(typed, self.settings.first_line_first, asyncio.get_running_loop().create_future())
        generation.waiters.append(waiter)
        self._evaluate(generation, waiter)
        try:
            return await waiter.future
        except asyncio.CancelledError:  # $/cancelRequest: pygls answers -32800
            self._detach(generation, waiter)
            raise

    def _detach(self, generation: Generation, waiter: _Waiter) -> None:
        if waiter in generation.waiters:
            generation.waiters.remove(waiter)
        if generation.waiters or generation.done:
            return
        with self._cond:
            queued = self._queue.remove(generation.uri) if self._queue.holds(generation) else None
        if queued is not None:
            self._finish(queued, cancelled=True)
        # A running generation with nobody waiting may still serve typed-ahead, so it keeps going until other
        # work arrives (_stop_orphans), the document changes against it, or it finishes.

    def _stop_orphans(self, except_uri: str) -> None:
        for generation in self._latest.values():
            if generation.uri != except_uri and not generation.done and not generation.waiters:
                generation.token.cancel()

    # --- waiters (event loop) ---

    def _evaluate(self, generation: Generation, waiter: _Waiter) -> None:
        """Resolve `waiter` if the generation already has what it needs."""
        if waiter.future.done():
            return
        remainder = remainder_after(generation.text, waiter.typed)
        if generation.done:
            waiter.future.set_result("" if generation.failed else remainder)
        elif not still_agrees(generation.text, waiter.typed):
            waiter.future.set_result(None)
        elif waiter.first_line_only and remainder is not None:
            first_line = complete_first_line(remainder)
            if first_line is not None:
                waiter.future.set_result(first_line)
        if waiter.future.done():
            generation.waiters.remove(waiter)

    def _on_text(self, generation: Generation, text: str) -> None:
        if generation.done:
            return
        generation.text = text
        if not still_agrees(text, generation.typed):
            # The user typed something else meanwhile (we could not tell while nothing was generated yet).
            # The request made after that typing starts again; the older ones are stale and get empty answers.
            for waiter in list(generation.waiters):
                if waiter.typed == generation.typed:
                    waiter.future.set_result(None)
                    generation.waiters.remove(waiter)
            self._cancel(generation)
            return
        for waiter in list(generation.waiters):
            self._evaluate(generation, waiter)

    def _on_done(
        self, generation: Generation, text: str, result: CompletionResult | None, error: str | None
    ) -> None:
        if result is not None:
            self.stats.record_engine(result)
            if result.finish_reason == "cancelled":
                self.stats.cancelled_generations += 1
        if error is not None:
            self.stats.failed_generations += 1
            self._on_log(logging.ERROR, f"completion failed: {error}")
        cancelled = result is not None and result.finish_reason == "cancelled"
        if cancelled or error is not None:
            self._finish(generation, cancelled=True, failed=error is not None)
        else:
            generation.text = text
            self._finish(generation)

    def _finish(self, generation: Generation, *, cancelled: bool = False, failed: bool = False) -> None:
        if generation.done:
            return
        generation.done = True
        generation.failed = failed or cancelled  # a cut-off suggestion is not served from the cache
        for waiter in list(generation.waiters):
            self._evaluate(generation, waiter)

    def _cancel(self, generation: Generation) -> None:
        """Stop a generation (the engine sees the token within one round) and answer its waiters now."""
        generation.token.cancel()
        self._finish(generation, cancelled=True)

    def _cancel_everything(self) -> None:
        with self._cond:
            while (queued := self._queue.pop()) is not None:
                self._finish(queued, cancelled=True)
        for generation in self._latest.values():
            self._cancel(generation)
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

    # --- worker thread ---

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # a closed loop: the server is shutting down
            self._loop.call_soon_threadsafe(callback, *args)

    def _worker_main(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and self._load_settings is None and not len(self._queue):
                    self._cond.wait()
                if self._stopping:
                    break
                to_load, epoch = self._load_settings, self._load_epoch
                self._load_settings = None
                generation = self._queue.pop() if to_load is None else None
            if to_load is not None:
                self._load_backend(to_load, epoch)
            elif generation is not None:
                self._run(generation)
        if self._backend is not None:
            self._backend.close()

    def _load_backend(self, settings: ServerSettings, epoch: int) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None
        try:
            backend = self._backend_factory(settings)
            info = backend.info()
        except Exception as exc:  # report it; the server answers empty until settings change
            logger.exception("backend failed to load")
            self._post(self._on_loaded, None, None, f"{type(exc).__name__}: {exc}", epoch)
            return
        self._backend = backend
        self._draft_acceptance = SyntaxAcceptance()  # a new model drafts differently
        self._post(self._on_loaded, backend, info, None, epoch)

    def _on_loaded(
        self, backend: CompletionBackend | None, info: BackendInfo | None, error: str | None, epoch: int
    ) -> None:
        if epoch != self._load_epoch:  # a newer load superseded this one
            return
        if error is not None:
            self.info = None
            self._set_state("error", f"model failed to load: {error}")
            return
        self.info = info
        assert info is not None
        self._set_state("ready", f"{info.name} backend ready: {info.target}")

    def _run(self, generation: Generation) -> None:
        backend, info, settings = self._backend, self.info, self.settings
        if backend is None or info is None or generation.token.cancelled:
            self._post(self._on_done, generation, "", CompletionResult("", "cancelled"), None)
            return
        try:
            with self.store_lock:
                ctx = None
                if self._is_current(generation.uri, generation.version):
                    ctx = self._build_context(
                        self.store,
                        generation.uri,
                        generation.anchor,
                        info,
                        settings.context,
                        backend.count_tokens,
                    )
            if ctx is None:  # edited or closed since the request: the client asks again
                self._post(self._on_done, generation, "", CompletionResult("", "cancelled"), None)
                return
            if ctx.mode == "none":
                self._post(self._on_done, generation, "", CompletionResult("", "stop"), None)
                return
            request = CompletionRequest(
                prompt=ctx.prompt,
                max_new_tokens=settings.max_new_tokens,
                temperature=settings.temperature,
                stop_strings=ctx.stop_strings,
                lookup_context=ctx.lookup_snippets,
                suffix=ctx.suffix,
                previous_completion=generation.previous_completion,
                drafter=settings.drafter,
                stop_check=ctx.stop_check,
                draft_policy=shared_learning(ctx.draft_policy, self._draft_acceptance),
                forced_prefix=ctx.forced_prefix,
            )
            self._post(self._count_generation)
            result = backend.complete(
                request,
                on_text=lambda text: self._post(self._on_text, generation, text),
                cancel=generation.token,
            )
            cancelled_at = generation.token.cancelled_at
            if result.finish_reason == "cancelled" and cancelled_at is not None:
                idle_ms = (time.monotonic() - cancelled_at) * 1000
                self._post(self.stats.cancel_to_idle_ms.append, idle_ms)
            text = result.text if result.finish_reason == "cancelled" else self._finalize(result.text, ctx)
            if ctx.stop_rules is not None and ctx.stop_rules.fired:
                self._post(self.stats.stop_rules_fired.update, sorted(ctx.stop_rules.fired))
        except Exception as exc:  # a fault in one request must not take the worker down
            logger.exception("completion failed")
            self._post(self._on_done, generation, "", None, f"{type(exc).__name__}: {exc}")
            return
        self._post(self._on_done, generation, text, result, None)

    def _count_generation(self) -> None:
        self.stats.generations += 1
