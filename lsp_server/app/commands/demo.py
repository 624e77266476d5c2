"""`specls demo`: replay typing a file through the real server (`specls serve` over stdio, an LSP client on
this side) and show the ghost text, latencies and speculation statistics live; a summary at the end."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from lsp_server.app.commands.model_args import add_model_arguments

if TYPE_CHECKING:
    from lsp_server.typist.replay import KeyEvent, Replay

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "pantry.py"
LANGUAGE_IDS = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".jsx": "javascriptreact",
    ".ts": "typescript",
    ".tsx": "typescriptreact",
    ".go": "go",
    ".rs": "rust",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file", help="the file to replay (default: a sample Python file shipped with specls)"
    )
    parser.add_argument(
        "--speed",
        default="20",
        help="typing cadence: characters per second (20, 20cps) or ms per char (50ms)",
    )
    parser.add_argument(
        "--plain",
        "--lines",
        dest="plain",
        action="store_true",
        help="line output instead of the live view (automatic when stdout is not a terminal)",
    )
    parser.add_argument(
        "--max-keystrokes", type=int, metavar="N", help="stop typing after this many key presses"
    )
    parser.add_argument(
        "--accept",
        action="store_true",
        help="take ghost text that matches what comes next with one key press (Tab / accept-word)",
    )
    parser.add_argument(
        "--speedup-samples",
        type=int,
        metavar="N",
        default=6,
        help="prompts decoded plainly and speculatively after the replay to measure the speed-up (0: skip)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the typing rhythm")
    parser.add_argument("--summary-json", metavar="PATH", help="also write the summary to this file as JSON")
    parser.add_argument(
        "--load-timeout", type=float, default=600, help="seconds to wait for the model to load"
    )
    model = parser.add_argument_group("server (passed to `specls serve`)")
    model.add_argument(
        "--backend",
        choices=("local", "openai", "fake"),
        default="local",
        help="local: the target/draft pair in the server process (default); openai: a remote endpoint",
    )
    add_model_arguments(model, dtype_default=None)
    model.add_argument("--device", help="auto, cpu, cuda, ... (default: auto)")
    model.add_argument("--endpoint", help="OpenAI-compatible base URL (with --backend openai)")
    model.add_argument("--model", dest="remote_model", help="model name at the endpoint")
    model.add_argument(
        "--fake-rules", help="with --backend fake: its JSON rules file (tests, client development)"
    )
    model.add_argument("--fake-token-delay-ms", help="with --backend fake: delay per generated token")


def demo_target(args: argparse.Namespace) -> str | None:
    """The named target; with none named (and no draft either) on the local backend, the server's default
    model (`engine.catalog.default_target`: what a newcomer's editor gets too)."""
    if args.target is not None or args.draft is not None or args.backend != "local":
        return str(args.target) if args.target is not None else None
    from engine.catalog import default_target

    return default_target()


def server_args(args: argparse.Namespace) -> list[str]:
    flags = [("--backend", args.backend), ("--target", args.target), ("--draft", args.draft)]
    flags += [("--device", args.device), ("--dtype", args.dtype)]
    flags += [("--endpoint", args.endpoint), ("--model", args.remote_model)]
    flags += [("--fake-rules", args.fake_rules), ("--fake-token-delay-ms", args.fake_token_delay_ms)]
    return [part for flag, value in flags if value is not None for part in (flag, value)]


def run(args: argparse.Namespace) -> int:
    from lsp_server.typist.client import ServerError
    from lsp_server.typist.keystrokes import parse_speed

    path = Path(args.file) if args.file else SAMPLE
    args.target = demo_target(args)
    try:
        source = path.read_text(encoding="utf-8")
        ms_per_char = parse_speed(args.speed)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"specls demo: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"specls demo: {exc}", file=sys.stderr)
        return 2
    if not source.strip():
        print(f"specls demo: {path} is empty; nothing to type", file=sys.stderr)
        return 2
    if args.max_keystrokes is not None and args.max_keystrokes < 1:
        print("specls demo: --max-keystrokes must be at least 1", file=sys.stderr)
        return 2
    plain = args.plain or not sys.stdout.isatty()
    try:
        summary = asyncio.run(_demo(args, path, source.replace("\r\n", "\n"), ms_per_char, plain))
    except ServerError as exc:
        print(
            f"\nspecls demo: {exc}\n  `specls doctor` checks the model pair and the environment.",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("\nspecls demo: interrupted", file=sys.stderr)
        return 130
    if args.summary_json:
        try:
            Path(args.summary_json).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            print(f"specls demo: cannot write the summary to {args.summary_json}: {exc}", file=sys.stderr)
            return 2
    return 1 if summary["errors"] else 0


async def _demo(
    args: argparse.Namespace, path: Path, source: str, ms_per_char: float, plain: bool
) -> dict[str, Any]:
    from lsp_server.app.demo.speedup import measure_speedup, pick_offsets
    from lsp_server.app.demo.summary import build_summary, format_summary
    from lsp_server.app.demo.view import LineView, LiveView
    from lsp_server.typist.client import ServerSession
    from lsp_server.typist.keystrokes import Cadence, plan_keystrokes
    from lsp_server.typist.replay import LiveStats, LspEditor, Replay

    out = sys.stdout
    language_id = LANGUAGE_IDS.get(path.suffix.lower(), "plaintext")
    session = ServerSession()
    try:
        out.write(f"specls demo: starting `specls serve {' '.join(server_args(args))}` ...\n")
        out.flush()
        await session.start(server_args(args))
        ready = await session.wait_ready(args.load_timeout)
        out.write(f"{ready.get('message')}\n")
        replay_uri = f"file:///specls-demo/{path.name}"
        view = LineView(out) if plain else LiveView(out)
        editor = LspEditor(session, replay_uri, language_id, on_stats=view.server_stats)
        replay = Replay(
            editor,
            source,
            Cadence(ms_per_char),
            view,
            max_keystrokes=args.max_keystrokes,
            seed=args.seed,
            accept=args.accept,
        )
        out.write(
            f"typing {path.name}: {replay.planned} key presses at {1000 / ms_per_char:.0f} chars/s"
            f"{', taking matching ghost text' if args.accept else ''}; "
            f"{'each new suggestion is a ghost line' if plain else 'grey text is the suggestion at the cursor'}"
            "; Ctrl-C stops early with a summary\n\n"
        )
        events = await _run_interruptibly(replay, out)
        view.finish()
        speedup = None
        if args.speedup_samples > 0 and args.backend == "local" and not replay.stopped_early:
            offsets = pick_offsets(events, args.speedup_samples)
            out.write(
                f"\nmeasuring the speed-up on {len(offsets)} of the prompts above (plain vs speculative) ...\n"
            )
            out.flush()
            speedup = await measure_speedup(session, source, offsets, language_id, path.name)
        typed = events[-1].offset if events else 0
        plain_presses = len(plan_keystrokes(source[:typed]))
        summary = build_summary(
            events, LiveStats.from_server(editor.last_stats), speedup, plain_presses, replay.unanswered
        )
        out.write("\n" + "\n".join(format_summary(summary)) + "\n")
        out.flush()
        return summary
    finally:
        await session.stop()


async def _run_interruptibly(replay: Replay, out: TextIO) -> list[KeyEvent]:
    """The first Ctrl-C stops the typing and still prints the summary; a second one quits at once."""
    loop = asyncio.get_running_loop()

    def first_interrupt() -> None:
        loop.remove_signal_handler(signal.SIGINT)
        out.write("\n(stopping: Ctrl-C again quits without a summary)\n")
        replay.stop_typing()

    try:
        loop.add_signal_handler(signal.SIGINT, first_interrupt)
    except (NotImplementedError, RuntimeError):  # no signal handlers here (Windows, a worker thread)
        return await replay.run()
    try:
        return await replay.run()
    finally:
        loop.remove_signal_handler(signal.SIGINT)
