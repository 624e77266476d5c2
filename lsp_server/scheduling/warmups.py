"""Warm-ups, as pure decisions: while the user is idle the engine prefills its KV cache with the prompt the
next request will need. Four triggers (`WarmTrigger`): a file opens (the cursor unknown: warm its longest
start that fits the budget, `warm_offset`), the client reports the cursor (`specls/cursor`: there the
suggestion itself is started, `suggest_at_rest`), a save, and
`warmIdleMs` after the document's last request (which resumes a prefill that typing cancelled). Any real
request pre-empts a warm-up; what it computed stays cached."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from lsp_server.documents import Document
from lsp_server.scheduling.document_state import DocumentState
from lsp_server.scheduling.settings import SchedulingSettings
from lsp_server.suggestion_cache import SuggestionCache


class WarmTrigger(StrEnum):
    OPEN = "open"
    CURSOR = "cursor"
    SAVE = "save"
    IDLE = "idle"


def suggest_at_rest(
    settings: SchedulingSettings, state: DocumentState, document: Document, cache: SuggestionCache
) -> bool:
    """Whether the cursor the client reports at rest (`specls/cursor`, `state.cursor`) should start its
    suggestion now, not just warm the cache: the request that follows (after the client's own pause) then
    finds it made or on its way. Not where one is cached or being made for this cursor already (typing
    sends requests itself), nor in a document whose copy may differ from the client's."""
    offset = state.cursor
    if not settings.warm or offset is None or not document.servable:
        return False
    if cache.find(state.uri, document.text, offset) is not None:
        return False
    made = state.generation
    return made is None or made.failed or (made.version, made.anchor) != (document.version, offset)


def may_warm(settings: SchedulingSettings, ready: bool) -> bool:
    return settings.warm and ready


def idle_delay_s(settings: SchedulingSettings) -> float | None:
    """How long after a request to warm if nothing else happened; None: no idle warm-up."""
    return settings.warm_idle_ms / 1000 if settings.warm else None


def idle_warm_due(state: DocumentState, requests_then: int, *, current: bool, engine_busy: bool) -> bool:
    """Whether the idle warm-up set by the document's request number `requests_then` should run now: no newer
    request, the document still open (`current`: its state is the one the timer was set with), its
    generation no longer running, the engine idle and the cursor known."""
    if not current or state.requests != requests_then or state.running is not None:
        return False
    return not engine_busy and state.cursor is not None


def warm_offset(text: str, budget: int, count_tokens: Callable[[str], int]) -> int:
    """Where to warm a file whose cursor is unknown: the end of the longest start of it that fits in the
    prompt budget (with room for snippets and markers). A prefix-first prompt for any cursor above that
    point is a start of the prompt warmed there, so it finds its whole prefix cached."""
    budget = int(budget * 0.9)
    # About 3 characters a token: look no further than twice that, so a huge file costs no more.
    end = len(text) if len(text) <= budget * 6 else text.rfind("\n", 0, budget * 3) + 1
    while end > 0 and count_tokens(text[:end]) > budget:
        end = text.rfind("\n", 0, end - max(1, end // 10)) + 1  # a tenth back, to a line start
    return end
