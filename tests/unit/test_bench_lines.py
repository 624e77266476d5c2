"""`specls bench lines`: the positions it picks, the scores, and a smoke run on a tiny saved pair (no quality is
asserted from random models; the numbers come from bench/results)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.lines import LinesConfig, edit_similarity, line_positions, run_lines, write_report
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
    paths = write_report(result, tmp_path / "out", "smoke")
    assert [p.suffix for p in paths] == [".json", ".md", ".png"]
    assert json.loads(paths[0].read_text())["models"][0]["summary"]["positions"] >= 2
    assert "exact next line" in paths[1].read_text()
