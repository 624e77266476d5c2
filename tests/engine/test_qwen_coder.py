"""The engine on the real code pair: Qwen2.5-Coder 0.5B and 1.5B as `specls pull` converts them.

Skipped, with the command to run, where a model is not pulled (`scripts/setup.sh --dev` pulls both, so CI
runs these). In fp32:
- the lean decoder's greedy output equals transformers' own `generate` on the same weights;
- every drafter's greedy output equals plain decoding token for token, on the 0.5B model alone and on the
  1.5B target drafted by the 0.5B model (the pair), and drafts are really accepted;
- every Qwen special token ends a completion and none reaches the text.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from engine_core_support import FixedLength

from engine.api import CompletionRequest
from engine.catalog import CATALOG, is_pulled

SMALL, LARGE = "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"


def needs(*names: str) -> pytest.MarkDecorator:
    missing = [name for name in names if not is_pulled(name)]
    return pytest.mark.skipif(
        bool(missing), reason=f"not pulled: run `specls pull {' '.join(missing)}` (setup.sh --dev does)"
    )


pytestmark = [pytest.mark.timeout(1800)]

# Code with repetition and a suffix, so every copying drafter has something to propose.
PROMPTS = (
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "    def __add__(self, other):\n        return Point(self.x + other.x, self.y + other.y)\n\n"
    "    def __sub__(self, other):\n",
    "import os\n\n\ndef read_lines(path):\n    with open(path) as handle:\n        return handle.readlines()\n\n\n"
    "def write_lines(path, lines):\n    with open(path, 'w') as handle:\n",
)
SUFFIX = "\n\n    def __mul__(self, k):\n        return Point(self.x * k, self.y * k)\n"
NEW_TOKENS = 24
QWEN_SPECIALS = CATALOG[SMALL].end_tokens


def load(target: str, draft: str, keep_hf_model: bool = False, draft_quantization: str = "auto") -> Any:
    """The engine as the server loads it, in plain fp32 (the exact reference; `auto` would pick W8A8, which
    parts only at near-ties): HF weights released once the lean decoders hold them, unless a test runs the HF
    module itself (`keep_hf_model`); draft weights as `auto` picks for this CPU unless named."""
    from engine.service import LocalEngine

    torch.set_num_threads(2)
    return LocalEngine(
        target=target,
        draft=draft,
        device="cpu",
        dtype="fp32",
        max_context=1024,
        runtime="torch",
        quantization="none",
        keep_hf_model=keep_hf_model,
        draft_quantization=draft_quantization,
    )


@pytest.fixture(scope="module")
def small() -> Any:
    return load(SMALL, "none", keep_hf_model=True)  # transformers' generate is the reference below


def complete(engine: Any, prompt: str, drafter: str, **extra: Any) -> Any:
    return engine.complete(
        CompletionRequest(prompt=prompt, max_new_tokens=NEW_TOKENS, drafter=drafter, **extra)
    )


def drafter_inputs(engine: Any, plain_ids: list[int]) -> dict[str, dict[str, Any]]:
    """What each copying drafter copies from, per drafter: the text after the cursor, and an earlier
    suggestion whose first half is right (the plain run's own tokens) and whose tail is wrong."""
    stale = engine.decode(plain_ids[: NEW_TOKENS // 2]) + " wrong tail"
    return {
        "suffix": {"suffix": SUFFIX},
        "stale": {"previous_completion": stale},
        "hybrid": {"suffix": SUFFIX, "previous_completion": stale},
    }


def identical_for_every_drafter(
    engine: Any, drafters: tuple[str, ...], **request: Any
) -> dict[str, list[int]]:
    """Asserts each drafter's output equals plain greedy on every prompt; returns each drafter's
    [accepted, drafted] tokens."""
    counts = {drafter: [0, 0] for drafter in drafters}
    for prompt in PROMPTS:
        plain = complete(engine, prompt, "none")
        assert len(plain.token_ids) >= 8, "plain decoding produced (almost) nothing"
        extra = drafter_inputs(engine, plain.token_ids)
        for drafter in drafters:
            result = complete(engine, prompt, drafter, **extra.get(drafter, {}), **request)
            assert result.token_ids == plain.token_ids, f"{drafter} differs on {prompt[-30:]!r}"
            assert result.finish_reason == plain.finish_reason
            counts[drafter][0] += result.stats.accepted
            counts[drafter][1] += result.stats.drafted
    return counts


@needs(SMALL)
def test_the_lean_decoder_equals_transformers_generate_on_qwen2(small: Any) -> None:
    assert small.runtime.runtime == "lean", small.runtime.describe()  # qwen2 runs on the lean path
    prompt_ids = small.encode(PROMPTS[0])
    ours = complete(small, PROMPTS[0], "none")
    model = small.pair.target
    with torch.inference_mode():
        reference = model.generate(
            torch.tensor([prompt_ids]),
            max_new_tokens=len(ours.token_ids),
            do_sample=False,
            eos_token_id=sorted(small.eos_ids),
            pad_token_id=small.tokenizer.pad_token_id,
        )[0, len(prompt_ids) :].tolist()
    assert ours.token_ids == reference
    assert len(ours.token_ids) >= 8


@needs(SMALL)
def test_every_qwen_special_token_ends_a_completion_and_none_reaches_the_text(small: Any) -> None:
    vocab = small.tokenizer.get_vocab()
    for token in QWEN_SPECIALS:
        assert vocab[token] in small.eos_ids, token
        assert len(small.encode(token)) == 1, f"{token} does not tokenize as one special id"
        assert small.decode([vocab["x"], vocab[token]]) == "x"
    assert small.info().special_tokens  # the server's marker filter reads these
    assert {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"} <= set(small.info().special_tokens)


@needs(SMALL)
def test_every_drafter_is_token_identical_to_plain_greedy_on_the_small_model(small: Any) -> None:
    counts = identical_for_every_drafter(small, ("lookup", "suffix", "stale", "hybrid"))
    assert sum(accepted for accepted, _ in counts.values()) > NEW_TOKENS  # the identity means something


@needs(SMALL)
def test_a_draft_with_int8_weights_leaves_fp32_greedy_output_unchanged() -> None:
    """The draft's precision changes only acceptance: the 0.5B model drafting for itself with int8 weights
    (accepted often, rejected where int8 moves its argmax) gives plain fp32 greedy output token for token."""
    engine = load(SMALL, SMALL, draft_quantization="int8")
    assert engine.draft_runtime is not None and engine.draft_runtime.weights == "fp32 + int8 weights"
    assert all(isinstance(layer, torch.nn.Identity) for layer in engine.pair.target.model.layers)  # released
    accepted = 0
    for prompt in PROMPTS:
        plain = complete(engine, prompt, "none")
        # A fixed length: the learned policy rightly stops drafting where an int8 step costs more than a
        # target step (AVX2 CPUs), and this test needs drafts to check.
        drafted = complete(engine, prompt, "model", draft_policy=FixedLength(4))
        assert drafted.token_ids == plain.token_ids, prompt[-30:]
        accepted += drafted.stats.accepted
    assert accepted > NEW_TOKENS
