"""Which llama-server rows the throughput benchmark can run, and the flags each server gets."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.llama_peer import start_peer
from bench.throughput import ThroughputConfig, runnable_methods


def test_the_draft_model_row_needs_a_draft_model() -> None:
    config = ThroughputConfig(target="smollm2-135m", methods=("autoregressive", "llama-server-draft-simple"))
    _, skipped = runnable_methods(config, has_draft_model=False)
    assert "llama-server-draft-simple" in skipped


def test_a_draft_row_without_a_draft_gguf_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="draft"):
        start_peer(Path("/nonexistent/llama-server"), tmp_path / "t.gguf", "llama-server-draft-simple", 1, 512,
                   tmp_path / "log")  # fmt: skip


# Stands in for a llama-server build whose repacked (AMX) path crashes while loading: it dies from SIGSEGV
# unless told --no-repack, and then answers /health.
CRASHES_WHEN_REPACKING = """\
import http.server, os, signal, sys
if "--no-repack" not in sys.argv:
    with open(os.path.join(os.path.dirname(sys.argv[0]), "crashes"), "a") as crashes:
        crashes.write("crashed\\n")
    os.kill(os.getpid(), signal.SIGSEGV)
port = int(sys.argv[sys.argv.index("--port") + 1])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def test_a_server_that_crashes_while_repacking_is_started_again_without_repacking(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!{sys.executable}\n{CRASHES_WHEN_REPACKING}")
    binary.chmod(0o755)
    peer = start_peer(binary, tmp_path / "t.gguf", "llama-server", 1, 512, tmp_path / "log")
    try:
        assert peer.repack is False and peer.process.poll() is None
    finally:
        peer.stop()
    assert (tmp_path / "crashes").read_text() == "crashed\n"
    # A caller that has seen the crash starts the next server without repacking: no second crash.
    peer = start_peer(binary, tmp_path / "t.gguf", "llama-server", 1, 512, tmp_path / "log", repack=False)
    try:
        assert peer.repack is False and peer.process.poll() is None
    finally:
        peer.stop()
    assert (tmp_path / "crashes").read_text() == "crashed\n"


class _TimedPeer:
    """Answers like llama-server's /completion: its timings report the prompt it read, at 100 tokens/s."""

    def __init__(self) -> None:
        self.prompts: list[list[int]] = []

    def complete(
        self, prompt_ids: list[int], max_new_tokens: int, ignore_eos: bool
    ) -> tuple[list[int], dict[str, float]]:
        self.prompts.append(prompt_ids)
        return [1], {"prompt_n": len(prompt_ids), "prompt_per_second": 100.0 + len(self.prompts)}


def test_llama_server_prompt_reading_is_its_own_timing_on_the_engines_prompt() -> None:
    from bench.decode_speed import _prefill_ratio_lines, prefill_tokens, server_prefill_speed

    peer = _TimedPeer()
    speeds = server_prefill_speed(peer, (500, 1000, 4096), window=2048)
    assert speeds == {500: 102.0, 1000: 104.0}  # the faster of two; a prompt past the window is skipped
    assert peer.prompts[0] == prefill_tokens(500) and peer.prompts[2] == prefill_tokens(1000)
    # As written to JSON (string keys) and read back, the report still divides length by length.
    lines = _prefill_ratio_lines(
        {"lean-bf16": {"prefill_tokens_per_s": {"500": 1020.0, "1000": 520.0}}},
        {"llama-server --no-repack": {"500": 102.0, "1000": 104.0}},
        [500, 1000],
    )
    assert lines == [
        "\nAs a multiple of `llama-server --no-repack` (500, 1000 tokens): lean-bf16 10.0x / 5.0x.\n"
    ]
