"""Why a request was answered empty, as one closed list: `specls/stats` counts empty answers by these values
(`empty_reasons`), and the keystroke benchmark reports them, so a value is part of the output format.

The one open-ended reason is `mode-none:<why>`: the syntax said no completion belongs here, and says why."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

BackendState = Literal["idle", "loading", "ready", "error"]


class EmptyReason(StrEnum):
    BACKEND_IDLE = "backend-idle"  # the backend was never loaded
    BACKEND_LOADING = "backend-loading"
    BACKEND_ERROR = "backend-error"
    BAD_POSITION = "bad-position"  # the request points outside the document (logged)
    SUPERSEDED = "superseded"  # a newer request for the document owns the answer
    DIVERGED = "diverged"  # the typing went elsewhere while the model generated
    NOTHING_LEFT = "nothing-left"  # the suggestion was typed out, or nothing else said why
    EDITED = "edited"  # an edit the running generation disagrees with stopped it
    EDITED_BEFORE_START = "edited-before-start"
    CLOSED = "closed"
    PREFETCH_DROPPED = "prefetch-dropped"
    CLIENT_CANCELLED = "client-cancelled"  # $/cancelRequest before the generation started
    RELOADED = "reloaded"  # the backend was reloaded
    ORPHANED = "orphaned"  # nobody waited on it, and another document needed the engine
    CANCELLED = "cancelled"
    CANCELLED_BEFORE_START = "cancelled-before-start"
    STALE_CONTEXT = "stale-context"  # edited or closed between the request and its prompt
    FAILED = "failed"  # the backend raised
    GENERATED_NOTHING = "generated-nothing"
    MODE_NONE = "mode-none"

    @classmethod
    def backend_not_ready(cls, state: str) -> EmptyReason:
        return cls(f"backend-{state}")


def mode_none(why: str) -> str:
    """The reason for a cursor where the syntax wants no completion (`mode-none:mid-word`, ...)."""
    return f"{EmptyReason.MODE_NONE}:{why}"
