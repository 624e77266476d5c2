"""The keystroke replay: pure helpers, and a short replay through `specls serve --backend fake`."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench.keystrokes import (
    Keystroke,
    KeystrokeConfig,
    gap_after,
    keystrokes_of,
    run_keystrokes,
    summarize,
    write_report,
)


def test_a_newline_takes_its_indentation_along() -> None:
    assert keystrokes_of("if x:\n    y\n") == ["i", "f", " ", "x", ":", "\n    ", "y", "\n"]


def test_cadence_stays_in_range_and_pauses_at_line_ends() -> None:
    rng = random.Random(1)
    config = KeystrokeConfig()
    gaps = [gap_after("a", rng, config) for _ in range(200)]
    assert min(gaps) >= 0.060 and max(gaps) <= 0.120
    line_end = [gap_after("\n  ", rng, config) for _ in range(200)]
    assert min(line_end) >= 0.360 and max(line_end) <= 1.020


def test_summarize_counts_cancelled_keystrokes_as_never_shown() -> None:
    keys = [
        Keystroke("f", 0, 1, "a", 0.0, 0.010, "suggestion", "bc", "1", 2, "bc"),
        Keystroke("f", 1, 2, "b", 1.0, 1.030, "suggestion", "c", "1+1", 1, "bc"),
        Keystroke("f", 2, 3, "c", 2.0, None, "cancelled"),
        Keystroke("f", 3, 4, "d", 3.0, 3.005, "empty"),
    ]
    before = {"requests": 2, "engine_totals": {"prompt_tokens": 10, "reused_prompt_tokens": 0}}
    after = {
        "requests": 6,
        "typed_ahead_hits": 1,
        "engine_totals": {"prompt_tokens": 110, "reused_prompt_tokens": 80, "new_tokens": 7},
        "cancel_to_idle_ms": [5.0, 7.0],
    }
    summary = summarize(keys, before, after)
    assert summary["outcomes"] == {"suggestion": 2, "cancelled": 1, "empty": 1}
    assert summary["keystroke_to_suggestion_ms"]["p50"] == pytest.approx(20.0)
    assert summary["keystroke_to_suggestion_all_keystrokes_ms"]["p50"] is None  # 2 of 4 never got one
    assert summary["keystroke_to_answer_ms"]["count"] == 3
    assert summary["typed_next_matched_suggestion"]["exact"] == 1.0
    server = summary["server"]
    assert server["requests"] == 4 and server["typed_ahead_hit_rate"] == 0.25
    assert server["kv_prefix_reuse"] == pytest.approx(0.8)
    assert server["generated_tokens"] == 7
    assert server["cancel_to_idle_ms"]["max"] == 7.0


@pytest.mark.slow  # a real `specls serve` subprocess behind a pygls client
def test_replay_through_the_real_server_with_the_fake_backend(tmp_path: Path) -> None:
    lines = [f"x{i} = {i}" for i in range(30)] + ["def add(a, b):", "    return a + b"] + ["y = 1"] * 12
    source = tmp_path / "sample.py"
    source.write_text("\n".join(lines) + "\n")
    config = KeystrokeConfig(
        files=(source,),
        chars=55,
        backend="fake",
        min_gap_ms=20,
        max_gap_ms=40,
        line_pause_ms=(50, 80),
        settings={"fake": {"rules": [["def add(", "a, b):\n    return a + b"]]}},
        out=tmp_path,
        tag="fake",
        timeout_s=60,
    )
    result = run_keystrokes(config, progress=False)
    summary = result["summary"]
    region = result["regions"][0]
    typed = source.read_text()[region["start"] :][: region["chars"]]
    assert typed.endswith("return a + b") and len(typed) >= 55  # whole lines, up to the next line end
    assert summary["keystrokes"] == len(keystrokes_of(typed))
    assert summary["outcomes"].get("suggestion", 0) >= 3  # from "def add(" on, the rule suggests the rest
    assert summary["typed_next_matched_suggestion"]["exact"] == 1.0  # the rule is exactly what gets typed
    assert summary["server"]["requests"] == summary["keystrokes"]
    assert summary["server"]["typed_ahead_hits"] >= 1
    paths = write_report(result, tmp_path, "fake")
    assert json.loads(paths[0].read_text())["summary"]["keystrokes"] == summary["keystrokes"]
    assert "keystroke -> suggestion p50" in paths[1].read_text()
    assert paths[2].read_bytes()[:4] == b"\x89PNG"
