"""`specls bench lines`: the positions it picks, the scores, and a smoke run on a tiny saved pair (no quality is
asserted from random models; the numbers come from bench/results)."""

from __future__ import annotations

import builtins
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.lines import (
    GOALS,
    LinesConfig,
    Outcome,
    edit_similarity,
    fit_threshold,
    gate_scores,
    in_name_list,
    line_positions,
    prose_lines,
    run_lines,
    split_by_file,
    summarize,
    write_report,
)
from tests.unit.bench_support import save_tiny_pair


def test_positions_are_line_starts_after_the_indentation_with_the_rest_of_the_line_removed() -> None:
    lines = ["def f(a):", "    # a comment", "    value = compute(a)", "    return value", ""] * 6
    text = "\n".join(lines)
    positions = line_positions([("m.py", text), ("n.py", text)], count=3, per_file=2)
    assert [p.name.split(":")[0] for p in positions] == ["m.py", "m.py", "n.py"]  # per file, then the count
    for position in positions:
        before = position.document[: position.offset]
        line_before = before[before.rfind("\n") + 1 :]
        assert not line_before.strip()  # the cursor sits after the indentation
        assert not position.removed.startswith(("#", " "))  # code, not a comment line
        number = int(position.name.split(":")[1]) - 1
        assert lines[number] == line_before + position.removed
        assert position.document.split("\n") == [*lines[:number], line_before, *lines[number + 1 :]]
    assert line_positions([("short.py", "x = 1\n")], count=5) == []


def test_import_lines_only_picks_the_line_starts_of_import_lines() -> None:
    lines = ["import os", "from .m import a", "    from .n import b", "", "x = 1", *["y = 2"] * 20]
    picked = line_positions([("m.py", "\n".join(lines))], count=5, per_file=3, import_lines=True)
    assert [p.removed for p in picked] == [
        "import os",
        "from .m import a",
    ]  # an indented one is not among the imports


def test_name_lists_keeps_the_line_starts_among_an_import_blocks_names_or_alls_strings() -> None:
    lines = [
        "from .spans import (",
        "    AgentSpan,",
        "    TaskSpan,",
        ")",
        "__all__ = [",
        '    "AgentSpan",',
        '    "TaskSpan",',
        "]",
        *["x = 1"] * 20,
    ]
    picked = line_positions([("m.py", "\n".join(lines))], count=40, per_file=40)
    kept = [p.removed for p in picked if in_name_list(p)]
    # The block's `)`, once removed, leaves the block open: that line may be its close, or one more name.
    assert kept == ["AgentSpan,", "TaskSpan,", ")", '"AgentSpan",', '"TaskSpan",']


def test_docstrings_and_the_inner_lines_of_long_strings_are_prose_other_lines_code() -> None:
    source = [
        "def f(a):",  # 0
        '    """One line of docstring."""',  # 1 prose
        '    text = """first',  # 2 code: the assignment starts here
        "    inside the string",  # 3 prose
        '    """',  # 4 prose: still the string
        '    call("an argument",',  # 5 code
        '         "another")',  # 6 code: a string in a call, not a statement
        '    """A docstring-like statement',  # 7 prose
        '    over two lines."""  # and a comment',  # 8 prose
        "    return a",  # 9 code
    ]
    assert prose_lines("\n".join(source)) == {1, 3, 4, 7, 8}
    assert prose_lines('def f(:\n    """unclosed') == set()  # not Python: no prose claimed
    positions = line_positions([("m.py", "\n".join(source * 3))], count=30, per_file=30)
    kinds = {int(p.name.split(":")[1]) - 1: p.kind for p in positions}
    assert kinds[1] == "prose" and kinds[2] == "code" and kinds[9] == "code"


def test_the_summary_gives_the_exact_next_line_by_the_lines_kind() -> None:
    outcomes = [_outcome("a.py:1", True, 0.9), _outcome("a.py:2", False, 0.9), _outcome("a.py:3", True, 0.9)]
    outcomes[1].kind = outcomes[2].kind = "prose"
    assert summarize(outcomes)["by_kind"] == {
        "code": {"positions": 1, "exact": 1, "exact_first_line": 1.0},
        "prose": {"positions": 2, "exact": 1, "exact_first_line": 0.5},
    }


