"""Helpers for the remote-backend tests: a tiny Llama in Hugging Face format, its GGUF export, and a
real `llama-server` process serving it on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sysconfig
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.llama_peer import free_port, stop_process

REPO_ROOT = Path(__file__).resolve().parents[2]
BUNDLED_TARGET = REPO_ROOT / "engine" / "bundled" / "target"
BUILD_HINT = "build it with `bash scripts/build_llama_server.sh` (or set SPECLS_LLAMA_SERVER)"


def _stdlib_sample(max_chars: int = 400_000) -> list[str]:
    """Some local Python source to train the test tokenizer on (no download needed)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts: list[str] = []
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return texts


def build_tiny_llama(folder: Path) -> Path:
    """A randomly initialised 2-layer Llama with a real byte-level BPE tokenizer, saved like the bundled pair.

    The large initializer range makes logits far from tied, so greedy output is stable across
    numeric backends (PyTorch vs ggml) and the comparison tests mean something.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.train.tokenizer import tokenizer_config, train_code_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = train_code_tokenizer(_stdlib_sample(), vocab_size=512)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(512)), encoding="utf-8")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention exercises the k permutation with fewer heads
        max_position_embeddings=512,
        initializer_range=0.25,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config)
    ban_tokens_that_are_not_text(model, tokenizer)
    model.save_pretrained(folder)
    return folder


def ban_tokens_that_are_not_text(model: Any, tokenizer: Any) -> None:
    """Keep a random model from emitting byte tokens that are not UTF-8 on their own, or control characters.

    Such byte soup is rendered differently by each runtime, which would make text comparisons meaningless.
    Llama has no output bias, so we build one: residual channel 0 carries a constant (set in every
    embedding, never written by attention or MLP), and the lm_head's weight on that channel pushes the
    banned tokens' logits far down.
    """
    import torch

    def is_text(token_id: int) -> bool:
        text = tokenizer.decode([token_id], skip_special_tokens=False)
        return "\ufffd" not in text and all(ch in "\n\t" or " " <= ch != "\x7f" for ch in text)

    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 0.5
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        for token_id in range(model.lm_head.weight.shape[0]):
            model.lm_head.weight[token_id, 0] = 0.0 if is_text(token_id) else -100.0


@dataclass
class LlamaServer:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def stop(self) -> None:
        stop_process(self.process)


def start_llama_server(
    binary: Path, model: Path, log_path: Path, *, alias: str = "specls-test", port: int | None = None
) -> LlamaServer:
    """Start llama-server on a loopback port (a free one by default) and wait until /health answers 200."""
    port = port or free_port()
    command = [
        str(binary), "--model", str(model), "--alias", alias, "--host", "127.0.0.1", "--port", str(port),
        "--ctx-size", "512", "--parallel", "1", "--threads", "1", "--no-warmup", "--metrics",
    ]  # fmt: skip
    log = log_path.open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"llama-server exited with {process.returncode}:\n{log_path.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as response:
                if response.status == 200:
                    return LlamaServer(process=process, url=url, log_path=log_path)
        except OSError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"llama-server did not become healthy in 60 s:\n{log_path.read_text()[-3000:]}")
