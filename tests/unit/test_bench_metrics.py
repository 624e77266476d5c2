"""The benchmark report arithmetic: percentiles, speed-up theory, alpha estimate, identity check."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from bench.draft_length import RecordingPolicy, RoundRecord, acceptance_by_context
from bench.metrics import (
    alpha_from_rounds,
    expected_tokens_per_round,
    markdown_table,
    median,
    percentile,
    theoretical_speedup,
)
from bench.throughput import Run, summarize, verify_cost_at
from engine.api import DraftChoice, DraftContext
from lsp_server.context import syntax_context_of


def test_median_and_percentiles() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median([]) is None
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 100.0
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([], 50) is None
    # Infinite entries (requests that never got an answer) rank last and never turn into nan.
    assert percentile([1.0, math.inf, math.inf], 50) == math.inf
    assert percentile([1.0, 2.0, math.inf], 50) == 2.0
    assert percentile([1.0, 2.0, math.inf], 75) == math.inf
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_expected_tokens_per_round_matches_the_geometric_sum() -> None:
    alpha, k = 0.7, 5
    assert expected_tokens_per_round(alpha, k) == pytest.approx(sum(alpha**i for i in range(k + 1)))
    assert expected_tokens_per_round(1.0, 4) == 5
    assert expected_tokens_per_round(0.0, 4) == 1


def test_theoretical_speedup_is_the_papers_formula() -> None:
    # alpha 0.8, k 4, c 0.05: 3.3616 tokens per round for 1.2 target steps.
    s = theoretical_speedup(0.8, 4, 0.05)
    assert s == pytest.approx((1 - 0.8**5) / (0.2 * (4 * 0.05 + 1)))
    assert s == pytest.approx(3.3616 / 1.2)
    # A verify that costs 1.5 target steps shrinks the same speed-up by the same factor.
    assert theoretical_speedup(0.8, 4, 0.05, verify_cost=1.5) == pytest.approx(
        (1 - 0.8**5) / (0.2 * (4 * 0.05 + 1.5))
    )
    assert theoretical_speedup(0.0, 4, 0.0) == 1.0  # nothing accepted, free drafts: no gain, no loss


@pytest.mark.parametrize("alpha", [0.05, 0.3, 0.6, 0.9, 0.99])
@pytest.mark.parametrize("k", [1, 3.5, 8])
def test_alpha_from_rounds_inverts_the_expected_yield(alpha: float, k: float) -> None:
    assert alpha_from_rounds(expected_tokens_per_round(alpha, k), k) == pytest.approx(alpha, abs=1e-9)


def test_alpha_from_rounds_edges() -> None:
    assert alpha_from_rounds(1.0, 4) == 0.0
    assert alpha_from_rounds(5.0, 4) == 1.0
    assert alpha_from_rounds(3.0, 0) == 0.0


def test_markdown_table_formats_missing_and_float_cells() -> None:
    table = markdown_table(["a", "b"], [[None, 0.123456], ["x", 12345.6]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| - | 0.123 |", "| x | 12346 |"]


def test_verify_cost_interpolates_between_measured_widths() -> None:
    costs = {"2": 1.4, "4": 1.6}
    assert verify_cost_at(costs, 0) == 1.0
    assert verify_cost_at(costs, 1) == pytest.approx(1.2)
    assert verify_cost_at(costs, 3) == pytest.approx(1.5)
    assert verify_cost_at(costs, 10) == 1.6  # beyond the widest measurement: the widest cost


def _run(method: str, prompt: str, wall: float, ids: list[int], **stats: object) -> Run:
    return Run(method, prompt, wall, len(ids), ids, dict(stats))


def test_summarize_ratios_acceptance_and_mismatches() -> None:
    step_costs = {"c": {"model": 0.25, "lookup": 0.0, "suffix": 0.0}, "verify_cost": {"4": 1.0}}
    spec_stats = {"target_forwards": 2, "drafted": 8, "accepted": 6, "per_drafter": {"model": {"drafted": 8}}}
    runs = [
        _run("autoregressive", "p1", 1.0, [1, 2, 3, 4, 5, 6, 7, 8]),
        _run("speculative-model", "p1", 0.5, [1, 2, 3, 4, 5, 6, 7, 8], **spec_stats),
        _run("autoregressive", "p2", 2.0, [1, 2, 3, 4, 5, 6, 7, 8]),
        _run("speculative-model", "p2", 0.5, [1, 2, 3, 4, 5, 6, 7, 9], **spec_stats),
    ]
    summary = summarize(runs, step_costs, ("autoregressive", "speculative-model"))
    spec = summary["speculative-model"]
    assert summary["autoregressive"]["ratio_to_autoregressive_median"] == 1.0
    assert spec["ratio_to_autoregressive_median"] == pytest.approx(3.0)  # median of 2x and 4x
    assert spec["tokens_per_s_median"] == pytest.approx(16.0)
    assert spec["mean_draft_length"] == 4 and spec["mean_accepted_length"] == 3
    assert spec["tokens_per_round"] == 4
    assert spec["alpha"] == pytest.approx(alpha_from_rounds(4, 4))
    assert spec["c"] == 0.25
    assert spec["theoretical_speedup"] == pytest.approx(theoretical_speedup(spec["alpha"], 4, 0.25))
    assert spec["outputs_identical_to_autoregressive"] is False
    assert spec["mismatches"] == [{"prompt": "p2", "first_difference_at": 7}]
    assert not math.isnan(spec["theoretical_speedup_measured_verify"])


class _Fixed:
    def __init__(self) -> None:
        self.observed: list[tuple[str, int, int]] = []

    def choose(self, options: Sequence[DraftContext]) -> DraftChoice:
        return DraftChoice(0, 4)

    def observe(self, drafter: str, num_drafted: int, num_accepted: int) -> None:
        self.observed.append((drafter, num_drafted, num_accepted))


def test_recording_policy_names_contexts_and_forwards_observations() -> None:
    inner = _Fixed()
    policy = RecordingPolicy(inner, syntax_context_of)
    for text_before, drafted, accepted in (("x = 1\n", 4, 4), ("foo(", 4, 1), ("a +", 3, 0)):
        assert policy.choose([DraftContext(text_before, "", "model", False)]) == DraftChoice(0, 4)
        policy.observe("model", drafted, accepted)
    assert [r.syntax_context for r in policy.rounds] == ["indentation", "after-open", "after-operator"]
    assert inner.observed == [("model", 4, 4), ("model", 4, 1), ("model", 3, 0)]


def test_acceptance_by_context_counts_held_drafts() -> None:
    rounds = [
        RoundRecord("indentation", "model", 16, 8, 8),
        RoundRecord("indentation", "model", 16, 4, 1),
        RoundRecord("indentation", "model", 16, 0, 0),  # nothing drafted: not a round of this drafter
        RoundRecord("statement-start", "model", 16, 2, 0),
    ]
    table = acceptance_by_context(rounds)
    assert list(table) == ["model / indentation", "model / statement-start"]
    indentation = table["model / indentation"]
    assert indentation["rounds"] == 2 and indentation["acceptance"] == pytest.approx(9 / 12)
    assert indentation["held_at_least"] == {"2": 0.5, "4": 0.5, "8": 1.0, "16": None, "32": None}
    assert table["model / statement-start"]["held_at_least"]["2"] == 0.0


def test_repetition_share_counts_tokens_inside_an_ngram_seen_before() -> None:
    from bench.metrics import repetition_share

    assert repetition_share([]) == 0.0
    assert repetition_share(list(range(20))) == 0.0  # never repeats
    # 1 2 3 4 1 2 3 4: the second 4-gram "1 2 3 4" repeats the first, so its 4 tokens count.
    assert repetition_share([1, 2, 3, 4, 1, 2, 3, 4]) == 0.5
    # a loop: everything after the first period is a repeat
    loop = [7, 8, 9] * 10
    assert repetition_share(loop) == (len(loop) - 3) / len(loop)
    assert repetition_share([1, 2, 3, 1, 2, 3], n=3) == 0.5
    with pytest.raises(ValueError):
        repetition_share([1], n=0)


def test_summarize_splits_prefill_from_decode_for_engine_and_llama_server_runs() -> None:
    runs = [
        _run("autoregressive", "p1", 3.0, [1, 2, 3, 4], prompt_tokens=100, prefill_s=2.0, decode_s=1.0),
        _run("autoregressive", "p2", 3.0, [1, 2, 3, 4], prompt_tokens=300, prefill_s=2.0, decode_s=1.0),
        _run("llama-server", "p1", 5.0, [1, 2, 3, 4], prompt_n=100, prompt_ms=4000.0, predicted_ms=400.0),
        _run("hf-greedy", "p1", 1.0, [1, 2, 3, 4]),
    ]
    summary = summarize(runs, {"c": {}, "verify_cost": {}}, ("autoregressive", "llama-server", "hf-greedy"))
    assert summary["autoregressive"]["prefill_tokens_per_s"] == pytest.approx(100.0)  # 400 tokens in 4 s
    assert summary["autoregressive"]["decode_ms_per_token"] == pytest.approx(250.0)  # 2 s over 8 tokens
    assert summary["llama-server"]["prefill_tokens_per_s"] == pytest.approx(25.0)
    assert summary["llama-server"]["decode_ms_per_token"] == pytest.approx(100.0)
    assert "decode_ms_per_token" not in summary["hf-greedy"]  # transformers' generate reports no split
