"""`specls pull NAME`: download, check and convert a named model once (the only command that fetches one)."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from engine.catalog import CATALOG

    parser.add_argument("name", choices=sorted(CATALOG), help="the model to fetch")


def run(args: argparse.Namespace) -> int:
    from engine.catalog import PullError, pull

    try:
        pull(args.name, progress=lambda line: print(f"specls pull: {line}", flush=True))
    except PullError as exc:
        print(f"specls pull: {exc}", file=sys.stderr)
        return 1
    return 0
