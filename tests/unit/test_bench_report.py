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


def test_a_repeat_with_another_seed_keeps_its_own_row(tmp_path: Path) -> None:
    first = _keystrokes("2026-12-01T00:00:00Z", 0.2, 1.0)
    repeat = _keystrokes("2026-12-02T00:00:00Z", 0.6, 1.0)
    repeat["config"] = {**repeat["config"], "seed": 1}  # type: ignore[dict-item]
    (tmp_path / "keystrokes-a.json").write_text(json.dumps(first))
    (tmp_path / "keystrokes-a-seed1.json").write_text(json.dumps(repeat))
    rows = report.rows(tmp_path)
    assert sorted(row.file for row in rows) == ["keystrokes-a-seed1.json", "keystrokes-a.json"]
    assert any(row.question.endswith(", seed 1") for row in rows)


def test_a_replay_of_other_code_keeps_its_own_row_beside_this_projects(tmp_path: Path) -> None:
    own = _keystrokes("2026-12-01T00:00:00Z", 0.7, 1.0)
    own["config"] = {**own["config"], "files": ["lsp_server/documents.py", "engine/speculative.py"]}  # type: ignore[dict-item]
    other = _keystrokes("2026-12-02T00:00:00Z", 0.5, 1.0)
    other["config"] = {**other["config"], "files": ["src/agents/guardrail.py", "src/agents/x/computer.py"]}  # type: ignore[dict-item]
    (tmp_path / "keystrokes-own.json").write_text(json.dumps(own))
    (tmp_path / "keystrokes-other.json").write_text(json.dumps(other))
    questions = sorted(row.question for row in report.rows(tmp_path))
    assert [q.rsplit(", ", 1)[-1] for q in questions] == [
        "2 given files under src/agents/",
        "2 of this project's files",
    ]


def test_the_cpu_class_comes_from_the_record_else_from_what_the_run_implies() -> None:
    # An emulated class is its own table, never mistaken for the real one.
    assert report.cpu_class_of({"cpu_class": "AVX2-only (emulated: ...)"}, "x") == "AVX2-only (emulated)"
    assert report.cpu_class_of({"cpu_class": "AVX2-only"}, "x") == "AVX2-only"
    assert report.cpu_class_of({}, "decode-speed-qwen05-bf16-amx-cpu") == "AMX/AVX512-BF16"
    assert report.cpu_class_of({"environment": {"device": "cuda"}}, "x") == "GPU"
    assert report.cpu_class_of({"environment": {"device": "cpu", "dtype": "float32"}}, "x") == (
        "CPU class not recorded"
    )


def test_a_demo_and_a_decode_speed_run_without_llama_server_have_rows(tmp_path: Path) -> None:
    demo = {
        "benchmark": "demo",
        "date_utc": "2026-12-03T19:02Z",
        "config": {"target": "qwen2.5-coder-0.5b"},
        "cpu_class": "AVX2-only (emulated: torch capability lowered on an AVX-512 CPU)",
        "keystrokes": 2501,
        "ghost_on_screen": 0.5912,
        "ghost_right": 0.5616,
        "typed_ahead_hit_rate": 0.7382,
    }
    speed = {
        "benchmark": "decode-speed",
        "config": {"engines": ["lean-fp32", "lean-w8a8"]},
        "environment": {"target": "/models/qwen2.5-coder-0.5b", "date_utc": "2026-12-03T18:44Z"},
        "cpu_class": "AVX2-only",
        "step_profile": {
            "lean-fp32": {"step_ms": 188.0, "verify_cost": {"8": 2.7}},
            "lean-w8a8": {"step_ms": 105.0, "verify_cost": {"8": 1.99}},
        },
        "summary": {
            "lean-fp32 plain": {"tokens_per_s_median": 2.0},
            "lean-w8a8 speculative-lookup": {"tokens_per_s_median": 5.0},
        },
    }
    (tmp_path / "demo-x.json").write_text(json.dumps(demo))
    (tmp_path / "decode-speed-x.json").write_text(json.dumps(speed))
    by_file = {row.file: row for row in report.rows(tmp_path)}
    assert by_file["demo-x.json"].cpu_class == "AVX2-only (emulated)"
    assert "59.1% of 2501 key presses" in by_file["demo-x.json"].answer
    answer = by_file["decode-speed-x.json"].answer
    assert answer.startswith("lean-w8a8 speculative-lookup: 2.50x lean-fp32 plain")
    assert "lean-w8a8 step 105 ms, verify of 8 1.99 steps" in answer
