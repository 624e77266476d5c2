"""`specls bench lines-compare`: the sign test and the position-by-position comparison of two results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.lines_compare import compare_outcomes, model_outcomes, sign_test_p


def test_the_sign_test_matches_the_binomial_tails() -> None:
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(5, 0) == pytest.approx(2 / 32)  # 5-0 or 0-5 of five coin flips
    assert sign_test_p(0, 5) == pytest.approx(2 / 32)
    assert sign_test_p(3, 3) == 1.0
    assert sign_test_p(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)
    assert sign_test_p(10, 0) < 0.01 < sign_test_p(4, 0)


def _outcome(position: str, exact: bool, suggestion: str) -> dict[str, object]:
    return {"position": position, "removed": "x = 1", "suggestion": suggestion, "exact_first_line": exact}


def test_only_shared_positions_whose_exactness_changed_are_counted() -> None:
    before = [
        _outcome("a.py:1", False, "y = 2"),
        _outcome("a.py:9", True, "x = 1"),
        _outcome("b.py:3", True, ""),
    ]
    after = [
        _outcome("a.py:1", True, "x = 1\nz"),
        _outcome("a.py:9", True, "x = 1"),
        _outcome("c.py:4", False, ""),
    ]
    comparison = compare_outcomes(before, after)
    assert (comparison.common, comparison.exact_before, comparison.exact_after) == (2, 1, 2)
    assert [(c.position, c.gained, c.before, c.after) for c in comparison.changes] == [
        ("a.py:1", True, "y = 2", "x = 1")
    ]
    assert (comparison.gained, comparison.lost) == (1, 0)


def test_a_result_with_several_models_needs_one_named(tmp_path: Path) -> None:
    path = tmp_path / "lines.json"
    models = [
        {"name": "small", "target": "t1", "outcomes": [_outcome("a.py:1", True, "x = 1")]},
        {"name": "large", "target": "t2", "outcomes": []},
    ]
    path.write_text(json.dumps({"models": models}), encoding="utf-8")
    with pytest.raises(ValueError, match="several models"):
        model_outcomes(path, None)
    assert len(model_outcomes(path, "t1")) == 1
    assert model_outcomes(path, "large") == []
    with pytest.raises(ValueError, match="no model named"):
        model_outcomes(path, "huge")


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    # `specls bench lines-compare A B | head -1`: the pipe closes before the table is written.
    import subprocess
    import sys

    rows = [_outcome(f"a.py:{n}", n % 2 == 0, f"y = {n}") for n in range(2000)]
    for name, flip in (("a.json", False), ("b.json", True)):
        outcomes = [row | {"exact_first_line": row["exact_first_line"] != flip} for row in rows]
        (tmp_path / name).write_text(
            json.dumps({"models": [{"target": {"spec": "m"}, "outcomes": outcomes}]})
        )
    results = [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    command = [sys.executable, "-m", "lsp_server.app.cli", "bench", "lines-compare", *results]
    project = Path(__file__).resolve().parents[2]  # where `-m lsp_server.app.cli` is found
    process = subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before anything is written
    error = process.stderr.read().decode()
    assert process.wait(timeout=60) == 1
    assert "Traceback" not in error and "BrokenPipeError" not in error
