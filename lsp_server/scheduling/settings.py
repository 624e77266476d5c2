"""The seven settings the scheduling policies read, read once from `ServerSettings` into a frozen value
(plus what the client said at initialize). Every policy takes this object; none reads `ServerSettings`."""

from __future__ import annotations

from dataclasses import dataclass

from lsp_server.config import ServerSettings


@dataclass(frozen=True)
class SchedulingSettings:
    debounce_ms: int = 0  # wait this long after a request before starting a generation (0: at once)
    first_line_first: bool = False  # answer with the first line as soon as it is complete
    first_line_ms: int = 100  # else, after this long, answer with a complete first line if there is one
    partial_after_ms: int = 80  # mid-line, after this long, answer with whatever is there (0: never)
    prefetch: bool = True  # compute the next suggestion as if the one on screen were accepted
    warm: bool = True  # prefill the cache while the user is idle
    warm_idle_ms: int = 300  # the pause after the last request before the idle warm-up
    # The client asks again on `specls/suggestionGrown`: only then may a request get a mid-line part,
    # since a client that never re-asks would keep showing just that part.
    client_refreshes: bool = False

    @classmethod
    def of(cls, settings: ServerSettings, *, client_refreshes: bool) -> SchedulingSettings:
        return cls(
            debounce_ms=settings.debounce_ms,
            first_line_first=settings.first_line_first,
            first_line_ms=settings.first_line_ms,
            partial_after_ms=settings.partial_after_ms,
            prefetch=settings.prefetch,
            warm=settings.warm,
            warm_idle_ms=settings.warm_idle_ms,
            client_refreshes=client_refreshes,
        )
