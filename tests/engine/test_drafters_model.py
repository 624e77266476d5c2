"""The draft-model drafter on a tiny random Llama: greedy and sampled drafts, confidence stopping, and a
cache that stays consistent through rejections, compared against a decoder that recomputes everything."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedModel

from engine.decoder import CausalDecoder
from engine.drafters.model import ModelDrafter
from engine.hf_decoder import make_decoder
from engine.verify import warp_logits

VOCAB = 64


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.3,  # wide logits: no near-ties between greedy choices
    )
    return LlamaForCausalLM(config).eval().requires_grad_(False)


class RecomputeDecoder:
    """Test-only `CausalDecoder`: no KV cache at all, every forward reruns the model over all tokens."""

    def __init__(self, model: PreTrainedModel, max_length: int = 128) -> None:
        self.model = model
        self.vocab_size = VOCAB
        self.max_length = max_length
        self.tokens: list[int] = []
        self.forwards = 0

    @property
    def cached_tokens(self) -> list[int]:
        return list(self.tokens)

    @torch.inference_mode()
    def forward(self, token_ids: list[int]) -> torch.Tensor:
        self.tokens += token_ids
        assert len(self.tokens) <= self.max_length
        self.forwards += 1
        logits = self.model(torch.tensor([self.tokens])).logits[0]
        return logits[-len(token_ids) :].float()

    def crop(self, length: int) -> None:
        self.tokens = self.tokens[:length]


def next_logits(model: LlamaForCausalLM, context: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([context])).logits[0, -1].float()


def greedy_path(model: LlamaForCausalLM, context: list[int], steps: int) -> tuple[list[int], list[float]]:
    tokens: list[int] = []
    confidences: list[float] = []
    for _ in range(steps):
        probs = torch.softmax(next_logits(model, context + tokens), dim=-1)
        tokens.append(int(probs.argmax()))
        confidences.append(float(probs.max()))
    return tokens, confidences


def test_greedy_draft_is_the_draft_models_greedy_continuation(model: LlamaForCausalLM) -> None:
    context = [3, 14, 15, 9, 26, 5]
    drafter = ModelDrafter(RecomputeDecoder(model), confidence_threshold=0.0)
    draft = drafter.propose(context, 6)
    assert draft.token_ids == greedy_path(model, context, 6)[0]
    assert draft.draft_probs is None and draft.drafter == "model"


def test_confidence_stopping_ends_the_draft_before_the_first_doubtful_token(model: LlamaForCausalLM) -> None:
    context = [7, 1, 8, 2, 8]
    tokens, confidences = greedy_path(model, context, 8)
    threshold = sorted(confidences[1:])[len(confidences) // 2]  # some later token falls below it
    first_doubtful = next(i for i, c in enumerate(confidences) if i >= 1 and c < threshold)
    drafter = ModelDrafter(RecomputeDecoder(model), confidence_threshold=threshold)
    assert drafter.propose(context, 8).token_ids == tokens[:first_doubtful]
    # The first token is always proposed (min_tokens=1), however unsure the model is.
    assert ModelDrafter(RecomputeDecoder(model), confidence_threshold=1.0).propose(context, 8).token_ids == [
        tokens[0]
    ]


def test_sampled_draft_carries_the_warped_distributions_it_drew_from(model: LlamaForCausalLM) -> None:
    context = [2, 7, 1, 8, 2, 8, 1]
    drafter = ModelDrafter(
        RecomputeDecoder(model),
        temperature=0.7,
        top_k=5,
        generator=torch.Generator().manual_seed(0),
        confidence_threshold=0.0,
    )
    draft = drafter.propose(context, 5)
    assert draft.draft_probs is not None and draft.draft_probs.shape == (5, VOCAB)
    for i, token in enumerate(draft.token_ids):
        expected = warp_logits(next_logits(model, context + draft.token_ids[:i]), 0.7, top_k=5)
        torch.testing.assert_close(draft.draft_probs[i], expected)
        assert expected[token] > 0  # drawn from inside the top-k support
    again = ModelDrafter(
        RecomputeDecoder(model), temperature=0.7, top_k=5, generator=torch.Generator().manual_seed(0)
    )
    assert again.propose(context, 5).token_ids[:1] == draft.token_ids[:1]  # same seed, same first draw


@pytest.fixture(scope="module")
def gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(1)
    config = GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128, initializer_range=0.3
    )
    return GPT2LMHeadModel(config).eval().requires_grad_(False)


@pytest.mark.parametrize(
    ("arch", "decoder_kind"), [("llama", "recompute"), ("llama", "engine"), ("gpt2", "engine")]
)
def test_cache_stays_consistent_through_rejections_and_new_prompts(
    model: LlamaForCausalLM, gpt2: GPT2LMHeadModel, arch: str, decoder_kind: str
) -> None:
    """Simulated rounds with random acceptance; the kept drafter must always draft what a fresh one drafts.

    "engine" runs the project's own cached decoders (`make_decoder`: the lean Llama path, the Hugging Face
    cache path for GPT-2), whose crops really drop keys and values.
    """
    rng = random.Random(1)
    chosen: PreTrainedModel = gpt2 if arch == "gpt2" else model
    decoder: CausalDecoder = (
        RecomputeDecoder(chosen) if decoder_kind == "recompute" else make_decoder(chosen, 128)
    )
    drafter = ModelDrafter(decoder, confidence_threshold=0.0)
    context = [rng.randrange(VOCAB) for _ in range(12)]
    for round_index in range(10):
        if round_index % 5 == 4:  # the next keystroke: a new prompt sharing only part of the old one
            context = context[: rng.randrange(4, len(context))] + [rng.randrange(VOCAB) for _ in range(3)]
        draft = drafter.propose(context, rng.randrange(1, 6))
        fresh = ModelDrafter(RecomputeDecoder(chosen), confidence_threshold=0.0).propose(
            context, len(draft.token_ids)
        )
        assert draft.token_ids == fresh.token_ids
        accepted = rng.randrange(len(draft.token_ids) + 1)
        rejected_or_bonus = (draft.token_ids[accepted] + 1) % VOCAB if accepted < len(draft.token_ids) else 0
        context = context + draft.token_ids[:accepted] + [rejected_or_bonus]
        drafter.observe(context, accepted, len(draft.token_ids))
        cached = decoder.cached_tokens
        assert cached == context[: len(cached)], "the cache holds a token the context does not have"
        assert len(cached) >= len(context) - 2  # it kept what it could: no needless recompute


def test_drafting_after_full_acceptance_feeds_only_the_new_tokens(model: LlamaForCausalLM) -> None:
    decoder = RecomputeDecoder(model)
    drafter = ModelDrafter(decoder, confidence_threshold=0.0)
    context = [5, 6, 7, 8]
    draft = drafter.propose(context, 3)
    context = context + draft.token_ids + [1]
    drafter.observe(context, 3, 3)
    assert decoder.tokens == context[:-2]  # the prompt and two drafts; the last draft was never fed
    forwards = decoder.forwards
    drafter.propose(context, 1)
    assert decoder.forwards == forwards + 1 and decoder.tokens == context  # one forward of the 2 new tokens


def test_long_context_is_left_truncated_in_quarter_window_steps(model: LlamaForCausalLM) -> None:
    decoder = RecomputeDecoder(model, max_length=24)
    drafter = ModelDrafter(decoder, confidence_threshold=0.0)
    context = [random.Random(2).randrange(VOCAB) for _ in range(40)]
    draft = drafter.propose(context, 4)
    # 40 + 4 - 1 - 24 = 19 tokens too many; the window start moves in steps of 24 // 4 = 6, so to 24.
    assert len(decoder.tokens) <= 24 and decoder.tokens[:16] == context[24:]
    fresh = ModelDrafter(RecomputeDecoder(model), confidence_threshold=0.0).propose(context[24:], 4)
    assert draft.token_ids == fresh.token_ids


def test_no_room_or_no_context_gives_an_empty_draft(model: LlamaForCausalLM) -> None:
    drafter = ModelDrafter(RecomputeDecoder(model))
    assert drafter.propose([1, 2, 3], 0).token_ids == []
    assert drafter.propose([], 4).token_ids == []
    drafter.observe([1, 2, 3], 0, 0)  # nothing was drafted: nothing to roll back, no error
    tiny_window = RecomputeDecoder(model, max_length=8)
    draft = ModelDrafter(tiny_window, confidence_threshold=0.0).propose(list(range(20)), 8)
    assert len(draft.token_ids) == 4 and len(tiny_window.tokens) <= 8  # half the window at most
    with pytest.raises(ValueError):
        ModelDrafter(RecomputeDecoder(model), confidence_threshold=1.5)


def test_its_plan_counts_the_context_it_must_read_before_drafting(model) -> None:
    drafter = ModelDrafter(make_decoder(model, max_length=128))
    context = list(range(1, 41))
    (cold,) = drafter.plans(context)
    assert cold.drafter == "model" and cold.catch_up == 40 - 2  # a new prompt: all of it, less a usual feed
    draft = drafter.propose(context, 4)
    accepted = len(draft.token_ids) // 2
    after = [*context, *draft.token_ids[:accepted], 7]  # the target's own token ends the round
    drafter.observe(after, accepted, len(draft.token_ids))
    assert drafter.plans(after)[0].catch_up == 0  # only the usual feed: it drafted last round
    # Four tokens from rounds it did not draft, on top of the one or two a round feeds anyway.
    assert drafter.plans([*after, 8, 9, 10, 11])[0].catch_up in (3, 4)


def test_catching_up_on_a_prompt_reads_it_without_logits_and_stops_at_a_cancel(
    model: LlamaForCausalLM,
) -> None:
    """A cold draft reads all but the last missed token through `prefill` (no vocabulary projection, and,
    behind the server's `PollingDecoder`, interruptible); its draft is the same as one read token by token."""
    from engine.api import CancelToken
    from engine.lean import LeanLlamaDecoder
    from engine.speculative import DraftCancelled, PollingDecoder

    context = [random.Random(5).randrange(1, VOCAB) for _ in range(40)]
    lean = LeanLlamaDecoder(model, 128)
    widths: list[int] = []  # of every forward that computes logits (behind `PollingDecoder`: interruptible)
    forward_unless = lean.forward_unless
    lean.forward_unless = lambda ids, stop: (widths.append(len(ids)), forward_unless(ids, stop))[1]  # type: ignore[method-assign]
    cancel = CancelToken()
    draft = ModelDrafter(PollingDecoder(lean, cancel), confidence_threshold=0.0).propose(context, 4)
    assert draft.token_ids == greedy_path(model, context, 4)[0]
    assert widths[0] == 1  # the prompt went through prefill; only its last token made logits
    assert len(lean.cached_tokens) == len(context) + 3
    lean.crop(0)
    cancel.cancel()
    with pytest.raises(DraftCancelled):
        ModelDrafter(PollingDecoder(lean, cancel)).propose(context, 4)
    assert lean.cached_tokens == []
