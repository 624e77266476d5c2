"""The keystroke budget (`lsp_server.scheduling.budget`): a request gets a prompt it can read before the next
key, table-tested without threads, and the prompt's start survives the worker's snapshot."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.api import BackendInfo
from lsp_server.context import CompletionContext, ContextSettings, build_completion_context
from lsp_server.context.builder import (
    DEFAULT_PROMPT_TOKENS,
    MIN_SUFFIX_TOKENS,
    MOST_PROMPT_TOKENS,
    MOST_SUFFIX_TOKENS,
    affordable_suffix_tokens,
    full_prompt_tokens,
)
from lsp_server.documents import DocumentStore
from lsp_server.scheduling.budget import (
    FIRST_LINE_TOKENS,
    MIN_PROMPT_TOKENS,
    affordable_prompt_tokens,
    needs_smaller_prompt,
)


def info(prompt_tokens_per_s: float, step_s: float) -> BackendInfo:
    return BackendInfo(
        "local", "t", None, (), 8192, "cpu", prompt_tokens_per_s=prompt_tokens_per_s, step_s=step_s
    )


LAPTOP = info(150, 0.05)  # an AVX2 laptop in W8A8: 150 prompt tokens/s, 50 ms a step
AMX = info(650, 0.045)  # a Xeon with AMX in bf16
REMOTE = info(0, 0)  # nothing measured


@pytest.mark.parametrize(
    ("backend", "configured", "expected"),
    [
        (LAPTOP, 1536, int(150 * (1.5 - FIRST_LINE_TOKENS * 0.05))),  # 135: reads ~0.9 s, writes ~0.6 s
        (AMX, 1536, int(650 * (1.5 - FIRST_LINE_TOKENS * 0.045))),  # 623
        (AMX, 384, 384),  # never more than configured
        (info(40, 0.2), 1536, MIN_PROMPT_TOKENS),  # too slow for any useful prompt: the floor
        (info(40, 0.2), 64, 64),  # a configured budget under the floor stays
        (REMOTE, 1536, 1536),  # unmeasured: the setting decides
    ],
)
def test_affordable_prompt_tokens(backend: BackendInfo, configured: int, expected: int) -> None:
    assert affordable_prompt_tokens(backend, configured) == expected


def test_a_suggestion_started_at_rest_gets_the_tighter_budget() -> None:
    from lsp_server.scheduling.budget import AT_REST_SUGGESTION_S

    assert affordable_prompt_tokens(AMX, 1536, AT_REST_SUGGESTION_S) == int(650 * (1.0 - 12 * 0.045))  # 299
    assert affordable_prompt_tokens(LAPTOP, 1536, AT_REST_SUGGESTION_S) == MIN_PROMPT_TOKENS  # the floor
    assert needs_smaller_prompt(1400, 1500, LAPTOP, 1536, AT_REST_SUGGESTION_S) == MIN_PROMPT_TOKENS


@pytest.mark.parametrize(
    ("cached", "total", "backend", "expected"),
    [
        (0, 1500, LAPTOP, 135),  # a just-opened file: 10 s to read, so a prompt readable in time
        (1490, 1500, LAPTOP, None),  # typing on: 10 new tokens
        (1400, 1500, LAPTOP, None),  # 100 new tokens: 0.67 s + 0.6 s first line fits 1.5 s
        (1300, 1500, LAPTOP, 135),  # 200 new tokens: 1.3 s + 0.6 s does not
        (0, 120, LAPTOP, None),  # a small file fits whole
        (0, 1500, AMX, affordable_prompt_tokens(AMX, 1536)),
        (900, 1500, AMX, None),
        (0, 1500, REMOTE, None),
    ],
)
def test_a_request_keeps_its_prompt_only_if_it_can_read_the_rest_in_time(
    cached: int, total: int, backend: BackendInfo, expected: int | None
) -> None:
    assert needs_smaller_prompt(cached, total, backend, 1536) == expected


def test_the_prompt_start_a_snapshot_chose_is_kept_by_the_store() -> None:
    """The builder runs on a copy of the documents; where its prompt started must come back, or every
    prompt in a long file starts somewhere new and the cached prefix is lost."""
    from lsp_server.documents import DocumentStore

    store = DocumentStore()
    store.open("file:///a.py", "python", 1, "x = 1\n" * 50)
    snapshot = store.snapshot()
    snapshot.get("file:///a.py").prompt_start_line = 17
    store.adopt_trees(snapshot)
    assert store.get("file:///a.py").prompt_start_line == 17


def test_a_copy_taken_earlier_does_not_put_an_older_start_back() -> None:
    """Two prompts built side by side (a request's and the growth read aside): each copy gives back only the
    starts its own prompt moved. Before, the request's copy put the growth's start back to what it was when
    the copy was taken, and the next growth began elsewhere and read its prompt again from the start."""
    from lsp_server.documents import DocumentStore

    store = DocumentStore()
    store.open("file:///a.py", "python", 1, "x = 1\n" * 50)
    request, growth = store.snapshot(), store.snapshot()
    growth.get("file:///a.py").grow_start_line = 12
    growth.get("file:///a.py").below_start_from_end = 30
    store.adopt_trees(growth)
    request.get("file:///a.py").prompt_start_line = 17  # the request moved its own start only
    store.adopt_trees(request)
    adopted = store.get("file:///a.py")
    assert (adopted.prompt_start_line, adopted.grow_start_line, adopted.below_start_from_end) == (17, 12, 30)


def test_a_model_whose_first_line_fits_says_so_with_the_numbers() -> None:
    from lsp_server.scheduling.budget import first_line_fit

    fits, detail = first_line_fit(AMX)
    assert fits is True
    assert detail.startswith(f"fits: {MIN_PROMPT_TOKENS} prompt tokens at 650 tokens/s")
    assert "45 ms a step (0.54 s)" in detail and "of the 1.5 s keystroke budget" in detail


def test_speculation_is_credited_only_for_a_draft_model_and_only_conservatively() -> None:
    from lsp_server.scheduling.budget import first_line_fit

    slow = info(420, 0.15)  # 0.30 s to read the smallest prompt, 1.80 s to write a plain first line
    assert first_line_fit(slow)[0] is False
    drafted = replace(slow, speculative_speedup=2.0)
    fits, detail = first_line_fit(drafted)
    assert fits is True and "150 ms a step / 2.00 (the draft model, conservatively) (0.90 s)" in detail
    assert first_line_fit(drafted, drafter="lookup")[0] is False  # copying drafters are not credited
    fits, detail = first_line_fit(info(40, 0.2))
    assert fits is False and detail.startswith("does not fit: ")


def test_a_first_line_too_slow_for_a_user_typing_on_does_not_fit() -> None:
    """Prompts read fast enough for a just-opened file, but 90 ms a step writes a line start's 12-token first
    line in 1.08 s, after the user typing on has passed the pause after Enter."""
    from lsp_server.scheduling.budget import LINE_START_SUGGESTION_S, first_line_fit

    fits, detail = first_line_fit(info(20_000, 0.09))
    assert fits is False and "take 1.09 s of the 1.5 s keystroke budget" in detail
    assert detail.endswith(f"at a line start while typing, is past {LINE_START_SUGGESTION_S:g} s")
    fits, detail = first_line_fit(info(20_000, 0.05))
    assert fits is True and detail.endswith(f"is within {LINE_START_SUGGESTION_S:g} s")


def test_an_unmeasured_backend_is_neither_fit_nor_unfit() -> None:
    from lsp_server.scheduling.budget import first_line_fit

    assert first_line_fit(REMOTE) == (None, "not measured by this backend")


GPU = info(20_000, 0.02)  # prompts read in milliseconds


@pytest.mark.parametrize(
    ("backend", "configured", "expected"),
    [
        (LAPTOP, None, MIN_SUFFIX_TOKENS),  # 15 tokens in 0.1 s: the floor
        (AMX, None, 65),  # 0.1 s of reading
        (GPU, None, MOST_SUFFIX_TOKENS),  # 2,000 tokens in 0.1 s: the most
        (info(40, 0.2), None, MIN_SUFFIX_TOKENS),  # slower than any first line in time: still the floor
        (REMOTE, None, MIN_SUFFIX_TOKENS),  # unmeasured: a remote server may be a laptop's llama-server
        (LAPTOP, 384, 384),  # a number the user set is used as given, on any machine
        (GPU, 16, 16),
        (AMX, 0, 0),  # no suffix at all
    ],
)
def test_the_suffix_is_what_a_line_start_rereads_in_time_unless_the_user_says(
    backend: BackendInfo, configured: int | None, expected: int
) -> None:
    assert affordable_suffix_tokens(backend, configured) == expected


def built_with_qwen_tokens(
    backend: BackendInfo, settings: ContextSettings, lines: int, cursor_line: int
) -> CompletionContext:
    """The server's context for a file of `lines` lines `value_N = N` (3 tokens a line, 1 a word) at the start of
    line `cursor_line`, built for a model with Qwen's fill-in-the-middle tokens."""
    text = "".join(f"value_{n} = {n}\n" for n in range(lines))
    store = DocumentStore()
    store.open("file:///w/values.py", "python", 1, text)
    qwen = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>")
    return build_completion_context(
        store,
        "file:///w/values.py",
        text.index(f"value_{cursor_line} ="),
        replace(backend, special_tokens=qwen),
        settings,
        lambda part: len(part.split()),
    )


def test_the_context_builder_gives_the_prompt_the_machines_suffix_or_the_users() -> None:
    def suffix_tokens(backend: BackendInfo, settings: ContextSettings) -> int:
        return len(built_with_qwen_tokens(backend, settings, 400, 200).suffix.split())

    assert ContextSettings().max_suffix_tokens is None  # the machine's, by default
    # Trimmed at 8-line blocks of 3 tokens a line: within one block of the share.
    assert 65 - 24 <= suffix_tokens(AMX, ContextSettings()) <= 65  # 0.1 s of reading
    assert MOST_SUFFIX_TOKENS - 24 <= suffix_tokens(GPU, ContextSettings()) <= MOST_SUFFIX_TOKENS
    assert MIN_SUFFIX_TOKENS - 24 <= suffix_tokens(LAPTOP, ContextSettings()) <= MIN_SUFFIX_TOKENS
    assert 200 - 24 <= suffix_tokens(LAPTOP, ContextSettings(max_suffix_tokens=200)) <= 200  # the user's


@pytest.mark.parametrize(
    ("backend", "configured", "expected"),
    [
        (LAPTOP, None, DEFAULT_PROMPT_TOKENS),  # 60 tokens from scratch in the at-rest second: the floor
        (AMX, None, DEFAULT_PROMPT_TOKENS),  # ~300: the floor, read aside as before
        (info(3_000, 0.02), None, 2_280),  # 0.76 s left after a first line's steps, at 3,000 tokens/s
        (GPU, None, MOST_PROMPT_TOKENS),  # 15,200 tokens in that time: the most
        (REMOTE, None, DEFAULT_PROMPT_TOKENS),  # unmeasured: as before
        (GPU, 1024, 1024),  # a number the user set is used as given, on any machine
        (LAPTOP, 8192, 8192),
    ],
)
def test_the_full_prompt_is_what_the_machine_reads_at_rest_unless_the_user_says(
    backend: BackendInfo, configured: int | None, expected: int
) -> None:
    assert full_prompt_tokens(backend, configured) == expected


def test_the_context_builder_fills_the_machines_prompt_or_the_users() -> None:
    def prompt_tokens(backend: BackendInfo, settings: ContextSettings) -> int:  # of a 9,000-token file
        return len(built_with_qwen_tokens(backend, settings, 3000, 2000).prompt.split())

    assert ContextSettings().max_prompt_tokens is None  # the machine's, by default

    def fills(tokens: int, budget: int) -> bool:  # a moved prefix leaves a quarter free (STICKY_FILL)
        return 0.75 * budget <= tokens <= budget

    assert fills(prompt_tokens(AMX, ContextSettings()), DEFAULT_PROMPT_TOKENS)
    assert fills(prompt_tokens(GPU, ContextSettings()), MOST_PROMPT_TOKENS)
    assert fills(prompt_tokens(REMOTE, ContextSettings()), DEFAULT_PROMPT_TOKENS)
    assert fills(prompt_tokens(GPU, ContextSettings(max_prompt_tokens=1000)), 1000)  # the user's
    small_window = replace(GPU, context_length=2048)  # the model's window still bounds it
    assert prompt_tokens(small_window, ContextSettings()) <= 2048 - ContextSettings().reserve_tokens
