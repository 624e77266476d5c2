"""`specls serve --target smollm2-135m`: the real pretrained model behind the LSP server, end to end.

Skipped, with the command to run, where the model is not pulled (scripts/setup.sh pulls it). The server
runs with no draft model (none shares SmolLM2's tokenizer): lookup, suffix and stale drafting only, and
prefix-only prompts (the tokenizer has no FIM tokens).
"""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types

from engine.catalog import is_pulled
from tests.e2e.server_support import start_session, stop_session

NAME = "smollm2-135m"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),  # loading and pricing a 135M-parameter model on a 2-core CPU
    pytest.mark.skipif(
        not is_pulled(NAME), reason=f"{NAME} is not pulled: run `specls pull {NAME}` (scripts/setup.sh does)"
    ),
]
URI = "file:///project/point.py"
SOURCE = (
    "class Point:\n"
    "    def __init__(self, x, y):\n"
    "        self.x = x\n"
    "        self.y = y\n"
    "\n"
    "    def __add__(self, other):\n"
    "        return Point(self.x + other.x, self.y + other.y)\n"
    "\n"
    "    def __sub__(self, other):\n"
    "        return Point("
)


async def test_the_pulled_model_serves_a_suggestion_that_closes_against_the_suffix() -> None:
    args = ("--backend", "local", "--target", NAME, "--device", "cpu", "--dtype", "fp32")
    session = await start_session(args=args, initialization_options={"maxNewTokens": 24}, wait_ready=False)
    try:
        status = await session.wait_for_state("ready", "error", timeout=600)
        assert status["state"] == "ready", status
        session.open(URI, SOURCE + ")\n")  # the closing bracket is already typed after the cursor
        lines = SOURCE.split("\n")
        cursor = types.Position(len(lines) - 1, len(lines[-1]))
        result = await asyncio.wait_for(session.inline_at(URI, cursor), 300)
        items = result.items if result is not None else []
        assert items, "no suggestion from the real model"
        text = items[0].insert_text
        assert "self.x - other.x" in text, text  # the model continues the pattern of __add__
        assert not text.rstrip().endswith("))"), text  # the typed ")" after the cursor is not duplicated
        stats = await session.stats()
        assert stats["generations"] >= 1 and stats["last_engine_stats"]["target_forwards"] >= 1
    finally:
        await stop_session(session)
