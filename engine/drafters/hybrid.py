"""Picking a drafter per round: copied drafts (stale completion, suffix, prompt lookup) cost nothing to
produce, so they go first when they match; the draft model fills in when nothing matches."""

from __future__ import annotations

from engine.drafters.base import Draft
from engine.drafters.caps import LONG_ANCHOR
from engine.drafters.plan import DraftPlan, PlanningDrafter, RealigningDrafter


class HybridDrafter:
    """Tries the copying drafters in order (stale, suffix, lookup), then the model drafter.

    It keeps an exponential moving average of each drafter's acceptance rate (accepted / drafted). A
    copying drafter whose recent drafts were mostly rejected is skipped in favour of the model, unless its
    match is anchored on at least `strong_match_len` tokens; a skipped drafter regains trust slowly, so
    one bad stretch does not bench it for the rest of the call. The draft model is benched the same way
    when its recent acceptance falls below `model_min_acceptance`: short model drafts that are mostly
    rejected cost more than a plain step (on CPU one verify of 1-2 tokens costs ~1.5-1.9 target steps,
    see bench/results), so the round drafts nothing instead. `Draft.drafter` names the drafter used.
    """

    name = "hybrid"

    def __init__(
        self,
        *,
        model: PlanningDrafter | None = None,
        lookup: PlanningDrafter | None = None,
        suffix: PlanningDrafter | None = None,
        stale: PlanningDrafter | None = None,
        strong_match_len: int = LONG_ANCHOR,
        min_acceptance: float = 0.3,
        model_min_acceptance: float = 0.5,
        ema_weight: float = 0.3,
        forgiveness: float = 0.05,
        acceptance: dict[str, float] | None = None,
    ) -> None:
        self.model = model
        self.copiers = [d for d in (stale, suffix, lookup) if d is not None]
        self.strong_match_len = strong_match_len
        self.min_acceptance = min_acceptance
        self.model_min_acceptance = model_min_acceptance
        self.ema_weight = ema_weight
        self.forgiveness = forgiveness
        # Optimistic start: every drafter gets tried before it can be judged. A caller that passes its own
        # `acceptance` dict keeps what was learned across calls (the engine does, per loaded pair).
        self.acceptance: dict[str, float] = acceptance if acceptance is not None else {}
        for drafter in (*self.copiers, model):
            if drafter is not None:
                self.acceptance.setdefault(drafter.name, 1.0)
        self._choice: tuple[int, PlanningDrafter | None, DraftPlan] | None = None  # (context length, ...)
        self._used: PlanningDrafter | None = None

    def _trusted(self, drafter: PlanningDrafter, plan: DraftPlan) -> bool:
        if self.model is None or plan.match_len >= self.strong_match_len:
            return True
        return self.acceptance[drafter.name] >= self.min_acceptance

    def _choose(self, context_ids: list[int]) -> tuple[PlanningDrafter | None, DraftPlan]:
        for drafter in self.copiers:
            plan = drafter.plan(context_ids)
            if not plan.copy_found:
                continue
            if self._trusted(drafter, plan):
                return drafter, plan
            self._forgive(drafter.name)
        if self.model is not None:
            if self.acceptance[self.model.name] >= self.model_min_acceptance:
                return self.model, self.model.plan(context_ids)
            self._forgive(self.model.name)
        return None, DraftPlan("none", copy_found=False)

    def _forgive(self, name: str) -> None:
        rate = self.acceptance[name]
        self.acceptance[name] = rate + self.forgiveness * (1.0 - rate)

    def plan(self, context_ids: list[int]) -> DraftPlan:
        drafter, plan = self._choose(context_ids)
        self._choice = (len(context_ids), drafter, plan)
        return plan

    def propose(self, context_ids: list[int], max_tokens: int) -> Draft:
        if self._choice is not None and self._choice[0] == len(context_ids):
            drafter = self._choice[1]  # planned this round: keep the choice the length policy was sized for
        else:
            drafter = self._choose(context_ids)[0]
        self._choice = None
        self._used = drafter
        if drafter is None:
            return Draft(token_ids=[], draft_probs=None, drafter="none")
        draft = drafter.propose(context_ids, max_tokens)
        draft.drafter = drafter.name
        return draft

    def realign(self, overshoot: str, context_len: int) -> None:
        """Token healing ended past the cursor: pass it on to the copying drafters that align on text."""
        for drafter in self.copiers:
            if isinstance(drafter, RealigningDrafter):
                drafter.realign(overshoot, context_len)

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        drafter, self._used = self._used, None
        if drafter is None:
            return
        drafter.observe(context_ids, num_accepted, num_drafted)
        if num_drafted > 0:
            rate = self.acceptance[drafter.name]
            self.acceptance[drafter.name] = rate + self.ema_weight * (num_accepted / num_drafted - rate)
