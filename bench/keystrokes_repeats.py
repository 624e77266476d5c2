"""Repeated runs of `specls bench keystrokes` (`--repeat N`): the same typing N times in a row, each run with a
fresh server and its own result files, and one table of their headline measures with the mean and the spread.

One run's figures move with the machine: three runs of the same code on a 2-core Xeon spanned 13 points of
ghost text and 2.4 points of characters saved (docs/line-starts.md). A change judged by the typist needs its
spread beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.metrics import markdown_table, write_result_files


@dataclass(frozen=True)
class Measure:
    label: str
    read: Callable[[dict[str, Any]], float | None]  # from a run's summary
    unit: str  # "%": a share shown in percent; "ms"; "" for a count


def _stale(summary: dict[str, Any]) -> float | None:
    reasons = (summary.get("server") or {}).get("empty_reasons") or {}
    return float(reasons.get("stale-context", 0))


def _latency(summary: dict[str, Any], quantile: str) -> float | None:
    value = (summary.get("suggestion_latency_ms") or {}).get(quantile)
    return None if value is None else float(value)


HEADLINE = (
    Measure("ghost text on screen when the next key came", lambda s: s.get("ghost_on_screen"), "%"),
    Measure("... and the key agreed with it", lambda s: s.get("ghost_right"), "%"),
    Measure("characters saved by Tab / accept-line", lambda s: s.get("chars_saved"), "%"),
    Measure("answered empty as stale", _stale, ""),
    Measure("key press -> suggestion p50", lambda s: _latency(s, "p50"), "ms"),
    Measure("key press -> suggestion p95", lambda s: _latency(s, "p95"), "ms"),
)


def spread(values: Sequence[float | None]) -> dict[str, float | None]:
    """Mean, least and most of the values measured (None where no run measured it)."""
    known = [value for value in values if value is not None]
    if not known:
        return {"mean": None, "min": None, "max": None}
    return {"mean": statistics.fmean(known), "min": min(known), "max": max(known)}


def repeat_summary(summaries: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per headline measure: each run's value, and their mean, least and most."""
    table: dict[str, dict[str, Any]] = {}
    for measure in HEADLINE:
        values = [measure.read(summary) for summary in summaries]
        table[measure.label] = {"runs": values, **spread(values)}
    return table


def _cell(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "%":
        return f"{100 * value:.1f}%"
    if unit == "ms":
        return f"{value:.0f} ms"
    return f"{value:.0f}"


def repeats_markdown(tag: str, files: Sequence[str], table: dict[str, dict[str, Any]]) -> str:
    runs = len(next(iter(table.values()))["runs"]) if table else 0
    header = ["measure", *(f"run {i + 1}" for i in range(runs)), "mean", "least - most"]
    units = {measure.label: measure.unit for measure in HEADLINE}
    rows = [
        [
            label,
            *(_cell(value, units[label]) for value in row["runs"]),
            _cell(row["mean"], units[label]),
            f"{_cell(row['min'], units[label])} - {_cell(row['max'], units[label])}",
        ]
        for label, row in table.items()
    ]
    listed = ", ".join(f"`{name}`" for name in files)
    return (
        f"# Keystroke replay, {runs} runs in a row ({tag})\n\n"
        f"The same typing, one run after another, each with a fresh server; each run's report: {listed}.\n\n"
        + markdown_table(header, rows)
        + "\n"
    )


def write_repeats(
    out: Path, tag: str, results: Sequence[dict[str, Any]], run_files: Sequence[str]
) -> list[Path]:
    table = repeat_summary([result["summary"] for result in results])
    combined = {"benchmark": "keystrokes-repeats", "tag": tag, "runs": list(run_files), "measures": table}
    return write_result_files(
        out / f"keystrokes-{tag}-repeats", combined, repeats_markdown(tag, run_files, table)
    )
