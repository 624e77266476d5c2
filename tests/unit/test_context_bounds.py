"""Prompt building is bounded whatever the text: long lines are cut to the budget before anything is
tokenized, a lone surrogate never reaches a tokenizer, and a snapshot of the documents is immune to edits."""

from __future__ import annotations

import time

from engine.api import BackendInfo
from lsp_server.config import ServerSettings, apply_settings, fit_to_model
from lsp_server.context import ContextSettings, build_completion_context
from lsp_server.context.builder import MAX_CHARS_PER_TOKEN, bounded_line_before
from lsp_server.context.fim import BLOCK_LINES
from lsp_server.documents import DocumentStore, TextChange
from lsp_server.engine_request import engine_request, without_lone_surrogates

SPECIAL = ("<|endoftext|>", "<|sp_fim_prefix|>", "<|sp_fim_suffix|>", "<|sp_fim_middle|>", "<|sp_file_sep|>")
INFO = BackendInfo("fake", "t", None, SPECIAL, 2048, "cpu")


class Counter:
    """A 4-characters-per-token count that remembers the longest text it was asked about."""

    def __init__(self) -> None:
        self.longest = 0

    def __call__(self, text: str) -> int:
        self.longest = max(self.longest, len(text))
        return (len(text) + 3) // 4


def test_a_2mb_line_is_cut_to_the_budget_before_it_is_counted() -> None:
    store = DocumentStore()
    big = "var a=1;" * 262_144
    # No grammar here (the parse is bounded on its own, PARSE_BUDGET_S; the fault suite covers it)
    store.open("file:///w/min.txt", "plaintext", 1, big[:1_000_000] + "\n" + big[1_000_000:])
    store.open("file:///w/other.txt", "plaintext", 1, big)  # a snippet candidate, as long
    settings = ContextSettings(max_prompt_tokens=1536)
    count = Counter()
    started = time.perf_counter()
    ctx = build_completion_context(store, "file:///w/min.txt", 1_500_000, INFO, settings, count)
    took = time.perf_counter() - started
    most = (1536 + BLOCK_LINES) * MAX_CHARS_PER_TOKEN
    assert count.longest <= most + 1000, count.longest  # 2 MB before
    assert count(ctx.prompt) <= 1536 and ctx.prefix
    assert took < 0.5, took


def test_the_line_before_the_cursor_keeps_its_indentation_and_its_end() -> None:
    line = "    " + "x" * 100_000
    text = "def f():\n" + line
    bounded = bounded_line_before(text, len(text))
    assert bounded.startswith("    x") and bounded.endswith("x" * 100) and len(bounded) <= 4004
    assert bounded_line_before("a\n  short", 9) == "  short"


def test_lone_surrogates_never_reach_the_engine() -> None:
    assert without_lone_surrogates("ok \ud800 and \udfff") == "ok \ufffd and \ufffd"
    assert without_lone_surrogates("emoji 😀 stays") == "emoji 😀 stays"
    store = DocumentStore()
    store.open("file:///w/b.py", "python", 1, "def load_rows(path):\n    return rows  # \ud800\n")
    store.open("file:///w/a.py", "python", 1, "from b import load_rows\n\nrows = load_rows(path)\n")
    ctx = build_completion_context(store, "file:///w/a.py", 48, INFO, ContextSettings(), Counter())
    request = engine_request(ctx, ServerSettings(), previous_completion="\udc00")
    for text in (request.prompt, request.suffix, request.previous_completion, *request.lookup_context):
        text.encode("utf-8")  # raises on a lone surrogate


def test_a_snapshot_does_not_see_later_edits() -> None:
    store = DocumentStore()
    store.open("file:///w/a.py", "python", 1, "x = 1\ny = 2\n")
    assert store.get("file:///w/a.py").tree is not None
    snapshot = store.snapshot()
    store.change("file:///w/a.py", 2, [TextChange((0, 0, 1, 0), "")])
    copy = snapshot.get("file:///w/a.py")
    assert copy.text == "x = 1\ny = 2\n" and copy.line_count == 3 and copy.line_text(1) == "y = 2"
    assert copy.tree is not None and copy.tree.root_node.end_byte == len(b"x = 1\ny = 2\n")
    assert store.get("file:///w/a.py").line_text(0) == "y = 2"


def test_non_finite_numbers_fall_back_and_the_rest_holds() -> None:
    settings, report = apply_settings(
        {
            "maxNewTokens": float("inf"),
            "debounceMs": float("-inf"),
            "temperature": float("nan"),
            "maxLines": 3,
        },
        ServerSettings(),
    )
    assert settings.max_new_tokens == 64 and settings.debounce_ms == 0 and settings.temperature == 0.0
    assert settings.context.max_lines == 3
    assert len(report.invalid) == 3 and all("finite" in line or "number" in line for line in report.invalid)


def test_max_new_tokens_is_fitted_to_the_window() -> None:
    fitted, problems = fit_to_model(ServerSettings(max_new_tokens=600), 512)
    assert fitted.max_new_tokens == 448 and len(problems) == 1 and "512" in problems[0]
    assert fitted.context.reserve_tokens == 448  # the prompt budget leaves room for the completion
    same, none = fit_to_model(ServerSettings(), 512)
    assert same.max_new_tokens == 64 and same.context.reserve_tokens == 128 and none == []
