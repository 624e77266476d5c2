"""The engine's syntax-tuned draft lengths: what the policy learns per syntax context, and the lengths it picks."""

from __future__ import annotations

from dataclasses import replace

from engine.api import DraftContext
from engine.costs import StepCosts
from engine.drafters.length import FixedDraftPolicy, SyntaxAcceptance, SyntaxDraftPolicy
from lsp_server.context.syntax_context import syntax_classifier, syntax_context_of


def _ctx(text_before: str, drafter: str = "model", costs: StepCosts | None = None) -> DraftContext:
    return DraftContext(
        text_before=text_before,
        generated="",
        drafter=drafter,
        copy_found=drafter != "model",
        step_costs=costs,
    )


CPU_LIKE = StepCosts(widths=(1, 32), verify=(1.3, 4.0), draft_step=0.15)
GPU_LIKE = StepCosts(widths=(1, 32), verify=(1.0, 1.05), draft_step=0.02)


def test_priors_draft_longer_where_code_is_predictable() -> None:
    policy = SyntaxDraftPolicy(classify=syntax_context_of)
    after_newline = policy.max_draft_tokens(_ctx("def f(x):\n", costs=CPU_LIKE))
    new_statement = policy.max_draft_tokens(_ctx("def f(x):\n    ", costs=CPU_LIKE))
    after_operator = policy.max_draft_tokens(_ctx("y = x + ", costs=CPU_LIKE))
    assert after_newline > new_statement >= 1
    assert after_newline > after_operator >= 1
    # Copied text is free to draft, so it runs further than the model in the same place.
    assert policy.max_draft_tokens(_ctx("y = x + ", "lookup", CPU_LIKE)) > after_operator


def test_cheap_wide_verifies_make_drafts_longer() -> None:
    cpu = SyntaxDraftPolicy(classify=syntax_context_of).max_draft_tokens(_ctx("def f(x):\n", costs=CPU_LIKE))
    gpu = SyntaxDraftPolicy(classify=syntax_context_of).max_draft_tokens(_ctx("def f(x):\n", costs=GPU_LIKE))
    assert gpu > cpu


def test_policy_learns_per_context_from_observed_rounds() -> None:
    policy = SyntaxDraftPolicy(classify=syntax_context_of)
    statement = _ctx("def f(x):\n    ", costs=CPU_LIKE)
    newline = _ctx("def f(x):\n", costs=CPU_LIKE)
    before = policy.max_draft_tokens(statement)
    policy.observe("model", before, before)
    for _ in range(30):  # drafts at new statements keep holding completely
        k = policy.max_draft_tokens(statement)
        policy.observe("model", k, k)
    assert policy.max_draft_tokens(statement) > before
    policy.observe("none", 0, 0)
    failures = 0
    while failures < 10:  # drafts after a newline keep failing at once
        k = policy.max_draft_tokens(newline)
        if k:
            policy.observe("model", k, 0)
            failures += 1
    # Benched: no drafts there for a while, then its evidence has faded enough for a retry.
    skipped = 0
    while policy.max_draft_tokens(newline) == 0 and skipped < 200:
        skipped += 1
    assert 1 <= skipped < 200


def test_rare_contexts_start_from_what_the_drafter_does_everywhere() -> None:
    learned = SyntaxAcceptance()
    fresh = learned.continue_probs("model", "closing")
    for _ in range(50):  # the model's drafts hold everywhere else
        learned.record("model", "identifier", 8, 8)
    assert learned.continue_probs("model", "closing")[0] > fresh[0]
    # Syntax still matters before a context's own rounds arrive: decision points start lower.
    assert (
        learned.continue_probs("model", "statement-start")[0] < learned.continue_probs("model", "closing")[0]
    )
    copy = learned.continue_probs("lookup", "other")
    assert copy[0] < copy[8] < copy[31]  # copied text that held so far tends to keep holding


def test_stale_none_and_caps() -> None:
    policy = SyntaxDraftPolicy(classify=syntax_context_of, max_length=3)
    assert policy.max_draft_tokens(_ctx("x", "stale")) == policy.stale_length
    assert policy.max_draft_tokens(_ctx("x", "none")) == 0
    assert policy.max_draft_tokens(_ctx("def f(x):\n", "lookup", GPU_LIKE)) == 3
    assert FixedDraftPolicy(5).max_draft_tokens(_ctx("anything")) == 5


def test_one_acceptance_is_shared_by_the_policies_built_on_it() -> None:
    learned = SyntaxAcceptance()
    first = SyntaxDraftPolicy(classify=syntax_classifier({"abc"}), acceptance=learned)
    k = first.max_draft_tokens(_ctx("y = x + ", costs=CPU_LIKE))
    first.observe("model", k, 1)
    second = SyntaxDraftPolicy(classify=syntax_classifier(), acceptance=learned)
    assert second.acceptance.curves[("model", "after-operator")].rounds == 1
    assert second.acceptance.pooled["model"].rounds == 1


def test_without_a_classifier_every_round_is_one_context() -> None:
    policy = SyntaxDraftPolicy()
    for text in ("def f(x):\n", "y = foo(", "x = 1"):
        k = policy.max_draft_tokens(_ctx(text, costs=CPU_LIKE))
        policy.observe("model", k, 0)
    assert {context for _, context in policy.acceptance.curves} == {"other"}


def test_a_streak_and_a_long_anchor_are_learned_apart() -> None:
    policy = SyntaxDraftPolicy(classify=syntax_context_of)
    text = "x = foo(1)\n"
    k = policy.max_draft_tokens(replace(_ctx(text, "lookup", CPU_LIKE), match_len=2))
    policy.observe("lookup", k, k)  # held whole
    k = policy.max_draft_tokens(replace(_ctx(text, "lookup", CPU_LIKE), match_len=5))
    policy.observe("lookup", k, 0)
    assert set(policy.acceptance.curves) == {
        ("lookup", "indentation"),
        ("lookup", "indentation | streak | anchored"),
    }
    assert policy.acceptance.pooled["lookup"].rounds == 2
