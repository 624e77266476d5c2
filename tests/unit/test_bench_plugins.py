"""Every benchmark is a plug-in of `specls bench`: it declares its own arguments and command, and each one
parses from the real command line (a smoke test of every plug-in's arguments)."""

from __future__ import annotations

import importlib

import pytest

from bench.plugins import PLUGINS, benchmarks
from lsp_server.app.cli import build_parser

SMOKE_ARGUMENTS = {
    "throughput": ["--prompts", "1"],
    "draft-length": ["--fixed-lengths", "2,4"],
    "keystrokes": ["--chars", "10"],
    "lines": ["--positions", "2"],
    "lines-compare": ["before.json", "after.json"],
    "gate-compare": ["result.json", "--line", "0.1"],
    "lines-imports": ["result.json"],
    "infill": ["--tasks", "2"],
    "decode-speed": ["--target", "/tmp/model", "--engines", "lean-fp32", "--prefill-lengths", "8,16"],
    "prompt-reuse": [],
    "load-memory": ["/tmp/model"],
    "prompt-template": ["--prompts", "2"],
    "report": ["--check"],
}


def test_every_plugin_declares_its_command() -> None:
    names = [benchmark.NAME for benchmark in benchmarks()]
    assert sorted(names) == sorted(SMOKE_ARGUMENTS), "a plug-in without a smoke test, or the reverse"
    for module in PLUGINS:
        loaded = importlib.import_module(module)
        assert callable(loaded.add_arguments) and callable(loaded.command) and loaded.HELP


@pytest.mark.parametrize("name", sorted(SMOKE_ARGUMENTS))
def test_every_plugin_parses_from_specls_bench(name: str) -> None:
    args = build_parser().parse_args(["bench", name, *SMOKE_ARGUMENTS[name]])
    assert args.benchmark == name
    assert args.bench_command is next(b.command for b in benchmarks() if name == b.NAME)


def test_decode_speed_has_no_command_line_of_its_own() -> None:
    decode_speed = importlib.import_module("bench.decode_speed")
    assert not hasattr(decode_speed, "main")


def test_bench_report_check_passes_through_specls() -> None:
    args = build_parser().parse_args(["bench", "report", "--check"])
    assert args.bench_command(args) == 0


def test_decode_speed_names_a_missing_target_and_downloads_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser().parse_args(["bench", "decode-speed", "--target", "/nonexistent/model"])
    assert args.bench_command(args) == 2
    assert "does not exist" in capsys.readouterr().err
