"""`specls bench gate-compare`: two confidence gates on the same `specls bench lines` results.

A gate reads the probabilities the model gave the tokens of a suggestion's first line (`first_line_token_probs`,
recorded per line start since 69bc13e) and shows the suggestion only above a threshold. Two readings are
compared: the least likely token (the server's gate until 41ac340) and the whole line's probability, the
product (the server's gate since; `lsp_server.context.gate.first_line_confidence`). For each result and all
together: how many suggestions each shows, how many of those are the exact next line (precision), what share of
all line starts they get right (recall) and the characters of the exact lines (what Tab would have saved).
Reading only; no model runs.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lines_compare import model_outcomes
from bench.metrics import markdown_table

LEAST_LIKELY_TOKEN = "least likely token"
LINE_PROBABILITY = "line probability"


def gate_value(kind: str, probs: Sequence[float]) -> float:
    """What a gate of `kind` reads from the first line's token probabilities (none known: 0)."""
    if not probs:
        return 0.0
    return min(probs) if kind == LEAST_LIKELY_TOKEN else math.prod(probs)


@dataclass(frozen=True)
class GateRow:
    gate: str  # "none", or the kind and its threshold
    positions: int
    shown: int
    exact: int
    chars: int  # characters of the exact lines shown

    @property
    def precision(self) -> float | None:
        return self.exact / self.shown if self.shown else None

    @property
    def recall(self) -> float | None:
        return self.exact / self.positions if self.positions else None


def gate_row(outcomes: Sequence[dict[str, Any]], kind: str | None, threshold: float) -> GateRow:
    """What a gate of `kind` at `threshold` shows of `outcomes` (None: no gate, every non-empty one)."""
    shown = [
        o
        for o in outcomes
        if o["non_empty"]
        and (kind is None or gate_value(kind, o.get("first_line_token_probs") or []) >= threshold)
    ]
    exact = [o for o in shown if o["exact_first_line"]]
    return GateRow(
        "none" if kind is None else f"{kind} >= {threshold:g}",
        len(outcomes),
        len(shown),
        len(exact),
        sum(len(str(o["removed"]).strip()) for o in exact),
    )


def recorded(outcomes: Sequence[dict[str, Any]]) -> bool:
    """Whether the run recorded the first lines' token probabilities (every non-empty suggestion has them)."""
    return all("first_line_token_probs" in o for o in outcomes if o["non_empty"])


def compare_gates(
    outcomes: Sequence[dict[str, Any]], least_likely: float, line_thresholds: Sequence[float]
) -> list[GateRow]:
    return [
        gate_row(outcomes, None, 0.0),
        gate_row(outcomes, LEAST_LIKELY_TOKEN, least_likely),
        *(gate_row(outcomes, LINE_PROBABILITY, threshold) for threshold in line_thresholds),
    ]


def markdown_rows(name: str, rows: Sequence[GateRow]) -> list[list[str]]:
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    return [
        [
            name,
            row.gate,
            str(row.positions),
            str(row.shown),
            str(row.exact),
            pct(row.precision),
            pct(row.recall),
            str(row.chars),
        ]
        for row in rows
    ]


# --- `specls bench gate-compare` ---

NAME = "gate-compare"
HELP = "the least-likely-token gate against the line-probability gate on `specls bench lines` results"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", type=Path, nargs="+", help="`specls bench lines` JSON results")
    parser.add_argument("--model", help="the model to read, where a result holds several")
    parser.add_argument(
        "--least-likely",
        type=float,
        default=0.3,
        help="the least-likely-token gate's threshold (default 0.3)",
    )
    parser.add_argument(
        "--line",
        type=float,
        action="append",
        help="a line-probability threshold (repeatable; default 0.05, 0.1, 0.15, 0.2, 0.3)",
    )


def command(args: argparse.Namespace) -> int:
    thresholds = args.line or [0.05, 0.1, 0.15, 0.2, 0.3]
    table: list[list[str]] = []
    pooled: list[dict[str, Any]] = []
    try:
        for path in args.results:
            outcomes = model_outcomes(path, args.model)
            if not recorded(outcomes):
                raise ValueError(f"{path} has no first_line_token_probs (a run before 69bc13e)")
            pooled += outcomes
            table += markdown_rows(path.stem, compare_gates(outcomes, args.least_likely, thresholds))
    except (OSError, ValueError, KeyError) as error:
        print(f"specls bench gate-compare: {error}")
        return 2
    if len(args.results) > 1:
        table += markdown_rows("all", compare_gates(pooled, args.least_likely, thresholds))
    header = [
        "result",
        "gate",
        "line starts",
        "shown",
        "exact shown",
        "precision",
        "recall",
        "chars of exact lines",
    ]
    print(markdown_table(header, table))
    return 0
