"""Every handler is guarded: an exception is logged to the client (window/logMessage) and the request gets an
empty answer, so the server stays up whatever a client sends."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar, cast

logger = logging.getLogger(__name__)

Handler = TypeVar("Handler", bound=Callable[..., Any])


class Logs(Protocol):
    def log(self, level: int, message: str) -> None: ...


def guarded(default: Any) -> Callable[[Handler], Handler]:
    """Turn an exception in a handler (plain or coroutine) into a logged error and `default`.
    Cancellation ($/cancelRequest) still propagates to pygls: CancelledError is not an Exception."""

    def fail(ls: Logs, handler: Callable[..., Any], exc: Exception) -> Any:
        logger.exception("%s failed", handler.__name__)
        ls.log(logging.ERROR, f"{handler.__name__} failed: {type(exc).__name__}: {exc}")
        return default

    def decorate(handler: Handler) -> Handler:
        if inspect.iscoroutinefunction(handler):

            @functools.wraps(handler)
            async def run_async(ls: Logs, params: Any) -> Any:
                try:
                    return await handler(ls, params)
                except Exception as exc:
                    return fail(ls, handler, exc)

            return cast(Handler, run_async)

        @functools.wraps(handler)
        def run(ls: Logs, params: Any) -> Any:
            try:
                return handler(ls, params)
            except Exception as exc:
                return fail(ls, handler, exc)

        return cast(Handler, run)

    return decorate


def field(params: Any, name: str) -> Any:
    """Read a field of a custom notification's params (pygls passes them through as a dict)."""
    return params.get(name) if isinstance(params, Mapping) else getattr(params, name, None)
