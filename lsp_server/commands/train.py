"""`specls train`: train the bundled target and draft pair on local code, then evaluate it and write its card."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset", choices=["full", "tiny"], default="full", help="tiny finishes in under a minute"
    )
    parser.add_argument(
        "--tiny", dest="preset", action="store_const", const="tiny", help="same as --preset tiny"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="where the pair goes (default: the bundled folder)"
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="checkpoints; a killed run resumes from here (default: OUT/.work)",
    )
    parser.add_argument(
        "--add-corpus",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="another folder of .py files to train on (repeatable)",
    )
    parser.add_argument("--no-stdlib", action="store_true", help="train only on --add-corpus folders")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--skip-eval", action="store_true", help="do not evaluate or write the model card")


def reproduce_command(args: argparse.Namespace) -> str:
    """The options that decide the weights (where files go and thread counts do not)."""
    parts = ["specls", "train", "--preset", args.preset, "--seed", str(args.seed)]
    parts += [f"--add-corpus={shlex.quote(str(folder))}" for folder in args.add_corpus]
    return " ".join(parts + (["--no-stdlib"] if args.no_stdlib else []))


def run(args: argparse.Namespace) -> int:
    import torch

    from engine.models import BUNDLED_DIR
    from engine.train.card import evaluate_pair, write_model_card
    from engine.train.corpus import iter_source_files, split_corpus, stdlib_root
    from engine.train.pipeline import PRESETS, run_training

    if args.threads:
        torch.set_num_threads(args.threads)
    preset = PRESETS[args.preset]
    out_dir: Path = args.out or BUNDLED_DIR
    work_dir: Path = args.work_dir or out_dir / ".work"
    if args.no_stdlib and not args.add_corpus:
        print("specls train: --no-stdlib needs at least one --add-corpus DIR", file=sys.stderr)
        return 2
    for folder in args.add_corpus:
        if not folder.is_dir():
            print(f"specls train: corpus folder {folder} does not exist", file=sys.stderr)
            return 2
    result = run_training(
        preset,
        out_dir,
        work_dir,
        tuple(args.add_corpus),
        seed=args.seed,
        progress=True,
        include_stdlib=not args.no_stdlib,
    )
    print(f"target -> {result.target_dir}\ndraft  -> {result.draft_dir}")
    if args.skip_eval:
        return 0
    roots = ([] if args.no_stdlib else [stdlib_root()]) + list(args.add_corpus)
    train_files, _ = split_corpus(iter_source_files(roots))
    metrics = evaluate_pair(
        result, preset, train_files[: preset.max_files] if preset.max_files else train_files
    )
    card = write_model_card(out_dir, metrics, preset, reproduce_command(args))
    print(
        f"held-out CE target {metrics['held_out_ce_target']} vs trigram {metrics['held_out_ce_trigram']}; "
        f"alpha {metrics['greedy_agreement_alpha']}; FIM exact match {metrics['fim_line_exact_match']}\n"
        f"model card -> {card}"
    )
    return 0
