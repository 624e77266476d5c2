"""`specls bench`: throughput against peers, learned draft lengths, keystroke latency, suggestions at line starts
and HumanEval infilling (see bench/README.md): each benchmark's arguments, then a call into `bench/`.

`bench/` is installed with `engine` and `lsp_server` (pyproject's `packages.find`; scripts/setup.sh installs
them editable, so it is this checkout's folder) and runs from any working directory; where it cannot be
imported, it is looked for beside `lsp_server/` in the source checkout. Results go to `--out` (default:
bench/results, relative to the working directory).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lsp_server.app.commands.model_args import add_model_arguments


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, ... (default: auto)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: up to 8)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="results folder")
    parser.add_argument("--tag", help="results file name tag (default: the device type)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _lengths(text: str) -> tuple[int, ...]:
    """A comma-separated list of positive draft lengths."""
    return tuple(_positive(part) for part in text.split(",") if part.strip())


def _draft_policy(text: str) -> str:
    if text == "learned" or (text.isdigit() and int(text) >= 1):
        return text
    raise argparse.ArgumentTypeError(f"expected learned or a positive integer, got {text!r}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", required=True)

    throughput = sub.add_parser("throughput", help="tokens/s of every method on held-out prompts")
    throughput.add_argument("--prompts", type=_positive, default=8, help="held-out prompts (default: 8)")
    throughput.add_argument("--max-new-tokens", type=_positive, default=128, help="per prompt (default: 128)")
    throughput.add_argument("--repeats", type=_positive, default=1, help="runs per prompt and method")
    throughput.add_argument(
        "--methods",
        help="comma-separated subset of: autoregressive, speculative-model, speculative-lookup, "
        "speculative-suffix, speculative-hybrid, hf-greedy, hf-assisted, hf-prompt-lookup, llama-server, "
        "llama-server-ngram-simple, llama-server-ngram-mod, llama-server-draft-simple (default: all that can run)",
    )
    throughput.add_argument(
        "--draft-policy",
        type=_draft_policy,
        default="learned",
        help="learned (the engine's own) or a fixed length (default: learned)",
    )
    throughput.add_argument(
        "--ignore-eos",
        action="store_true",
        help="generate --max-new-tokens past end-of-text: a steady-state row, not the headline "
        "(default: natural stops)",
    )
    throughput.add_argument(
        "--warm-prompt",
        action="store_true",
        help="read each prompt into the target and draft model first, untimed, as the server's idle "
        "warm-up does: time the decode a user waits for after a pause (default: cold, prefill timed)",
    )
    throughput.add_argument(
        "--runtime",
        choices=("auto", "llama.cpp", "torch"),
        default="auto",
        help="what decodes the target: auto (default: llama.cpp when installed and a GGUF lies beside the "
        "target, else torch), llama.cpp or torch",
    )
    throughput.add_argument(
        "--quantize",
        choices=("none", "int8", "int4"),
        default="none",
        help="torch runtime: int8 or int4 weight-only projections (default: none)",
    )
    _model_arguments(throughput)

    draft_length = sub.add_parser(
        "draft-length", help="learned vs fixed draft lengths; acceptance per syntax context"
    )
    draft_length.add_argument("--prompts", type=_positive, default=8, help="held-out prompts (default: 8)")
    draft_length.add_argument(
        "--max-new-tokens", type=_positive, default=128, help="per prompt (default: 128)"
    )
    draft_length.add_argument("--repeats", type=_positive, default=1, help="runs per prompt and policy")
    draft_length.add_argument(
        "--drafter",
        default="hybrid",
        choices=("model", "lookup", "suffix", "hybrid"),
        help="the drafter every policy sizes (default: hybrid, the server's)",
    )
    draft_length.add_argument(
        "--stop-at-eos", action="store_true", help="stop at end-of-text (default: ignore)"
    )
    draft_length.add_argument(
        "--warm-prompt",
        action="store_true",
        help="read each prompt into the target and draft model first, untimed, as the server's idle "
        "warm-up does (default: cold, prefill timed)",
    )
    draft_length.add_argument(
        "--fixed-lengths",
        type=_lengths,
        help="the fixed draft lengths compared, comma-separated (default: 2,4,8,16,32)",
    )
    _model_arguments(draft_length)

    keys = sub.add_parser("keystrokes", help="replay typing through `specls serve`; keystroke latency")
    keys.add_argument(
        "--file",
        dest="files",
        type=Path,
        action="append",
        default=[],
        help="a file to type (repeatable; default: held-out stdlib files)",
    )
    keys.add_argument(
        "--files-count", type=_positive, default=3, help="held-out files when no --file (default 3)"
    )
    keys.add_argument("--chars", type=_positive, default=300, help="characters typed per file (default: 300)")
    keys.add_argument("--backend", default="local", choices=("local", "openai", "fake"))
    keys.add_argument("--endpoint", help="OpenAI-compatible base URL (with --backend openai)")
    keys.add_argument("--model", dest="remote_model", help="model name at the endpoint")
    keys.add_argument("--seed", type=int, default=0, help="seed of the typing cadence (default: 0)")
    keys.add_argument("--pace-ms", type=float, default=120, help="between key presses (default 120)")
    keys.add_argument("--line-pause-ms", type=float, default=600, help="more after each Enter (default 600)")
    keys.add_argument(
        "--no-accept", dest="accept", action="store_false", help="never press Tab / accept-line"
    )
    keys.add_argument(
        "--probes",
        type=int,
        default=6,
        help="files opened to time the first suggestion, half at once, half after 1 s (default 6; 0: none)",
    )
    keys.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="a server setting as initializationOptions, e.g. --setting maxNewTokens=32 (repeatable)",
    )
    add_model_arguments(keys, dtype_default=None)
    keys.add_argument("--device", help="auto, cpu, cuda, ... (default: the server's)")
    keys.add_argument("--threads", type=_positive, help="torch CPU threads of the server (OMP_NUM_THREADS)")
    keys.add_argument("--out", type=Path, default=Path("bench/results"), help="results folder")
    keys.add_argument("--tag", help="results file name tag (default: the device type)")
    keys.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_lines(sub)
    _add_infill(sub)


def _add_lines(sub: Any) -> None:
    lines = sub.add_parser(
        "lines", help="suggestions at line starts in held-out code: non-empty, indented, exact"
    )
    lines.add_argument("--positions", type=_positive, default=60, help="line starts in all (default: 60)")
    lines.add_argument("--per-file", type=_positive, default=2, help="line starts per file (default: 2)")
    lines.add_argument(
        "--folder",
        dest="folders",
        type=Path,
        action="append",
        default=[],
        help="also score the .py files of this folder (repeatable)",
    )
    _add_scoring_options(lines)
    lines.add_argument(
        "--no-stdlib",
        action="store_true",
        help="score only the --folder files, not the held-out standard library (which pretrained models saw)",
    )
    lines.add_argument(
        "--first-line",
        action="store_true",
        help="stop each suggestion after its first line (all that exact next line and the gate read; faster)",
    )


def _add_scoring_options(parser: argparse.ArgumentParser) -> None:
    """Options `bench lines` and `bench infill` share."""
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
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ... (default: cpu)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: one for small models)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="results folder")
    parser.add_argument("--tag", help="results file name tag (default: the device type)")


def _add_infill(sub: Any) -> None:
    infill = sub.add_parser("infill", help="HumanEval infilling: pass@1 and exact match, through the server")
    infill.add_argument(
        "--set", dest="task_set", choices=("single-line", "multi-line"), default="single-line"
    )
    infill.add_argument("--tasks", type=_positive, default=120, help="tasks, evenly spread (default: 120)")
    _add_scoring_options(infill)


def _scored_models(args: argparse.Namespace) -> list[tuple[str | None, str | None]] | None:
    """(target, draft) pairs from --target/--draft; the bundled pair and every pulled catalog model by default."""
    from engine.catalog import CATALOG, is_pulled

    if len(args.drafts) > len(args.targets):
        print("specls bench: more --draft than --target", file=sys.stderr)
        return None
    targets: list[str | None] = list(args.targets)
    if not targets:
        targets = [None, *(name for name in CATALOG if is_pulled(name))]
    drafts: list[str | None] = [*args.drafts, *[None] * (len(targets) - len(args.drafts))]
    return list(zip(targets, drafts, strict=True))


def _infill(args: argparse.Namespace) -> int:
    from bench.infill import InfillConfig, run_infill, write_report

    scoring = _scoring(args)
    if scoring is None:
        return 2
    config = InfillConfig(
        task_set=args.task_set,
        tasks=args.tasks,
        prompt_shapes=tuple(args.prompt_shapes or ["auto"]),
        **scoring,
    )
    for path in write_report(run_infill(config), config.out, config.tag):
        print(path)
    return 0


def _lines(args: argparse.Namespace) -> int:
    from bench.lines import LinesConfig, run_lines, write_report

    missing = [str(folder) for folder in args.folders if not folder.is_dir()]
    if missing:
        print(f"specls bench: no such folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    scoring = _scoring(args)
    if scoring is None:
        return 2
    config = LinesConfig(
        positions=args.positions,
        per_file=args.per_file,
        folders=tuple(args.folders),
        prompt_shape=(args.prompt_shapes or ["auto"])[0],
        stdlib=not args.no_stdlib,
        first_line_only=args.first_line,
        **scoring,
    )
    for path in write_report(run_lines(config), config.out, config.tag):
        print(path)
    return 0


def _scoring(args: argparse.Namespace) -> dict[str, Any] | None:
    """What both scoring benchmarks (infill, lines) take from the command line; None when a model named
    is missing (already reported)."""
    models = _scored_models(args)
    if models is None:
        return None
    return {
        "models": tuple(models),
        "device": args.device,
        "dtype": args.dtype,
        "threads": args.threads,
        "out": args.out,
        "tag": _results_tag(args),
    }


def _results_tag(args: argparse.Namespace) -> str:
    if args.tag:
        return str(args.tag)
    return "cuda" if str(args.device or "").startswith("cuda") else "cpu"


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


def run(args: argparse.Namespace) -> int:
    if not _find_bench():
        print("specls bench: the bench/ folder of a source checkout was not found", file=sys.stderr)
        return 2
    from engine.models import ModelLoadError

    try:
        if args.benchmark == "throughput":
            return _throughput(args)
        if args.benchmark == "draft-length":
            return _draft_length(args)
        if args.benchmark == "keystrokes":
            return _keystrokes(args)
        if args.benchmark == "lines":
            return _lines(args)
        if args.benchmark == "infill":
            return _infill(args)
    except ModelLoadError as exc:
        print(f"specls bench: {exc}", file=sys.stderr)
        return 1
    raise AssertionError(f"unknown benchmark {args.benchmark}")


def _throughput(args: argparse.Namespace) -> int:
    from bench.throughput import ALL_METHODS, ThroughputConfig, run_throughput, write_report

    methods = ALL_METHODS
    if args.methods:
        methods = tuple(name.strip() for name in args.methods.split(",") if name.strip())
        unknown = [name for name in methods if name not in ALL_METHODS]
        if unknown:
            print(
                f"specls bench: unknown methods {unknown}; choose from {', '.join(ALL_METHODS)}",
                file=sys.stderr,
            )
            return 2
        if "autoregressive" not in methods:
            methods = ("autoregressive", *methods)  # every ratio is measured against it
    config = ThroughputConfig(
        prompts=args.prompts,
        max_new_tokens=args.max_new_tokens,
        target=args.target,
        draft=args.draft,
        device=args.device,
        dtype=args.dtype,
        runtime=args.runtime,
        quantization=args.quantize,
        threads=args.threads,
        repeats=args.repeats,
        methods=methods,
        draft_policy=args.draft_policy,
        stop_at_eos=not args.ignore_eos,
        warm_prompt=args.warm_prompt,
        out=args.out,
        tag=_results_tag(args),
    )
    result = run_throughput(config, progress=not args.quiet)
    for path in write_report(result, config.out, config.tag):
        print(path)
    return 0


def _draft_length(args: argparse.Namespace) -> int:
    from bench.draft_length import FIXED_LENGTHS, DraftLengthConfig, run_draft_length, write_report

    config = DraftLengthConfig(
        prompts=args.prompts,
        max_new_tokens=args.max_new_tokens,
        drafter=args.drafter,
        target=args.target,
        draft=args.draft,
        device=args.device,
        dtype=args.dtype,
        threads=args.threads,
        repeats=args.repeats,
        stop_at_eos=args.stop_at_eos,
        fixed_lengths=args.fixed_lengths or FIXED_LENGTHS,
        warm_prompt=args.warm_prompt,
        out=args.out,
        tag=_results_tag(args),
    )
    result = run_draft_length(config, progress=not args.quiet)
    for path in write_report(result, config.out, config.tag):
        print(path)
    return 0


def _keystrokes(args: argparse.Namespace) -> int:
    import json

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
        tag=_results_tag(args) if args.tag or args.backend == "local" else args.backend,
    )
    try:
        result = run_keystrokes(config, progress=not args.quiet)
    except (RuntimeError, TimeoutError, ValueError) as exc:
        print(f"specls bench: {exc}", file=sys.stderr)
        return 1
    for path in write_report(result, config.out, config.tag):
        print(path)
    return 0
