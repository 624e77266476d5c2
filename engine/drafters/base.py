"""The one small interface every drafter implements, and what a drafter offers before a round.

One round of `engine.speculative.speculative_generate`: `plans = drafter.plans(ids)` -> the draft policy
chooses one plan and its length (`engine.drafters.length`, the one decider) -> `draft = drafter.propose(ids,
k, plan)` -> one target forward -> `drafter.observe(...)` and the policy told how the draft held. Planning is
cheap: copying drafters find their match (and reuse it in `propose`), the model drafter does nothing, the
hybrid offers its members' plans. A plan with a `length` fixes the round's draft length itself (a forced
prefix's spelling, `forced.py`); the policy is neither asked nor told about such a round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@dataclass
class Draft:
    token_ids: list[int]
    # Per drafted token, the drafter's probability distribution over the vocabulary ([k, vocab], float32),
    # or None for a deterministic drafter: verification then treats q as one-hot on the drafted token.
    draft_probs: torch.Tensor | None = None
    drafter: str = ""  # name of the drafter that produced it (the hybrid reports the member the policy chose)


@dataclass(frozen=True)
class DraftPlan:
    # which drafter would propose: "model", "lookup", "suffix", "stale" or "forced"
    drafter: str
    copy_found: bool  # a free (copied, not computed) draft is available
    match_len: int = 0  # tokens of context that the match is anchored on (longer is more trustworthy)
    length: int | None = None  # this round's draft length, decided by the drafter instead of the policy
    # Context tokens a draft model must read before it can draft, beyond a round's usual one or two (its
    # cache is behind: a new prompt, or rounds another drafter won). The policy prices reading them.
    catch_up: int = 0


class Drafter(Protocol):
    name: str

    def plans(self, context_ids: list[int]) -> list[DraftPlan]:
        """What this drafter can offer the next round: one plan per way it could draft (none: nothing)."""
        ...

    def propose(self, context_ids: list[int], max_tokens: int, plan: DraftPlan | None = None) -> Draft:
        """Propose up to `max_tokens` tokens to follow `context_ids` (prompt + accepted tokens), by `plan`
        (one of `plans(context_ids)`; None: the first)."""
        ...

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        """Called after verification; `context_ids` now ends with the accepted tokens and the target's token."""
        ...


@runtime_checkable
class RealigningDrafter(Protocol):
    """A drafter that copies text and can re-align on it when token healing's spelling ended past the
    cursor; the forced-prefix and hybrid drafters pass the overshoot on to the drafters they wrap."""

    def realign(self, overshoot: str, context_len: int) -> None:
        """Token healing's spelling ended `overshoot` past the cursor, when the context had `context_len`
        tokens: align the copied text on what follows it."""
        ...
