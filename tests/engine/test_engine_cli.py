"""`specls generate` and `specls info` on a tiny pair saved to disk (in-process, through the CLI parser)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_core_support import save_pair, tiny_llama, tokenizer

from lsp_server.app.cli import main


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


@pytest.mark.parametrize("mode", ["autoregressive", "speculative"])
def test_generate_at_a_line_start_with_the_bundled_pair_prints_code_and_no_marker(
    tmp_path: Path, capsys, mode: str
) -> None:
    """The bundled pair, asked without a suffix file, once printed "<|sp_fim_suffix|>   return a + b"."""
    from lsp_server.context.fim import marker_texts

    prompt = tmp_path / "prompt.py"
    prompt.write_text("def add(a, b):\n    ")
    for raw in ([], ["--raw"]):
        argv = [
            "generate",
            "--prompt-file",
            str(prompt),
            "--max-new-tokens",
            "24",
            "--device",
            "cpu",
            "--json",
        ]
        assert main([*argv, "--mode", mode, *raw]) == 0
        text = json.loads(capsys.readouterr().out)["text"]
        assert not any(marker in text for marker in marker_texts()), text
        if not raw:  # the FIM prompt and the healed indentation: code on the cursor's line
            assert text.strip() and text[0] not in " \t\n", text


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
