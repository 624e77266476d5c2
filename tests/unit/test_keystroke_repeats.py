"""`specls bench keystrokes --repeat N`: the table of repeated runs, and the command through the fake backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.keystrokes_repeats import repeat_summary, repeats_markdown, spread
from lsp_server.app.cli import build_parser


def _summary(ghost: float, saved: float, stale: int, p50: float | None) -> dict[str, object]:
    return {
        "ghost_on_screen": ghost,
        "ghost_right": ghost / 2,
        "chars_saved": saved,
        "server": {"empty_reasons": {"stale-context": stale, "generated-nothing": 9}},
        "suggestion_latency_ms": {"p50": p50, "p95": None},
    }


def test_spread_is_over_the_runs_that_measured_something() -> None:
    assert spread([0.5, None, 0.7]) == {"mean": pytest.approx(0.6), "min": 0.5, "max": 0.7}
    assert spread([None, None]) == {"mean": None, "min": None, "max": None}


def test_the_table_holds_each_run_and_its_spread() -> None:
    table = repeat_summary(
        [_summary(0.60, 0.136, 98, 4.0), _summary(0.52, 0.121, 149, None), _summary(0.65, 0.145, 80, 6.0)]
    )
    ghost = table["ghost text on screen when the next key came"]
    assert ghost["runs"] == [0.60, 0.52, 0.65] and (ghost["min"], ghost["max"]) == (0.52, 0.65)
    assert table["answered empty as stale"]["mean"] == pytest.approx((98 + 149 + 80) / 3)
    assert table["key press -> suggestion p50"]["mean"] == pytest.approx(5.0)
    markdown = repeats_markdown("t", ["keystrokes-t-run1.md"], table)
    assert (
        "| characters saved by Tab / accept-line | 13.6% | 12.1% | 14.5% | 13.4% | 12.1% - 14.5% |"
        in markdown
    )
    assert "| key press -> suggestion p95 | - | - | - | - | - - - |" in markdown


@pytest.mark.slow  # two real `specls serve` subprocesses behind a pygls client
def test_repeat_runs_the_replay_twice_and_writes_the_table(tmp_path: Path) -> None:
    lines = [f"x{i} = {i}" for i in range(30)] + ["def add(a, b):", "    return a + b"] + ["y = 1"] * 12
    source = tmp_path / "sample.py"
    source.write_text("\n".join(lines) + "\n")
    fake = json.dumps({"rules": [["def add(", "a, b):\n    return a + b"]]})
    arguments = ["bench", "keystrokes", "--backend", "fake", "--file", str(source), "--chars", "30"]
    arguments += ["--pace-ms", "30", "--line-pause-ms", "60", "--probes", "0", "--setting", f"fake={fake}"]
    arguments += ["--repeat", "2", "--tag", "fk", "--out", str(tmp_path), "--quiet"]
    args = build_parser().parse_args(arguments)
    assert args.bench_command(args) == 0
    for run in (1, 2):
        assert (
            json.loads((tmp_path / f"keystrokes-fk-run{run}.json").read_text())["summary"]["key_presses"] > 0
        )
    table = json.loads((tmp_path / "keystrokes-fk-repeats.json").read_text())["measures"]
    saved = table["characters saved by Tab / accept-line"]
    assert len(saved["runs"]) == 2 and all(value > 0 for value in saved["runs"])
    assert "keystrokes-fk-run2.md" in (tmp_path / "keystrokes-fk-repeats.md").read_text()
