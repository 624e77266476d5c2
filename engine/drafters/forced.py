"""Token healing, seen by the speculative loop as a drafter: a wrapper that drafts a forced prefix's own
spelling before handing over to the drafter it wraps.

The other half of healing is the logits constraint (`ForcedPrefix.constrain`), which the loop applies to
every verify: the target only ever accepts tokens that spell the forced text. While the text is being
spelled, this drafter proposes the tokenizer's spelling of what is left, at a length of its own (the
policy is neither asked nor told: the spelling is not a guess), and keeps those rounds from the wrapped
drafter. When the spelling ends past the cursor ("subprocess" for a typed "subp"), drafters that copy text
re-align on what follows it.
"""

from __future__ import annotations

from engine.drafters.base import Draft, Drafter, DraftPlan, RealigningDrafter
from engine.healing import ForcedPrefix

FORCED = "forced"  # the name its spelling rounds are counted under, apart from every drafter's


class ForcedPrefixDrafter:
    """A `Drafter` around any `Drafter`."""

    def __init__(self, inner: Drafter, forced: ForcedPrefix) -> None:
        self.inner = inner
        self.forced = forced
        self.name = inner.name
        self._spelling = False  # the round in flight drafts the forced text

    def plans(self, context_ids: list[int]) -> list[DraftPlan]:
        self._spelling = self.forced.active  # the loop plans every round, before it drafts
        if self._spelling:
            return [DraftPlan(FORCED, copy_found=True, length=len(self.forced.lead_ids()))]
        return self.inner.plans(context_ids)

    def propose(self, context_ids: list[int], max_tokens: int, plan: DraftPlan | None = None) -> Draft:
        if self._spelling:
            return Draft(self.forced.lead_ids()[:max_tokens], None, FORCED)
        return self.inner.propose(context_ids, max_tokens, plan)

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        spelling, self._spelling = self._spelling, False
        new_tokens = context_ids[len(context_ids) - num_accepted - 1 :]
        spelled = self.forced.advance(new_tokens)
        if not spelling:
            self.inner.observe(context_ids, num_accepted, num_drafted)
        elif not self.forced.active and isinstance(self.inner, RealigningDrafter):
            self.inner.realign(self.forced.overshoot, len(context_ids) - len(new_tokens) + spelled)
