"""Low-precision losslessness: quantized weights stay close to the model, and greedy speculative output may
leave plain greedy output only where the plain run's two best logits are within NEAR_TIE_MARGIN.

The engine tests run the bundled target (a real trained model, so real code has real near-ties) through the
lean decoder in bf16 and with int8 / int4 weights, with a drafter that proposes the plain run's own
continuation, corrupted now and then, so verifies of every width are compared against single steps.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
import torch
from engine_core_support import FixedLength, ScriptedDrafter, assert_parts_only_at_a_near_tie

from engine.autoregressive import autoregressive_generate
from engine.generation import DecodeSettings
from engine.lean import LeanLlamaDecoder
from engine.precision import (
    Divergence,
    MarginRecorder,
    greedy_divergence,
    top2_margin,
)
from engine.quantize import (
    INT4_GROUP,
    Int4Linear,
    Int8Linear,
    PrepackedBf16Linear,
    check_quantization,
    make_linear,
    prepacked_bf16_fits,
    quantize_int4,
    quantize_int8,
)
from engine.sequences import first_divergence
from engine.speculative import speculative_generate

BUNDLED_TARGET = Path(__file__).resolve().parents[2] / "engine" / "bundled" / "target"
NEW_TOKENS = 24


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


# --- pure functions ---------------------------------------------------------------------------------------


def test_top2_margin_and_first_divergence() -> None:
    assert top2_margin(torch.tensor([0.0, 3.0, 2.5, -1.0])) == pytest.approx(0.5)
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence([], []) is None


def test_greedy_divergence_reports_the_plain_margin_and_rejects_a_wide_one() -> None:
    margins = [4.0, 0.1, 3.0]
    assert greedy_divergence([7, 8, 9], [7, 8, 9], margins) is None
    tie = greedy_divergence([7, 8, 9], [7, 6, 1], margins)
    assert tie == Divergence(position=1, margin=0.1) and tie.near_tie
    wide = greedy_divergence([7, 8, 9], [7, 8, 2], margins)  # a loop bug, not numerics
    assert wide == Divergence(position=2, margin=3.0) and not wide.near_tie
    # The speculative run stopped early (e.g. at a stop string inside a draft): no margin to blame.
    assert not greedy_divergence([7, 8, 9], [7, 8], margins).near_tie  # type: ignore[union-attr]


# --- quantized projections --------------------------------------------------------------------------------


def test_int8_codes_round_trip_within_half_a_step() -> None:
    weight = torch.randn(48, 64)
    codes, scales = quantize_int8(weight)
    assert codes.dtype == torch.int8 and codes.abs().max() <= 127
    error = (codes.float() * scales[:, None] - weight).abs()
    assert (error <= scales[:, None] / 2 + 1e-6).all()


def test_int4_codes_round_trip_within_half_a_step() -> None:
    weight = torch.randn(48, 2 * INT4_GROUP)
    codes, scales_and_zeros = quantize_int4(weight)
    assert codes.min() >= 0 and codes.max() <= 15
    scales, zeros = scales_and_zeros[..., 0].T, scales_and_zeros[..., 1].T  # [out, groups]
    groups = codes.float().reshape(48, 2, INT4_GROUP)
    dequantized = (groups - 8) * scales[..., None] + zeros[..., None]
    error = (dequantized.reshape(48, -1) - weight).abs()
    assert (error <= scales.repeat_interleave(INT4_GROUP, dim=1) / 2 + 1e-5).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_quantized_linear_matches_its_dequantized_weights(dtype: torch.dtype, kind: str) -> None:
    """The packed CPU kernels compute x @ dequantized(W).T (+ bias), for 1 and for several rows."""
    torch.manual_seed(0)
    weight, bias = torch.randn(96, 128).to(dtype), torch.randn(96).to(dtype)
    linear = Int8Linear(weight, bias) if kind == "int8" else Int4Linear(weight, bias)
    if kind == "int8":
        codes, scales = quantize_int8(weight)
        dequantized = codes.float() * scales[:, None]
    else:
        codes, sz = quantize_int4(weight)
        groups = codes.float().reshape(96, -1, INT4_GROUP)
        dequantized = ((groups - 8) * sz[..., 0].T[..., None] + sz[..., 1].T[..., None]).reshape(96, 128)
    for rows in (1, 5):
        x = torch.randn(rows, 128).to(dtype)
        want = x.float() @ dequantized.T + bias.float()
        got = linear(x).float()
        tolerance = 1e-3 if dtype == torch.float32 else 0.05 * want.abs().max().item()
        assert (got - want).abs().max().item() < tolerance
        assert got.shape == (rows, 96)


@pytest.mark.skipif(
    not prepacked_bf16_fits(torch.zeros(1, 1, dtype=torch.bfloat16)), reason="no native oneDNN bf16 here"
)
def test_prepacked_bf16_linear_computes_what_f_linear_does() -> None:
    """The reordered weight runs oneDNN's kernel once-packed: the result is F.linear's, at every row count."""
    torch.manual_seed(0)
    weight, bias = torch.randn(96, 128).bfloat16(), torch.randn(96).bfloat16()
    assert isinstance(make_linear(weight, bias, "none"), PrepackedBf16Linear)
    assert not isinstance(make_linear(weight.float(), None, "none"), PrepackedBf16Linear)
    for with_bias in (None, bias):
        linear = PrepackedBf16Linear(weight, with_bias)
        for rows in (1, 9, 40):
            x = torch.randn(rows, 128).bfloat16()
            torch.testing.assert_close(linear(x), torch.nn.functional.linear(x, weight, with_bias))
        assert linear(torch.randn(2, 3, 128).bfloat16()).shape == (2, 3, 96)


def test_unknown_or_unsupported_quantization_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown quantization"):
        check_quantization("int3", torch.device("cpu"))
    with pytest.raises(ValueError, match="CPU only"):
        check_quantization("int4", torch.device("cuda"))
    with pytest.raises(ValueError, match="divisible"):
        Int4Linear(torch.randn(8, 40))


# --- the loop on quantized and bf16 weights ---------------------------------------------------------------


def _bundled_target(dtype: torch.dtype) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(BUNDLED_TARGET, dtype=dtype).eval()


def _code_prompts(tokenizer: object, count: int = 3, length: int = 120) -> list[list[int]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    prompts = []
    for name in ("textwrap.py", "fnmatch.py", "bisect.py", "shlex.py")[:count]:
        text = (stdlib / name).read_text(encoding="utf-8")
        ids = tokenizer.encode(text[len(text) // 3 :], add_special_tokens=False)  # type: ignore[attr-defined]
        prompts.append(list(ids[:length]))
    return prompts


@pytest.mark.parametrize(
    ("dtype", "quantization"),
    [
        (torch.bfloat16, "none"),
        (torch.bfloat16, "int8"),
        (torch.bfloat16, "int4"),
        (torch.float32, "int8"),
        (torch.float32, "int4"),
        (torch.float32, "w8a8"),
    ],
)
def test_speculative_greedy_leaves_plain_greedy_only_at_near_ties(
    dtype: torch.dtype, quantization: str
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(BUNDLED_TARGET)
    decoder = LeanLlamaDecoder(_bundled_target(dtype), 512, quantization)  # type: ignore[arg-type]
    settings = DecodeSettings(max_new_tokens=NEW_TOKENS)
    compared = 0
    for prompt in _code_prompts(tokenizer, count=2, length=80):
        decoder.crop(0)
        recorder = MarginRecorder(decoder)
        plain = autoregressive_generate(recorder, prompt, settings, decode=tokenizer.decode)
        assert len(recorder.margins) == len(plain.token_ids) == NEW_TOKENS
        for k, corrupt_every in ((3, 3), (10, 4)):
            decoder.crop(0)
            drafter = ScriptedDrafter(prompt, plain.token_ids, corrupt_every=corrupt_every)
            speculative = speculative_generate(
                decoder, drafter, prompt, settings, FixedLength(k), decode=tokenizer.decode
            )
            assert speculative.stats.accepted > 0
            assert_parts_only_at_a_near_tie(plain.token_ids, speculative.token_ids, recorder.margins)
            compared += 1
    assert compared == 4


def test_quantized_target_stays_close_to_the_model() -> None:
    """Teacher-forced on held-out code: int8 agrees with the fp32 model's top-1 almost always, int4 mostly."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(BUNDLED_TARGET)
    model = _bundled_target(torch.float32)
    window = _code_prompts(tokenizer, count=1, length=200)[0]
    reference = LeanLlamaDecoder(model, 512).forward(window).argmax(-1)  # type: ignore[arg-type]
    agreement = {}
    for quantization in ("int8", "int4"):
        logits = LeanLlamaDecoder(model, 512, quantization).forward(window)  # type: ignore[arg-type]
        agreement[quantization] = (logits.argmax(-1) == reference).float().mean().item()
    assert agreement["int8"] >= 0.95, agreement
    assert agreement["int4"] >= 0.8, agreement
