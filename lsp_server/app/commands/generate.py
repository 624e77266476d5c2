"""`specls generate`: complete a prompt file with the engine and print the text (or one JSON object)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lsp_server.app.commands.model_args import add_model_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt-file", required=True, help="text before the cursor")
    parser.add_argument(
        "--suffix-file",
        help="text after the cursor (default: none); a model with fill-in-the-middle tokens always gets its "
        "FIM prompt, with this suffix or an empty one",
    )
    parser.add_argument(
        "--raw", action="store_true", help="send the prompt file as it is: no FIM template, no token healing"
    )
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--mode", choices=("speculative", "autoregressive"), default="speculative")
    parser.add_argument("--drafter", choices=("hybrid", "model", "lookup", "suffix"), default="hybrid")
    add_model_arguments(parser)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--json", action="store_true", help="print one JSON object: token_ids, text, stats")


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SystemExit(f"specls generate: cannot read the {what} file {path!r}: {exc.strerror}") from exc


def run(args: argparse.Namespace) -> int:
    from engine.api import CompletionRequest
    from engine.models import ModelLoadError
    from engine.service import LocalEngine
    from lsp_server.context.builder import healed_fragment
    from lsp_server.context.fim import detect_fim_template, marker_texts

    prefix = _read(args.prompt_file, "prompt")
    suffix = _read(args.suffix_file, "suffix") if args.suffix_file else ""
    try:
        engine = LocalEngine(target=args.target, draft=args.draft, device=args.device, dtype=args.dtype)
    except ModelLoadError as exc:
        print(f"specls generate: {exc}", file=sys.stderr)
        return 2
    info = engine.info()
    template = detect_fim_template(info.special_tokens)
    if args.suffix_file and template is None:
        print("specls generate: the target's tokenizer has no fill-in-the-middle tokens", file=sys.stderr)
        return 2
    # As the server does: the spaces and word fragment before the cursor are re-generated (token healing).
    healed = healed_fragment(prefix) if info.token_healing and not args.raw else ""
    prompt_prefix = prefix[: len(prefix) - len(healed)]
    prompt = prompt_prefix if template is None or args.raw else template.format(prompt_prefix, suffix)
    stops = (*(template.stop_strings if template is not None else ()), *marker_texts(info.special_tokens))
    request = CompletionRequest(
        prompt=prompt,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        stop_strings=tuple(dict.fromkeys(stops)),
        suffix=suffix,
        drafter="none" if args.mode == "autoregressive" else args.drafter,
        forced_prefix=healed,
    )
    try:
        result = engine.complete(request)
    except ValueError as exc:
        print(f"specls generate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        payload = {
            "text": result.text,
            "token_ids": result.token_ids,
            "finish_reason": result.finish_reason,
            "mode": args.mode,
            "drafter": request.drafter,
            "stats": result.stats.as_dict(),
        }
        print(json.dumps(payload))
        return 0
    print(result.text)
    stats = result.stats
    tokens = len(result.token_ids)
    print(
        f"[{result.finish_reason}] {tokens} tokens in {stats.wall_s:.3f}s "
        f"({tokens / max(stats.decode_s, 1e-9):.1f} tok/s decode), "
        f"{stats.target_forwards} target forwards, {stats.accepted}/{stats.drafted} drafts accepted",
        file=sys.stderr,
    )
    return 0
