"""Draft-length control lives in the engine: a request brings a syntax classifier, the loaded model keeps
what the syntax policy learns, and greedy output does not depend on the policy."""

from __future__ import annotations

from engine_core_support import decode, local_engine, prompt_ids, tiny_llama

from engine.api import CompletionRequest
from engine.drafters.length import FixedDraftPolicy


def test_the_loaded_model_learns_draft_lengths_per_syntax_context() -> None:
    target = tiny_llama(seed=3)
    engine = local_engine(target, target)
    text = decode(prompt_ids(20, seed=5) * 3)  # repeats itself: the lookup drafter finds copies
    seen: list[str] = []

    def classify(text_before: str) -> str:
        seen.append(text_before)
        return "closing" if text_before.endswith(")") else "other"

    request = CompletionRequest(prompt=text, max_new_tokens=24, drafter="hybrid", syntax_context=classify)
    learned = engine.complete(request)
    assert seen, "the classifier named the context of every sized round"
    acceptance = engine.draft_acceptance
    assert {context.split(" | ")[0] for _, context in acceptance.curves} <= {"closing", "other"}
    rounds = sum(curve.rounds for curve in acceptance.pooled.values())
    assert rounds > 0
    again = engine.complete(request)
    assert sum(curve.rounds for curve in acceptance.pooled.values()) > rounds  # kept across requests
    fixed = engine.complete(
        CompletionRequest(prompt=text, max_new_tokens=24, drafter="hybrid", draft_policy=FixedDraftPolicy(3))
    )
    assert learned.token_ids == again.token_ids == fixed.token_ids  # lossless whatever the lengths
    assert local_engine(target, target).draft_acceptance.pooled == {}  # a newly loaded model starts afresh
