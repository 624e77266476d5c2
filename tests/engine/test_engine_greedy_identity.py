"""Greedy speculative output == autoregressive baseline == transformers generate(do_sample=False)."""

from __future__ import annotations

import pytest
import torch
from engine_core_support import (
    FixedLength,
    ScriptedDrafter,
    decode,
    hf_greedy,
    local_engine,
    prompt_ids,
    tiny_gpt2,
    tiny_llama,
    vocab,
)

from engine.api import CompletionRequest
from engine.autoregressive import autoregressive_generate
from engine.drafters.length import FixedDraftPolicy
from engine.generation import DecodeSettings
from engine.hf_decoder import make_decoder
from engine.speculative import speculative_generate

NEW_TOKENS = 24
ARCHITECTURES = {"llama": tiny_llama, "gpt2": tiny_gpt2}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("prompt_len", [1, 9, 40])
def test_baseline_and_scripted_speculation_match_transformers(arch: str, prompt_len: int) -> None:
    model = ARCHITECTURES[arch](seed=prompt_len)
    prompt = prompt_ids(prompt_len, seed=prompt_len)
    expected = hf_greedy(model, prompt, NEW_TOKENS)
    settings = DecodeSettings(max_new_tokens=NEW_TOKENS)
    decoder = make_decoder(model)
    baseline = autoregressive_generate(decoder, prompt, settings, decode=decode)
    assert baseline.token_ids == expected
    assert baseline.stats.target_forwards == NEW_TOKENS
    for k in (1, 3, 8):
        # The scripted drafter corrupts a different position each round, so every accept length occurs.
        drafter = ScriptedDrafter(prompt, expected, corrupt_every=3)
        result = speculative_generate(decoder, drafter, prompt, settings, FixedLength(k), decode=decode)
        assert result.token_ids == expected, f"k={k}"
        assert result.text == baseline.text
        assert result.stats.target_forwards < NEW_TOKENS
        assert result.stats.accepted == sum(n for n, _ in drafter.observed)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("drafter", ["model", "lookup", "suffix", "stale", "hybrid"])
def test_every_real_drafter_keeps_greedy_output(arch: str, drafter: str) -> None:
    target = ARCHITECTURES[arch](seed=11)
    prompt_text = decode(prompt_ids(30, seed=4))
    for draft in (target, ARCHITECTURES[arch](seed=12)):  # a perfect draft model and a poor one
        engine = local_engine(target, draft)
        ids = engine.encode(prompt_text)
        want = hf_greedy(target, ids, NEW_TOKENS, stop_at=engine.eos_ids)
        # Hints that hold the true continuation, so the copying drafters get accepted as well as rejected:
        # another file with the prompt's tail and its continuation, a suffix starting mid-way through it,
        # and an earlier completion with one wrong token in it.
        request = CompletionRequest(
            prompt=prompt_text,
            max_new_tokens=NEW_TOKENS,
            drafter=drafter,
            lookup_context=(decode(ids[-6:] + want[:16]),),
            suffix=decode(want[8:]),
            previous_completion=decode(want[:12] + [(want[12] + 1) % vocab()] + want[13:]),
            draft_policy=FixedDraftPolicy(8),  # drafts every round, even where the costs say it cannot pay
        )
        result = engine.complete(request)
        assert result.token_ids == want, f"draft is target: {draft is target}"
        assert result.finish_reason == ("length" if len(want) == NEW_TOKENS else "eos")
        stats = result.stats
        assert stats.drafted > 0
        if drafter != "model" or draft is target:
            assert stats.accepted > 0, stats.per_drafter
        assert stats.target_forwards == sum(stats.accepted_histogram)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_cache_reuse_across_calls_matches_fresh_engine(arch: str) -> None:
    target = ARCHITECTURES[arch](seed=21)
    draft = ARCHITECTURES[arch](seed=22)
    warm = local_engine(target, draft)
    base = decode(prompt_ids(40, seed=9))
    prompts = [base, base + "x = 1", base + "x = 12", base[:30] + "def"]  # typing, then an edit earlier on
    for index, prompt in enumerate(prompts):
        request = CompletionRequest(prompt=prompt, max_new_tokens=16, drafter="hybrid")
        result = warm.complete(request)
        fresh = local_engine(target, draft).complete(request)
        assert result.token_ids == fresh.token_ids
        assert result.token_ids == hf_greedy(target, warm.encode(prompt), 16, stop_at=warm.eos_ids)
        if index in (1, 2):
            assert result.stats.reused_prompt_tokens > 0
