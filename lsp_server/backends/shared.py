"""One loaded backend per model, shared by every TCP session that asks for it.

Each session has its own engine worker thread (and so its own queue, documents and settings), but a model is
loaded once: `SharedBackends.factory` is the sessions' backend factory and hands each one a `_SessionBackend`
view of the shared instance. The real backend is not thread-safe, so `complete` calls take turns in arrival
order (`_Turns`, first come first served: with one running generation per session, that is round robin
between sessions). A session waiting for its turn still sees its own cancel at once, and another session's
cancel never touches it. The instance is closed when its last session lets go.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from engine.api import (
    BackendInfo,
    CancelToken,
    CompletionBackend,
    CompletionRequest,
    CompletionResult,
    EngineStats,
    OnText,
)
from lsp_server.config import ServerSettings

_POLL_S = 0.01  # how often a waiting session looks at its cancel flag


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


@dataclass
class _Entry:
    loaded: threading.Event = field(default_factory=threading.Event)
    backend: CompletionBackend | None = None
    error: BaseException | None = None
    users: int = 0
    turns: _Turns = field(default_factory=_Turns)


class SharedBackends:
    def __init__(self, factory: Callable[[ServerSettings], CompletionBackend]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._entries: dict[Hashable, _Entry] = {}

    def factory(self, settings: ServerSettings) -> CompletionBackend:
        """The backend for `settings`: loaded now (on the calling session's engine thread) or shared."""
        key = settings.model_key()
        with self._lock:
            entry = self._entries.get(key)
            loader = entry is None
            if entry is None:
                entry = self._entries[key] = _Entry()
            entry.users += 1
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
            last = entry.users == 0
            if last and self._entries.get(key) is entry:
                del self._entries[key]
        if last and entry.backend is not None:
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

    def complete(
        self, request: CompletionRequest, *, on_text: OnText | None = None, cancel: CancelToken | None = None
    ) -> CompletionResult:
        ticket = self._entry.turns.acquire(cancel)
        if ticket is None:
            return CompletionResult("", "cancelled", stats=EngineStats(waited_for_turn=True))
        try:
            return self._backend.complete(request, on_text=on_text, cancel=cancel)
        finally:
            self._entry.turns.release(ticket)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._owner._release(self._key, self._entry)
