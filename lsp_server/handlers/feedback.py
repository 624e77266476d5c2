"""The user's feedback on suggestions, counted for `specls/stats` (local only, never sent anywhere): the
`specls.accept` command every suggestion carries, and the `specls/did*` notifications a client may send."""

from __future__ import annotations

from typing import Any

from engine.memory import peak_resident_mb
from lsp_server.context.builder import (
    affordable_suffix_tokens,
    full_prompt_tokens,
    gate_threshold,
    lines_below_tokens,
)
from lsp_server.handlers.guard import field, guarded
from lsp_server.language_server import SpeclsServer
from lsp_server.scheduling.budget import first_line_fit

STATS_REQUEST = "specls/stats"


def accept_command(ls: SpeclsServer, *arguments: Any) -> None:
    """`specls.accept`, the command every suggestion carries: the client runs it when the user accepts."""
    _count_accept(ls, arguments[0] if arguments else None)


def _count_accept(ls: SpeclsServer, suggestion_id: Any) -> None:
    key = str(suggestion_id)
    if key in ls.accepted_ids:  # the command and specls/didAccept may both report one accept
        return
    if len(ls.accepted_ids) > 10_000:
        ls.accepted_ids.clear()
    ls.accepted_ids.add(key)
    ls.scheduler.stats.record_accepted()
    ls.schedule_status()


@guarded(None)
def did_show(ls: SpeclsServer, params: Any) -> None:
    ls.scheduler.stats.record_shown()


@guarded(None)
def did_accept(ls: SpeclsServer, params: Any) -> None:
    _count_accept(ls, field(params, "suggestionId"))


@guarded(None)
def did_partially_accept(ls: SpeclsServer, params: Any) -> None:
    ls.scheduler.stats.record_partially_accepted()


@guarded(None)
def did_reject(ls: SpeclsServer, params: Any) -> None:
    ls.scheduler.stats.record_rejected()
    ls.schedule_status()


@guarded({})
def stats_request(ls: SpeclsServer, params: Any) -> dict[str, Any]:
    result = ls.scheduler.stats.as_dict()
    result["state"] = ls.scheduler.state
    result["peak_rss_mb"] = peak_resident_mb()
    info = ls.scheduler.info
    result["model_memory_mb"] = dict(info.memory) if info is not None else {}
    # What runs, on which CPU class and why (`engine.hardware`), and how fast it measured itself at load.
    result["engine"] = info.runtime if info is not None else ""
    result["prompt_tokens_per_s"] = round(info.prompt_tokens_per_s, 1) if info is not None else 0.0
    result["step_ms"] = round(info.step_s * 1000, 1) if info is not None else 0.0
    # Which model runs and why (`engine.hardware.choose_default_model`), and whether it fits the budget.
    result["model_choice"] = info.model_choice if info is not None else ""
    fits, detail = first_line_fit(info, ls.settings.drafter) if info is not None else (None, "not loaded")
    result["keystroke_budget"] = {"fits": fits, "detail": detail}
    # How large a prompt is here (before a request cuts it for time), and how much of it follows the
    # cursor: what a line start re-reads in time. None in a setting: the machine's.
    context = ls.settings.context
    result["prompt_tokens"] = (
        full_prompt_tokens(info, context.max_prompt_tokens) if info is not None else context.max_prompt_tokens
    )
    result["suffix_tokens"] = (
        affordable_suffix_tokens(info, context.max_suffix_tokens)
        if info is not None
        else context.max_suffix_tokens
    )
    # The lines below the cursor, ahead of the file's text where the suffix holds fewer (Qwen's layout).
    result["lines_below_tokens"] = (
        lines_below_tokens(info, context.lines_below_tokens, result["suffix_tokens"], result["prompt_tokens"])
        if info is not None
        else context.lines_below_tokens
    )
    # The confidence gate: no suggestion whose first line the model finds less likely than this (0: none).
    result["first_line_gate"] = (
        gate_threshold(info, context.min_first_line_probability)
        if info is not None
        else context.min_first_line_probability
    )
    result["settings"] = {
        "backend": ls.settings.backend,
        "firstLineFirst": ls.settings.first_line_first,
        "positionEncoding": ls.store.position_encoding,
    }
    return result
