"""FIM templates: detection per family, layout, token budget and KV-cache prefix reuse while typing."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
from tokenizers import Tokenizer, models

from engine.api import BackendInfo
from engine.sequences import common_prefix_length
from engine.tokens import SPECIAL_TOKENS
from engine.train.tokenizer import train_code_tokenizer
from lsp_server.context import ContextSettings, build_completion_context, detect_fim_template
from lsp_server.context.builder import (
    BELOW_STICKY_LINES,
    lines_below,
    lines_below_tokens,
)
from lsp_server.context.fim import (
    BUNDLED,
    Snippet,
    fit_prefix_suffix,
)
from lsp_server.documents import DocumentStore, TextChange

# Each family's special tokens as its tokenizer lists them (None: a model without FIM).
FAMILY_TOKENS: dict[str | None, list[str]] = {
    "specls": list(SPECIAL_TOKENS),
    "qwen2.5-coder": [
        "<|endoftext|>",
        "<|fim_prefix|>",
        "<|fim_middle|>",
        "<|fim_suffix|>",
        "<|fim_pad|>",
        "<|file_sep|>",
    ],
    "starcoder2": [
        "<|endoftext|>",
        "<fim_prefix>",
        "<fim_middle>",
        "<fim_suffix>",
        "<fim_pad>",
        "<repo_name>",
        "<file_sep>",
    ],
    "codellama": ["<s>", "</s>", "<unk>", "▁<PRE>", "▁<MID>", "▁<SUF>", "▁<EOT>"],
    "deepseek-coder": [
        "<｜end▁of▁sentence｜>",
        "<｜fim▁hole｜>",
        "<｜fim▁begin｜>",
        "<｜fim▁end｜>",
        "<|EOT|>",
    ],
    None: ["<|endoftext|>", "<pad>", "<mask>"],
}


def _family_tokenizer(special: list[str]) -> Tokenizer:
    """A tiny word-level tokenizer carrying one family's special tokens, as a model's tokenizer would."""
    vocab = {"[UNK]": 0, "def": 1, "f": 2, "x": 3, "return": 4}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.add_special_tokens(special)
    return tokenizer


def _special_tokens(tokenizer: Tokenizer) -> list[str]:
    return [token.content for token in tokenizer.get_added_tokens_decoder().values() if token.special]


@pytest.mark.parametrize("family", list(FAMILY_TOKENS))
def test_template_detected_from_tokenizer_special_tokens(family: str | None) -> None:
    tokenizer = _family_tokenizer(FAMILY_TOKENS[family])
    template = detect_fim_template(_special_tokens(tokenizer))
    if family is None:
        assert template is None
        return
    assert template is not None
    assert template.name == family
    # The markers in a formatted prompt come back as the tokenizer's special ids, each exactly once.
    prompt = template.format("def f", "return x", [Snippet("b.py", "x")])
    ids = tokenizer.encode(prompt).ids
    for marker in (template.prefix_token, template.suffix_token, template.middle_token):
        assert ids.count(tokenizer.token_to_id(marker)) == 1


def test_layouts_put_stable_parts_first() -> None:
    snippet = Snippet("lib/b.py", "def helper(): ...")
    assert BUNDLED.format("PRE", "SUF", [snippet]) == (
        "<|sp_file_sep|>lib/b.py\ndef helper(): ...\n"
        "<|sp_fim_suffix|>SUF<|sp_fim_prefix|>PRE<|sp_fim_middle|>"
    )
    qwen = detect_fim_template(FAMILY_TOKENS["qwen2.5-coder"])
    assert qwen is not None
    # PSM: the lines above the cursor in the prefix, the cursor's line so far after the middle token.
    assert qwen.format("A\nPRE", "SUF", [snippet]) == (
        "<|file_sep|>lib/b.py\ndef helper(): ...\n<|fim_prefix|>A\n<|fim_suffix|>SUF<|fim_middle|>PRE"
    )
    codellama = detect_fim_template(["<PRE>", "<SUF>", "<MID>", "<EOT>"])
    assert codellama is not None
    assert codellama.format("A\nPRE", "SUF") == "<PRE> A\n <SUF>SUF <MID>PRE"
    deepseek = detect_fim_template(FAMILY_TOKENS["deepseek-coder"])
    assert deepseek is not None
    assert deepseek.format("PRE", "SUF", [snippet], comment="#") == (
        "# lib/b.py\ndef helper(): ...\n<｜fim▁begin｜><｜fim▁hole｜>SUF<｜fim▁end｜>PRE"
    )


@functools.cache
def _code_tokenizer() -> Tokenizer:
    # A fixed corpus: trained on the project's files, the counts (and block cuts) moved with every new file.
    return train_code_tokenizer([_source(300)], vocab_size=600)


def _count(text: str) -> int:
    return len(_code_tokenizer().encode(text).ids)


def _source(lines: int) -> str:
    return "".join(
        f"def function_{i}(value):\n    return value * {i} + offset_{i % 7}\n\n" for i in range(lines)
    )


def test_budget_is_respected_and_weighted_toward_the_prefix() -> None:
    text = _source(200)
    cursor = len(text) // 2
    prefix, suffix = fit_prefix_suffix(text[:cursor], text[cursor:], 400, 0.75, _count)
    assert _count(prefix) + _count(suffix) <= 400
    assert _count(prefix) > 2 * _count(suffix) > 0
    assert text[:cursor].endswith(prefix)
    assert text[cursor:].startswith(suffix)
    # A short suffix leaves its share to the prefix.
    prefix, suffix = fit_prefix_suffix(text[:cursor], "\n", 400, 0.75, _count)
    assert _count(prefix) > 350


def test_a_suffix_cap_gives_the_prefix_what_the_suffix_share_leaves() -> None:
    text = _source(200)
    cursor = len(text) // 2
    _, shared = fit_prefix_suffix(text[:cursor], text[cursor:], 400, 0.75, _count)
    prefix, suffix = fit_prefix_suffix(text[:cursor], text[cursor:], 400, 0.75, _count, max_suffix_tokens=40)
    assert 0 < _count(suffix) <= 40 < _count(shared)
    assert text[cursor:].startswith(suffix)  # the lines right after the cursor are the ones kept
    assert 350 < _count(prefix) + _count(suffix) <= 400


def test_build_context_stays_within_budget_with_snippets() -> None:
    store = DocumentStore()
    store.open("file:///w/other.py", "python", 1, _source(30))
    text = _source(300)
    store.open("file:///w/main.py", "python", 1, text)
    info = BackendInfo("fake", "t", None, SPECIAL_TOKENS, 1024, "cpu")
    # The tokenizer is trained on this repository's sources, so token counts drift as the code changes:
    # the budget leaves the ~150-token snippet room to spare.
    settings = ContextSettings(max_prompt_tokens=800)
    ctx = build_completion_context(store, "file:///w/main.py", len(text) // 2, info, settings, _count)
    assert _count(ctx.prompt) <= 800
    assert ctx.lookup_snippets  # the other file shares identifiers with the code around the cursor
    assert ctx.prompt.startswith("<|sp_file_sep|>other.py\n") or ctx.prompt.startswith(
        "<|sp_file_sep|>w/other.py"
    )


def test_prefix_only_fallback_without_fim_tokens() -> None:
    store = DocumentStore()
    store.open("file:///w/a.py", "python", 1, "x = 1\ny = █\nz = 3\n".replace("█", ""))
    info = BackendInfo("fake", "t", None, ("<|endoftext|>",), 1024, "cpu")
    ctx = build_completion_context(
        store, "file:///w/a.py", len("x = 1\ny = "), info, ContextSettings(), _count
    )
    assert ctx.prompt == "x = 1\ny = "
    assert ctx.suffix == ""


def prefix_reuse_rate(token_sequences: list[list[int]]) -> float:
    """Fraction of each prompt's tokens already present as a prefix of the prompt before it, over
    consecutive prompts (the first prompt is not counted): what the layout keeps of the KV cache."""
    reused = total = 0
    for previous, current in zip(token_sequences, token_sequences[1:], strict=False):
        reused += common_prefix_length(previous, current)
        total += len(current)
    return reused / total if total else 0.0


def test_consecutive_keystrokes_share_a_long_token_prefix() -> None:
    """Type a new line in the middle of a file too big for the budget: the trimmed prompt must keep its
    head, so a prefix-reusing KV cache re-encodes only the last few tokens per keystroke."""
    store = DocumentStore()
    uri = "file:///w/main.py"
    text = _source(400)
    cursor = text.index("def function_200")
    text = text[:cursor] + "\n" + text[cursor:]  # an empty line to type on
    store.open(uri, "python", 1, text)
    store.open("file:///w/other.py", "python", 1, _source(20))
    info = BackendInfo("fake", "t", None, SPECIAL_TOKENS, 1024, "cpu")
    settings = ContextSettings(max_prompt_tokens=700)
    typed = "def new_function(value):\n    return value + offset_3\n"
    prompts = []
    for version, ch in enumerate(typed, start=2):
        line, character = store.position_at(uri, cursor)
        store.change(uri, version, [TextChange((line, character, line, character), ch)])
        cursor += 1
        ctx = build_completion_context(store, uri, cursor, info, settings, _count)
        assert ctx.mode != "none"
        assert _count(ctx.prompt) <= 700
        prompts.append(_code_tokenizer().encode(ctx.prompt).ids)
    rate = prefix_reuse_rate(prompts)
    assert rate > 0.9, rate
    # Every keystroke keeps at least 80% of the previous prompt's tokens.
    for previous, current in zip(prompts, prompts[1:], strict=False):
        assert common_prefix_length(previous, current) > 0.8 * len(previous)


def test_common_prefix_length() -> None:
    assert common_prefix_length([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix_length([], [1]) == 0
    assert prefix_reuse_rate([[1, 2], [1, 2, 3], [9]]) == pytest.approx(2 / 4)


def test_a_prefix_only_header_names_the_file_before_its_text() -> None:
    import dataclasses

    from lsp_server.context.fim import PREFIX_ONLY, Snippet

    template = dataclasses.replace(PREFIX_ONLY, file_header="{comment} {path}\n")
    snippet = Snippet("pkg/util.py", "def helper():\n    pass")
    prompt = template.format("x = 1\n", "ignored suffix", [snippet], "//", "pkg/main.go")
    assert prompt == "// pkg/util.py\ndef helper():\n    pass\n// pkg/main.go\nx = 1\n"
    assert template.format("x = 1\n", "", (), "#", "") == "x = 1\n"  # no path, no header
    no_header = dataclasses.replace(PREFIX_ONLY, file_header="")
    assert no_header.format("x = 1\n", "", (), "#", "a.py") == "x = 1\n"


def test_the_prompt_start_stays_put_while_the_cursor_moves_down_and_then_moves_with_room() -> None:
    """Prefix-only (no FIM tokens): moving the cursor down line by line through a file too big for the
    budget keeps the same prompt start for many lines (so the KV cache keeps the prompt's head); when it
    must move, it moves far enough that the next moves are as rare."""
    store = DocumentStore()
    uri = "file:///w/main.py"
    text = _source(400)
    store.open(uri, "python", 1, text)
    info = BackendInfo("fake", "t", None, ("<|endoftext|>",), 4096, "cpu")
    settings = ContextSettings(max_prompt_tokens=700)
    starts = []
    lines = text.split("\n")
    for line in range(300, 380):
        offset = sum(len(each) + 1 for each in lines[:line])
        ctx = build_completion_context(store, uri, offset, info, settings, _count)
        assert _count(ctx.prompt) <= 700
        starts.append(text.index(ctx.prefix[:200]))
    moves = sum(a != b for a, b in zip(starts, starts[1:], strict=False))
    assert 1 <= moves <= 4, moves  # 80 lines down: a block-by-block trim would move it every 8 lines


def test_typing_on_a_line_changes_only_the_end_of_a_psm_prompt() -> None:
    qwen = detect_fim_template(FAMILY_TOKENS["qwen2.5-coder"])
    assert qwen is not None
    prompts = [qwen.format("def f(x):\n    " + "return x + 1"[:n], "\nprint(f(2))\n") for n in range(1, 13)]
    head = qwen.format("def f(x):\n    ", "\nprint(f(2))\n")
    for prompt in prompts:
        assert prompt.startswith(head)  # only the cursor's line, at the very end, grows


def _qwen_store(text: str) -> tuple[DocumentStore, BackendInfo]:
    store = DocumentStore()
    store.open("file:///w/main.py", "python", 1, text)
    return store, BackendInfo("fake", "t", None, tuple(FAMILY_TOKENS["qwen2.5-coder"]), 4096, "cpu")


BELOW = ContextSettings(lines_below_tokens=320)


def test_the_lines_below_go_ahead_of_the_prefix_where_the_suffix_holds_few() -> None:
    text = _source(300)
    cursor = text.index("def function_150")
    text = text[:cursor] + "\n" + text[cursor:]  # an empty line to type on
    store, info = _qwen_store(text)
    ctx = build_completion_context(store, "file:///w/main.py", cursor, info, BELOW, _count)
    below = text[cursor + 1 :]
    head, _, rest = ctx.prompt.partition("<|fim_prefix|>")
    assert head.startswith("<|file_sep|>w/main.py\n" + below[:200])  # from the line after the cursor's
    block = head.removeprefix("<|file_sep|>w/main.py\n").removesuffix("\n")
    assert below.startswith(block) and 0.8 * 320 < _count(block) <= 320
    assert _count(ctx.prompt) <= 1536
    assert "<|fim_suffix|>" in rest  # the suffix a new line re-reads is still there, as before

    # Off (the default); where the suffix already holds as many tokens (a GPU); in a prompt cut for time: none.
    for settings in (
        ContextSettings(),
        ContextSettings(lines_below_tokens=320, max_suffix_tokens=384),
        ContextSettings(lines_below_tokens=320, max_prompt_tokens=1000),
    ):
        ctx = build_completion_context(store, "file:///w/main.py", cursor, info, settings, _count)
        assert ctx.prompt.startswith("<|fim_prefix|>")
    # The model's measured number where the user sets none (the 1.5B's 320); a number the user sets wins.
    measured = replace(info, lines_below_tokens=320)
    for settings, ahead in ((ContextSettings(), True), (ContextSettings(lines_below_tokens=0), False)):
        ctx = build_completion_context(store, "file:///w/main.py", cursor, measured, settings, _count)
        assert ctx.prompt.startswith("<|file_sep|>w/main.py\n" + below[:200]) is ahead
    assert (
        lines_below_tokens(info, None, 64, 1536) == 0 and lines_below_tokens(measured, None, 64, 1536) == 320
    )
    assert lines_below_tokens(measured, 0, 64, 1536) == 0 and lines_below_tokens(info, 256, 64, 1536) == 256
    assert lines_below_tokens(info, 320, 64, 1536) == 320
    assert lines_below_tokens(info, 320, 384, 1536) == 0  # the suffix holds them already
    assert lines_below_tokens(info, 320, 64, 1000) == 0  # more than a quarter of the prompt
    assert lines_below_tokens(info, 0, 64, 1536) == 0


def test_the_lines_below_stay_while_lines_are_typed_above_them() -> None:
    text = _source(300)
    cursor = text.index("def function_150")
    text = text[:cursor] + "\n" + text[cursor:]
    store, info = _qwen_store(text)
    uri = "file:///w/main.py"
    heads = set()
    for version, ch in enumerate("x = 1\nreturn x\n", start=2):
        line, character = store.position_at(uri, cursor)
        store.change(uri, version, [TextChange((line, character, line, character), ch)])
        cursor += 1
        ctx = build_completion_context(store, uri, cursor, info, BELOW, _count)
        heads.add(ctx.prompt.partition("<|fim_prefix|>")[0])
    assert len(heads) == 1  # the block, and with it the prompt's cached start, never changed


def test_a_prompt_a_few_lines_up_keeps_the_block_and_so_the_cached_prompt() -> None:
    # A growth read aside for the line where typing began, a warm-up: a line start a little above the cursor.
    store = DocumentStore()
    store.open("file:///w/a.py", "python", 1, "".join(f"line_{n} = {n}\n" for n in range(40)))
    doc = store.get("file:///w/a.py")
    assert lines_below(doc, doc.line_start(20), 100, _count).startswith("line_21 = 21\n")
    for up in range(1, BELOW_STICKY_LINES + 1):  # its lines between are in the suffix
        assert lines_below(doc, doc.line_start(20 - up), 100, _count).startswith("line_21 = 21\n")
    # Further up, or at the block's own first line, the block starts at the next line again.
    assert lines_below(doc, doc.line_start(10), 100, _count).startswith("line_11 = 11\n")
    assert lines_below(doc, doc.line_start(11), 100, _count).startswith("line_12 = 12\n")
    # A line opened above it (Enter) moves the block's line number, not its text.
    store.change("file:///w/a.py", 2, [TextChange((5, 0, 5, 0), "new = 0\n")])
    doc = store.get("file:///w/a.py")
    assert lines_below(doc, doc.line_start(11), 100, _count).startswith("line_12 = 12\n")


def test_the_lines_below_are_whole_lines_within_their_budget() -> None:
    store = DocumentStore()
    store.open("file:///w/a.py", "python", 1, "a = 1\nb = 2\nc = 3\n")
    doc = store.get("file:///w/a.py")
    assert lines_below(doc, 0, 100, _count) == "b = 2\nc = 3"
    assert lines_below(doc, 0, _count("b = 2\n"), _count) == "b = 2"
    assert lines_below(doc, 0, 1, _count) == ""  # the first line does not fit
    assert lines_below(doc, len(doc.text), 100, _count) == ""  # nothing below the last line