def test_the_summary_gives_the_exact_next_line_by_the_true_lines_length() -> None:
    outcomes = [
        _outcome("a.py:1", True, 0.9, line="    return a"),  # 8 characters once stripped
        _outcome("a.py:2", False, 0.9, line="x" * 30),
        _outcome("a.py:3", True, 0.9, line="x" * 31),
        _outcome("a.py:4", False, 0.9, line="x" * 51),
    ]
    assert summarize(outcomes)["by_length"] == {
        "up to 30": {"positions": 2, "exact": 1, "exact_first_line": 0.5},
        "31-50": {"positions": 1, "exact": 1, "exact_first_line": 1.0},
        "over 50": {"positions": 1, "exact": 0, "exact_first_line": 0.0},
    }
    assert "over 50" not in summarize(outcomes[:3])["by_length"]  # an empty band is left out


def test_edit_similarity_is_one_for_equal_lines_and_lower_otherwise() -> None:
    assert edit_similarity("return a + b", "return a + b") == 1.0
    assert 0 < edit_similarity("return a + b", "return a - b") < 1
    assert edit_similarity("", "x") == 0.0


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    pytest.importorskip("torch")
    return save_tiny_pair(tmp_path_factory.mktemp("pair"))


def test_lines_smoke_writes_json_markdown_and_png(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "a.py").write_text("\n".join(f"def f{i}(a):\n    return a + {i}\n" for i in range(15)))
    config = LinesConfig(
        models=((str(tiny_pair[0]), str(tiny_pair[1])),),
        positions=40,
        per_file=1,
        folders=(folder,),
        threads=1,
    )
    result = run_lines(config)
    (model,) = result["models"]
    assert model["summary"]["positions"] == len(model["outcomes"]) >= 2
    assert model["outcomes"][0]["position"].startswith("code/a.py")  # the named folder comes first
    assert model["summary"]["marker_text"] == 0
    # every suggestion has the model's confidence in its first line, and the gate's table is there
    confidences = [o["first_line_confidence"] for o in model["outcomes"] if o["suggestion"].strip()]
    assert confidences and all(c is None or 0 < c <= 1 for c in confidences)
    assert any(c is not None for c in confidences)
    assert model["gate"]["all"]["without"]["positions"] == len(model["outcomes"])
    assert result["machine"] and "code" in result["code"]
    paths = write_report(result, tmp_path / "out", "smoke")
    assert [p.suffix for p in paths] == [".json", ".md", ".png"]
    assert json.loads(paths[0].read_text())["models"][0]["summary"]["positions"] >= 2
    report = paths[1].read_text()
    assert "exact next line" in report and "precision (exact among shown)" in report
    assert "exact next line by the line's kind" in report and " of " in report
    assert "exact next line by the true line's length: up to 30 characters" in report
    # the table names what the matmuls read, as the server ran them
    assert model["runtime"].startswith(("lean", "transformers")) and f"({model['weights']}," in report


def test_lines_scores_the_quantization_it_is_given(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "a.py").write_text("\n".join(f"def f{i}(a):\n    return a + {i}\n" for i in range(4)))
    config = LinesConfig(
        models=((str(tiny_pair[0]), "none"),), positions=2, per_file=1, folders=(folder,), threads=1
    )
    as_served = run_lines(config)["models"][0]
    quantized = run_lines(replace(config, quantization="int8"))["models"][0]
    # a tiny model's step is overhead-bound: auto leaves its weights as loaded; int8 is what was asked for
    assert as_served["weights"] == "fp32" and quantized["weights"] == "fp32 + int8 weights"


def test_a_missing_plotting_package_skips_the_picture_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    result = {"config": {"positions": 1, "per_file": 1, "device": "cpu"}, "goals": GOALS, "models": []}
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] == "matplotlib":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    paths = write_report(result, tmp_path, "no-plot")
    assert [p.suffix for p in paths] == [".json", ".md"]
    assert not (tmp_path / "lines-no-plot.png").exists()
    assert "No picture: matplotlib is not installed" in paths[1].read_text()
    assert "matplotlib" in capsys.readouterr().err


def _outcome(name: str, exact: bool, confidence: float | None, line: str = "x" * 10) -> Outcome:
    return Outcome(
        position=name,
        removed=line,
        suggestion=line if exact else "y",
        non_empty=True,
        indentation_ok=True,
        marker_text=False,
        exact_first_line=exact,
        edit_similarity=1.0 if exact else 0.0,
        guard_fired=False,
        forced_prefix="",
        finish_reason="stop",
        new_tokens=3,
        wall_s=0.1,
        first_line_confidence=confidence,
    )


