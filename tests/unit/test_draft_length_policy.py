"""The engine's one draft decider: what it learns per drafter and situation, which offer it picks each
round, and how far it drafts."""

from __future__ import annotations

from engine.api import NO_DRAFT, DraftChoice, DraftContext
from engine.costs import StepCosts
from engine.drafters.length import DraftAcceptance, FixedDraftPolicy, LearnedDraftPolicy


def _ctx(drafter: str = "model", costs: StepCosts | None = None, match_len: int = 0) -> DraftContext:
    return DraftContext(
        text_before="x = foo(",
        generated="",
        drafter=drafter,
        copy_found=drafter != "model",
        step_costs=costs,
        match_len=match_len,
    )


def _length(policy: LearnedDraftPolicy, ctx: DraftContext) -> int:
    """The length the policy picks when `ctx` is the only offer."""
    return policy.choose([ctx]).length


CPU_LIKE = StepCosts(widths=(1, 32), verify=(1.3, 4.0), draft_step=0.15)
GPU_LIKE = StepCosts(widths=(1, 32), verify=(1.0, 1.05), draft_step=0.02)


def test_cheap_wide_verifies_make_drafts_longer() -> None:
    cpu = _length(LearnedDraftPolicy(), _ctx(costs=CPU_LIKE))
    gpu = _length(LearnedDraftPolicy(), _ctx(costs=GPU_LIKE))
    assert 1 <= cpu < gpu


def test_copied_text_is_drafted_further_than_the_model_drafts() -> None:
    policy = LearnedDraftPolicy()
    model = _length(policy, _ctx("model", CPU_LIKE))
    assert _length(policy, _ctx("lookup", CPU_LIKE)) > model >= 1  # copying costs no draft steps
    copy = DraftAcceptance().continue_probs("lookup", "")
    assert copy[0] < copy[8] < copy[31]  # copied text that held so far tends to keep holding


def test_policy_learns_from_observed_rounds_benches_a_failing_drafter_and_retries_it() -> None:
    policy = LearnedDraftPolicy()
    before = _length(policy, _ctx(costs=CPU_LIKE))
    policy.observe("model", before, before)
    for _ in range(30):  # the model's drafts keep holding completely
        k = _length(policy, _ctx(costs=CPU_LIKE))
        policy.observe("model", k, k)
    assert _length(policy, _ctx(costs=CPU_LIKE)) > before
    policy.observe("none", 0, 0)
    failures = 0
    while failures < 40:  # then they keep failing at once
        k = _length(policy, _ctx(costs=CPU_LIKE))
        if k:
            policy.observe("model", k, 0)
            failures += 1
        else:
            break
    assert _length(policy, _ctx(costs=CPU_LIKE)) == 0
    # Benched: no drafts for a while, then its evidence has faded enough for a retry.
    skipped = 0
    while _length(policy, _ctx(costs=CPU_LIKE)) == 0 and skipped < 500:
        skipped += 1
    assert 1 <= skipped < 500


def test_a_copy_that_keeps_failing_yields_to_the_model_and_is_tried_again_later() -> None:
    policy = LearnedDraftPolicy()
    offers = [_ctx("lookup", CPU_LIKE, match_len=2), _ctx("model", CPU_LIKE)]
    assert policy.choose(offers).option == 0  # at equal priors a copy wins: it costs no draft steps
    for _ in range(40):
        choice = policy.choose(offers)
        if choice.option != 0:
            break
        policy.observe("lookup", choice.length, 0)  # every copied draft rejected at once
    # Where the lookup is no longer worth drafting, the model is asked (not a plain step).
    choice = policy.choose(offers)
    assert choice.option == 1 and choice.length >= 1
    rounds = 0
    while policy.choose(offers).option == 1:  # the model's drafts hold...
        policy.observe("model", 1, 1)
        rounds += 1
        assert rounds < 2000
    assert rounds > 10  # ...and the lookup's poor record fades slowly until it is tried again


def test_without_another_offer_a_failing_copy_yields_to_plain_steps() -> None:
    policy = LearnedDraftPolicy()
    lookup = _ctx("lookup", CPU_LIKE, match_len=2)
    for _ in range(40):
        choice = policy.choose([lookup])
        if choice.length == 0:
            break
        policy.observe("lookup", choice.length, 0)
    assert policy.choose([lookup]) == NO_DRAFT


def test_a_streak_and_a_long_anchor_are_learned_apart() -> None:
    policy = LearnedDraftPolicy()
    k = _length(policy, _ctx("lookup", CPU_LIKE, match_len=2))
    policy.observe("lookup", k, k)  # held whole
    k = _length(policy, _ctx("lookup", CPU_LIKE, match_len=5))
    policy.observe("lookup", k, 0)
    assert set(policy.acceptance.curves) == {("lookup", ""), ("lookup", "streak anchored")}
    assert policy.acceptance.pooled["lookup"].rounds == 2
    assert policy.situation(_ctx("lookup", match_len=5)) == "anchored"  # the streak ended with that round


def test_a_rare_situation_starts_from_what_the_drafter_does_everywhere() -> None:
    learned = DraftAcceptance()
    fresh = learned.continue_probs("model", "streak")
    for _ in range(50):  # the model's drafts hold everywhere else
        learned.record("model", "", 8, 8)
    assert learned.continue_probs("model", "streak")[0] > fresh[0]
    for _ in range(50):  # and fail right after a draft that held whole
        learned.record("model", "streak", 8, 0)
    assert learned.continue_probs("model", "streak")[0] < learned.continue_probs("model", "")[0]


def test_stale_first_and_whole_nothing_offered_and_caps() -> None:
    policy = LearnedDraftPolicy(max_length=3)
    stale = policy.choose([_ctx("stale"), _ctx("model")])
    assert stale == DraftChoice(0, policy.stale_length)
    assert policy.choose([]) == NO_DRAFT
    assert _length(policy, _ctx("lookup", GPU_LIKE)) == 3
    assert FixedDraftPolicy(5).choose([_ctx("lookup"), _ctx()]) == DraftChoice(0, 5)
    assert FixedDraftPolicy(5).choose([]).length == 0


def test_one_acceptance_is_shared_by_the_policies_built_on_it() -> None:
    learned = DraftAcceptance()
    first = LearnedDraftPolicy(acceptance=learned)
    k = _length(first, _ctx(costs=CPU_LIKE))
    first.observe("model", k, 1)
    second = LearnedDraftPolicy(acceptance=learned)
    assert second.acceptance.curves[("model", "")].rounds == 1
    assert second.acceptance.pooled["model"].rounds == 1


def test_a_draft_model_that_must_first_read_a_long_prompt_drafts_only_when_it_can_pay_that_off() -> None:
    def model(catch_up: int, tokens_left: int) -> DraftContext:
        return DraftContext(
            "x = foo(", "", "model", False, CPU_LIKE, catch_up=catch_up, tokens_left=tokens_left
        )

    policy = LearnedDraftPolicy()
    assert policy.choose([model(0, 48)]).length >= 1  # warm: drafts
    assert policy.choose([model(2000, 48)]) == NO_DRAFT  # cold, short completion: reading costs too much
    assert policy.choose([model(2000, 100_000)]).length >= 1  # cold, long completion: it pays off
