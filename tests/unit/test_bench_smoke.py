"""Smoke runs of the benchmarks on a tiny saved pair: every method runs, outputs agree, reports are written.

No speed is asserted here (speed claims come only from bench/results); a handful of tokens keeps it fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.prompts import build_prompts, cursor_in, held_out_files
from engine.train.corpus import is_held_out
from tests.unit.bench_support import save_tiny_pair

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return save_tiny_pair(tmp_path_factory.mktemp("pair"))


def test_cursor_rule_removes_the_code_of_the_first_code_line_after_sixty_percent() -> None:
    lines = [f"x{i} = {i}" for i in range(50)]
    lines[30] = "    # a comment"
    lines[31] = "    value = compute(x, y)"
    found = cursor_in("\n".join(lines))
    assert found is not None
    line, offset, removed = found
    assert (line, removed) == (31, "value = compute(x, y)")
    assert "\n".join(lines)[offset : offset + len(removed)] == removed
    assert cursor_in("a = 1\n" * 10) is None  # too short to complete from


def test_held_out_files_are_the_ones_training_skips(tmp_path: Path) -> None:
    for name in ("a.py", "b.py", "c.py", "d.py", "pkg/e.py", "pkg/f.py", "notes.txt"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")
    found = [relative for relative, _ in held_out_files(tmp_path)]
    expected = sorted(
        p.relative_to(tmp_path).as_posix()
        for p in tmp_path.rglob("*.py")
        if is_held_out(p.relative_to(tmp_path).as_posix())
    )
    assert found == expected


def test_prompts_use_the_bundled_spm_template(tiny_pair: tuple[Path, Path]) -> None:
    from engine.service import LocalEngine

    engine = LocalEngine(str(tiny_pair[0]), str(tiny_pair[1]), "cpu")
    text = "\n".join(f"def f{i}(a):\n    return a + {i}\n" for i in range(30))
    prompts = build_prompts(engine.info(), engine.count_tokens, 3, files=[("m.py", text), ("n.py", text)])
    assert [p.name.split(":")[0] for p in prompts] == ["m.py", "n.py"]
    prompt = prompts[0]
    assert prompt.context.prompt.startswith("<|sp_fim_suffix|>")
    healed = len(prompt.context.forced_prefix)  # token healing leaves the whitespace before the cursor out
    assert prompt.context.prompt.endswith(
        prompt.document[: prompt.offset - healed][-20:] + "<|sp_fim_middle|>"
    )
    assert prompt.removed and not prompt.document[prompt.offset :].startswith(prompt.removed)


def test_throughput_smoke_every_method_agrees(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    from bench.throughput import METHODS, ThroughputConfig, run_throughput, write_report

    config = ThroughputConfig(
        prompts=1,
        max_new_tokens=6,
        target=str(tiny_pair[0]),
        draft=str(tiny_pair[1]),
        device="cpu",
        threads=1,
        draft_policy="4",  # a fixed length, so the model drafts (the learned policy may bench a random draft)
    )
    result = run_throughput(config, progress=False)
    summary = result["summary"]
    assert list(summary) == list(METHODS)
    for method, entry in summary.items():
        assert entry["new_tokens"] == 6, method  # EOS ignored: every method did the same work
        assert entry["outputs_identical_to_autoregressive"], (method, entry["mismatches"])
    spec = summary["speculative-model"]
    assert spec["rounds"] >= 1 and 0.0 <= spec["alpha"] <= 1.0 and spec["c"] > 0
    assert result["step_costs"]["target_step_s"] > 0
    paths = write_report(result, tmp_path, "smoke")
    assert [p.name for p in paths] == ["throughput-smoke.json", "throughput-smoke.md", "throughput-smoke.png"]
    assert json.loads(paths[0].read_text())["summary"]["autoregressive"]["runs"] == 1
    assert "| speculative-hybrid |" in paths[1].read_text()
    assert paths[2].read_bytes()[:4] == b"\x89PNG"


def test_draft_length_smoke(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    from bench.draft_length import (
        NO_CONFIDENCE_STOP,
        DraftLengthConfig,
        policy_names,
        run_draft_length,
        write_report,
    )

    config = DraftLengthConfig(
        prompts=1,
        max_new_tokens=6,
        target=str(tiny_pair[0]),
        draft=str(tiny_pair[1]),
        device="cpu",
        threads=1,
        fixed_lengths=(2, 4),
    )
    result = run_draft_length(config, progress=False)
    policies = result["policies"]
    names = policy_names(with_draft_model=True, fixed_lengths=(2, 4))
    assert names == ("learned", NO_CONFIDENCE_STOP, "fixed-2", "fixed-4")
    assert "fixed-8" not in policies and set(result["acceptance_by_context"]) == {"learned", "fixed-4"}
    for name in names:
        assert policies[name]["output_differs_from_learned_on"] == [], name
    for measure in ("tokens_per_s_overall", "tokens_per_modeled_step"):
        verdict = policies[f"vs_best_fixed_{measure}"]
        assert verdict["best_fixed"].startswith("fixed-")
        assert verdict["learned"] == pytest.approx(
            policies["learned"][measure] / policies[verdict["best_fixed"]][measure]
        )
    assert policies["learned"]["tokens_per_modeled_step"] > 0
    stop = policies["vs_no_confidence_stop"]["tokens_per_modeled_step"]
    assert stop == pytest.approx(
        policies["learned"]["tokens_per_modeled_step"]
        / policies[NO_CONFIDENCE_STOP]["tokens_per_modeled_step"]
    )
    json_path, md_path = write_report(result, tmp_path, "smoke")
    assert json.loads(json_path.read_text())["benchmark"] == "draft-length"
    assert "Acceptance per syntax context" in md_path.read_text()


def test_cli_rejects_unknown_methods_and_bad_policies(capsys: pytest.CaptureFixture[str]) -> None:
    from lsp_server.app.cli import build_parser, main

    assert main(["bench", "throughput", "--methods", "autoregressive,warp-drive", "--target", "x"]) == 2
    assert "warp-drive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "throughput", "--draft-policy", "0"])


def test_cli_reports_a_missing_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lsp_server.app.cli import main

    missing = str(tmp_path / "none")
    assert main(["bench", "throughput", "--target", missing, "--draft", missing, "--out", str(tmp_path)]) == 1
    assert "does not exist" in capsys.readouterr().err
