"""The server's handler guards: an exception becomes a logged error and an empty answer; cancellation
($/cancelRequest) still reaches pygls so that it can answer -32800."""

from __future__ import annotations

import asyncio
import inspect
import logging

import pytest

from lsp_server.handlers.guard import guarded


class RecordingServer:
    def __init__(self) -> None:
        self.logged: list[tuple[int, str]] = []

    def log(self, level: int, message: str) -> None:
        self.logged.append((level, message))


def test_a_failing_sync_handler_returns_the_default_and_logs() -> None:
    @guarded(default=[])
    def handler(ls: RecordingServer, params: object) -> list[str]:
        raise KeyError("boom")

    ls = RecordingServer()
    assert handler(ls, None) == []
    assert ls.logged == [(logging.ERROR, "handler failed: KeyError: 'boom'")]


async def test_a_failing_async_handler_returns_the_default_and_logs() -> None:
    @guarded(default=None)
    async def handler(ls: RecordingServer, params: object) -> str:
        raise ValueError("bad")

    ls = RecordingServer()
    assert inspect.iscoroutinefunction(handler)  # pygls awaits it as a coroutine handler
    assert await handler(ls, None) is None
    assert ls.logged[0][1] == "handler failed: ValueError: bad"


async def test_cancellation_passes_through_the_async_guard() -> None:
    @guarded(default=None)
    async def handler(ls: RecordingServer, params: object) -> str:
        await asyncio.sleep(10)
        return "never"

    ls = RecordingServer()
    task = asyncio.ensure_future(handler(ls, None))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ls.logged == []
