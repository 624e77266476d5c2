"""SmolLM2-135M in bf16, as the server runs it on a CPU with native bf16: speculative greedy output may leave
plain greedy output only where the plain run's two best logits nearly tie (`engine.precision`).

A verify over k + 1 positions and a one-token step round differently in bf16, so exact identity is a claim
only fp32 can make (`test_smollm2.py`). Skipped, with the command to run, where the model is not pulled.
"""

from __future__ import annotations

import pytest
import torch
from engine_core_support import FixedLength, ScriptedDrafter, assert_parts_only_at_a_near_tie

from engine.autoregressive import autoregressive_generate
from engine.catalog import is_pulled
from engine.drafters.lookup import PromptLookupDrafter
from engine.generation import DecodeSettings
from engine.precision import MarginRecorder
from engine.speculative import speculative_generate

NAME = "smollm2-135m"
pytestmark = [
    pytest.mark.skipif(
        not is_pulled(NAME), reason=f"{NAME} is not pulled: run `specls pull {NAME}` (scripts/setup.sh does)"
    ),
    pytest.mark.timeout(1200),  # bf16 is emulated, and slow, on a CPU without native bf16
]

PROMPTS = (
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "    def __add__(self, other):\n        return Point(self.x + other.x, self.y + other.y)\n\n",
    "import os\n\n\ndef read_lines(path):\n    with open(path) as handle:\n        return handle.readlines()\n\n\n",
)
NEW_TOKENS = 32


def test_bf16_speculative_greedy_leaves_plain_greedy_only_at_near_ties() -> None:
    from engine.service import LocalEngine

    torch.set_num_threads(1)
    engine = LocalEngine(target=NAME, device="cpu", dtype="bf16", max_context=1024, runtime="torch")
    assert engine.pair.dtype == torch.bfloat16
    decoder = engine.target
    settings = DecodeSettings(max_new_tokens=NEW_TOKENS)
    compared = accepted = 0
    for text in PROMPTS:
        prompt = engine.encode(text)
        decoder.crop(0)
        recorder = MarginRecorder(decoder)
        plain = autoregressive_generate(recorder, prompt, settings, decode=engine.decode)
        assert plain.token_ids and len(recorder.margins) == len(plain.token_ids)
        # wide verifies of the plain run's own continuation, corrupted now and then; and the real lookup drafter
        for drafter, length in (
            (ScriptedDrafter(prompt, plain.token_ids, corrupt_every=4), FixedLength(10)),
            (PromptLookupDrafter(min_ngram=1), FixedLength(8)),
        ):
            decoder.crop(0)
            speculative = speculative_generate(
                decoder, drafter, prompt, settings, length, decode=engine.decode
            )
            accepted += speculative.stats.accepted
            assert_parts_only_at_a_near_tie(plain.token_ids, speculative.token_ids, recorder.margins)
            compared += 1
    assert compared == 4
    assert accepted > NEW_TOKENS  # drafts were really accepted, so the comparison means something
