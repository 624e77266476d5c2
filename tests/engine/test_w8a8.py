"""W8A8 (`engine.quantize.RowwiseInt8Linear`): every projected row computed as it would be alone, accurate to
int8 weights when it chooses tokens, and speculative greedy output that leaves plain greedy output of the same
model only at a near-tie (attention runs batched)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from engine_core_support import (
    CODE,
    assert_parts_only_at_a_near_tie,
    decode,
    local_engine,
    prompt_ids,
    tiny_llama,
)

from engine.api import CompletionRequest
from engine.drafters.length import FixedDraftPolicy
from engine.hardware import OVERHEAD_BOUND_PARAMS, choose_target_quantization
from engine.lean import TWO_PASS_DOWN_MIN_READ, TWO_PASS_DOWN_TAIL, LeanLlamaDecoder
from engine.precision import top2_margin
from engine.quantize import RowwiseInt8Linear, quantize_int8, rowwise_int8_available
from engine.runtime import build_draft_decoder, build_target_decoder

pytestmark = pytest.mark.skipif(not rowwise_int8_available(), reason="no fbgemm in this torch build")


def activations(rows: int, features: int = 96, seed: int = 0) -> torch.Tensor:
    """Rows with an outlier channel, as transformer activations have."""
    x = torch.randn(rows, features, generator=torch.Generator().manual_seed(seed))
    x[:, 7] *= 30
    return x


def weights(out_features: int = 80, in_features: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(out_features, in_features, generator=generator) * 0.05, torch.randn(out_features) * 0.1


def test_every_row_of_a_batch_is_bit_for_bit_what_it_would_be_alone() -> None:
    weight, bias = weights()
    linear = RowwiseInt8Linear(weight, bias)
    x = activations(9)
    for project in (linear, linear.read_prompt):
        together = project(x)
        alone = torch.cat([project(x[row : row + 1]) for row in range(x.shape[0])])
        assert torch.equal(together, alone)


def test_negative_control_fbgemms_own_per_tensor_activation_scale_couples_the_rows() -> None:
    """What the pinned columns prevent: one scale per call makes a row's result depend on its neighbours."""
    weight, _ = weights()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dynamic = torch.ao.nn.quantized.dynamic.Linear(weight.shape[1], weight.shape[0], bias_=False)
        codes, scales = quantize_int8(weight)
        dynamic.set_weight_bias(
            torch._make_per_channel_quantized_tensor(
                codes, scales.double(), torch.zeros(80, dtype=torch.long), 0
            ),
            None,
        )
    x = activations(9)
    together = dynamic(x)
    alone = torch.cat([dynamic(x[row : row + 1]) for row in range(x.shape[0])])
    assert not torch.equal(together, alone)


def test_token_choosing_rows_are_as_accurate_as_int8_weights_and_prompt_rows_close() -> None:
    weight, bias = weights()
    codes, scales = quantize_int8(weight)
    int8_weights_exact = F.linear(activations(16), codes.float() * scales[:, None], bias)
    linear = RowwiseInt8Linear(weight, bias)
    size = int8_weights_exact.abs().max()
    precise = (linear(activations(16)) - int8_weights_exact).abs().max() / size
    one_pass = (linear.read_prompt(activations(16)) - int8_weights_exact).abs().max() / size
    assert precise < 2e-3  # the second pass recovers what the outlier channel's scale rounded away
    assert one_pass < 6e-2
    assert precise < one_pass / 5


def read_in_two_calls(model: Any, ids: list[int], head: int, tail_passes: int) -> LeanLlamaDecoder:
    """A W8A8 decoder that read `ids[:head]` in one pass and the rest with `tail_passes` in the down
    projection (1: one pass; 2: both), as two prompt reads."""
    decoder = LeanLlamaDecoder(model, quantization="w8a8")
    decoder.prefill(ids[:head])
    decoder.two_pass_down_tail = 0 if tail_passes == 1 else len(ids)
    decoder.prefill(ids[head:])
    return decoder


def test_w8a8_reads_the_last_tokens_of_a_prompt_in_both_passes_in_the_down_projection() -> None:
    model = tiny_llama(seed=3, hidden=64)
    ids = prompt_ids(40)
    tail = LeanLlamaDecoder(model, quantization="w8a8", two_pass_down_tail=10)
    tail.prefill(ids)
    stopped_never = LeanLlamaDecoder(model, quantization="w8a8", two_pass_down_tail=10)
    assert stopped_never.prefill_interruptibly(ids, lambda: False) == len(ids)
    both = read_in_two_calls(model, ids, head=30, tail_passes=2)
    one = read_in_two_calls(model, ids, head=30, tail_passes=1)
    for decoder in (tail, stopped_never):  # the first 30 tokens in one pass, the last 10 in both
        assert torch.equal(decoder.keys[:, :, :40], both.keys[:, :, :40])
        assert torch.equal(decoder.values[:, :, :40], both.values[:, :, :40])
    # Two passes reach the cache: after the first layer's down projection, only the tail's rows part.
    assert torch.equal(both.values[:, :, :30], one.values[:, :, :30])
    assert torch.equal(both.values[0, :, :40], one.values[0, :, :40])
    assert not torch.equal(both.values[1:, :, 30:40], one.values[1:, :, 30:40])


