"""`specls generate` and `specls info` on a tiny pair saved to disk (in-process, through the CLI parser)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_core_support import save_pair, tiny_llama, tokenizer

from lsp_server.cli import main


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cli_pair")
    target = tiny_llama(seed=1)
    save_pair(folder, target, target, tokenizer())
    return folder


def test_generate_json_speculative_equals_autoregressive(pair_dir: Path, tmp_path: Path, capsys) -> None:
    prompt = tmp_path / "prompt.py"
    prompt.write_text("def add(a, b):\n    return")
    suffix = tmp_path / "suffix.py"
    suffix.write_text("\n\nprint(add(1, 2))\n")
    outputs = {}
    for mode in ("autoregressive", "speculative"):
        argv = [
            "generate",
            "--prompt-file",
            str(prompt),
            "--suffix-file",
            str(suffix),
            "--max-new-tokens",
            "12",
        ]
        argv += ["--target", str(pair_dir / "target"), "--draft", str(pair_dir / "draft"), "--device", "cpu"]
        assert main([*argv, "--mode", mode, "--json"]) == 0
        outputs[mode] = json.loads(capsys.readouterr().out)
    assert outputs["speculative"]["token_ids"] == outputs["autoregressive"]["token_ids"]
    for payload in outputs.values():
        assert {"target_forwards", "drafted", "accepted", "wall_s"} <= payload["stats"].keys()
        assert isinstance(payload["text"], str)
    assert outputs["autoregressive"]["stats"]["drafted"] == 0


def test_generate_reports_a_missing_model_and_file(tmp_path: Path, capsys) -> None:
    prompt = tmp_path / "prompt.py"
    prompt.write_text("x = 1")
    assert main(["generate", "--prompt-file", str(prompt), "--target", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="cannot read the prompt file"):
        main(["generate", "--prompt-file", str(tmp_path / "missing.py")])


def test_info_json_lists_both_models(pair_dir: Path, capsys) -> None:
    argv = ["info", "--json", "--target", str(pair_dir / "target"), "--draft", str(pair_dir / "draft")]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["target"]["params"] == report["draft"]["params"] > 0
    assert report["target"]["location"] == str((pair_dir / "target").resolve())
