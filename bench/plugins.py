"""`specls bench`'s plug-ins: every benchmark is a module of `bench/` that declares its own command.

A plug-in module has `NAME` (the subcommand), `HELP` (one line), `add_arguments(parser)` and
`command(args) -> int` (the exit status). `specls bench` (`lsp_server/app/commands/bench.py`) only lists
them: adding a benchmark is adding its module to PLUGINS.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Protocol, cast

PLUGINS = (
    "bench.throughput",
    "bench.draft_length",
    "bench.keystrokes_command",
    "bench.lines",
    "bench.lines_compare",
    "bench.gate_compare",
    "bench.lines_imports",
    "bench.infill",
    "bench.decode_speed",
    "bench.prompt_reuse",
    "bench.load_memory",
    "bench.prompt_template",
    "bench.report",
)


class Benchmark(Protocol):
    NAME: str
    HELP: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    command: Callable[[argparse.Namespace], int]


def benchmarks() -> list[Benchmark]:
    return [cast(Benchmark, importlib.import_module(name)) for name in PLUGINS]


def add_subcommands(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", required=True)
    for benchmark in benchmarks():
        plugin = sub.add_parser(benchmark.NAME, help=benchmark.HELP, description=benchmark.HELP)
        benchmark.add_arguments(plugin)
        plugin.set_defaults(bench_command=benchmark.command)


def run(args: argparse.Namespace) -> int:
    command: Callable[[argparse.Namespace], int] = args.bench_command
    return command(args)
