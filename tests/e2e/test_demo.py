"""`specls demo` and `specls doctor` end to end: real `specls serve` subprocesses, real LSP traffic.

The pair is the bundled one when it has been trained, else a tiny random Llama pair saved to a temporary
folder (the draft is a copy of the target, so model drafts are always accepted). The demo runs in line mode
(stdout is a pipe) on a short file; its summary must be complete and self-consistent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.models import BUNDLED_DIR

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SHORT_FILE = "def area(width, height):\n    return width * height\n\n\nprint(area(3, 4))\n"


def _specls(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "lsp_server.app.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


def _save_tiny_pair(root: Path) -> tuple[str, str]:
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from engine.train.tokenizer import tokenizer_config, train_code_tokenizer

    config = tokenizer_config(512)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_code_tokenizer([SHORT_FILE * 5, "for i in range(10):\n    print(i)\n"], 300),
        bos_token=config["bos_token"],
        eos_token=config["eos_token"],
        pad_token=config["pad_token"],
        additional_special_tokens=config["additional_special_tokens"],
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            tie_word_embeddings=False,
        )
    )
    for role in ("target", "draft"):
        model.save_pretrained(root / role)
        tokenizer.save_pretrained(root / role)
    return str(root / "target"), str(root / "draft")


@pytest.fixture(scope="module")
def pair_args(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    if (BUNDLED_DIR / "target" / "config.json").is_file() and (
        BUNDLED_DIR / "draft" / "config.json"
    ).is_file():
        return []
    target, draft = _save_tiny_pair(tmp_path_factory.mktemp("pair"))
    return ["--target", target, "--draft", draft]


def test_demo_replays_a_short_file_in_line_mode(pair_args: list[str], tmp_path: Path) -> None:
    source = tmp_path / "area.py"
    source.write_text(SHORT_FILE, encoding="utf-8")
    summary_path = tmp_path / "summary.json"
    result = _specls(
        "demo",
        "--file",
        str(source),
        "--speed",
        "60",
        "--speedup-samples",
        "2",
        "--summary-json",
        str(summary_path),
        # fp32, where greedy speculation is token-identical: `auto` is bf16 on a CPU with AVX512-BF16, and
        # there outputs may part at near-ties (tests/engine/test_precision.py checks those).
        "--dtype",
        "fp32",
        *pair_args,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "\x1b[" not in out  # no terminal control codes when stdout is not a terminal
    assert "   1 | def area(width, height):" in out and "   5 | print(area(3, 4))" in out
    for label in ("latency               p50", "typed-ahead hit rate", "drafts", "cancels", "speed-up"):
        assert label in out

    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    keystrokes = len(SHORT_FILE) - 4  # one character per key, but Enter brings the 4-space indent with it
    assert summary["keystrokes"] == keystrokes
    assert summary["answered"] == keystrokes and summary["errors"] == 0
    latency = summary["latency_ms"]
    assert 0 < latency["p50"] <= latency["p95"] < 60_000
    assert sum(summary["matches"].values()) == summary["suggestions"] <= keystrokes
    hit_rate = summary["typed_ahead_hit_rate"]
    assert hit_rate is None or 0 <= hit_rate <= 1
    server = summary["server"]
    # The replay's requests (the speed-up prompts come after); one it cancelled, as VS Code does when the next
    # key comes, may be dropped by the server's protocol layer before the server reads it (a busy machine).
    assert keystrokes - summary["superseded"] <= server["requests"]
    assert server["generations"] >= 1 and 0 <= server["cancelled_generations"] <= server["generations"]
    # At 60 characters a second every key supersedes the request before it (the replay cancels it, as VS
    # Code does), so on a busy machine no speculative round may finish before the last key.
    if server["draft_acceptance"] is not None:
        assert 0 <= server["draft_acceptance"] <= 1
        assert server["tokens_per_target_forward"] >= 1
    speedup = summary["speedup"]
    assert 1 <= speedup["samples"] + speedup["skipped"] <= 2
    if speedup["samples"]:
        # Greedy speculative decoding is lossless: both modes must write the same text.
        assert speedup["identical_outputs"] == speedup["samples"]
        assert speedup["factor"] > 0 and speedup["plain_tokens_per_s"] > 0
        # Every verify forward yields at least one token, so speculation never needs more of them.
        assert 0 < speedup["speculative_target_forwards"] <= speedup["plain_target_forwards"]


def test_demo_with_a_missing_model_says_how_to_fix_it(tmp_path: Path) -> None:
    result = _specls(
        "demo",
        "--max-keystrokes",
        "3",
        "--target",
        str(tmp_path / "nothing"),
        "--draft",
        str(tmp_path / "none"),
    )
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "specls doctor" in result.stderr


def test_demo_rejects_bad_options(tmp_path: Path) -> None:
    result = _specls("demo", "--speed", "fast", "--backend", "fake")
    assert result.returncode == 2 and "speed 'fast'" in result.stderr
    result = _specls("demo", "--file", str(tmp_path / "absent.py"), "--backend", "fake")
    assert result.returncode == 2 and "cannot read" in result.stderr


def test_doctor_passes_on_a_working_pair_and_gets_a_completion(pair_args: list[str]) -> None:
    # Named explicitly: with nothing named, doctor checks the machine's default model (a pulled one alone).
    pair = pair_args or ["--target", str(BUNDLED_DIR / "target"), "--draft", str(BUNDLED_DIR / "draft")]
    result = _specls("doctor", "--device", "cpu", *pair)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok    tokenizers: target and draft share one vocabulary" in result.stdout
    assert "ok    server: started and loaded in" in result.stdout or "warn  server:" in result.stdout
    assert "FAIL" not in result.stdout


def test_demo_accepts_matching_ghost_text(tmp_path: Path) -> None:
    """With a scripted backend that knows the file, accepting ghost text types most of it in two presses."""
    source = tmp_path / "area.py"
    source.write_text(SHORT_FILE, encoding="utf-8")
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps(
            [["def area(", "width, height):\n    return width * height\n"], ["print(", "area(3, 4))\n"]]
        )
    )
    summary_path = tmp_path / "summary.json"
    result = _specls(
        "demo",
        "--backend",
        "fake",
        "--fake-rules",
        str(rules),
        "--file",
        str(source),
        "--speed",
        "25",
        "--accept",
        "--summary-json",
        str(summary_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    assert summary["typed_chars"] == len(SHORT_FILE)
    assert summary["accepts"] >= 1 and summary["accepted_chars"] >= len("area(3, 4))")
    assert summary["keystrokes"] < len(SHORT_FILE) - 4 and summary["key_presses_saved"] > 0
    assert summary["matches"]["full"] >= 1 and summary["typed_ahead_hit_rate"] > 0
    # The server heard about each accept: whole ones as its command, parts as a notification.
    server = summary["server"]
    assert server["accepted"] + server["partially_accepted"] == summary["accepts"]
    assert "accepted ghost text" in result.stdout and "fewer key presses" in result.stdout
    assert "speed-up              not measured" in result.stdout  # a scripted backend has nothing to time


def test_ctrl_c_stops_the_typing_and_still_prints_the_summary(tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "lsp_server.app.cli", "demo", "--backend", "fake", "--speed", "20"]
    process = subprocess.Popen(
        [*command, "--summary-json", str(summary_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:  # wait until it types
            if line.startswith("typing "):
                break
        time.sleep(1.5)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert "stopping" in out and "summary" in out
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    assert 0 < summary["keystrokes"] < 200 and summary["answered"] == summary["keystrokes"]
