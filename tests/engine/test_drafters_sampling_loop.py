"""End-to-end losslessness of sampling: the speculative loop with real drafters emits the target's law.

Target and draft are tiny random Llamas over a 6-token vocabulary, warped with temperature 1 and top-k 4
(so the residual max(0, p - q) meets zeros on both sides). Each trial samples 3 new tokens with its own
seed through `engine.speculative.speculative_generate`; the empirical joint law of the 3 tokens is compared
with the exact target joint by a chi-square test. Cells expected to hold fewer than 5 samples are pooled;
the threshold is the 0.999 quantile (Wilson-Hilferty), so a correct sampler fails for a random seed with
probability 0.001, and seeds are fixed. Tokens the warped target forbids must never appear. A negative
control shows the same check rejects a loop that resamples from p instead of the residual (measured:
chi-square about 900 against a threshold near 103).

Decoders memoise logits by prefix, so each distinct prefix is computed once and trials stay cheap.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch
from engine_core_support import FixedLength
from sampling_support import MemoDecoder, chi_square_against
from transformers import LlamaConfig, LlamaForCausalLM

from engine import speculative
from engine.drafters.base import Drafter
from engine.drafters.lookup import PromptLookupDrafter
from engine.drafters.model import ModelDrafter
from engine.generation import DecodeSettings
from engine.speculative import speculative_generate
from engine.verify import speculative_sample_accept, warp_logits

VOCAB = 6
TOP_K = 4
NEW_TOKENS = 3
PROMPT = [1, 2, 3, 1, 2]  # "1 2" repeats, so the lookup drafter has something to copy
TRIALS = 2500


def tiny_llama(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
        initializer_range=0.15,
    )
    return LlamaForCausalLM(config).eval().requires_grad_(False)


def target_joint(target: MemoDecoder) -> dict[tuple[int, ...], float]:
    joint = {}
    for seq in itertools.product(range(VOCAB), repeat=NEW_TOKENS):
        prob = 1.0
        for i, token in enumerate(seq):
            probs = warp_logits(target.next_logits(tuple(PROMPT) + seq[:i]), 1.0, top_k=TOP_K)
            prob *= float(probs[token])
            if prob == 0.0:
                break
        joint[seq] = prob
    return joint


def run_trials(drafter_kind: str) -> tuple[Counter[tuple[int, ...]], dict[tuple[int, ...], float]]:
    torch.set_num_threads(1)
    target = MemoDecoder(tiny_llama(seed=5), max_length=32)
    draft_decoder = MemoDecoder(tiny_llama(seed=6), max_length=32)
    draft_generator = torch.Generator().manual_seed(99)
    counts: Counter[tuple[int, ...]] = Counter()
    drafted = 0
    for trial in range(TRIALS):
        drafter: Drafter
        if drafter_kind == "model":
            drafter = ModelDrafter(
                draft_decoder,
                temperature=1.0,
                top_k=TOP_K,
                generator=draft_generator,
                confidence_threshold=0.0,
            )
        else:
            drafter = PromptLookupDrafter(min_ngram=1)
        settings = DecodeSettings(max_new_tokens=NEW_TOKENS, temperature=1.0, top_k=TOP_K, seed=trial)
        result = speculative_generate(
            target,
            drafter,
            list(PROMPT),
            settings,
            FixedLength(2),
            decode=lambda ids: " ".join(map(str, ids)),
        )
        assert len(result.token_ids) == NEW_TOKENS
        counts[tuple(result.token_ids)] += 1
        drafted += result.stats.drafted
    assert drafted >= TRIALS  # every trial really went through drafts
    return counts, target_joint(target)


@pytest.mark.parametrize("drafter_kind", ["model", "lookup"])
def test_speculative_sampling_through_the_loop_follows_the_target(drafter_kind: str) -> None:
    chi_square_against(*run_trials(drafter_kind))


def test_the_check_detects_a_loop_that_resamples_from_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: the correct acceptance test with p instead of the residual at a rejection."""

    def resample_from_target(
        draft_ids: list[int],
        draft_probs: torch.Tensor | None,
        target_probs: torch.Tensor,
        gen: torch.Generator,
    ) -> tuple[int, int]:
        num_accepted, _ = speculative_sample_accept(draft_ids, draft_probs, target_probs, gen)
        return num_accepted, int(torch.multinomial(target_probs[num_accepted], 1, generator=gen))

    monkeypatch.setattr(speculative, "speculative_sample_accept", resample_from_target)
    with pytest.raises(AssertionError, match="chi-square"):
        chi_square_against(*run_trials("model"))
