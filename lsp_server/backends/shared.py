"""One loaded backend per model, shared by every TCP session that asks for it.

Each session has its own engine worker thread (and so its own queue, documents and settings), but a model is
loaded once: `SharedBackends.factory` is the sessions' backend factory and hands each one a `_SessionBackend`
view of the shared instance. The real backend is not thread-safe, so `complete` calls take turns in arrival
order (`_Turns`, first come first served). A session waiting for its turn still sees its own cancel at once,
and another session's cancel never touches it.

Time slices: a generation that has held the model for SLICE_S while another session waits is pre-empted at
the engine's next cancel check (between draft and verify steps, or between a forward's layers), goes to the
back of the queue, and is resumed afterwards from the text it had (the prompt continued by it, the stop
rules still seeing the whole completion). So a short request never waits behind a long one for more than a
slice and one step.

Grace: when the last session lets go of a model it stays loaded for `grace_s` (default GRACE_S), and the next
session reuses it. Unloading and reloading per session grew the process by ~64 MB each time; a model another
session asks for instead closes the idle ones first, so two models are never held for nothing.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any

from engine.api import (
    BackendInfo,
    CancelToken,
    CompletionBackend,
    CompletionRequest,
    CompletionResult,
    EngineStats,
    OnText,
    PromptCachingBackend,
    cut_at_stop,
)
from lsp_server.config import ServerSettings

logger = logging.getLogger(__name__)

_POLL_S = 0.01  # how often a waiting session looks at its cancel flag
SLICE_S = 0.2  # a generation yields the model to a waiting session after holding it this long
GRACE_S = 600.0  # an unused model stays loaded this long for the next session


class _Turns:
    """A first-come, first-served lock whose waiters give up when their cancel fires."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: collections.deque[object] = collections.deque()

    def acquire(self, cancel: CancelToken | None) -> object | None:
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            while self._queue[0] is not ticket:
                if cancel is not None and cancel.cancelled:
                    self._queue.remove(ticket)
                    self._cond.notify_all()
                    return None
                self._cond.wait(_POLL_S)
        return ticket

    def release(self, ticket: object) -> None:
        with self._cond:
            self._queue.remove(ticket)
            self._cond.notify_all()

    def others_waiting(self) -> bool:
        """Whether a session waits behind the one holding the turn (read without the lock: polled often)."""
        return len(self._queue) > 1


class _SliceToken(CancelToken):
    """What the backend polls while one session holds the model: that session's own cancel, or the end of
    its slice (SLICE_S held, another session waiting, and `may_yield` true)."""

    def __init__(self, own: CancelToken | None, turns: _Turns, may_yield: Callable[[], bool]) -> None:
        super().__init__()
        self._own = own
        self._turns = turns
        self._may_yield = may_yield
        self._started = time.monotonic()
        self.preempted = False

    @property
    def cancelled(self) -> bool:
        if super().cancelled:
            return True
        if self._own is not None and self._own.cancelled:
            self.cancel()
            self.cancelled_at = self._own.cancelled_at
            return True
        if time.monotonic() - self._started >= SLICE_S and self._turns.others_waiting() and self._may_yield():
            self.preempted = True
            self.cancel()
            return True
        return False


@dataclass
class _Entry:
    loaded: threading.Event = field(default_factory=threading.Event)
    backend: CompletionBackend | None = None
    error: BaseException | None = None
    users: int = 0
    turns: _Turns = field(default_factory=_Turns)
    idle: int = 0  # counts the times the entry became unused: a grace timer closes it only if still current


class SharedBackends:
    def __init__(
        self, factory: Callable[[ServerSettings], CompletionBackend], *, grace_s: float = GRACE_S
    ) -> None:
        self._factory = factory
        self._grace_s = grace_s
        self._lock = threading.Lock()
        self._entries: dict[Hashable, _Entry] = {}

    def factory(self, settings: ServerSettings) -> CompletionBackend:
        """The backend for `settings`: loaded now (on the calling session's engine thread) or shared."""
        key = settings.model_key()
        idle: list[_Entry] = []
        with self._lock:
            entry = self._entries.get(key)
            loader = entry is None
            if entry is None:
                entry = self._entries[key] = _Entry()
                idle = [
                    e for k, e in self._entries.items() if k != key and e.users == 0 and e.backend is not None
                ]
                for other in idle:  # about to load another model: let the unused ones go first
                    self._entries = {k: e for k, e in self._entries.items() if e is not other}
            entry.users += 1
        for other in idle:
            self._close(other)
        if loader:
            try:
                entry.backend = self._factory(settings)
            except BaseException as exc:
                entry.error = exc
                with self._lock:
                    self._entries.pop(key, None)  # the next session tries again
                raise
            finally:
                entry.loaded.set()
        else:
            entry.loaded.wait()
            if entry.error is not None:
                raise entry.error
        assert entry.backend is not None
        return _SessionBackend(self, key, entry)

    def loaded_count(self) -> int:
        with self._lock:
            return sum(1 for entry in self._entries.values() if entry.backend is not None)

    def _release(self, key: Hashable, entry: _Entry) -> None:
        with self._lock:
            entry.users -= 1
            if entry.users > 0 or self._entries.get(key) is not entry:
                return
            if self._grace_s > 0:
                entry.idle += 1
                timer = threading.Timer(self._grace_s, self._expire, args=(key, entry, entry.idle))
                timer.daemon = True
                timer.start()
                return
            del self._entries[key]
        self._close(entry)

    def _expire(self, key: Hashable, entry: _Entry, idle: int) -> None:
        with self._lock:
            if entry.users > 0 or entry.idle != idle or self._entries.get(key) is not entry:
                return  # in use again, or already gone
            del self._entries[key]
        logger.info("unloading a model no session used for %g s", self._grace_s)
        self._close(entry)

    @staticmethod
    def _close(entry: _Entry) -> None:
        if entry.backend is None:
            return
        ticket = entry.turns.acquire(None)  # let a running completion finish first
        try:
            entry.backend.close()
        finally:
            assert ticket is not None
            entry.turns.release(ticket)


