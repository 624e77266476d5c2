"""The engine on a real pretrained model: SmolLM2-135M as `specls pull smollm2-135m` converts it.

Skipped, with the command to run, where the model is not pulled (scripts/setup.sh pulls it, so CI runs
these). In fp32 every drafter's greedy output must equal plain decoding token for token; sampling through
the speculative loop must follow the target's warped law (the chi-square check of
`sampling_support`; `test_drafters_sampling_loop` holds the negative control that shows it can fail).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from engine_core_support import FixedLength
from sampling_support import MemoDecoder, chi_square_against

from engine.api import CompletionRequest
from engine.catalog import is_pulled
from engine.drafters.lookup import PromptLookupDrafter
from engine.generation import DecodeSettings
from engine.speculative import speculative_generate
from engine.verify import warp_logits

NAME = "smollm2-135m"
pytestmark = [
    pytest.mark.skipif(
        not is_pulled(NAME), reason=f"{NAME} is not pulled: run `specls pull {NAME}` (scripts/setup.sh does)"
    ),
    pytest.mark.timeout(1200),  # a 135M-parameter model on one CPU thread: ~40 ms a step when unshared
]

# Code with repetition, so the copying drafters have something to propose.
PROMPTS = (
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "    def __add__(self, other):\n        return Point(self.x + other.x, self.y + other.y)\n\n"
    "    def __sub__(self, other):\n",
    "import os\n\n\ndef read_lines(path):\n    with open(path) as handle:\n        return handle.readlines()\n\n\n"
    "def write_lines(path, lines):\n    with open(path, 'w') as handle:\n",
    "SETTINGS = {\n    'host': 'localhost',\n    'port': 8080,\n    'debug': False,\n}\n\n"
    "DEFAULTS = {\n    'host': ",
)
SUFFIX = "\n\n    def __mul__(self, k):\n        return Point(self.x * k, self.y * k)\n"
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def engine() -> Any:
    from engine.service import LocalEngine

    torch.set_num_threads(1)
    # The torch runtime: the fp32 identity is a claim about it (the GGUF beside the model is Q4_1 for llama.cpp).
    # quantization "none": `auto` would run W8A8 for an fp32 model of this size. keep_hf_model: the sampling
    # test runs the HF module itself as its reference.
    return LocalEngine(
        target=NAME,
        device="cpu",
        dtype="fp32",
        max_context=1024,
        runtime="torch",
        quantization="none",
        keep_hf_model=True,
    )


def complete(engine: Any, prompt: str, drafter: str, **extra: Any) -> Any:
    return engine.complete(
        CompletionRequest(prompt=prompt, max_new_tokens=NEW_TOKENS, drafter=drafter, **extra)
    )


def test_the_pulled_model_loads_without_a_draft_model_in_fp32(engine: Any) -> None:
    info = engine.info()
    assert info.draft is None and engine.draft_decoder is None
    assert engine.pair.dtype == torch.float32 and engine.pair.target.num_parameters() == 134_515_008
    assert engine.runtime.weights == "fp32" and engine.target.rows_as_steps  # exact verify rows
    assert not any("fim" in token for token in info.special_tokens)  # prefix-only prompts
    assert {0, 2} <= engine.eos_ids  # <|endoftext|> and <|im_end|> both end a completion
    with pytest.raises(ValueError, match="needs a draft model"):
        complete(engine, PROMPTS[0], "model")


def test_every_drafter_is_token_identical_to_plain_greedy_in_fp32(engine: Any) -> None:
    accepted = 0
    for prompt in PROMPTS[:2]:
        plain = complete(engine, prompt, "none")
        assert plain.token_ids, "plain decoding produced nothing"
        stale = engine.decode(plain.token_ids[: NEW_TOKENS // 2]) + " wrong tail"
        runs = {
            "lookup": complete(engine, prompt, "lookup"),
            "suffix": complete(engine, prompt, "suffix", suffix=SUFFIX),
            "stale": complete(engine, prompt, "stale", previous_completion=stale),
            "hybrid": complete(engine, prompt, "hybrid", suffix=SUFFIX, previous_completion=stale),
        }
        for drafter, result in runs.items():
            assert result.token_ids == plain.token_ids, f"{drafter} differs on {prompt[-30:]!r}"
            assert result.finish_reason == plain.finish_reason
            accepted += result.stats.accepted
    assert accepted > NEW_TOKENS  # drafts were really accepted, so the identity means something


def test_sampling_through_the_loop_follows_the_real_models_law(engine: Any) -> None:
    """Two sampled tokens (temperature 1, top-k 3: at most 9 joint outcomes) with lookup drafts."""
    prompt = engine.encode(PROMPTS[2])
    target = MemoDecoder(engine.pair.target, max_length=1024)
    top_k, new_tokens, trials = 3, 2, 1500
    counts: Counter[tuple[int, ...]] = Counter()
    drafted = 0
    for trial in range(trials):
        settings = DecodeSettings(max_new_tokens=new_tokens, temperature=1.0, top_k=top_k, seed=trial)
        result = speculative_generate(
            target,
            PromptLookupDrafter(min_ngram=1),
            list(prompt),
            settings,
            FixedLength(2),
            decode=engine.decode,
        )
        counts[tuple(result.token_ids)] += 1
        drafted += result.stats.drafted
    assert drafted >= trials // 2  # the lookup drafter really proposed
    joint: dict[tuple[int, ...], float] = {}
    first = warp_logits(target.next_logits(tuple(prompt)), 1.0, top_k=top_k)
    for a in first.nonzero().flatten().tolist():
        second = warp_logits(target.next_logits((*prompt, a)), 1.0, top_k=top_k)
        for b in second.nonzero().flatten().tolist():
            joint[(a, b)] = float(first[a]) * float(second[b])
    assert set(counts) <= set(joint), "a sampled pair the warped target forbids"
    chi_square_against(counts, joint)
