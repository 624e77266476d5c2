"""The real code pair in bf16, as `auto` runs it on a CPU with native bf16 (AVX512-BF16 or AMX): every
drafter's greedy output may leave plain greedy output only where the plain run's two best logits nearly tie
(`engine.precision`), on Qwen2.5-Coder-0.5B alone and on the 1.5B target drafted by the 0.5B model (int4
draft steps, bf16 prompt reading: the draft's precision changes only acceptance).

A verify over k + 1 positions and a one-token step round differently in bf16, so exact identity is a claim
only fp32 can make (`test_qwen_coder.py`, `test_qwen_pair.py`). Skipped where a model is not pulled, and on
a CPU without native bf16, where `auto` never picks bf16 (and emulated bf16 on the 1.5B model would take
most of an hour).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from engine_core_support import FixedLength, assert_parts_only_at_a_near_tie
from test_qwen_coder import LARGE, PROMPTS, SMALL, drafter_inputs, needs

from engine.api import CompletionRequest
from engine.autoregressive import autoregressive_generate
from engine.generation import DecodeSettings
from engine.models import cpu_bf16_support
from engine.precision import MarginRecorder

NEW_TOKENS = 32
pytestmark = [
    pytest.mark.skipif(not cpu_bf16_support()[0], reason="no native bf16 on this CPU: auto runs fp32 here"),
    pytest.mark.timeout(1800),
]


def load_bf16(target: str, draft: str) -> Any:
    from engine.service import LocalEngine

    torch.set_num_threads(2)
    engine = LocalEngine(target=target, draft=draft, device="cpu", dtype="bf16", max_context=1024)
    assert engine.pair.dtype == torch.bfloat16
    return engine


def check_every_drafter(engine: Any, drafters: tuple[str, ...]) -> int:
    """Each drafter (its own policy and a fixed length of 8) against plain greedy with its margins; returns
    the drafted tokens accepted, so a caller can check the comparison meant something."""
    settings = DecodeSettings(max_new_tokens=NEW_TOKENS, eos_ids=engine.eos_ids)
    accepted = 0
    for text in PROMPTS:
        engine.target.crop(0)
        recorder = MarginRecorder(engine.target)
        plain = autoregressive_generate(recorder, engine.encode(text), settings, decode=engine.decode)
        assert len(plain.token_ids) >= 8 and len(recorder.margins) == len(plain.token_ids)
        extra = drafter_inputs(engine, plain.token_ids)
        for drafter in drafters:
            for policy in ({}, {"draft_policy": FixedLength(8)}):
                request = CompletionRequest(
                    prompt=text,
                    max_new_tokens=NEW_TOKENS,
                    drafter=drafter,
                    **extra.get(drafter, {}),
                    **policy,
                )
                result = engine.complete(request)
                assert_parts_only_at_a_near_tie(plain.token_ids, list(result.token_ids), recorder.margins)
                accepted += result.stats.accepted
    return accepted


@needs(SMALL)
def test_bf16_every_drafter_leaves_plain_greedy_only_at_near_ties_on_the_small_model() -> None:
    accepted = check_every_drafter(load_bf16(SMALL, "none"), ("lookup", "suffix", "stale", "hybrid"))
    assert accepted > NEW_TOKENS


@needs(SMALL, LARGE)
def test_bf16_the_pair_leaves_plain_greedy_only_at_near_ties() -> None:
    engine = load_bf16(LARGE, SMALL)
    assert engine.draft_runtime is not None and engine.draft_runtime.weights == "bf16 + int4 weights"
    accepted = check_every_drafter(engine, ("model", "lookup", "hybrid"))
    assert accepted > NEW_TOKENS
