"""Draft-length control lives in the engine: the loaded model keeps what the learned policy learns, a seeded
request learns apart, and greedy output does not depend on the policy."""

from __future__ import annotations

from engine_core_support import decode, local_engine, prompt_ids, tiny_llama

from engine.api import CompletionRequest
from engine.drafters.length import FixedDraftPolicy


def test_the_loaded_model_learns_draft_lengths_across_requests() -> None:
    target = tiny_llama(seed=3)
    engine = local_engine(target, target)
    text = decode(prompt_ids(20, seed=5) * 3)  # repeats itself: the lookup drafter finds copies
    request = CompletionRequest(prompt=text, max_new_tokens=24, drafter="hybrid")
    learned = engine.complete(request)
    acceptance = engine.draft_acceptance
    rounds = sum(curve.rounds for curve in acceptance.pooled.values())
    assert rounds > 0
    again = engine.complete(request)
    assert sum(curve.rounds for curve in acceptance.pooled.values()) > rounds  # kept across requests
    before_seeded = sum(curve.rounds for curve in acceptance.pooled.values())
    seeded = engine.complete(CompletionRequest(prompt=text, max_new_tokens=24, drafter="hybrid", seed=1))
    assert sum(curve.rounds for curve in acceptance.pooled.values()) == before_seeded  # seeded: learns apart
    fixed = engine.complete(
        CompletionRequest(prompt=text, max_new_tokens=24, drafter="hybrid", draft_policy=FixedDraftPolicy(3))
    )
    assert learned.token_ids == again.token_ids == seeded.token_ids == fixed.token_ids  # lossless
    assert local_engine(target, target).draft_acceptance.pooled == {}  # a newly loaded model starts afresh
