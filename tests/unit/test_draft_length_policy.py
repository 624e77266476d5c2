"""The engine's learned draft lengths: what the policy learns per drafter and situation, and the lengths it
picks."""

from __future__ import annotations

from engine.api import DraftContext
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


CPU_LIKE = StepCosts(widths=(1, 32), verify=(1.3, 4.0), draft_step=0.15)
GPU_LIKE = StepCosts(widths=(1, 32), verify=(1.0, 1.05), draft_step=0.02)


def test_cheap_wide_verifies_make_drafts_longer() -> None:
    cpu = LearnedDraftPolicy().max_draft_tokens(_ctx(costs=CPU_LIKE))
    gpu = LearnedDraftPolicy().max_draft_tokens(_ctx(costs=GPU_LIKE))
    assert 1 <= cpu < gpu


def test_copied_text_is_drafted_further_than_the_model_drafts() -> None:
    policy = LearnedDraftPolicy()
    model = policy.max_draft_tokens(_ctx("model", CPU_LIKE))
    assert policy.max_draft_tokens(_ctx("lookup", CPU_LIKE)) > model >= 1  # copying costs no draft steps
    copy = DraftAcceptance().continue_probs("lookup", "")
    assert copy[0] < copy[8] < copy[31]  # copied text that held so far tends to keep holding


def test_policy_learns_from_observed_rounds_benches_a_failing_drafter_and_retries_it() -> None:
    policy = LearnedDraftPolicy()
    before = policy.max_draft_tokens(_ctx(costs=CPU_LIKE))
    policy.observe("model", before, before)
    for _ in range(30):  # the model's drafts keep holding completely
        k = policy.max_draft_tokens(_ctx(costs=CPU_LIKE))
        policy.observe("model", k, k)
    assert policy.max_draft_tokens(_ctx(costs=CPU_LIKE)) > before
    policy.observe("none", 0, 0)
    failures = 0
    while failures < 40:  # then they keep failing at once
        k = policy.max_draft_tokens(_ctx(costs=CPU_LIKE))
        if k:
            policy.observe("model", k, 0)
            failures += 1
        else:
            break
    assert policy.max_draft_tokens(_ctx(costs=CPU_LIKE)) == 0
    # Benched: no drafts for a while, then its evidence has faded enough for a retry.
    skipped = 0
    while policy.max_draft_tokens(_ctx(costs=CPU_LIKE)) == 0 and skipped < 500:
        skipped += 1
    assert 1 <= skipped < 500


def test_a_streak_and_a_long_anchor_are_learned_apart() -> None:
    policy = LearnedDraftPolicy()
    k = policy.max_draft_tokens(_ctx("lookup", CPU_LIKE, match_len=2))
    policy.observe("lookup", k, k)  # held whole
    k = policy.max_draft_tokens(_ctx("lookup", CPU_LIKE, match_len=5))
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


def test_stale_none_and_caps() -> None:
    policy = LearnedDraftPolicy(max_length=3)
    assert policy.max_draft_tokens(_ctx("stale")) == policy.stale_length
    assert policy.max_draft_tokens(_ctx("none")) == 0
    assert policy.max_draft_tokens(_ctx("lookup", GPU_LIKE)) == 3
    assert FixedDraftPolicy(5).max_draft_tokens(_ctx()) == 5


def test_one_acceptance_is_shared_by_the_policies_built_on_it() -> None:
    learned = DraftAcceptance()
    first = LearnedDraftPolicy(acceptance=learned)
    k = first.max_draft_tokens(_ctx(costs=CPU_LIKE))
    first.observe("model", k, 1)
    second = LearnedDraftPolicy(acceptance=learned)
    assert second.acceptance.curves[("model", "")].rounds == 1
    assert second.acceptance.pooled["model"].rounds == 1
