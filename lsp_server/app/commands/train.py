"""`specls train`: train the bundled target and draft pair on local code, or (`--teacher NAME`) distil a draft
for a pretrained target; then evaluate the result and write its card."""

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
    parser.add_argument(
        "--teacher",
        default=None,
        metavar="MODEL",
        help="distil only a draft for this pulled model or folder (its tokenizer, its top-k logits as teacher)",
    )
    parser.add_argument(
        "--teacher-batches", type=int, default=None, help="with --teacher: batches of teacher logits"
    )
    parser.add_argument("--epochs", type=int, default=None, help="with --teacher: passes over those batches")


def reproduce_command(args: argparse.Namespace) -> str:
    """The options that decide the weights (where files go and thread counts do not)."""
    parts = ["specls", "train", "--preset", args.preset, "--seed", str(args.seed)]
    if args.teacher:
        parts += ["--teacher", shlex.quote(args.teacher)]
        parts += [f"--{name}={value}" for name, value in distill_overrides(args).items()]
    parts += [f"--add-corpus={shlex.quote(str(folder))}" for folder in args.add_corpus]
    return " ".join(parts + (["--no-stdlib"] if args.no_stdlib else []))


def distill_overrides(args: argparse.Namespace) -> dict[str, int]:
    """The preset fields a --teacher run overrides, by option name."""
    given = {"teacher-batches": args.teacher_batches, "epochs": args.epochs}
    return {name: value for name, value in given.items() if value is not None}


def run_distill(args: argparse.Namespace, out: Path | None) -> int:
    """`--teacher`: a draft for a pretrained model, into engine/bundled/<model>-draft unless --out says."""
    import dataclasses

    from engine.models import BUNDLED_DIR, ModelLoadError, resolve_model_path
    from engine.train.distill import DISTILL_PRESETS, run_distillation
    from engine.train.distill_card import evaluate_draft, write_draft_card

    try:
        source = resolve_model_path(args.teacher, "target")
    except ModelLoadError as exc:
        print(f"specls train: {exc}", file=sys.stderr)
        return 2
    if not source.is_local:
        print(f"specls train: --teacher {args.teacher!r} must be a pulled model or a folder", file=sys.stderr)
        return 2
    teacher_dir = Path(source.location)
    preset = DISTILL_PRESETS[args.preset]
    overrides = distill_overrides(args)
    preset = dataclasses.replace(
        preset,
        teacher_batches=overrides.get("teacher-batches", preset.teacher_batches),
        epochs=overrides.get("epochs", preset.epochs),
    )
    out_dir = out or BUNDLED_DIR / f"{Path(args.teacher).name}-draft"
    work_dir: Path = args.work_dir or out_dir.with_name(out_dir.name + ".work")
    result = run_distillation(
        teacher_dir,
        preset,
        out_dir,
        work_dir,
        tuple(args.add_corpus),
        seed=args.seed,
        include_stdlib=not args.no_stdlib,
    )
    print(f"draft -> {result.draft_dir}")
    if args.skip_eval:
        return 0
    metrics = evaluate_draft(result, preset)
    card = write_draft_card(out_dir, metrics, preset, reproduce_command(args))
    print(f"alpha {metrics['greedy_agreement_alpha']}; model card -> {card}")
    return 0


def run(args: argparse.Namespace) -> int:
    import torch

    from engine.models import BUNDLED_DIR
    from engine.train.card import evaluate_pair, write_model_card
    from engine.train.corpus import iter_source_files, split_corpus, stdlib_root
    from engine.train.pipeline import PRESETS, run_training

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.no_stdlib and not args.add_corpus:
        print("specls train: --no-stdlib needs at least one --add-corpus DIR", file=sys.stderr)
        return 2
    for folder in args.add_corpus:
        if not folder.is_dir():
            print(f"specls train: corpus folder {folder} does not exist", file=sys.stderr)
            return 2
    if args.teacher:
        return run_distill(args, args.out)
    if args.teacher_batches is not None or args.epochs is not None:
        print("specls train: --teacher-batches and --epochs apply only with --teacher", file=sys.stderr)
        return 2
    preset = PRESETS[args.preset]
    out_dir: Path = args.out or BUNDLED_DIR
    work_dir: Path = args.work_dir or out_dir / ".work"
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
