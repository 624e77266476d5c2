"""The draft model's runtime: its weight quantization rule, and what the loaded models cost in memory."""

from __future__ import annotations

import pytest
import torch
from engine_core_support import prompt_ids, tiny_gpt2, tiny_llama

from engine.hf_decoder import HFDecoder
from engine.lean import LeanLlamaDecoder
from engine.quantize import QUANTIZED_MAX_ROWS, SplitLinear
from engine.runtime import RuntimeUnavailable, build_draft_decoder, choose_draft_quantization
from engine.service import decoder_weight_mb, model_memory


def test_auto_draft_weights_are_int4_on_avx512_w8a8_on_avx2_and_full_precision_when_small_or_off_cpu() -> (
    None
):
    assert choose_draft_quantization("auto", "cpu", "AVX512")[0] == "int4"
    assert choose_draft_quantization("auto", "cpu", "AVX512", params=494_000_000)[0] == "int4"
    small, small_why = choose_draft_quantization("auto", "cpu", "AVX512", params=2_900_000)
    assert small == "none" and "overhead-bound" in small_why  # the bundled draft stays full precision
    w8a8, why = choose_draft_quantization("auto", "cpu", "AVX2")
    assert w8a8 == "w8a8" and "AVX-512" in why
    assert choose_draft_quantization("auto", "cpu", "AVX2", params=2_900_000)[0] == "none"
    assert choose_draft_quantization("auto", "cuda")[0] == "none"
    assert choose_draft_quantization("int4", "cpu") == ("int4", "requested")
    with pytest.raises(RuntimeUnavailable, match="unknown draft quantization"):
        choose_draft_quantization("int3", "cpu")


def test_a_llama_draft_runs_lean_with_quantized_weights_and_a_gpt2_one_on_transformers() -> None:
    torch.set_num_threads(1)
    model = tiny_llama(seed=2, hidden=64)
    reference = LeanLlamaDecoder(model).forward(prompt_ids(20)).argmax(-1)
    decoder, choice = build_draft_decoder(model, 128, quantization="int8", release=True)
    assert isinstance(decoder, LeanLlamaDecoder) and decoder.quantization == "int8"
    assert choice.weights == "fp32 + int8 weights"
    # int8 weights move logits a little; on this well-separated tiny model the argmax stays.
    agreement = (decoder.forward(prompt_ids(20)).argmax(-1) == reference).float().mean()
    assert agreement >= 0.9
    other, other_choice = build_draft_decoder(tiny_gpt2(), 128)
    assert isinstance(other, HFDecoder) and other_choice.runtime == "transformers"
    with pytest.raises(RuntimeUnavailable, match="Llama-family"):
        build_draft_decoder(tiny_gpt2(), 128, quantization="int8")


def test_model_memory_counts_each_weight_once_and_int8_halves_bf16() -> None:
    model = tiny_llama(seed=4, hidden=128).to(torch.bfloat16)
    bf16 = LeanLlamaDecoder(model, 64)
    int8 = LeanLlamaDecoder(model, 64, "int8")
    embed_mb = model.get_input_embeddings().weight.numel() * 2 / 2**20
    projections_bf16 = decoder_weight_mb(bf16)
    projections_int8 = decoder_weight_mb(int8)
    assert projections_bf16 is not None and projections_int8 is not None
    params_mb = sum(p.numel() for p in model.parameters()) * 2 / 2**20
    assert projections_bf16 == pytest.approx(params_mb, rel=0.02)  # every parameter once, packed or not
    # int8 codes are half of bf16 (plus one scale per row); the embedding table stays bf16.
    assert projections_int8 - embed_mb == pytest.approx((projections_bf16 - embed_mb) / 2, rel=0.05)
    memory = model_memory(bf16, int8, rss_before=None)
    assert memory["weights_mb"] == pytest.approx(projections_bf16 + projections_int8)
    assert memory["kv_cache_mb"] == pytest.approx(2 * 2 * 2 * 2 * 64 * 32 * 2 / 2**20)
    assert memory["rss_added_by_load_mb"] is None


def test_a_quantized_draft_reads_prompts_with_its_full_precision_weights() -> None:
    """Decode steps (a few rows) run the int4 weights; a prompt (many rows) runs the full-precision ones, so
    reading it is as exact and as fast as an unquantized model's, and the vocabulary projection, read a few
    rows at a time, keeps no second copy."""
    torch.set_num_threads(1)
    model = tiny_llama(seed=3, hidden=64)
    reference = LeanLlamaDecoder(model, 128)
    decoder, choice = build_draft_decoder(model, 128, quantization="int4")
    assert isinstance(decoder, LeanLlamaDecoder) and choice.weights == "fp32 + int4 weights"
    qkv = decoder.layers[0].qkv
    assert isinstance(qkv, SplitLinear)
    assert not isinstance(decoder.lm_head, SplitLinear)
    # Both copies of the layers are counted in the memory report: the int4-only decoder's bytes plus the
    # full-precision projections of every layer.
    held, int4_only = decoder_weight_mb(decoder), decoder_weight_mb(LeanLlamaDecoder(model, 128, "int4"))
    projections = [layer.mlp for layer in model.model.layers] + [
        layer.self_attn for layer in model.model.layers
    ]
    dense_mb = sum(p.numel() * 4 for module in projections for p in module.parameters()) / 2**20
    assert held is not None and int4_only is not None
    assert held == pytest.approx(int4_only + dense_mb, rel=1e-6)
    many = torch.randn(QUANTIZED_MAX_ROWS + 1, 64)
    assert torch.equal(qkv(many), reference.layers[0].qkv(many))  # the full-precision path, bit for bit
    few = many[:QUANTIZED_MAX_ROWS]
    assert not torch.equal(qkv(few), reference.layers[0].qkv(few))  # int4 rounding: the quantized path
    relative_error = (qkv(few) - reference.layers[0].qkv(few)).norm() / reference.layers[0].qkv(few).norm()
    assert relative_error < 0.15
    # A prompt read through the wide path leaves the same cache as the unquantized model's.
    ids = prompt_ids(40)
    decoder.prefill(ids)
    reference.prefill(ids)
    assert torch.equal(decoder.keys[:, :, :40], reference.keys[:, :, :40])
