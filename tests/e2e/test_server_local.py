"""`specls serve --backend local` on a tiny real model pair: the speculative engine behind the LSP server.

The pair is built from a config with hand-set weights so that greedy decoding is known in advance: a large
constant in one embedding dimension dominates the final norm, and the LM head reads only that dimension, so
the target always emits "x" and the draft always proposes "y". Every draft is rejected, each speculative
round yields one token, and a long generation stays long: cancellation is then measured from the engine's
own statistics (target forwards of the cancelled call, its finish reason), not from the wall clock.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

from tests.e2e.server_support import Session, start_session, stop_session

pytestmark = pytest.mark.slow

URI = "file:///project/main.py"
WINDOW = 4096
LONG = 3000  # max new tokens for the generations that get cancelled


def _save_pair(root: Path) -> tuple[Path, Path]:
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from engine.train.tokenizer import tokenizer_config, train_code_tokenizer

    code = [
        "def add(a, b):\n    return a + b\n",
        "value = compute(x, y)\n",
        "for i in range(10):\n    print(i)\n",
    ]
    config = tokenizer_config(WINDOW)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_code_tokenizer(code * 20, vocab_size=300),
        bos_token=config["bos_token"],
        eos_token=config["eos_token"],
        pad_token=config["pad_token"],
        additional_special_tokens=config["additional_special_tokens"],
    )

    def build(folder: Path, always: str, hidden: int, layers: int) -> Path:
        torch.manual_seed(0)
        model = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(tokenizer),
                hidden_size=hidden,
                intermediate_size=2 * hidden,
                num_hidden_layers=layers,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=WINDOW,
                initializer_range=0.02,
                tie_word_embeddings=False,
            )
        )
        with torch.no_grad():
            model.model.embed_tokens.weight[:, 0] = 50.0  # dominates every position's normalised state
            model.lm_head.weight.zero_()
            model.lm_head.weight[tokenizer.convert_tokens_to_ids(always), 0] = 1.0
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return folder

    return build(root / "target", "x", hidden=256, layers=4), build(root / "draft", "y", hidden=64, layers=2)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _save_pair(tmp_path_factory.mktemp("pair"))


async def _local_session(pair: tuple[Path, Path], **settings: Any) -> Session:
    target, draft = pair
    args = ("--backend", "local", "--target", str(target), "--draft", str(draft), "--device", "cpu")
    # These tests count generations: no prefetch after a finished one.
    session = await start_session(args=args, initialization_options={"prefetch": False, **settings})
    status = await session.wait_for_state("ready", "error", timeout=120)
    assert status["state"] == "ready", status
    return session


async def _wait_for_stats(session: Session, condition: Any, timeout: float = 30) -> dict[str, Any]:
    for _ in range(int(timeout / 0.05)):
        stats = await session.stats()
        if condition(stats):
            return stats
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition never held; last stats {stats}")


async def test_local_model_completes_and_typed_ahead_needs_no_new_generation(pair: tuple[Path, Path]) -> None:
    session = await _local_session(pair, maxNewTokens=6, drafter="hybrid")
    try:
        session.open(URI, "value = ")
        # Token healing: the first of the six tokens re-spells the typed space, the other five are shown.
        assert await session.suggestion(URI) == "x" * 5
        session.type(URI, "xx")
        assert await session.suggestion(URI) == "x" * 3
        stats = await session.stats()
        assert stats["generations"] == 1 and stats["typed_ahead_hits"] == 1
        assert stats["last_engine_stats"]["target_forwards"] >= 1
    finally:
        await stop_session(session)


async def test_a_word_typed_halfway_is_healed_and_not_suggested_again(pair: tuple[Path, Path]) -> None:
    session = await _local_session(pair, maxNewTokens=8, drafter="hybrid")
    try:
        session.open(URI, "value = compute(x, y)\nvalue = comp")
        suggestion = await session.suggestion(URI)
        stats = await session.stats()
        # The engine re-generated " comp" under the healing constraint, then the target's free tokens ("x").
        assert stats["last_engine_stats"]["per_drafter"]["forced"]["rounds"] >= 1
        assert re.fullmatch(r"[a-z]*x+", suggestion), suggestion  # at most the rest of the word, then x's
    finally:
        await stop_session(session)


async def test_an_edit_or_a_newer_request_stops_the_local_generation(pair: tuple[Path, Path]) -> None:
    session = await _local_session(pair, maxNewTokens=LONG, drafter="model")
    try:
        session.open(URI, "value = ")
        first = session.inline(URI)
        await _wait_for_stats(session, lambda s: s["generations"] == 1)  # the engine is generating
        await asyncio.sleep(0.2)
        session.type(URI, ";")  # disagrees with the "xxx..." being generated
        assert not (await asyncio.wait_for(first, 30)).items
        stats = await _wait_for_stats(session, lambda s: s["cancelled_generations"] == 1)
        assert stats["last_finish_reason"] == "cancelled"
        assert stats["last_engine_stats"]["target_forwards"] < LONG / 3

        second = session.inline(URI)
        await _wait_for_stats(session, lambda s: s["generations"] == 2)
        await asyncio.sleep(0.2)
        newer = session.inline_at(URI, types.Position(0, 0))  # a newer request elsewhere
        assert not (await asyncio.wait_for(second, 30)).items
        stats = await _wait_for_stats(session, lambda s: s["cancelled_generations"] == 2)
        assert stats["last_engine_stats"]["target_forwards"] < LONG / 3
        newer.cancel()
    finally:
        await stop_session(session)


async def test_a_missing_local_model_is_reported_and_requests_are_answered_empty(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    session = await start_session(args=("--backend", "local", "--target", str(missing), "--device", "cpu"))
    try:
        status = await session.wait_for_state("error", timeout=120)
        assert "no-such-model" in status["message"]
        assert any("no-such-model" in m.message for m in session.client.messages)  # window/showMessage
        session.open(URI, "value = ")
        assert not (await asyncio.wait_for(session.inline(URI), 10)).items
    finally:
        await stop_session(session)


async def test_the_bundled_pair_answers_on_a_new_line_with_default_settings() -> None:
    """The commonest moment for a suggestion: after Enter, the cursor behind the new line's indentation."""
    session = await start_session(args=())  # `specls serve`: the local backend with the bundled pair
    try:
        status = await session.wait_for_state("ready", "error", timeout=120)
        assert status["state"] == "ready", status
        session.open(URI, "def add(a, b):\n    ")
        suggestion = await session.suggestion(URI, timeout=60)
        first, *later = suggestion.split("\n")
        assert first.strip(), suggestion  # something to insert on the cursor's line
        assert first == first.lstrip(" \t"), suggestion  # the indentation is typed already: not doubled
        for line in later:  # still in the body of `add`, indented with spaces as the file is
            assert not line.strip() or (line.startswith("    ") and "\t" not in line), suggestion
    finally:
        await stop_session(session)