def test_the_gate_scores_precision_and_recall_side_by_side() -> None:
    outcomes = [
        _outcome("a.py:1", True, 0.9),
        _outcome("a.py:2", True, 0.5),
        _outcome("b.py:1", False, 0.2),
        _outcome("b.py:2", False, 0.6),
    ]
    ungated = gate_scores(outcomes, 0.0)
    assert (ungated["shown"], ungated["precision"], ungated["recall"]) == (4, 0.5, 0.5)
    assert ungated["chars_per_shown"] == 20 / 4
    gated = gate_scores(outcomes, 0.55)
    assert (gated["shown"], gated["shown_exact"]) == (2, 1)
    assert (gated["precision"], gated["recall"]) == (0.5, 0.25)
    # a suggestion without a known confidence is never gated; an empty one is never shown
    assert gate_scores([_outcome("c.py:1", True, None)], 0.99)["shown"] == 1
    empty = _outcome("c.py:2", False, 0.9)
    empty.non_empty = False
    assert gate_scores([empty], 0.0)["shown"] == 0


def test_the_threshold_is_fit_to_characters_per_shown_suggestion_keeping_most_of_the_savings() -> None:
    outcomes = [
        _outcome("a.py:1", True, 0.9),
        _outcome("a.py:2", True, 0.5),
        _outcome("a.py:3", False, 0.2),
        _outcome("a.py:4", False, 0.3),
    ]
    # 0.5 drops both misses and keeps both hits: the best per shown suggestion
    assert fit_threshold(outcomes) == 0.5
    # 0.9 would be better still per shown suggestion but gives up half the characters saved
    assert fit_threshold(outcomes, keep=0.8) != 0.9
    assert fit_threshold(outcomes, keep=0.5) == 0.5  # ties go to the lower threshold
    # nothing to gain: no gate
    assert fit_threshold([_outcome("a.py:1", True, 0.3), _outcome("a.py:2", True, 0.4)]) == 0.0


def test_the_calibration_halves_keep_each_file_on_one_side() -> None:
    outcomes = [_outcome(f"{name}.py:{line}", True, 0.5) for name in "abcde" for line in (1, 2)]
    fit_on, evaluated_on = split_by_file(outcomes)
    files = [{o.position.split(":")[0] for o in half} for half in (fit_on, evaluated_on)]
    assert files == [{"a.py", "c.py", "e.py"}, {"b.py", "d.py"}]


def test_positions_are_spread_over_all_files_when_there_are_more_than_asked() -> None:
    text = "\n".join(["def f(a):", "    value = compute(a)", "    return value"] * 10)
    files = [(f"f{i}.py", text) for i in range(10)]
    picked = line_positions(files, count=5, per_file=1)
    assert [p.name.split(":")[0] for p in picked] == ["f0.py", "f2.py", "f4.py", "f6.py", "f8.py"]


def test_the_prompt_budget_and_suffix_share_can_be_set_and_the_report_says_so() -> None:
    import argparse

    from bench.lines import add_arguments, describe_settings, server_settings
    from lsp_server.config import ServerSettings

    defaults = ServerSettings().context
    unchanged = server_settings("auto").context
    assert (unchanged.max_prompt_tokens, unchanged.max_suffix_tokens) == (
        defaults.max_prompt_tokens,
        defaults.max_suffix_tokens,
    )
    larger = server_settings("auto", overrides={"contextTokens": 4096, "suffixTokens": 384}).context
    assert (larger.max_prompt_tokens, larger.max_suffix_tokens) == (4096, 384)
    assert server_settings("auto", overrides={"suffixTokens": 0}).context.max_suffix_tokens == 0  # no suffix
    with pytest.raises(ValueError, match="contextTokens"):
        server_settings("auto", overrides={"contextTokens": 10})  # below what the server accepts

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--context-tokens", "4096", "--suffix-tokens", "384"])
    assert (args.context_tokens, args.suffix_tokens) == (4096, 384)
    assert describe_settings({"setting_overrides": {"contextTokens": 4096, "suffixTokens": 384}}) == (
        "default server settings but contextTokens 4096, suffixTokens 384"
    )
    assert describe_settings({"setting_overrides": {}}) == "default server settings"
    with pytest.raises(SystemExit):
        parser.parse_args(["--suffix-tokens", "-1"])


def test_the_report_says_how_large_each_models_prompts_were() -> None:
    from bench.lines import describe_prompt_size

    assert (
        describe_prompt_size({"prompt_tokens": 4096, "suffix_tokens": 384})
        == ", prompt 4096, suffix 384 tokens"
    )
    assert (
        describe_prompt_size({"suffix_tokens": 149}) == ", suffix 149 tokens"
    )  # before prompts were recorded
    assert describe_prompt_size({}) == ""  # reports written before the suffix was recorded
