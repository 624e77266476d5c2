"""`specls bench lines-compare`: two `specls bench lines` results, position by position.

A change to the prompt or the stop rules moves a few line starts each way, and a bf16 near-tie can flip one
between two runs of the same code. So the comparison counts the positions gained and lost on the line starts
both runs share and gives the exact two-sided sign test (McNemar's, exact) for them: the chance of a split at
least this uneven if the change made no difference. Reading only; no model runs.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.metrics import code_cell, markdown_table


def sign_test_p(gained: int, lost: int) -> float:
    """Two-sided exact sign test: the probability, with each changed position equally likely to go either way,
    of a split at least as uneven as `gained` against `lost`. 1.0 when nothing changed."""
    changed = gained + lost
    if changed == 0:
        return 1.0
    fewer = min(gained, lost)
    tail = sum(math.comb(changed, k) for k in range(fewer + 1)) / 2**changed
    return float(min(1.0, 2 * tail))


@dataclass(frozen=True)
class Change:
    position: str
    removed: str
    before: str  # the first line each run suggested
    after: str
    gained: bool


@dataclass(frozen=True)
class Comparison:
    common: int
    exact_before: int
    exact_after: int
    changes: tuple[Change, ...]

    @property
    def gained(self) -> int:
        return sum(change.gained for change in self.changes)

    @property
    def lost(self) -> int:
        return len(self.changes) - self.gained

    @property
    def p_value(self) -> float:
        return sign_test_p(self.gained, self.lost)


def compare_outcomes(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> Comparison:
    """The line starts both runs scored (by position name), and those whose exact next line changed."""
    earlier = {outcome["position"]: outcome for outcome in before}
    later = {outcome["position"]: outcome for outcome in after}
    common = [position for position in earlier if position in later]
    changes = tuple(
        Change(
            position,
            earlier[position]["removed"].strip(),
            _first_line(earlier[position]),
            _first_line(later[position]),
            gained=bool(later[position]["exact_first_line"]),
        )
        for position in common
        if bool(earlier[position]["exact_first_line"]) != bool(later[position]["exact_first_line"])
    )
    return Comparison(
        common=len(common),
        exact_before=sum(bool(earlier[p]["exact_first_line"]) for p in common),
        exact_after=sum(bool(later[p]["exact_first_line"]) for p in common),
        changes=changes,
    )


def _first_line(outcome: dict[str, Any]) -> str:
    return str(outcome["suggestion"]).split("\n", 1)[0].strip()


def model_outcomes(path: Path, model: str | None) -> list[dict[str, Any]]:
    """The outcomes of `model` (its name or target) in a result file; the only model where none is named."""
    models = json.loads(path.read_text(encoding="utf-8"))["models"]
    if model is None:
        if len(models) != 1:
            names = ", ".join(str(entry.get("name")) for entry in models)
            raise ValueError(f"{path} holds several models ({names}): name one with --model")
        return list(models[0]["outcomes"])
    for entry in models:
        if model in (entry.get("name"), entry.get("target")):
            return list(entry["outcomes"])
    raise ValueError(f"{path} holds no model named {model!r}")


def markdown_comparison(comparison: Comparison, before: str, after: str) -> str:
    c = comparison
    lines = [
        f"`{before}` -> `{after}`: exact next line {c.exact_before} -> {c.exact_after} of {c.common} shared "
        f"line starts; {c.gained} gained, {c.lost} lost; two-sided sign test p = {c.p_value:.2f}\n",
    ]
    if c.changes:
        rows = [
            [
                "gained" if ch.gained else "lost",
                ch.position,
                code_cell(ch.removed),
                code_cell(ch.before),
                code_cell(ch.after),
            ]
            for ch in c.changes
        ]
        lines.append(markdown_table(["", "line start", "removed", "before", "after"], rows))
    return "\n".join(lines)


# --- `specls bench lines-compare` ---

NAME = "lines-compare"
HELP = "two `specls bench lines` results, position by position, with a sign test (reading only)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("before", type=Path, help="a `specls bench lines` JSON result")
    parser.add_argument("after", type=Path, help="another, on the same line starts")
    parser.add_argument("--model", help="the model to compare, where a result holds several")


def command(args: argparse.Namespace) -> int:
    try:
        comparison = compare_outcomes(
            model_outcomes(args.before, args.model), model_outcomes(args.after, args.model)
        )
    except (OSError, ValueError, KeyError) as error:
        print(f"specls bench lines-compare: {error}")
        return 2
    print(markdown_comparison(comparison, args.before.name, args.after.name))
    return 0
