"""The hybrid drafter's per-round choice and acceptance tracking."""

from __future__ import annotations

from engine.drafters.base import Draft
from engine.drafters.hybrid import HybridDrafter
from engine.drafters.lookup import PromptLookupDrafter
from engine.drafters.plan import DraftPlan
from engine.drafters.stale import StaleCompletionDrafter
from engine.drafters.suffix import SuffixDrafter
from engine.sequences import common_prefix_length


class ScriptedModel:
    """Stands in for the draft model: always proposes the same tokens and records what it is told."""

    name = "model"

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens
        self.observed: list[tuple[int, int]] = []

    def plan(self, context_ids: list[int]) -> DraftPlan:
        return DraftPlan(self.name, copy_found=False)

    def propose(self, context_ids: list[int], max_tokens: int) -> Draft:
        return Draft(token_ids=self.tokens[:max_tokens], draft_probs=None, drafter=self.name)

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        self.observed.append((num_accepted, num_drafted))


PROMPT = [50, 51, 52, 53, 1, 2, 3, 60, 61, 62, 99]  # "1 2 3" repeats below; 99 ends the prompt


def test_order_is_stale_then_suffix_then_lookup_then_model() -> None:
    model = ScriptedModel([7, 7])
    lookup = PromptLookupDrafter()
    suffix = SuffixDrafter([1, 2, 3, 40, 41])
    stale = StaleCompletionDrafter([70, 71, 72])
    context = [*PROMPT, 1, 2]  # lookup (1 2 -> 3 ...) and suffix (1 2 -> 3 40 41) both match

    first_round = HybridDrafter(model=model, lookup=lookup, suffix=suffix, stale=stale)
    plan = first_round.plan(PROMPT)
    assert plan.drafter == "stale" and plan.copy_found
    assert first_round.propose(PROMPT, 8) == Draft([70, 71, 72], None, "stale")

    assert HybridDrafter(model=model, lookup=lookup, suffix=suffix).propose(context, 8).drafter == "suffix"
    assert HybridDrafter(model=model, lookup=lookup).propose(context, 3) == Draft([3, 60, 61], None, "lookup")
    nothing_copies = [*PROMPT, 77, 78]
    assert (
        HybridDrafter(model=model, lookup=lookup, suffix=suffix).propose(nothing_copies, 8).drafter == "model"
    )
    empty = HybridDrafter(lookup=lookup).propose(nothing_copies, 8)
    assert empty.token_ids == [] and empty.drafter == "none"


def test_propose_keeps_the_drafter_chosen_by_plan() -> None:
    model = ScriptedModel([7])
    drafter = HybridDrafter(model=model, lookup=PromptLookupDrafter())
    context = [*PROMPT, 1, 2]
    assert drafter.plan(context).drafter == "lookup"
    assert drafter.propose(context, 4).drafter == "lookup"


def test_only_the_drafter_used_is_told_the_outcome() -> None:
    model = ScriptedModel([7, 7])
    drafter = HybridDrafter(model=model, lookup=PromptLookupDrafter())
    context = [*PROMPT, 1, 2]
    drafter.propose(context, 4)
    drafter.observe([*context, 3, 0], 1, 4)
    assert model.observed == []
    drafter.propose([*PROMPT, 77, 78], 2)
    drafter.observe([*PROMPT, 77, 78, 7, 7, 5], 2, 2)
    assert model.observed == [(2, 2)]


def test_weak_lookup_that_keeps_failing_yields_to_the_model_then_is_forgiven() -> None:
    model = ScriptedModel([7])
    drafter = HybridDrafter(model=model, lookup=PromptLookupDrafter(), strong_match_len=4, min_acceptance=0.3)
    weak = [*PROMPT, 1, 2]  # anchored on 2 tokens only
    for _ in range(4):
        assert drafter.propose(weak, 4).drafter == "lookup"
        drafter.observe([*weak, 0], 0, 3)
    assert drafter.acceptance["lookup"] < 0.3
    assert drafter.propose(weak, 4).drafter == "model"
    drafter.observe([*weak, 0], 0, 1)
    # A strong match (4+ tokens of anchor) is still trusted despite the poor record.
    strong = [*PROMPT, 52, 53, 1, 2]
    assert drafter.plan(strong).match_len >= 4
    assert drafter.propose(strong, 4).drafter == "lookup"
    drafter.observe([*strong, 0], 0, 3)
    # Each skipped round restores a little trust; eventually the lookup is tried again.
    rounds = 0
    while drafter.propose(weak, 4).drafter == "model":
        drafter.observe([*weak, 0], 0, 1)
        rounds += 1
        assert rounds < 50
    assert rounds > 0


def test_without_a_model_any_copy_match_is_used() -> None:
    drafter = HybridDrafter(lookup=PromptLookupDrafter())
    weak = [*PROMPT, 1, 2]
    for _ in range(6):
        assert drafter.propose(weak, 4).drafter == "lookup"
        drafter.observe([*weak, 0], 0, 3)


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


def test_a_mostly_rejected_draft_model_is_benched_and_retried_later() -> None:
    model = ScriptedModel([7, 7, 7, 7])
    hybrid = HybridDrafter(model=model, model_min_acceptance=0.5, ema_weight=0.5, forgiveness=0.1)
    context = [*PROMPT, 77, 78]  # nothing to copy: only the model can draft
    rounds_until_benched = 0
    while hybrid.propose(context, 4).drafter == "model":
        hybrid.observe(context, 0, 4)  # every model draft rejected
        rounds_until_benched += 1
        assert rounds_until_benched < 5, "a draft model that is never accepted must be benched"
    assert rounds_until_benched >= 1
    assert hybrid.propose(context, 4) == Draft([], None, "none")  # a plain step: cheaper than a lost draft
    hybrid.observe(context, 0, 0)
    retried_after = next(n for n in range(1, 100) if hybrid.propose(context, 4).drafter == "model")
    assert retried_after > 1  # trust comes back slowly, so the model is tried again, not every round


def test_a_well_accepted_draft_model_is_never_benched() -> None:
    model = ScriptedModel([7, 7, 7, 7])
    hybrid = HybridDrafter(model=model, model_min_acceptance=0.5)
    context = [*PROMPT, 77, 78]
    for _ in range(20):
        assert hybrid.propose(context, 4).drafter == "model"
        hybrid.observe(context, 3, 4)
