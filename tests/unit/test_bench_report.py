"""The results tables of README.md and docs/performance.md are generated from bench/results/*.json
(`bench.report`): they must not drift, and a new result must flow into them."""

from __future__ import annotations

import json
from pathlib import Path

from bench import report


def test_the_tables_match_the_results_files() -> None:
    drifted = report.update(check=True)
    assert not drifted, f"run `specls bench report`: {[str(p) for p in drifted]} drifted from bench/results"


def _keystrokes(date: str, ghost: float, load: float) -> dict[str, object]:
    return {
        "benchmark": "keystrokes",
        "date_utc": date,
        "load_average": {"start": load, "end": load, "cpus": 2},
        "config": {"backend": "local", "target": "qwen2.5-coder-0.5b", "count": 3, "files": []},
        "summary": {
            "ghost_on_screen": ghost,
            "chars_saved": 0.1,
            "suggestion_latency_ms": {"p50": 2.0, "p95": 100.0},
            "server": {"cancel_to_idle_ms": {"p95": 15.0}},
        },
        "cpu_class": "AVX2-only",
    }


def test_a_new_result_replaces_the_older_answer_to_its_question(tmp_path: Path) -> None:
    (tmp_path / "keystrokes-a.json").write_text(json.dumps(_keystrokes("2026-12-01T00:00:00Z", 0.2, 3.0)))
    (tmp_path / "keystrokes-b.json").write_text(json.dumps(_keystrokes("2026-12-02T00:00:00Z", 0.6, 0.5)))
    (tmp_path / "keystrokes-x-old-decider.json").write_text(
        json.dumps(_keystrokes("2026-12-09T00:00:00Z", 1, 1))
    )
    rows = report.rows(tmp_path)
    assert [row.file for row in rows] == ["keystrokes-b.json"]
    assert rows[0].cpu_class == "AVX2-only" and "load 0.5-0.5" in rows[0].load
    assert "60.0% of keys" in rows[0].answer
    table = report.tables(rows)
    assert "**AVX2-only**" in table and "keystrokes-b.json" in table


def test_the_cpu_class_comes_from_the_record_else_from_what_the_run_implies() -> None:
    assert report.cpu_class_of({"cpu_class": "AVX2-only (emulated: ...)"}, "x") == "AVX2-only"
    assert report.cpu_class_of({}, "decode-speed-qwen05-bf16-amx-cpu") == "AMX/AVX512-BF16"
    assert report.cpu_class_of({"environment": {"device": "cuda"}}, "x") == "GPU"
    assert report.cpu_class_of({"environment": {"device": "cpu", "dtype": "float32"}}, "x") == (
        "CPU class not recorded"
    )
