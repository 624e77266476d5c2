"""`specls bench prompt-reuse`: the layouts it compares, and its counts, with a character-level tokenizer."""

from __future__ import annotations

from pathlib import Path

from bench.keystrokes import KeystrokeConfig
from bench.prompt_reuse import as_served, block_after_middle, plain_psm, reuse_while_typing
from engine.api import BackendInfo
from lsp_server.context import ContextSettings, build_completion_context
from lsp_server.documents import DocumentStore

QWEN_SPECIAL = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|endoftext|>")


class CharTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(char) for char in text]


def _context(text: str, offset: int):  # type: ignore[no-untyped-def]
    store = DocumentStore()
    store.open("file:///w/a.py", "python", 1, text)
    info = BackendInfo("local", "t", None, QWEN_SPECIAL, 32768, "cpu", token_healing=False)
    return build_completion_context(store, "file:///w/a.py", offset, info, ContextSettings(), len)


def test_the_block_layout_moves_the_cursors_block_after_the_middle_token() -> None:
    lines = [f"x{i} = {i}" for i in range(12)]
    text = "\n".join(lines) + "\n"
    offset = text.index("x10")  # column 0 of line 10: its block of 8 lines starts at line 8
    ctx = _context(text, offset)
    prompt = block_after_middle(ctx, 10)
    assert ctx.mode != "none"
    assert prompt.endswith("<|fim_middle|>x8 = 8\nx9 = 9\n")
    assert "x7 = 7\n<|fim_suffix|>" in prompt
    assert plain_psm(ctx, 10).endswith("x9 = 9\n<|fim_suffix|>" + ctx.suffix + "<|fim_middle|>")
    assert as_served(ctx, 10) == ctx.prompt


def test_typing_a_file_counts_reuse_per_layout(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    body = "".join(f"def f{i}(a, b):\n    return a + b * {i}\n\n\n" for i in range(20))
    source.write_text(body, encoding="utf-8")
    layouts = {"served": as_served, "plain": plain_psm}
    rows = reuse_while_typing(
        CharTokenizer(),
        QWEN_SPECIAL,
        layouts,
        KeystrokeConfig(files=(source,), chars=80),
        ContextSettings(max_prompt_tokens=4000, max_suffix_tokens=200),
    )
    served, plain = rows["served"], rows["plain"]
    assert served["keystrokes"] == plain["keystrokes"] > 40
    # Plain PSM re-reads the suffix at every key; the served layout only at a new line.
    assert plain["tokens_to_prefill_per_key"] > 3 * served["tokens_to_prefill_per_key"]
    assert plain["keys_prefilling_over_long_prefill"] > served["keys_prefilling_over_long_prefill"]
    assert 0.9 < served["prefix_reuse"] <= 1.0
