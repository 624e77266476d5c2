"""`specls bench keystrokes`: the keystroke replay's command line (the replay is `bench/keystrokes.py`; this
plug-in joins it once that module's `--peer` work has landed)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from bench.cli_args import add_output_arguments, positive, print_paths, results_tag
from lsp_server.model_args import add_model_arguments

NAME = "keystrokes"
HELP = "replay typing through `specls serve`; keystroke latency"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file",
        dest="files",
        type=Path,
        action="append",
        default=[],
        help="a file to type (repeatable; default: held-out stdlib files)",
    )
    parser.add_argument(
        "--files-count", type=positive, default=3, help="held-out files when no --file (default 3)"
    )
    parser.add_argument(
        "--chars", type=positive, default=300, help="characters typed per file (default: 300)"
    )
    parser.add_argument("--backend", default="local", choices=("local", "openai", "fake"))
    parser.add_argument("--endpoint", help="OpenAI-compatible base URL (with --backend openai)")
    parser.add_argument("--model", dest="remote_model", help="model name at the endpoint")
    parser.add_argument("--seed", type=int, default=0, help="seed of the typing cadence (default: 0)")
    parser.add_argument("--pace-ms", type=float, default=120, help="between key presses (default 120)")
    parser.add_argument(
        "--line-pause-ms", type=float, default=600, help="more after each Enter (default 600)"
    )
    parser.add_argument(
        "--no-accept", dest="accept", action="store_false", help="never press Tab / accept-line"
    )
    parser.add_argument(
        "--probes",
        type=int,
        default=6,
        help="files opened to time the first suggestion, half at once, half after 1 s (default 6; 0: none)",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="a server setting as initializationOptions, e.g. --setting maxNewTokens=32 (repeatable)",
    )
    add_model_arguments(parser, dtype_default=None)
    parser.add_argument("--device", help="auto, cpu, cuda, ... (default: the server's)")
    parser.add_argument("--threads", type=positive, help="torch CPU threads of the server (OMP_NUM_THREADS)")
    parser.add_argument(
        "--peer",
        choices=("llama-server",),
        help="also type the same keys, in the same run, into a llama.vim-style client on llama-server with "
        "the target's GGUF (bench/llama_vim_client.py); both rows in one report",
    )
    parser.add_argument(
        "--server-log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="the server's log level (default WARNING; INFO logs each warm-up and growth, for finding out why)",
    )
    parser.add_argument(
        "--workspace",
        type=Path,
        help="the client's workspace folder, as in an editor with a project open: each --file under it is "
        "typed under its own file: URI, so the server indexes its project (default: none, files outside any)",
    )
    parser.add_argument(
        "--repeat",
        type=positive,
        default=1,
        help="type it all this many times in a row: each run's files (tag-run1, ...) and a table of their "
        "headline measures with mean and spread (tag-repeats); one run's figures move with the machine",
    )
    add_output_arguments(parser)


def command(args: argparse.Namespace) -> int:
    from bench.keystrokes import KeystrokeConfig, run_keystrokes, write_report

    settings = {}
    for item in args.setting:
        key, sep, value = item.partition("=")
        try:
            settings[key] = json.loads(value)
        except json.JSONDecodeError:
            settings[key] = value  # a bare string
        if not sep or not key:
            print(f"specls bench: --setting expects KEY=JSON, got {item!r}", file=sys.stderr)
            return 2
    missing = [str(path) for path in args.files if not path.is_file()]
    if missing:
        print(f"specls bench: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.workspace is not None and not args.workspace.is_dir():
        print(f"specls bench: --workspace: no such folder: {args.workspace}", file=sys.stderr)
        return 2
    if args.pace_ms <= 0 or args.line_pause_ms < 0 or args.probes < 0:
        print("specls bench: need --pace-ms > 0, --line-pause-ms >= 0, --probes >= 0", file=sys.stderr)
        return 2
    config = KeystrokeConfig(
        files=tuple(args.files),
        count=args.files_count,
        chars=args.chars,
        backend=args.backend,
        target=args.target,
        draft=args.draft,
        device=args.device,
        dtype=args.dtype,
        threads=args.threads,
        endpoint=args.endpoint,
        remote_model=args.remote_model,
        pace_ms=args.pace_ms,
        line_pause_ms=args.line_pause_ms,
        accept=args.accept,
        probes=args.probes,
        seed=args.seed,
        settings=settings,
        out=args.out,
        tag=results_tag(args) if args.tag or args.backend == "local" else args.backend,
        peer=args.peer,
        server_log_level=args.server_log_level,
        workspace=args.workspace,
    )
    single = args.repeat == 1
    tags = [config.tag] if single else [f"{config.tag}-run{run}" for run in range(1, args.repeat + 1)]
    results, written = [], []
    for run, tag in enumerate(tags, start=1):
        try:
            result = run_keystrokes(dataclasses.replace(config, tag=tag), progress=not args.quiet)
        except (RuntimeError, TimeoutError, ValueError) as exc:
            print(f"specls bench: {'' if single else f'run {run}: '}{exc}", file=sys.stderr)
            return 1
        results.append(result)
        written += write_report(result, config.out, tag)
    if not single:
        from bench.keystrokes_repeats import write_repeats

        written += write_repeats(config.out, config.tag, results, [f"keystrokes-{tag}.md" for tag in tags])
    return print_paths(written)
