"""The engine reports how sure the target was of each token it generated (`CompletionResult.token_probs`,
`token_ends`), the same in the plain and the speculative loop, without changing what it generates."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from engine_core_support import ScriptedDrafter, decode, hf_greedy, local_engine, prompt_ids, tiny_llama

from engine.api import CompletionRequest, ConfidenceReader
from engine.autoregressive import autoregressive_generate
from engine.drafters.length import FixedDraftPolicy
from engine.generation import DecodeSettings
from engine.hf_decoder import make_decoder
from engine.speculative import speculative_generate

NEW_TOKENS = 20


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _target_probs(model: torch.nn.Module, prompt: list[int], generated: list[int]) -> list[float]:
    """The target's own probability of each generated token: one forward over the whole sequence."""
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + generated])).logits[0].float()
    rows = logits[len(prompt) - 1 : len(prompt) - 1 + len(generated)]
    return rows.softmax(-1)[torch.arange(len(generated)), torch.tensor(generated)].tolist()


def test_both_loops_report_the_targets_probability_of_each_token() -> None:
    model = tiny_llama(seed=3)
    prompt = prompt_ids(12, seed=3)
    expected = hf_greedy(model, prompt, NEW_TOKENS)
    settings = DecodeSettings(max_new_tokens=NEW_TOKENS)
    baseline = autoregressive_generate(make_decoder(model), prompt, settings, decode=decode)
    assert baseline.token_ids == expected
    want = _target_probs(model, prompt, expected)
    assert baseline.token_probs == pytest.approx(want, abs=1e-5)
    # greedy picks the argmax, so every probability is a real one, and at least 1 / vocabulary
    assert all(0 < p <= 1 for p in baseline.token_probs)
    assert baseline.token_ends == [len(decode(expected[: i + 1])) for i in range(len(expected))]
    for k in (1, 4):
        drafter = ScriptedDrafter(prompt, expected, corrupt_every=3)
        spec = speculative_generate(
            make_decoder(model), drafter, prompt, settings, FixedDraftPolicy(k), decode=decode
        )
        assert spec.token_ids == expected  # still lossless
        assert spec.token_probs == pytest.approx(want, abs=1e-5), f"k={k}"
        assert spec.token_ends == baseline.token_ends


class Gate:
    """A stop check that ends the text at 0 once any token's probability falls below `threshold`."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.seen: list[tuple[list[float], list[int]]] = []

    def read_token_probs(self, token_probs: Sequence[float], token_ends: Sequence[int]) -> None:
        self.seen.append((list(token_probs), list(token_ends)))

    def __call__(self, text: str) -> int | None:
        probs, _ = self.seen[-1]
        return 0 if min(probs) < self.threshold else None


def test_a_confidence_reading_stop_check_cuts_both_loops_at_the_same_token() -> None:
    model = tiny_llama(seed=5)
    engine = local_engine(model, tiny_llama(seed=6))
    prompt_text = decode(prompt_ids(20, seed=5))
    plain = engine.complete(CompletionRequest(prompt_text, max_new_tokens=NEW_TOKENS, drafter="none"))
    assert len(plain.token_probs) == len(plain.token_ids) > 3
    # a threshold just above the lowest probability among the first tokens: the cut comes at that token
    lowest = min(range(len(plain.token_probs)), key=lambda i: plain.token_probs[i])
    threshold = plain.token_probs[lowest] * 1.001
    results = {}
    for drafter in ("none", "model", "hybrid"):
        gate = Gate(threshold)
        assert isinstance(gate, ConfidenceReader)
        request = CompletionRequest(
            prompt_text,
            max_new_tokens=NEW_TOKENS,
            drafter=drafter,
            stop_check=gate,
            draft_policy=None if drafter == "none" else FixedDraftPolicy(4),
        )
        result = engine.complete(request)
        assert result.finish_reason == "stop" and result.text == ""
        # the check saw the tokens one at a time, probabilities and ends aligned, up to the unsure one
        assert [len(probs) for probs, _ in gate.seen] == list(range(1, lowest + 2))
        assert all(len(probs) == len(ends) for probs, ends in gate.seen)
        results[drafter] = gate.seen[-1][0]
    assert results["model"] == pytest.approx(results["none"], abs=1e-5)
    assert results["hybrid"] == pytest.approx(results["none"], abs=1e-5)
