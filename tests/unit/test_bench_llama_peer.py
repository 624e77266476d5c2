"""Which llama-server rows the throughput benchmark can run, and the flags each server gets."""

from __future__ import annotations

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
