"""The abilities a drafter may have beyond `Drafter`, declared here so the loop asks by type, not by name.

- A planning drafter tells the loop before a round what it will offer, so the draft-length policy can size
  the draft: `plan = drafter.plan(ids)` -> `k = policy.max_draft_tokens(DraftContext(..., plan.drafter,
  plan.copy_found))` -> `draft = drafter.propose(ids, k)` -> one target forward -> `drafter.observe(...)`.
  Planning is cheap: lookup-style drafters find their match (and reuse it in `propose`), the model drafter
  does nothing. A plan with a `length` fixes the round's draft length itself (a forced prefix's spelling);
  the policy is neither asked nor told about such a round.
- A re-aligning drafter copies text, and can re-align when token healing ended past the cursor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engine.drafters.base import Drafter


@dataclass(frozen=True)
class DraftPlan:
    drafter: str  # which drafter will propose this round: "model", "lookup", "suffix", "stale" or "none"
    copy_found: bool  # a free (copied, not computed) draft is available
    available: int | None = None  # tokens the match can supply; None when unbounded (a draft model)
    match_len: int = 0  # tokens of context that the match is anchored on (longer is more trustworthy)
    length: int | None = None  # this round's draft length, decided by the drafter instead of the policy


@runtime_checkable
class PlanningDrafter(Drafter, Protocol):
    def plan(self, context_ids: list[int]) -> DraftPlan: ...


@runtime_checkable
class RealigningDrafter(Protocol):
    def realign(self, overshoot: str, context_len: int) -> None:
        """Token healing's spelling ended `overshoot` past the cursor, when the context had `context_len`
        tokens: align the copied text on what follows it."""
        ...
