"""llama.cpp's `llama-server` as a peer in the throughput benchmark: the same GGUF, the same prompt token ids.

One server per decoding mode runs on a loopback port with one thread (as the engine runs with one torch
thread); every request starts cold (`cache_prompt: false`), so its time includes the prefill as the
engine's does. The server holds the GGUF's Q4_1 weights, the engine their fp32 dequantization, so greedy
outputs may part ways at near-ties: its rows are compared on speed and repetition, not token identity.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Flags every peer server gets. Flash attention off: on this 2-core AVX-512 CPU its default (`auto`, which
# turns it on) doubled the decode step at a 1,000-token context (48 vs 23 ms per token, one thread), so the
# peer runs in its faster configuration.
COMMON_FLAGS: tuple[str, ...] = ("--flash-attn", "off")

# method name -> extra llama-server flags
LLAMA_METHODS: dict[str, tuple[str, ...]] = {
    "llama-server": (),
    "llama-server-ngram-simple": ("--spec-type", "ngram-simple"),
    "llama-server-ngram-mod": ("--spec-type", "ngram-mod"),
    # the engine's draft model exported to GGUF (`--model-draft`), with docs/remote.md's settings
    "llama-server-draft-simple": (
        "--spec-type", "draft-simple", "--spec-draft-n-max", "16", "--spec-draft-n-min", "0",
        "--spec-draft-p-min", "0.5",
    ),
}  # fmt: skip
NEEDS_DRAFT_GGUF = ("llama-server-draft-simple",)


def find_llama_server() -> Path | None:
    """$SPECLS_LLAMA_SERVER, else the binary cached by scripts/build_llama_server.sh, else PATH."""
    configured = os.environ.get("SPECLS_LLAMA_SERVER")
    if configured:
        return Path(configured)
    from engine.catalog import cache_dir

    cached = cache_dir() / "bin" / "llama-server"
    if cached.exists():
        return cached
    found = shutil.which("llama-server")
    return Path(found) if found else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Ask a llama-server to exit; kill it if it has not within 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


# Where llama.cpp repacks weights for the CPU's AMX units, this build crashes on its first forward on some
# CPUs (SIGSEGV in ggml_backend_amx_mul_mat, seen on a 2-core Xeon with AMX): the peer then runs without
# repacking, and the results say so.
NO_REPACK: tuple[str, ...] = ("--no-repack",)


@dataclass
class LlamaPeer:
    method: str
    process: subprocess.Popen[bytes]
    url: str
    repack: bool = True  # False: weight repacking was switched off, because the server crashed with it

    def complete(
        self, prompt_ids: list[int], max_new_tokens: int, ignore_eos: bool
    ) -> tuple[list[int], dict[str, Any]]:
        """Greedy completion of the prompt ids; (generated ids, the server's timings)."""
        body = {
            "prompt": prompt_ids,
            "n_predict": max_new_tokens,
            "temperature": 0.0,
            "cache_prompt": False,
            "ignore_eos": ignore_eos,
            "return_tokens": True,
        }
        request = urllib.request.Request(
            self.url + "/completion",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=600) as response:
            payload: dict[str, Any] = json.loads(response.read())
        return [int(token) for token in payload.get("tokens", [])], dict(payload.get("timings", {}))

    def stop(self) -> None:
        stop_process(self.process)


def start_peer(
    binary: Path,
    gguf: Path,
    method: str,
    threads: int,
    ctx_size: int,
    log: Path,
    draft_gguf: Path | None = None,
    repack: bool = True,
    extra_flags: tuple[str, ...] = (),
) -> LlamaPeer:
    """A healthy peer; with `repack` (the default) it first tries llama.cpp's weight repacking and falls back
    without it if the server crashes while loading. `repack=False` skips the attempt (a crash already seen).
    `extra_flags` follow the method's (llama.vim's batch sizes and cache reuse, say)."""
    if method in NEEDS_DRAFT_GGUF and draft_gguf is None:
        raise ValueError(f"{method} needs a draft model GGUF")
    draft_flags = ("--model-draft", str(draft_gguf), "--threads-draft", str(threads)) if draft_gguf else ()

    def launch(repack: bool) -> LlamaPeer:
        port = free_port()
        command = [
            str(binary), "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
            "--ctx-size", str(ctx_size), "--parallel", "1", "--threads", str(threads),
            "--threads-batch", str(threads), *COMMON_FLAGS, *LLAMA_METHODS[method], *extra_flags, *draft_flags,
            *(() if repack else NO_REPACK),
        ]  # fmt: skip
        with log.open("wb") as handle:
            process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
        return _until_healthy(LlamaPeer(method, process, f"http://127.0.0.1:{port}", repack=repack), log)

    if not repack:
        return launch(repack=False)
    try:
        return launch(repack=True)
    except PeerCrashed:
        return launch(repack=False)


class PeerCrashed(RuntimeError):
    """llama-server died from a signal while loading, with weight repacking on."""


def _until_healthy(peer: LlamaPeer, log: Path) -> LlamaPeer:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        code = peer.process.poll()
        if code is not None:
            failure = f"llama-server ({peer.method}) exited with {code}; log: {log}"
            raise PeerCrashed(failure) if code < 0 and peer.repack else RuntimeError(failure)
        try:
            with urllib.request.urlopen(peer.url + "/health", timeout=1) as response:
                if response.status == 200:
                    return peer
        except OSError:
            time.sleep(0.2)
    peer.stop()
    raise RuntimeError(f"llama-server ({peer.method}) did not become healthy in 120 s; log: {log}")
