"""`specls` command line. Each subcommand lives in `lsp_server/app/commands/<name>.py` and exposes
`add_arguments(parser)` and `run(args) -> int`; heavy imports (torch) happen inside `run`."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

SUBCOMMANDS: dict[str, str] = {
    "serve": "run the language server (stdio by default)",
    "generate": "complete a prompt file with the engine and print the result",
    "demo": "replay typing a file through the real server and show live ghost text",
    "bench": "run a benchmark: throughput, draft lengths, keystroke latency, line starts, infilling",
    "train": "train the bundled target and draft pair on local code",
    "info": "show the resolved model pair",
    "doctor": "check the environment and say how to fix what is wrong",
    "export": "export the bundled pair (gguf)",
    "pull": "download and convert a named model once (qwen2.5-coder-0.5b, see docs/models.md)",
}


class _Parser(argparse.ArgumentParser):
    """Bad flags are one line on stderr (and exit status 2), not the usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specls", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, help_text in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(f"lsp_server.app.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"lsp_server.app.commands.{name}":
                raise
            continue
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except BrokenPipeError:
        # Whoever read the output stopped early (`specls bench lines-compare ... | head`): end quietly, and
        # point stdout at /dev/null so the interpreter's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
