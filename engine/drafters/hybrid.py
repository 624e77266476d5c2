"""Every drafter a round could use, offered together: copied drafts (stale completion, suffix, prompt lookup)
when they match, and the draft model. Which of them drafts, and how far, is the draft policy's one decision
(`engine.drafters.length`), priced by what each has held and what its round costs on this device."""

from __future__ import annotations

from engine.drafters.base import Draft, Drafter, DraftPlan, RealigningDrafter


class HybridDrafter:
    """Offers the plans of its members in order (stale, suffix, lookup, model) and drafts with the member
    whose plan the policy chose. `Draft.drafter` names the member used."""

    name = "hybrid"

    def __init__(
        self,
        *,
        model: Drafter | None = None,
        lookup: Drafter | None = None,
        suffix: Drafter | None = None,
        stale: Drafter | None = None,
    ) -> None:
        self.members = [d for d in (stale, suffix, lookup, model) if d is not None]
        self._used: Drafter | None = None

    def plans(self, context_ids: list[int]) -> list[DraftPlan]:
        return [plan for member in self.members for plan in member.plans(context_ids)]

    def propose(self, context_ids: list[int], max_tokens: int, plan: DraftPlan | None = None) -> Draft:
        if plan is None:
            offered = self.plans(context_ids)
            plan = offered[0] if offered else None
        member = next((d for d in self.members if plan is not None and d.name == plan.drafter), None)
        self._used = member
        if member is None:
            return Draft(token_ids=[], draft_probs=None, drafter="none")
        draft = member.propose(context_ids, max_tokens, plan)
        draft.drafter = member.name
        return draft

    def realign(self, overshoot: str, context_len: int) -> None:
        """Token healing ended past the cursor: pass it on to the copying drafters that align on text."""
        for member in self.members:
            if isinstance(member, RealigningDrafter):
                member.realign(overshoot, context_len)

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        member, self._used = self._used, None
        if member is not None:
            member.observe(context_ids, num_accepted, num_drafted)
