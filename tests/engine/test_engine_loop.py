"""Stop rules, streaming, cancellation, sampling and bad input, through the loops and LocalEngine."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
import torch
from engine_core_support import (
    WINDOW,
    FixedLength,
    ScriptedDrafter,
    decode,
    hf_greedy,
    local_engine,
    prompt_ids,
    tiny_gpt2,
    tiny_llama,
)

from engine.api import CancelToken, CompletionRequest, DraftChoice, DraftContext
from engine.autoregressive import autoregressive_generate
from engine.costs import StepCosts
from engine.drafters.length import FixedDraftPolicy
from engine.generation import DecodeSettings
from engine.hf_decoder import make_decoder
from engine.speculative import speculative_generate


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def llama() -> torch.nn.Module:
    return tiny_llama(seed=31)


@pytest.fixture(scope="module")
def prompt_text() -> str:
    return decode(prompt_ids(25, seed=6))


def test_stop_string_cuts_text_and_streams_only_prefixes(llama, prompt_text) -> None:
    engine = local_engine(llama, llama)
    full = engine.complete(CompletionRequest(prompt=prompt_text, max_new_tokens=40, drafter="model"))
    stop = full.text[15:18]
    assert len(stop) == 3
    streamed: list[str] = []
    result = engine.complete(
        CompletionRequest(prompt=prompt_text, max_new_tokens=40, drafter="model", stop_strings=(stop,)),
        on_text=streamed.append,
    )
    assert result.finish_reason == "stop"
    assert result.text == full.text[: full.text.find(stop)]
    assert streamed and all(result.text.startswith(text) for text in streamed)
    assert all(len(a) < len(b) for a, b in zip(streamed, streamed[1:], strict=False))
    assert decode(result.token_ids).startswith(result.text)


def test_stop_check_callback_and_eos(llama, prompt_text) -> None:
    engine = local_engine(llama, llama)
    full = engine.complete(CompletionRequest(prompt=prompt_text, max_new_tokens=30, drafter="model"))
    cut = engine.complete(
        CompletionRequest(
            prompt=prompt_text,
            max_new_tokens=30,
            drafter="model",
            stop_check=lambda text: 10 if len(text) > 10 else None,
        )
    )
    assert (cut.finish_reason, cut.text) == ("stop", full.text[:10])
    # Treat the 6th generated token as end-of-text: generation ends just before it.
    eos = full.token_ids[5]
    settings = DecodeSettings(max_new_tokens=30, eos_ids=frozenset({eos}))
    prompt = engine.encode(prompt_text)
    for result in (
        autoregressive_generate(make_decoder(llama), prompt, settings, decode=decode),
        speculative_generate(
            make_decoder(llama),
            ScriptedDrafter(prompt, full.token_ids),
            prompt,
            settings,
            FixedLength(4),
            decode=decode,
        ),
    ):
        assert result.finish_reason == "eos"
        assert result.token_ids == full.token_ids[: full.token_ids.index(eos)]


def test_a_rule_that_cuts_before_its_trigger_cuts_at_the_same_token_in_both_loops(llama, prompt_text) -> None:
    """The degeneration guard fires on a repeat and cuts before it. A round that accepts eight tokens at once
    must stop where the token-by-token loop stops, so the stop rules see the text after every token."""
    prompt = local_engine(llama, llama).encode(prompt_text)
    full = autoregressive_generate(
        make_decoder(llama), prompt, DecodeSettings(max_new_tokens=30), decode=decode
    )
    assert len(full.text) > 50

    def cut_behind(text: str) -> int | None:  # fires once 40 characters exist, cuts 5 characters back
        return len(text) - 5 if len(text) >= 40 else None

    settings = DecodeSettings(max_new_tokens=30, stop_check=cut_behind)
    plain = autoregressive_generate(make_decoder(llama), prompt, settings, decode=decode)
    drafter = ScriptedDrafter(
        prompt, full.token_ids, corrupt_every=0
    )  # every draft is right: 9 tokens a round
    fast = speculative_generate(make_decoder(llama), drafter, prompt, settings, FixedLength(8), decode=decode)
    assert fast.stats.target_forwards < plain.stats.target_forwards  # rounds of several tokens
    assert (fast.text, fast.token_ids, fast.finish_reason) == (plain.text, plain.token_ids, "stop")
    assert plain.text == full.text[: len(plain.text)] and len(plain.text) < 40


class CancelAfterRounds:
    """A draft-length policy that fires the cancel token when round `rounds + 1` starts drafting."""

    def __init__(self, token: CancelToken, rounds: int, k: int = 3) -> None:
        self.token, self.rounds, self.k, self.calls = token, rounds, k, 0

    def choose(self, options: Sequence[DraftContext]) -> DraftChoice:
        self.calls += 1
        if self.calls > self.rounds:
            self.token.cancel()
        return DraftChoice(0, self.k)


@pytest.mark.parametrize("build", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_cancel_returns_within_the_round_and_next_call_is_unaffected(build) -> None:
    target = build(seed=41)
    engine = local_engine(target, target)
    text = decode(prompt_ids(30, seed=8))
    expected = hf_greedy(target, engine.encode(text), 32, stop_at=engine.eos_ids)
    for drafter in ("model", "hybrid"):
        token = CancelToken()
        policy = CancelAfterRounds(token, rounds=2)
        request = CompletionRequest(prompt=text, max_new_tokens=32, drafter=drafter, draft_policy=policy)
        result = engine.complete(request, cancel=token)
        assert result.finish_reason == "cancelled"
        assert result.stats.target_forwards == 2  # cancelled while drafting round 3: no verify ran
        assert len(result.token_ids) >= 2 and expected[: len(result.token_ids)] == result.token_ids
        again = engine.complete(CompletionRequest(prompt=text, max_new_tokens=32, drafter=drafter))
        assert again.token_ids == expected


class CancelAtCheck(CancelToken):
    """Fires the `n`-th time the engine looks at it: a cancel that lands inside the prefill."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n

    @property
    def cancelled(self) -> bool:
        self.left -= 1
        if self.left < 0:
            self.cancel()
        return super().cancelled


