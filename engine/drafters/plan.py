"""The abilities a drafter may have beyond `Drafter`, declared as Protocols so callers ask by type, not by name.

- A planning drafter says before a round what it will offer, so the draft-length policy can size the draft.
  One round of `engine.speculative.speculative_generate`: `plan = drafter.plan(ids)` -> `k =
  policy.max_draft_tokens(DraftContext(..., drafter=plan.drafter, copy_found=plan.copy_found,
  match_len=plan.match_len))` -> `draft = drafter.propose(ids, k)` -> one target forward ->
  `drafter.observe(...)` and the policy's learner told how the draft held. Planning is cheap: lookup-style
  drafters find their match (and reuse it in `propose`), the model drafter does nothing, the hybrid asks its
  members and picks one. A plan with a `length` fixes the round's draft length itself (a forced prefix's
  spelling, `forced.py`); the policy is neither asked nor told about such a round, and its counts are kept
  apart. A drafter that does not plan gets `DraftPlan(drafter.name, copy_found=False)`.
- A re-aligning drafter copies text and can re-align on it when token healing's spelling ended past the
  cursor; the forced-prefix and hybrid drafters pass the overshoot on to the drafters they wrap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engine.drafters.base import Drafter


@dataclass(frozen=True)
class DraftPlan:
    # which drafter will propose this round: "model", "lookup", "suffix", "stale", "forced" or "none"
    drafter: str
    copy_found: bool  # a free (copied, not computed) draft is available
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
