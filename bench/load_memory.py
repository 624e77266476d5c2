"""Memory of loading a target (and draft) the way the server does, measured in a fresh process.

`specls bench load-memory TARGET [--draft DRAFT]` starts `python -m bench.load_memory`, which loads a `LocalEngine` on CPU (torch runtime, auto dtype,
HF weights released once the lean decoders hold them) and prints one JSON object: the weights as the
decoders hold them, the KV caches, the process's resident memory before and after, and its peak (VmHWM).
The "added" figures subtract what the process held before loading (Python, torch, transformers).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def measure(target: str, draft: str | None, window: int, threads: int) -> dict[str, Any]:
    import torch
    import transformers  # noqa: F401  # imported before the baseline: it is not the model's memory

    from engine.memory import process_memory_mb
    from engine.service import LocalEngine

    torch.set_num_threads(threads)
    before = process_memory_mb("VmRSS")
    engine = LocalEngine(
        target=target, draft=draft or "none", device="cpu", max_context=window, runtime="torch"
    )
    rss, peak = process_memory_mb("VmRSS"), process_memory_mb("VmHWM")
    return {
        "target": target,
        "draft": draft,
        "dtype": str(engine.pair.dtype),
        "runtime": engine.info().runtime,
        **{k: v for k, v in engine.memory.items() if k != "rss_added_by_load_mb"},
        "rss_before_mb": before,
        "rss_mb": rss,
        "peak_mb": peak,
        "rss_added_mb": rss - before,
        "peak_added_mb": peak - before,
    }


def measure_in_subprocess(target: Path, draft: Path | None, window: int, threads: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.load_memory", str(target), "--window", str(window)]
    command += ["--threads", str(threads), *(["--draft", str(draft)] if draft else [])]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    """The fresh process `measure_in_subprocess` starts (`python -m bench.load_memory`): JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.load_memory", description=__doc__.split("\n")[0])
    parser.add_argument("target")
    parser.add_argument("--draft")
    parser.add_argument("--window", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.target, args.draft, args.window, args.threads)))
    return 0


# --- `specls bench load-memory` ---

NAME = "load-memory"
HELP = "what loading a target (and draft) as the server does costs, in a fresh process"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="the target: a pulled name or a local folder")
    parser.add_argument("--draft", help="its draft model")
    parser.add_argument("--window", type=int, default=2048, help="KV cache positions (default: 2048)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")


def command(args: argparse.Namespace) -> int:
    draft = Path(args.draft) if args.draft else None
    result = measure_in_subprocess(Path(args.target), draft, args.window, args.threads)
    print(json.dumps(result, indent=2))
    return 1 if "error" in result else 0


if __name__ == "__main__":
    raise SystemExit(main())
