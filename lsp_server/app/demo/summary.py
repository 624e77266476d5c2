"""The numbers at the end of a demo, as one JSON-ready dict, and their text form."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from lsp_server.app.demo.speedup import TIMED_RUNS, Speedup
from lsp_server.statistics import percentile
from lsp_server.typist.keystrokes import ratio
from lsp_server.typist.measures import Typed, user_measures
from lsp_server.typist.replay import KeyEvent, LiveStats


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def build_summary(
    events: Sequence[KeyEvent],
    server: LiveStats,
    speedup: Speedup | None,
    plain_presses: int | None = None,
    unanswered: int = 0,
) -> dict[str, Any]:
    """`plain_presses`: the key presses the same text takes without accepting any ghost text."""
    typed_chars = events[-1].offset - events[0].offset + len(events[0].key) if events else 0
    user = user_measures([Typed(events, typed_chars)])
    answered = [event for event in events if event.latency_ms is not None and event.error is None]
    # A superseded request's answer only says when the next key press came; an editor never shows it.
    latencies = [
        event.latency_ms for event in answered if event.latency_ms is not None and not event.superseded
    ]
    with_text = [event for event in answered if event.suggestion]
    suggestion_latencies = [event.latency_ms for event in with_text if event.latency_ms is not None]
    matches = Counter(event.match for event in with_text)
    summary: dict[str, Any] = {
        "keystrokes": len(events),
        "answered": len(answered),
        "errors": sum(event.error is not None for event in events) + unanswered,
        "unanswered": unanswered,
        "ghost_on_screen": _round(user["ghost_on_screen"], 4),
        "ghost_right": _round(user["ghost_right"], 4),
        "chars_saved": _round(user["chars_saved"], 4),
        "suggestions": len(with_text),
        "superseded": sum(event.superseded for event in events),
        "typed_chars": typed_chars,
        "accepts": sum(event.accepted > 0 for event in events),
        "accepted_chars": sum(event.accepted for event in events),
        "key_presses_saved": _round(1 - len(events) / plain_presses, 4) if plain_presses else None,
        "latency_ms": {
            "p50": _round(percentile(latencies, 50)),
            "p95": _round(percentile(latencies, 95)),
        },
        "suggestion_latency_ms": {
            "p50": _round(percentile(suggestion_latencies, 50)),
            "p95": _round(percentile(suggestion_latencies, 95)),
        },
        "matches": {kind: matches.get(kind, 0) for kind in ("full", "line", "partial", "miss")},
        # A hit: the user went on to type the whole suggestion, or at least its whole first line.
        "typed_ahead_hit_rate": _round(ratio(matches["full"] + matches["line"], len(with_text)), 4),
        "server": {
            "requests": server.requests,
            "generations": server.generations,
            "cancelled_generations": server.cancelled_generations,
            "typed_ahead_hits": server.typed_ahead_hits,
            "accepted": server.accepted,
            "partially_accepted": server.partially_accepted,
            "typed_ahead_rate": _round(ratio(server.typed_ahead_hits, server.requests), 4),
            "draft_acceptance": _round(server.draft_acceptance, 4),
            "tokens_per_target_forward": _round(server.tokens_per_forward, 3),
            "engine": server.engine,
        },
        "speedup": None,
    }
    if speedup is not None:
        summary["speedup"] = {
            "samples": len(speedup.samples),
            "skipped": speedup.skipped,
            "identical_outputs": speedup.identical,
            "plain_tokens_per_s": _round(speedup.plain_tokens_per_s, 1),
            "speculative_tokens_per_s": _round(speedup.speculative_tokens_per_s, 1),
            "factor": _round(speedup.factor, 3),
            "plain_tokens": sum(sample.plain_tokens for sample in speedup.samples),
            "plain_target_forwards": sum(sample.plain_forwards for sample in speedup.samples),
            "speculative_target_forwards": sum(sample.speculative_forwards for sample in speedup.samples),
        }
    return summary


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} ms"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def format_summary(summary: dict[str, Any]) -> list[str]:
    latency, with_text = summary["latency_ms"], summary["suggestion_latency_ms"]
    matches, server = summary["matches"], summary["server"]
    acceptance, tokens_per_forward = server["draft_acceptance"], server["tokens_per_target_forward"]
    drafts = "none proposed" if acceptance is None else f"{_percent(acceptance)} accepted"
    per_forward = "n/a" if tokens_per_forward is None else f"{tokens_per_forward:.2f}"
    lines = [
        "summary",
        f"  key presses           {summary['keystrokes']} ({summary['answered']} answered, "
        f"{summary['suggestions']} with ghost text, {summary['errors']} errors)",
        f"  ghost text on screen  {_percent(summary['ghost_on_screen'])} of key presses came with ghost text "
        f"shown ({_percent(summary['ghost_right'])} with it right)",
        f"  latency               p50 {_ms(latency['p50'])}, p95 {_ms(latency['p95'])} per key press "
        f"(with ghost text: p50 {_ms(with_text['p50'])}, p95 {_ms(with_text['p95'])}; superseded ones left out)",
        f"  typed-ahead hit rate  {_percent(summary['typed_ahead_hit_rate'])} of suggestions were then typed "
        f"(full {matches['full']}, first line {matches['line']}, partly {matches['partial']}, "
        f"miss {matches['miss']})",
        f"  served from typing    {_percent(server['typed_ahead_rate'])} of requests answered from an earlier "
        "suggestion the typing agreed with (no model call)",
        f"  drafts                {drafts}, {per_forward} tokens per target forward",
        f"  cancels               {server['cancelled_generations']} of {server['generations']} generations "
        f"stopped by newer typing; {summary['superseded']} requests superseded",
    ]
    if server.get("engine"):  # which engine ran, on which CPU class, and why
        lines.insert(1, f"  engine                {server['engine']}")
    if summary["accepts"]:
        lines.insert(
            4,
            f"  accepted ghost text   {summary['accepts']} times, {summary['accepted_chars']} of "
            f"{summary['typed_chars']} characters ({_percent(summary['chars_saved'])} of the typing saved); "
            f"{_percent(summary['key_presses_saved'])} fewer key presses",
        )
    speedup = summary.get("speedup")
    if speedup is None:
        lines.append("  speed-up              not measured")
    elif speedup["factor"] is None:
        lines.append(f"  speed-up              n/a ({speedup['skipped']} prompts gave no generation to time)")
    else:
        lines.append(
            f"  speed-up              {speedup['factor']:.2f}x over plain decoding "
            f"({speedup['speculative_tokens_per_s']:.0f} vs {speedup['plain_tokens_per_s']:.0f} tokens/s on "
            f"{speedup['plain_tokens']} tokens, fastest of {TIMED_RUNS} runs each, "
            f"{speedup['speculative_target_forwards']} vs {speedup['plain_target_forwards']} target forwards; "
            f"{speedup['samples']} prompts, same server; identical output {speedup['identical_outputs']}/"
            f"{speedup['samples']})"
        )
    return lines
