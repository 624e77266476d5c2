"""`specls bench gate-compare`: the two gates read from the recorded token probabilities of first lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.gate_compare import LEAST_LIKELY_TOKEN, LINE_PROBABILITY, compare_gates, gate_row, gate_value
from lsp_server.app.cli import main


def outcome(removed: str, exact: bool, probs: list[float], non_empty: bool = True) -> dict[str, object]:
    return {
        "position": f"a.py:{len(removed)}",
        "removed": removed,
        "suggestion": removed if exact else "x = 1",
        "non_empty": non_empty,
        "exact_first_line": exact,
        "first_line_token_probs": probs,
    }


OUTCOMES = [
    outcome("return total", True, [0.9, 0.9]),  # line 0.81, least likely 0.9
    outcome("for name in names:", True, [0.35, 0.35]),  # line 0.1225, least likely 0.35
    outcome("self.cache = {}", False, [0.5, 0.5, 0.5, 0.5]),  # line 0.0625, least likely 0.5: wrong
    outcome("pass", False, [0.08]),  # below both
    outcome("", False, [], non_empty=False),  # nothing suggested: never shown
]


def test_each_gate_reads_its_own_value() -> None:
    assert gate_value(LEAST_LIKELY_TOKEN, [0.9, 0.4, 0.8]) == pytest.approx(0.4)
    assert gate_value(LINE_PROBABILITY, [0.9, 0.4, 0.8]) == pytest.approx(0.288)
    assert gate_value(LINE_PROBABILITY, []) == 0.0


def test_the_line_probability_drops_a_long_unsure_line_the_least_likely_token_keeps() -> None:
    none, least, line = compare_gates(OUTCOMES, 0.3, [0.1])
    assert (none.shown, none.exact, none.positions) == (4, 2, 5)
    assert (least.shown, least.exact) == (3, 2)
    assert (line.shown, line.exact) == (2, 2)
    assert line.precision == 1.0 and least.precision == pytest.approx(2 / 3)
    assert line.recall == least.recall == pytest.approx(2 / 5)
    assert line.chars == len("return total") + len("for name in names:")
    assert gate_row(OUTCOMES, LINE_PROBABILITY, 0.5).exact == 1


def test_the_command_prints_each_result_and_all_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("one", "two"):
        (tmp_path / f"{name}.json").write_text(json.dumps({"models": [{"outcomes": OUTCOMES}]}))
    assert (
        main(
            ["bench", "gate-compare", str(tmp_path / "one.json"), str(tmp_path / "two.json"), "--line", "0.1"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "| all | line probability >= 0.1 | 10 | 4 | 4 | 100.0% | 40.0% |" in out
    assert "| one | least likely token >= 0.3 | 5 | 3 | 2 | 66.7% | 40.0% |" in out
    # a run from before the probabilities were recorded is refused, not read as all-zero
    old = [{k: v for k, v in o.items() if k != "first_line_token_probs"} for o in OUTCOMES]
    (tmp_path / "old.json").write_text(json.dumps({"models": [{"outcomes": old}]}))
    assert main(["bench", "gate-compare", str(tmp_path / "old.json")]) == 2
    assert "no first_line_token_probs" in capsys.readouterr().out