def test_a_w8a8_read_shorter_than_the_minimum_stays_in_one_pass() -> None:
    """The keystroke loop's short re-reads: the whole read in one pass, the same cache as without a tail."""
    model = tiny_llama(seed=3, hidden=64)
    ids = prompt_ids(40)
    short = LeanLlamaDecoder(model, quantization="w8a8", two_pass_down_tail=10, two_pass_down_min_read=41)
    short.prefill(ids)
    one = read_in_two_calls(model, ids, head=30, tail_passes=1)
    long_enough = LeanLlamaDecoder(
        model, quantization="w8a8", two_pass_down_tail=10, two_pass_down_min_read=40
    )
    long_enough.prefill(ids)
    without_tail = LeanLlamaDecoder(model, quantization="w8a8")
    without_tail.prefill(ids)
    assert torch.equal(short.values[:, :, :40], without_tail.values[:, :, :40])
    assert not torch.equal(long_enough.values[:, :, :40], without_tail.values[:, :, :40])
    assert torch.equal(one.values[:, :, :30], long_enough.values[:, :, :30])


def test_only_a_w8a8_target_reads_a_tail_in_two_passes() -> None:
    model = tiny_llama(seed=3, hidden=64)
    ids = prompt_ids(40)
    fp32, fp32_tail = LeanLlamaDecoder(model), LeanLlamaDecoder(model, two_pass_down_tail=10)
    for decoder in (fp32, fp32_tail):
        decoder.prefill(ids)
    assert torch.equal(fp32.values[:, :, :40], fp32_tail.values[:, :, :40])  # nothing to read twice
    target, _ = build_target_decoder(model, None, 64, runtime="torch", quantization="w8a8")
    draft, _ = build_draft_decoder(model, 64, quantization="w8a8")
    assert getattr(target, "two_pass_down_tail", None) == TWO_PASS_DOWN_TAIL > 0
    assert getattr(target, "two_pass_down_min_read", None) == TWO_PASS_DOWN_MIN_READ > TWO_PASS_DOWN_TAIL
    assert getattr(draft, "two_pass_down_tail", None) == 0  # a draft's rounding never changes the output


def test_the_lean_decoder_in_w8a8_agrees_with_fp32_on_a_tiny_model() -> None:
    torch.set_num_threads(1)
    model = tiny_llama(seed=3, hidden=64)
    reference = LeanLlamaDecoder(model).forward(prompt_ids(40)).argmax(-1)
    quantized = LeanLlamaDecoder(model, quantization="w8a8")
    agreement = (quantized.forward(prompt_ids(40)).argmax(-1) == reference).float().mean()
    assert agreement >= 0.9


def plain_step_margins(engine: Any, plain_ids: list[int]) -> list[float]:
    """The top-2 margin that chose each plain token, from one-token steps over the cache the plain run left
    (its prompt, then every generated token but the last)."""
    decoder = engine.target
    start = len(decoder.cached_tokens) - len(plain_ids)  # the prompt's last token, fed by the first step
    fed = decoder.cached_tokens[start:]
    decoder.crop(start)
    return [top2_margin(decoder.forward([token])[-1]) for token in fed]


@pytest.mark.parametrize("drafter", ["lookup", "suffix", "stale", "hybrid"])
def test_speculative_greedy_output_leaves_plain_w8a8_output_only_at_near_ties(drafter: str) -> None:
    """Projections are exact per row; attention is batched (`LeanLlamaDecoder.rows_as_steps` is off for W8A8,
    a verify of 8 would cost 16% more), so a verify may round a row differently and part at a near-tie."""
    torch.set_num_threads(1)
    target = tiny_llama(seed=11)
    engine = local_engine(target, tiny_llama(seed=12))
    engine_w8a8 = type(engine)(pair=engine.pair, quantization="w8a8", keep_hf_model=True)
    assert engine_w8a8.runtime.weights == "fp32 + w8a8 weights" and not engine_w8a8.target.rows_as_steps
    prompt = decode(prompt_ids(30, seed=4)) + CODE[0]
    plain = engine_w8a8.complete(CompletionRequest(prompt=prompt, max_new_tokens=40, drafter="none"))
    want = plain.token_ids
    margins = plain_step_margins(engine_w8a8, want)
    request = CompletionRequest(
        prompt=prompt,
        max_new_tokens=40,
        drafter=drafter,
        lookup_context=(decode(engine_w8a8.encode(prompt)[-6:] + want[:16]),),
        suffix=decode(want[8:]),
        previous_completion=decode(want[:12] + [(want[12] + 1) % 300] + want[13:]),
        draft_policy=FixedDraftPolicy(8),
    )
    result = engine_w8a8.complete(request)
    assert_parts_only_at_a_near_tie(want, result.token_ids, margins)
    assert result.stats.accepted > 0  # verifies of several rows ran and were checked against the steps


@pytest.mark.parametrize(
    ("device", "dtype", "params", "expected"),
    [
        ("cpu", "fp32", 494_000_000, "w8a8"),  # Qwen2.5-Coder-0.5B on an AVX2 laptop
        ("cpu", "fp32", None, "w8a8"),  # size unknown: assumed large
        ("cpu", "bf16", 494_000_000, "none"),  # native bf16 (AMX, AVX512-BF16): as before
        ("cpu", "fp32", OVERHEAD_BOUND_PARAMS - 1, "none"),  # the bundled pair: overhead-bound
        ("cuda", "bf16", 494_000_000, "none"),
    ],
)
def test_auto_target_projections(device: str, dtype: str, params: int | None, expected: str) -> None:
    chosen, reason = choose_target_quantization("auto", device, dtype, params)
    assert chosen == expected and reason
    assert choose_target_quantization("int4", device, dtype, params) == ("int4", "requested")
    with pytest.raises(ValueError, match="unknown quantization"):
        choose_target_quantization("int3", device, dtype, params)
