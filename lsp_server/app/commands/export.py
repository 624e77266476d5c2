"""`specls export gguf --out DIR`: write the target and draft as GGUF files for llama.cpp's llama-server.

    specls export gguf --out models/
    llama-server -m models/specls-target.gguf --model-draft models/specls-draft.gguf \\
        --spec-type draft-simple --spec-draft-n-max 16

The tokenizer is written as GGUF's byte-level BPE with llama.cpp's "gpt-2" pre-tokenizer named
explicitly (see engine/gguf_export.py and docs/remote.md for why).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import engine

BUNDLED_DIR = Path(engine.__file__).resolve().parent / "bundled"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("format", choices=("gguf",), help="output format")
    parser.add_argument("--out", required=True, type=Path, help="folder to write the .gguf files into")
    parser.add_argument("--target", type=Path, help="target model folder (default: the bundled target)")
    parser.add_argument("--draft", type=Path, help="draft model folder (default: the bundled draft)")
    parser.add_argument("--no-draft", action="store_true", help="export only the target")
    parser.add_argument(
        "--dtype",
        choices=("f32", "f16"),
        default="f32",
        help="f32 (default) matches the PyTorch engine's greedy output best; f16 is half the size",
    )


def _model_folder(path: Path | None, role: str) -> Path:
    folder = path if path is not None else BUNDLED_DIR / role
    missing = [name for name in ("config.json", "tokenizer.json") if not (folder / name).is_file()]
    if missing or not any(folder.glob("*.safetensors")):
        what = ", ".join(missing) if missing else "*.safetensors"
        hint = " (train the bundled pair with `specls train`)" if path is None else ""
        raise FileNotFoundError(f"{role} model folder {folder} lacks {what}{hint}")
    return folder


def run(args: argparse.Namespace) -> int:
    from engine.gguf_export import GgufExportError, export_llama_gguf

    roles = [("target", args.target)] + ([] if args.no_draft else [("draft", args.draft)])
    try:
        folders = [(role, _model_folder(path, role)) for role, path in roles]
    except FileNotFoundError as exc:
        print(f"specls export: {exc}", file=sys.stderr)
        return 2
    for role, folder in folders:
        out_path = args.out / f"specls-{role}.gguf"
        try:
            result = export_llama_gguf(folder, out_path, name=f"specls-{role}", dtype=args.dtype)
        except GgufExportError as exc:
            print(f"specls export: cannot export the {role} ({folder}): {exc}", file=sys.stderr)
            return 1
        size_mb = result.path.stat().st_size / 1e6
        print(
            f"{role}: {result.path} ({result.parameters / 1e6:.1f}M parameters, {result.tensors} tensors, "
            f"vocab {result.vocab_size}, {args.dtype}, {size_mb:.1f} MB)"
        )
    return 0
