"""The hybrid drafter: what it offers a round, and that it drafts with the member whose plan was chosen."""

from __future__ import annotations

from engine.drafters.base import Draft, DraftPlan
from engine.drafters.hybrid import HybridDrafter
from engine.drafters.lookup import PromptLookupDrafter
from engine.drafters.stale import StaleCompletionDrafter
from engine.drafters.suffix import SuffixDrafter
from engine.sequences import common_prefix_length


class ScriptedModel:
    """Stands in for the draft model: always proposes the same tokens and records what it is told."""

    name = "model"

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens
        self.observed: list[tuple[int, int]] = []

    def plans(self, context_ids: list[int]) -> list[DraftPlan]:
        return [DraftPlan(self.name, copy_found=False)]

    def propose(self, context_ids: list[int], max_tokens: int, plan: DraftPlan | None = None) -> Draft:
        return Draft(token_ids=self.tokens[:max_tokens], draft_probs=None, drafter=self.name)

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        self.observed.append((num_accepted, num_drafted))


PROMPT = [50, 51, 52, 53, 1, 2, 3, 60, 61, 62, 99]  # "1 2 3" repeats below; 99 ends the prompt


def _offered(drafter: HybridDrafter, context: list[int]) -> list[str]:
    return [plan.drafter for plan in drafter.plans(context)]


def test_it_offers_every_member_that_can_draft_in_order_stale_suffix_lookup_model() -> None:
    model = ScriptedModel([7, 7])
    lookup = PromptLookupDrafter()
    suffix = SuffixDrafter([1, 2, 3, 40, 41])
    stale = StaleCompletionDrafter([70, 71, 72])
    context = [*PROMPT, 1, 2]  # lookup (1 2 -> 3 ...) and suffix (1 2 -> 3 40 41) both match

    everyone = HybridDrafter(model=model, lookup=lookup, suffix=suffix, stale=stale)
    assert _offered(everyone, PROMPT) == ["stale", "model"]  # nothing in the prompt's tail repeats yet
    assert everyone.propose(PROMPT, 8) == Draft([70, 71, 72], None, "stale")  # no plan: the first offer
    assert _offered(HybridDrafter(model=model, lookup=lookup, suffix=suffix), context) == [
        "suffix",
        "lookup",
        "model",
    ]
    assert _offered(HybridDrafter(model=model, lookup=lookup), [*PROMPT, 77, 78]) == ["model"]
    assert _offered(HybridDrafter(lookup=lookup), [*PROMPT, 77, 78]) == []
    empty = HybridDrafter(lookup=lookup).propose([*PROMPT, 77, 78], 8)
    assert empty.token_ids == [] and empty.drafter == "none"


def test_it_drafts_with_the_member_whose_plan_was_chosen() -> None:
    model = ScriptedModel([7, 7, 7])
    drafter = HybridDrafter(model=model, lookup=PromptLookupDrafter())
    context = [*PROMPT, 1, 2]
    lookup_plan, model_plan = drafter.plans(context)
    assert drafter.propose(context, 3, lookup_plan) == Draft([3, 60, 61], None, "lookup")
    assert drafter.propose(context, 2, model_plan) == Draft([7, 7], None, "model")


def test_only_the_member_used_is_told_the_outcome() -> None:
    model = ScriptedModel([7, 7])
    drafter = HybridDrafter(model=model, lookup=PromptLookupDrafter())
    context = [*PROMPT, 1, 2]
    drafter.propose(context, 4, drafter.plans(context)[0])  # the lookup
    drafter.observe([*context, 3, 0], 1, 4)
    assert model.observed == []
    drafter.propose([*PROMPT, 77, 78], 2, DraftPlan("model", copy_found=False))
    drafter.observe([*PROMPT, 77, 78, 7, 7, 5], 2, 2)
    assert model.observed == [(2, 2)]


def test_common_prefix_length() -> None:
    assert common_prefix_length([1, 2, 3], [1, 2, 3]) == 3
    assert common_prefix_length([1, 2, 3], [1, 2]) == 2
    assert common_prefix_length([1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 9, 5, 6, 7]) == 3
    assert common_prefix_length([4], [1]) == 0
    assert common_prefix_length([], [1]) == 0
    for cut in range(40):
        a = list(range(40))
        b = a[:cut] + [-1] + a[cut + 1 :]
        assert common_prefix_length(a, b) == cut