@pytest.mark.parametrize("build", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
@pytest.mark.parametrize("drafter", ["none", "hybrid"])
def test_a_cancel_during_the_prefill_keeps_its_work_and_the_output_stays_the_same(
    build, drafter, monkeypatch
) -> None:
    import engine.generation
    import engine.lean

    monkeypatch.setattr(engine.lean, "INTERRUPTIBLE_CHUNK", 8)
    monkeypatch.setattr(engine.generation, "PREFILL_PIECE", 8)
    target = build(seed=41)
    engine = local_engine(target, target)
    text = decode(prompt_ids(60, seed=8))
    expected = hf_greedy(target, engine.encode(text), 16, stop_at=engine.eos_ids)
    request = CompletionRequest(prompt=text, max_new_tokens=16, drafter=drafter)
    engine.target.crop(0)
    cancelled = engine.complete(request, cancel=CancelAtCheck(5))
    assert cancelled.finish_reason == "cancelled" and cancelled.token_ids == []
    kept = len(engine.target.cached_tokens)
    assert kept > 0  # the prefill's finished part stayed in the cache
    warmed = engine.warm(request)  # and a warm-up (or the next request) goes on from it
    assert warmed.cached_tokens == warmed.prompt_tokens  # all but the last token, which a request feeds
    again = engine.complete(request)
    assert again.stats.reused_prompt_tokens == warmed.prompt_tokens - 1
    assert again.token_ids == expected


def test_cancel_from_on_text_between_draft_model_steps(llama, prompt_text) -> None:
    engine = local_engine(llama, llama)
    expected = hf_greedy(llama, engine.encode(prompt_text), 32, stop_at=engine.eos_ids)
    token = CancelToken()
    seen: list[str] = []

    def on_text(text: str) -> None:
        seen.append(text)
        token.cancel()

    result = engine.complete(
        CompletionRequest(
            prompt=prompt_text, max_new_tokens=32, drafter="model", draft_policy=FixedDraftPolicy(4)
        ),
        on_text=on_text,
        cancel=token,
    )
    assert result.finish_reason == "cancelled"
    assert result.stats.target_forwards == len(seen) == 1
    assert result.token_ids == expected[: len(result.token_ids)]
    assert engine.complete(CompletionRequest(prompt=prompt_text, max_new_tokens=32)).token_ids == expected
    # A token cancelled before the call starts yields an empty, cancelled result without touching caches.
    early = engine.complete(CompletionRequest(prompt=prompt_text, max_new_tokens=32), cancel=token)
    assert (early.finish_reason, early.token_ids, early.stats.target_forwards) == ("cancelled", [], 0)


@pytest.mark.parametrize("drafter", ["model", "hybrid", "none"])
def test_sampled_path_is_seeded_and_stays_in_the_nucleus(llama, prompt_text, drafter) -> None:
    draft = tiny_llama(seed=32)

    def sample(seed: int) -> list[int]:
        # A fresh engine each time: caches carried across calls may change which drafts are tried, and so
        # the random stream, though never the output distribution.
        engine = local_engine(llama, draft)
        request = CompletionRequest(
            prompt=prompt_text,
            max_new_tokens=24,
            temperature=0.9,
            top_k=20,
            top_p=0.9,
            seed=seed,
            drafter=drafter,
        )
        result = engine.complete(request)
        # The random stream depends on which drafts were tried, so a seed may sample EOS early.
        assert result.finish_reason in ("length", "eos")
        expected_length = range(24, 25) if result.finish_reason == "length" else range(1, 25)
        assert len(result.token_ids) in expected_length
        return result.token_ids

    first = sample(1)
    assert sample(1) == first
    assert sample(2) != first
    # Every sampled token is among the target's top 20 at its position (top_k is honoured end to end).
    ids = local_engine(llama, draft).encode(prompt_text) + first
    with torch.inference_mode():
        logits = llama(torch.tensor([ids])).logits[0, -len(first) - 1 : -1]
    top20 = logits.topk(20).indices
    assert all(token in row.tolist() for token, row in zip(first, top20, strict=True))


def test_bad_input_gets_clear_errors(llama) -> None:
    engine = local_engine(llama, llama)
    with pytest.raises(ValueError, match="empty"):
        engine.complete(CompletionRequest(prompt=""))
    with pytest.raises(ValueError, match="context window"):
        engine.complete(CompletionRequest(prompt="x = 1", max_new_tokens=WINDOW))
    with pytest.raises(ValueError, match="unknown drafter"):
        engine.complete(CompletionRequest(prompt="x = 1", drafter="oracle"))


@pytest.mark.parametrize("drafter", ["none", "hybrid"])
def test_long_prompt_is_truncated_from_the_left(llama, drafter) -> None:
    engine = local_engine(llama, llama)
    ids = prompt_ids(WINDOW + 50, seed=12)
    result = engine.complete(CompletionRequest(prompt=decode(ids), max_new_tokens=16, drafter=drafter))
    encoded = engine.encode(decode(ids))
    kept = encoded[-(WINDOW - 16) :]
    assert result.stats.truncated_prompt_tokens == len(encoded) - len(kept)
    assert result.stats.prompt_tokens == WINDOW - 16
    assert result.token_ids == hf_greedy(llama, kept, 16, stop_at=engine.eos_ids)


def test_the_engine_remembers_a_poorly_accepted_draft_model_across_calls(llama) -> None:
    engine = local_engine(llama, tiny_llama(seed=77))  # an unrelated draft: mostly rejected
    # Priced as on a GPU (a draft step nearly free, wide verifies flat), so the model is worth trying at first.
    engine.step_costs = StepCosts(widths=(1, 32), verify=(1.0, 1.05), draft_step=0.02)
    rounds = []
    for seed in (40, 41, 42):
        request = CompletionRequest(
            prompt=decode(prompt_ids(20, seed=seed)), max_new_tokens=24, drafter="hybrid"
        )
        result = engine.complete(request)
        assert (
            result.token_ids == engine.complete(replace(request, drafter="none")).token_ids
        )  # still lossless
        model_stats = result.stats.per_drafter.get("model", {"rounds": 0, "accepted": 0, "drafted": 0})
        rounds.append(model_stats["rounds"])
    first_token_holds = engine.draft_acceptance.continue_probs("model", "")[0]
    assert first_token_holds < 0.5
    assert rounds[0] > 0 and rounds[2] < rounds[0]  # later calls start with the model already benched


def test_a_cancel_between_layers_stops_a_forward_and_leaves_the_cache_as_it_was() -> None:
    from engine.decoder import forward_or_cancel
    from engine.lean import LeanLlamaDecoder

    model = tiny_llama(seed=41, layers=4)
    lean, fresh = LeanLlamaDecoder(model, WINDOW), LeanLlamaDecoder(model, WINDOW)
    ids = prompt_ids(20, seed=3)
    lean.prefill(ids[:-1])
    checks: list[int] = []

    def third_check_stops() -> bool:
        checks.append(1)
        return len(checks) >= 3

    assert lean.forward_unless([ids[-1], 5, 6], third_check_stops) is None
    assert len(checks) == 3  # stopped before its third of four layers
    assert lean.cached_tokens == ids[:-1]
    # The keys and values the stopped forward wrote lie past the cache and are overwritten.
    fresh.prefill(ids[:-1])
    assert torch.equal(lean.forward([ids[-1], 5, 6]), fresh.forward([ids[-1], 5, 6]))
    token = CancelToken()
    token.cancel()
    assert forward_or_cancel(lean, [7], token) is None and len(lean.cached_tokens) == len(ids) + 2


@pytest.mark.parametrize("drafter", ["none", "hybrid"])
def test_a_cancel_inside_a_target_forward_ends_the_call_and_the_next_one_is_unaffected(drafter) -> None:
    target = tiny_llama(seed=41)
    engine = local_engine(target, target)
    text = decode(prompt_ids(30, seed=8))
    prompt = engine.encode(text)
    expected = hf_greedy(target, prompt, 16, stop_at=engine.eos_ids)
    request = CompletionRequest(prompt=text, max_new_tokens=16, drafter=drafter)
    engine.warm(request)  # the prompt is read: from here every look at the token is a forward's
    result = engine.complete(request, cancel=CancelAtCheck(7))
    assert result.finish_reason == "cancelled"
    assert 0 < len(result.token_ids) < 16 and expected[: len(result.token_ids)] == result.token_ids
    # The forward that saw the cancel cached nothing: the cache still holds the context but its last token.
    cached = engine.target.cached_tokens
    assert cached == (prompt + result.token_ids)[: len(cached)]
    assert len(cached) <= len(prompt) + len(result.token_ids) - 1
    again = engine.complete(request)
    assert again.token_ids == expected


def test_a_prompt_read_aside_keeps_the_served_one_and_takes_over_when_asked_for(llama) -> None:
    engine = local_engine(llama, llama)
    assert engine.info().reads_prompts_aside  # the lean decoder can make a second cache
    small_text, large_text = decode(prompt_ids(12, seed=8)), decode(prompt_ids(40, seed=9))
    small = CompletionRequest(prompt=small_text, max_new_tokens=12, drafter="lookup")
    large = CompletionRequest(prompt=large_text, max_new_tokens=12, drafter="lookup")
    expected_small = hf_greedy(llama, engine.encode(small_text), 12, stop_at=engine.eos_ids)
    expected_large = hf_greedy(llama, engine.encode(large_text), 12, stop_at=engine.eos_ids)
    assert engine.complete(small).token_ids == expected_small
    served = engine.target.cached_tokens

    token = CancelToken()
    token.cancel()
    assert engine.warm_aside(large, cancel=token).cached_tokens == 0  # pre-empted before it read anything
    read = engine.warm_aside(large)
    assert read.cached_tokens == read.prompt_tokens
    assert engine.target.cached_tokens == served  # the served prompt's cache was left as it was
    assert engine.prompt_tokens_cached(large_text) == (read.prompt_tokens - 1, read.prompt_tokens)
    assert engine.prompt_tokens_cached(small_text)[0] >= len(engine.encode(small_text)) - 1

    again = engine.complete(small)  # still served from the first cache
    assert again.token_ids == expected_small and again.stats.reused_prompt_tokens > 0
    grown = engine.complete(large)  # the second cache holds this prompt: it serves it, nothing re-read
    assert grown.token_ids == expected_large
    assert grown.stats.reused_prompt_tokens == read.prompt_tokens - 1
    # The roles swapped: the small prompt now lives in the second cache and is served from there, which
    # leaves the large one where a warm-up aside finds it whole.
    assert engine.complete(small).stats.reused_prompt_tokens > 0
    assert engine.warm_aside(large).cached_tokens == read.prompt_tokens


def test_a_prompt_that_goes_on_from_the_served_one_extends_it_instead_of_being_read_aside(llama) -> None:
    engine = local_engine(llama, llama)
    text = decode(prompt_ids(30, seed=8))
    longer = text + decode(prompt_ids(6, seed=10))
    engine.warm(CompletionRequest(prompt=text, max_new_tokens=12))
    served = engine.target.cached_tokens
    read = engine.warm_aside(CompletionRequest(prompt=longer, max_new_tokens=12))
    assert read.cached_tokens == read.prompt_tokens
    assert engine.target.cached_tokens[: len(served)] == served  # the served cache went on from its prompt
    assert engine._aside is None  # and no second cache was made for it
    request = CompletionRequest(prompt=longer, max_new_tokens=12, drafter="lookup")
    expected = hf_greedy(llama, engine.encode(longer), 12, stop_at=engine.eos_ids)
    result = engine.complete(request)
    assert result.token_ids == expected and result.stats.reused_prompt_tokens == read.prompt_tokens - 1