class _SessionBackend:
    """One session's handle on a shared backend."""

    def __init__(self, owner: SharedBackends, key: Hashable, entry: _Entry) -> None:
        assert entry.backend is not None
        self._owner = owner
        self._key = key
        self._entry = entry
        self._backend = entry.backend
        self._closed = False

    def info(self) -> BackendInfo:
        return self._backend.info()

    def count_tokens(self, text: str) -> int:
        return self._backend.count_tokens(text)

    def prompt_tokens_cached(self, prompt: str) -> tuple[int, int]:
        """The shared cache's hint (another session may change it before this one's turn)."""
        if isinstance(self._backend, PromptCachingBackend):
            return self._backend.prompt_tokens_cached(prompt)
        return 0, self._backend.count_tokens(prompt)

    def complete(
        self, request: CompletionRequest, *, on_text: OnText | None = None, cancel: CancelToken | None = None
    ) -> CompletionResult:
        done: CompletionResult | None = None  # what the slices so far made
        while True:
            ticket = self._entry.turns.acquire(cancel)
            if ticket is None:
                if done is not None:
                    return replace(done, finish_reason="cancelled")
                return CompletionResult("", "cancelled", stats=EngineStats(waited_for_turn=True))
            so_far = done.text if done is not None else ""
            seen = [so_far]

            def shown(text: str, so_far: str = so_far, seen: list[str] = seen) -> None:
                seen[0] = so_far + text
                if on_text is not None:
                    on_text(so_far + text)

            # A forced prefix (token healing) must be spelled out before a slice may end: resuming starts
            # after it.
            def may_yield(seen: list[str] = seen) -> bool:
                return len(seen[0]) >= len(request.forced_prefix)

            token = _SliceToken(cancel, self._entry.turns, may_yield)
            try:
                part = self._backend.complete(_resumed(request, done), on_text=shown, cancel=token)
            finally:
                self._entry.turns.release(ticket)
            done = _joined(done, part)
            if (
                not token.preempted
                or part.finish_reason != "cancelled"
                or (cancel is not None and cancel.cancelled)
            ):
                return done
            if done.stats.new_tokens >= request.max_new_tokens:
                return replace(done, finish_reason="length")
            logger.debug(
                "a generation yielded the model after %d tokens; it resumes in turn", done.stats.new_tokens
            )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._owner._release(self._key, self._entry)


def _resumed(request: CompletionRequest, done: CompletionResult | None) -> CompletionRequest:
    """`request` continued after the text its earlier slices made: the prompt ends with that text, and the
    stop rules see the whole completion (stop strings across the seam included)."""
    if done is None or not done.text:
        return request
    before = done.text
    stop_strings, stop_check = request.stop_strings, request.stop_check

    def whole_check(text: str) -> int | None:
        cut, stopped = cut_at_stop(before + text, stop_strings, stop_check)
        return max(0, len(cut) - len(before)) if stopped else None

    previous = request.previous_completion
    return replace(
        request,
        prompt=request.prompt + before,
        max_new_tokens=max(1, request.max_new_tokens - done.stats.new_tokens),
        stop_strings=(),
        stop_check=whole_check if (stop_strings or stop_check is not None) else None,
        previous_completion=previous[len(before) :] if previous.startswith(before) else "",
        forced_prefix="",
    )


def _joined(done: CompletionResult | None, part: CompletionResult) -> CompletionResult:
    """One result from a generation's slices: the texts and tokens end to end, the work summed."""
    if done is None:
        return part
    offset = len(done.text)
    stats = replace(
        part.stats,
        prompt_tokens=done.stats.prompt_tokens,
        target_forwards=done.stats.target_forwards + part.stats.target_forwards,
        drafted=done.stats.drafted + part.stats.drafted,
        accepted=done.stats.accepted + part.stats.accepted,
        new_tokens=done.stats.new_tokens + part.stats.new_tokens,
        prefill_s=done.stats.prefill_s + part.stats.prefill_s,
        decode_s=done.stats.decode_s + part.stats.decode_s,
        wall_s=done.stats.wall_s + part.stats.wall_s,
        first_text_s=done.stats.first_text_s
        if done.stats.first_text_s is not None
        else part.stats.first_text_s,
    )
    per_token: dict[str, list[Any]] = {}  # per-token fields, where the engine reports them
    if hasattr(part, "token_probs"):
        per_token["token_probs"] = list(getattr(done, "token_probs", [])) + list(part.token_probs)
    if hasattr(part, "token_ends"):  # where each token's text ends in `text`
        ends = [end + offset for end in part.token_ends]
        per_token["token_ends"] = list(getattr(done, "token_ends", [])) + ends
    joined = replace(part, text=done.text + part.text, token_ids=done.token_ids + part.token_ids, stats=stats)
    for name, values in per_token.items():
        setattr(joined, name, values)
    return joined
