"""The lean Llama decoder and the generic HF decoder against transformers' own forward."""

from __future__ import annotations

import copy

import pytest
import torch
from engine_core_support import prompt_ids, tiny_gpt2, tiny_llama

from engine.api import CancelToken
from engine.generation import sync_cache
from engine.hf_decoder import HFDecoder, make_decoder
from engine.lean import LeanLlamaDecoder


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def reference_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0].float()


@pytest.mark.parametrize("tied", [False, True])
def test_lean_logits_match_hf_forward_with_gqa_and_rope_theta(tied: bool) -> None:
    model = tiny_llama(seed=3, tied=tied)
    ids = prompt_ids(60)
    expected = reference_logits(model, ids)
    decoder = LeanLlamaDecoder(model)
    decoder.prefill(ids[:10])
    chunk = decoder.forward(ids[10:30])
    torch.testing.assert_close(chunk, expected[10:30], atol=1e-4, rtol=1e-4)
    # Roll back a rejected tail and continue one token at a time, then in a block.
    decoder.crop(25)
    assert decoder.cached_tokens == ids[:25]
    single = decoder.forward(ids[25:26])
    rest = decoder.forward(ids[26:60])
    torch.testing.assert_close(single, expected[25:26], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(rest, expected[26:60], atol=1e-4, rtol=1e-4)
    assert decoder.cached_tokens == ids


@pytest.mark.parametrize("build", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_hf_decoder_matches_full_forward_after_crop(build) -> None:
    model = build(seed=5)
    ids = prompt_ids(40, seed=2)
    expected = reference_logits(model, ids)
    decoder = HFDecoder(model)
    decoder.prefill(ids[:12])
    decoder.forward(ids[12:30])
    decoder.crop(20)
    assert decoder.cached_tokens == ids[:20]
    torch.testing.assert_close(decoder.forward(ids[20:40]), expected[20:40], atol=1e-4, rtol=1e-4)


def test_make_decoder_picks_lean_for_llama_and_hf_otherwise() -> None:
    assert isinstance(make_decoder(tiny_llama()), LeanLlamaDecoder)
    assert isinstance(make_decoder(tiny_gpt2()), HFDecoder)


@pytest.mark.parametrize("build", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_decoder_refuses_to_overflow_its_window(build) -> None:
    decoder = make_decoder(build(), max_length=16)
    decoder.forward(prompt_ids(10))
    with pytest.raises(ValueError, match="16 positions"):
        decoder.forward(prompt_ids(7))
    assert len(decoder.cached_tokens) == 10  # the failed call changed nothing


@pytest.mark.parametrize(
    ("dtype", "rows_as_steps"),
    [(torch.float32, False), (torch.float32, True), (torch.bfloat16, False)],
    ids=["fp32-batched", "fp32-rows-as-steps", "bf16"],
)
def test_every_query_count_matches_hf_forward_on_every_attention_path(
    dtype: torch.dtype, rows_as_steps: bool
) -> None:
    """A decode step and small verifies (grouped fp32 matmuls, up to FEW_QUERIES), wider forwards (SDPA) and
    the exact row-by-row path, from the same cached prefix, against transformers' forward. fp32: equal to
    1e-4. bf16: no further from the exact (fp32) forward of the same bf16 weights than transformers' own bf16
    forward is."""
    from engine.lean import FEW_QUERIES

    model = tiny_llama(seed=11, layers=3).to(dtype)
    ids = prompt_ids(80, seed=4)
    exact = reference_logits(copy.deepcopy(model).float(), ids)
    hf_error = (reference_logits(model, ids) - exact).abs().amax(-1)  # per position
    decoder = LeanLlamaDecoder(model, rows_as_steps=rows_as_steps)
    decoder.prefill(ids[:40])
    for count in (1, 2, 3, FEW_QUERIES - 1, FEW_QUERIES, FEW_QUERIES + 1, 17):
        decoder.crop(40)
        logits = decoder.forward(ids[40 : 40 + count])
        wanted = exact[40 : 40 + count]
        if dtype == torch.float32:
            torch.testing.assert_close(logits, wanted, atol=1e-4, rtol=1e-4)
        else:
            error = (logits - wanted).abs().amax(-1)
            assert (error <= 2 * hf_error[40 : 40 + count].max() + 0.05).all(), (count, error, hf_error.max())


def test_an_fp32_verifys_rows_are_bit_for_bit_its_one_token_steps() -> None:
    """fp32 promises lossless speculation: every row of a verify, at any width, is what a one-token step at
    that position computes (padded projections, row-by-row attention; batched matmuls round a row
    differently with the batch's shape on some CPUs, an AMD EPYC among them)."""
    decoder = LeanLlamaDecoder(tiny_llama(seed=5, layers=2))
    assert decoder.rows_as_steps
    ids = prompt_ids(60, seed=2)
    decoder.prefill(ids[:30])
    steps = torch.cat([decoder.forward([token]) for token in ids[30:47]])
    for count in (2, 8, 9, 17):
        decoder.crop(30)
        assert torch.equal(decoder.forward(ids[30 : 30 + count]), steps[:count]), count
    assert not LeanLlamaDecoder(tiny_llama(seed=5, layers=2).bfloat16()).rows_as_steps  # near-ties only
    assert not LeanLlamaDecoder(tiny_llama(seed=5, layers=2), quantization="int8").rows_as_steps


@pytest.mark.parametrize("tied", [False, True])
def test_release_frees_the_hf_weights_and_keeps_the_same_logits(tied: bool) -> None:
    model = tiny_llama(seed=7, tied=tied)
    ids = prompt_ids(30, seed=1)
    expected = LeanLlamaDecoder(model).forward(ids)
    before = sum(p.numel() for p in model.parameters())
    released = LeanLlamaDecoder(model, release=True)
    torch.testing.assert_close(released.forward(ids), expected, atol=0, rtol=0)
    remaining = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight.numel()
    assert all(isinstance(layer, torch.nn.Identity) for layer in model.model.layers)
    # Only the embedding table (shared with the lean decoder, and with the output when tied) and the final
    # norm are left.
    assert remaining == embed + model.config.hidden_size, (before, remaining)


class _StopAfter:
    """A cancel that fires at the `checks`-th time it is asked (a cancel arriving mid-prefill)."""

    def __init__(self, checks: int) -> None:
        self.left = checks

    def __call__(self) -> bool:
        self.left -= 1
        return self.left < 0


def test_an_interrupted_lean_prefill_resumes_from_the_layer_where_it_stopped(monkeypatch) -> None:
    import engine.lean

    monkeypatch.setattr(engine.lean, "INTERRUPTIBLE_CHUNK", 8)
    model = tiny_llama(seed=4)
    ids = prompt_ids(50, seed=3)
    expected = reference_logits(model, ids)
    decoder = LeanLlamaDecoder(model)
    # Two layers: pieces 1 and 2 pass their 2 checks each; piece 3 is stopped before its second layer.
    assert decoder.prefill_interruptibly(ids[:40], _StopAfter(5)) == 16
    assert decoder.cached_tokens == ids[:16]
    layers_run = []
    original = decoder._run

    def counting(token_ids, logits, should_stop=None, resume=None, two_pass_down=False):  # type: ignore[no-untyped-def]
        layers_run.append((len(token_ids), resume.layers if resume is not None else 0))
        return original(token_ids, logits, should_stop, resume, two_pass_down)

    decoder._run = counting  # type: ignore[method-assign]
    assert decoder.prefill_interruptibly(ids[16:40], lambda: False) == 24
    assert layers_run[0] == (8, 1)  # piece 3 went on from its second layer
    torch.testing.assert_close(decoder.forward(ids[40:50]), expected[40:50], atol=1e-4, rtol=1e-4)


def test_a_stopped_piece_serves_a_prompt_that_changed_after_its_start(monkeypatch) -> None:
    # Typing changes the end of the prompt: the part of the stopped piece before the change is kept.
    import engine.lean

    monkeypatch.setattr(engine.lean, "INTERRUPTIBLE_CHUNK", 8)
    model = tiny_llama(seed=4)
    ids = prompt_ids(30, seed=3)
    typed = ids[:12] + prompt_ids(18, seed=9)  # the same first 12 tokens, then others
    expected = reference_logits(model, typed)
    decoder = LeanLlamaDecoder(model)
    assert decoder.prefill_interruptibly(ids[:16], _StopAfter(3)) == 8  # piece 2 stopped after a layer
    assert decoder.prefill_interruptibly(typed[8:24], lambda: False) == 16
    torch.testing.assert_close(decoder.forward(typed[24:30]), expected[24:30], atol=1e-4, rtol=1e-4)


class _CancelAtCheck(CancelToken):
    """A cancel token that fires the `n`-th time the engine looks at it."""

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
def test_a_cancelled_sync_cache_keeps_its_prefix_and_the_next_call_reuses_it(build, monkeypatch) -> None:
    import engine.generation
    import engine.lean

    monkeypatch.setattr(engine.lean, "INTERRUPTIBLE_CHUNK", 8)
    monkeypatch.setattr(engine.generation, "PREFILL_PIECE", 8)
    decoder = make_decoder(build(seed=6))
    ids = prompt_ids(60, seed=4)
    assert sync_cache(decoder, ids, _CancelAtCheck(3)) == 0
    kept = len(decoder.cached_tokens)
    assert 0 < kept < len(ids) - 1 and decoder.cached_tokens == ids[:kept]
    assert sync_cache(decoder, ids) == kept  # the next call goes on from the kept prefix
    assert decoder.cached_tokens == ids[:-1]
