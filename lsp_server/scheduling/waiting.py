"""Waiting on a generation, as pure decisions: when a waiting request may be answered with less than the
whole suggestion, and what it is answered with as the text streams in.

A request waiting on a generation gets (`resolve`):
- the whole remaining text once the generation is done ("" if it failed or was cut off);
- None once the generation no longer agrees with what the user typed (the caller starts again);
- its first complete line, once the first-line deadline passed (at once with `firstLineFirst`);
- mid-line only, after `partialAfterMs`: whatever non-blank text there is up to its first line break
  (people type on mid-line; at a line start they pause and wait for a whole line). Only for a client that
  asks again on `specls/suggestionGrown`, which the coordinator sends when the generation is whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsp_server.scheduling.settings import SchedulingSettings
from lsp_server.typed_ahead import complete_first_line, remainder_after, still_agrees


@dataclass(frozen=True)
class WaitPlan:
    """When a waiting request may take less than the whole suggestion; a delay of None: never by a timer."""

    first_line_now: bool
    first_line_after_s: float | None
    partial_now: bool
    partial_after_s: float | None


def partial_after(settings: SchedulingSettings, text: str, offset: int, typed: str = "") -> float | None:
    """Seconds after which a request at `offset` of `text` (then `typed` there) may be answered with the text
    generated so far: mid-line only, for a client that asks again; None: never."""
    if not settings.client_refreshes or settings.partial_after_ms <= 0:
        return None
    line_before = text[text.rfind("\n", 0, offset) + 1 : offset] + typed
    if not line_before.strip() or "\n" in typed:
        return None
    return settings.partial_after_ms / 1000


def plan_wait(settings: SchedulingSettings, partial_after_s: float | None) -> WaitPlan:
    first_line_now = settings.first_line_first or settings.first_line_ms <= 0
    return WaitPlan(
        first_line_now=first_line_now,
        first_line_after_s=None if first_line_now else settings.first_line_ms / 1000,
        partial_now=partial_after_s is not None and partial_after_s <= 0,
        partial_after_s=partial_after_s if partial_after_s is not None and partial_after_s > 0 else None,
    )


def plan_new_request(settings: SchedulingSettings, text: str, offset: int) -> WaitPlan:
    """A request that started its own generation: the partial deadline runs from now."""
    return plan_wait(settings, partial_after(settings, text, offset))


def plan_typed_ahead(settings: SchedulingSettings, doc_text: str, anchor: int, typed: str) -> WaitPlan:
    """A request that typed ahead of a running generation: mid-line, the user already waited while typing,
    so a part is due at once."""
    partial = partial_after(settings, doc_text, anchor, typed)
    return plan_wait(settings, 0.0 if partial is not None else None)


@dataclass(frozen=True)
class Resolution:
    answer: str | None  # the text to answer with; None: the generation diverged from the typing
    short: bool = False  # less than the whole suggestion: announce it when it is whole


def resolve(
    text: str, done: bool, failed: bool, typed: str, first_line_only: bool, partial_due: bool
) -> Resolution | None:
    """What a request that had typed `typed` when it asked gets now from a generation that has produced
    `text` (`done`, `failed`); None: keep waiting."""
    remainder = remainder_after(text, typed)
    if done:
        return Resolution("" if failed else remainder)
    if not still_agrees(text, typed):
        return Resolution(None)
    if remainder is None:  # the user is ahead of the model: wait for it to catch up
        return None
    first_line = complete_first_line(remainder)
    if first_line_only and first_line is not None:
        return Resolution(first_line, short=True)
    if partial_due and remainder.strip():
        # Mid-line, past the deadline: what is there now beats nothing before the next key; the
        # generation goes on and the next request is served from it.
        return Resolution(remainder.split("\n", 1)[0] if "\n" in remainder.strip() else remainder, short=True)
    return None


def keeps_going(generated: str, typed: str) -> bool:
    """Whether a running generation that has produced `generated` goes on after the user typed `typed` at
    its cursor: while it may still match (else it is stopped, and its waiters start again)."""
    return still_agrees(generated, typed)
