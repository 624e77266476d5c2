"""What a drafter tells the loop before a round, so the draft-length policy can size the draft.

A round runs: `plan = drafter.plan(ids)` -> `k = policy.max_draft_tokens(DraftContext(..., plan.drafter,
plan.lookup_hit))` -> `draft = drafter.propose(ids, k)` -> one target forward -> `drafter.observe(...)`.
Planning is cheap: lookup-style drafters find their match (and reuse it in `propose`), the model drafter
does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engine.drafters.base import Drafter


@dataclass(frozen=True)
class DraftPlan:
    drafter: str  # which drafter will propose this round: "model", "lookup", "suffix", "stale" or "none"
    lookup_hit: bool  # a free (copied, not computed) draft is available
    available: int | None = None  # tokens the match can supply; None when unbounded (a draft model)
    match_len: int = 0  # tokens of context that the match is anchored on (longer is more trustworthy)


class PlanningDrafter(Drafter, Protocol):
    def plan(self, context_ids: list[int]) -> DraftPlan: ...


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix, by bisection on slice equality (C-speed compares)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
