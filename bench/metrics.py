"""Pure arithmetic for the benchmark reports: medians, speed-up theory, acceptance estimates (percentiles
come from `lsp_server.statistics`, the one definition the server and the demo report with too).

Theory (Leviathan et al. 2023, eq. 1 and Thm. 3.8): with per-token acceptance rate `alpha`, draft length
`k` and draft step cost `c` (one draft step / one target step), one round yields on average
(1 - alpha^(k+1)) / (1 - alpha) tokens and costs k*c + 1 target steps, so the expected speed-up is
S = (1 - alpha^(k+1)) / ((1 - alpha) (k c + 1)). The paper assumes verifying k + 1 tokens costs one target
step; on a CPU it does not, so `theoretical_speedup` also takes the measured verify cost `v` (in target
steps) in place of that 1.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lsp_server.statistics import percentile as percentile  # re-exported for the benchmarks


def median(values: Sequence[float]) -> float | None:
    ordered = sorted(v for v in values if not math.isnan(v))
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def expected_tokens_per_round(alpha: float, k: float) -> float:
    """Tokens one round yields (accepted drafts + the target's own token) at acceptance rate alpha."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be within 0..1, got {alpha}")
    if alpha == 1:
        return k + 1
    return float((1 - alpha ** (k + 1)) / (1 - alpha))


def theoretical_speedup(alpha: float, k: float, c: float, verify_cost: float = 1.0) -> float:
    """S = (1 - alpha^(k+1)) / ((1 - alpha) (k c + v)); v = 1 is the paper's formula."""
    return expected_tokens_per_round(alpha, k) / (k * c + verify_cost)


def alpha_from_rounds(tokens_per_round: float, k: float) -> float:
    """The acceptance rate alpha whose expected yield at draft length k equals the observed tokens per round.

    Inverts `expected_tokens_per_round` by bisection (it increases with alpha); an observed yield at or
    above k + 1 gives 1, at or below 1 gives 0.
    """
    if k <= 0 or tokens_per_round <= 1:
        return 0.0
    if tokens_per_round >= k + 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if expected_tokens_per_round(mid, k) < tokens_per_round:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(cell(value) for value in row) + " |" for row in rows)
    return "\n".join(lines) + "\n"


def percent(value: float | None, decimals: int = 0) -> str:
    """A share as a percentage for a report ("-" when unknown)."""
    return "-" if value is None else f"{100 * value:.{decimals}f}%"


def code_cell(text: str, width: int = 60) -> str:
    """A snippet of code as a markdown table cell: stripped, pipes escaped, cut to `width`."""
    text = text.strip().replace("|", "\\|")
    return f"`{text[:width]}`" if text else "(empty)"


def model_name(model: dict[str, Any]) -> str:
    """A scored model's short name: "bundled", or its folder's name."""
    location = str(model["target"].get("spec") or model["target"].get("location"))
    return "bundled" if location == "bundled" else Path(location).name


def precision_name(model: dict[str, Any]) -> str:
    """What a scored model's matmuls read ("fp32 + w8a8 weights", "bf16"); results written before the
    runtime was recorded name only the dtype their weights were loaded in."""
    return str(model.get("weights") or model["dtype"])


def write_result_files(
    stem: Path,
    result: dict[str, Any],
    markdown: str,
    plot: Callable[[dict[str, Any], Path], None] | None = None,
    json_default: Callable[[Any], Any] = str,
) -> list[Path]:
    """Write `stem`.json, `stem`.md and (with a plot function) `stem`.png; return the paths written."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(json.dumps(result, indent=2, default=json_default) + "\n", encoding="utf-8")
    md_path.write_text(markdown, encoding="utf-8")
    if plot is None:
        return [json_path, md_path]
    png_path = stem.with_suffix(".png")
    try:
        plot(result, png_path)
    except ModuleNotFoundError as exc:  # matplotlib comes with the dev extras only: the numbers stand alone
        if exc.name is None or exc.name.split(".")[0] not in PLOTTING_PACKAGES:
            raise
        note = f"No picture: {exc.name} is not installed (`pip install matplotlib` draws {png_path.name})."
        md_path.write_text(markdown.rstrip("\n") + f"\n\n{note}\n", encoding="utf-8")
        print(f"specls bench: {note}", file=sys.stderr)
        return [json_path, md_path]
    return [json_path, md_path, png_path]


PLOTTING_PACKAGES = ("matplotlib",)  # what the plots import; missing, a report skips its picture


REPEAT_NGRAM = 4  # tokens; long enough that ordinary code idioms rarely count, short enough to catch loops


def repetition_share(token_ids: Sequence[int], n: int = REPEAT_NGRAM) -> float:
    """Share of the generated tokens that lie inside an n-gram the same output already generated earlier.

    0 for text that never repeats itself; near 1 for a model stuck in a loop. A copying drafter (lookup)
    accepts long drafts exactly where this is high, so every speed-up is reported beside it.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    seen: set[tuple[int, ...]] = set()
    inside = [False] * len(token_ids)
    for end in range(n, len(token_ids) + 1):
        gram = tuple(token_ids[end - n : end])
        if gram in seen:
            for index in range(end - n, end):
                inside[index] = True
        seen.add(gram)
    return sum(inside) / len(token_ids) if token_ids else 0.0
