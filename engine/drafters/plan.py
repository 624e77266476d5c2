"""What a drafter tells the loop before a round, so the draft-length policy can size the draft.

A round runs: `plan = drafter.plan(ids)` -> `k = policy.max_draft_tokens(DraftContext(..., plan.drafter,
plan.copy_found))` -> `draft = drafter.propose(ids, k)` -> one target forward -> `drafter.observe(...)`.
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
    copy_found: bool  # a free (copied, not computed) draft is available
    available: int | None = None  # tokens the match can supply; None when unbounded (a draft model)
    match_len: int = 0  # tokens of context that the match is anchored on (longer is more trustworthy)


class PlanningDrafter(Drafter, Protocol):
    def plan(self, context_ids: list[int]) -> DraftPlan: ...
