"""Argument types and flag groups the benchmarks' plug-ins share (`bench.plugins`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lsp_server.model_args import add_model_arguments


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def lengths(text: str) -> tuple[int, ...]:
    """A comma-separated list of positive draft lengths."""
    return tuple(positive(part) for part in text.split(",") if part.strip())


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def add_output_arguments(parser: argparse.ArgumentParser, *, quiet: bool = True) -> None:
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="results folder")
    parser.add_argument("--tag", help="results file name tag (default: the device type)")
    if quiet:
        parser.add_argument("--quiet", action="store_true", help="no progress bar")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The model, its device and threads, and where results go: what every in-process benchmark takes."""
    add_model_arguments(parser)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ... (default: auto)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: up to 8)")
    add_output_arguments(parser)


def results_tag(args: argparse.Namespace) -> str:
    """--tag, else the device type: results of a CUDA run never overwrite a CPU run's."""
    if args.tag:
        return str(args.tag)
    return "cuda" if str(getattr(args, "device", "") or "").startswith("cuda") else "cpu"


def print_paths(paths: list[Path]) -> int:
    for path in paths:
        print(path)
    return 0


def add_scoring_arguments(parser: argparse.ArgumentParser) -> None:
    """What the scoring benchmarks (`lines`, `infill`) share: the models scored, their prompt shapes, and
    where the results go."""
    from engine.hardware import TARGET_QUANTIZATIONS
    from lsp_server.context.builder import PROMPT_SHAPES

    parser.add_argument(
        "--target",
        dest="targets",
        action="append",
        default=[],
        help="a target to score (repeatable; default: the bundled pair and every pulled catalog model)",
    )
    parser.add_argument(
        "--draft",
        dest="drafts",
        action="append",
        default=[],
        help="the draft of the --target at the same place, or 'none' (default: that target's default draft)",
    )
    parser.add_argument(
        "--prompt-shape",
        dest="prompt_shapes",
        action="append",
        choices=PROMPT_SHAPES,
        default=[],
        help="prompt shape to score (repeatable; default: auto, the model's measured one)",
    )
    parser.add_argument("--dtype", choices=("auto", "fp32", "bf16"), default="auto")
    parser.add_argument(
        "--quantize",
        dest="quantization",
        choices=TARGET_QUANTIZATIONS,
        default="auto",
        help="the target's projections, as `specls serve --quantize` (default: auto, what the server serves: "
        "w8a8 on a CPU without native bf16)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ... (default: cpu)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: one for small models)")
    add_output_arguments(parser, quiet=False)


def scoring_fields(args: argparse.Namespace) -> dict[str, Any] | None:
    """The config fields both scoring benchmarks take from the command line: (target, draft) pairs from
    --target/--draft (the bundled pair and every pulled catalog model by default); None when more drafts
    than targets were named (already reported)."""
    from engine.catalog import CATALOG, is_pulled

    if len(args.drafts) > len(args.targets):
        print("specls bench: more --draft than --target", file=sys.stderr)
        return None
    targets: list[str | None] = list(args.targets)
    if not targets:
        targets = [None, *(name for name in CATALOG if is_pulled(name))]
    drafts: list[str | None] = [*args.drafts, *[None] * (len(targets) - len(args.drafts))]
    return {
        "models": tuple(zip(targets, drafts, strict=True)),
        "device": args.device,
        "dtype": args.dtype,
        "quantization": args.quantization,
        "threads": args.threads,
        "out": args.out,
        "tag": results_tag(args),
    }
