"""`specls bench`: every benchmark is a plug-in of `bench/` that declares its own arguments and run function
(`bench.plugins`; see bench/README.md). This command only finds `bench` and lists them.

`bench/` is installed with `engine` and `lsp_server` (pyproject's `packages.find`; scripts/setup.sh installs
them editable, so it is this checkout's folder) and runs from any working directory; where it cannot be
imported, it is looked for beside `lsp_server/` in the source checkout. Results go to `--out` (default:
bench/results, relative to the working directory).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _find_bench() -> bool:
    """Whether `bench` can be imported: installed with the package, or else found beside `lsp_server/` in the
    source checkout (then added to `sys.path`)."""
    import importlib.util

    if importlib.util.find_spec("bench") is not None:
        return True
    root = Path(__file__).resolve().parents[3]
    if (root / "bench" / "__init__.py").is_file():
        sys.path.insert(0, str(root))
        return True
    return False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    if not _find_bench():
        parser.add_argument("benchmark", nargs="?", help="(bench/ was not found)")
        return
    from bench.plugins import add_subcommands

    add_subcommands(parser)


def run(args: argparse.Namespace) -> int:
    if not _find_bench() or not hasattr(args, "bench_command"):
        print("specls bench: the bench/ folder of a source checkout was not found", file=sys.stderr)
        return 2
    from bench.plugins import run as run_benchmark
    from engine.models import ModelLoadError

    try:
        return run_benchmark(args)
    except ModelLoadError as exc:
        print(f"specls bench: {exc}", file=sys.stderr)
        return 1
