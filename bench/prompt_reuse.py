"""KV prefix reuse per keystroke, per prompt template: how much of each prompt a prefix-reusing cache already
holds from the prompt before it, while a person types held-out code into a file (`specls bench
prompt-reuse`). Counting only, no model forward: not a timed benchmark.

Each keystroke's prompt is built by the server's own context builder (its budget, the sticky prompt start,
token healing), with each model's own tokenizer and template. A "plain PSM" row formats the same prefix
and suffix the way FIM prompts were laid out before (the cursor's line inside the prefix), for comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.keystrokes import KeystrokeConfig, default_regions
from engine.api import BackendInfo
from engine.sequences import common_prefix_length
from lsp_server.context import ContextSettings, build_completion_context
from lsp_server.documents import DocumentStore, TextChange
from lsp_server.typist.keystrokes import plan_keystrokes

MODELS = {
    "prefix-only (smollm2-135m)": "smollm2-135m",
    "qwen2.5-coder PSM (qwen2.5-coder-0.5b)": "qwen2.5-coder-0.5b",
}


def reuse_while_typing(
    tokenizer: Any, special: tuple[str, ...], plain_psm: bool, count: int
) -> dict[str, Any]:
    """Type `count` held-out regions key by key; per key, the share of the prompt's tokens that the
    previous key's prompt shares as a prefix."""
    info = BackendInfo("local", "t", None, special, 32768, "cpu", token_healing=True)
    settings = ContextSettings()

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    reused = total = keys = 0
    full_recomputes = 0
    for region in default_regions(KeystrokeConfig(count=count)):
        store = DocumentStore()
        uri = "file:///bench/" + region.name
        text = region.text[: region.start] + region.text[region.end :]
        store.open(uri, "python", 1, text)
        cursor, previous = region.start, None
        for version, key in enumerate(plan_keystrokes(region.text[region.start : region.end]), start=2):
            line, character = store.position_at(uri, cursor)
            store.change(uri, version, [TextChange((line, character, line, character), key)])
            cursor += len(key)
            ctx = build_completion_context(store, uri, cursor, info, settings, count_tokens)
            if ctx.mode == "none":
                continue
            prompt = ctx.prompt
            if plain_psm and ctx.template.order == "psm":
                healed = ctx.prefix[: len(ctx.prefix) - len(ctx.forced_prefix)]
                t = ctx.template
                prompt = f"{t.prefix_token}{healed}{t.suffix_token}{ctx.suffix}{t.middle_token}"
            ids = tokenizer.encode(prompt, add_special_tokens=False)
            if previous is not None:
                shared = common_prefix_length(previous, ids)
                reused += shared
                total += len(ids)
                keys += 1
                full_recomputes += shared < len(ids) // 2
            previous = ids
    return {
        "keystrokes": keys,
        "prefix_reuse": reused / total if total else None,
        "tokens_to_prefill_per_key": (total - reused) / keys if keys else None,
        "keys_recomputing_over_half": full_recomputes,
    }


# --- `specls bench prompt-reuse` ---

NAME = "prompt-reuse"
HELP = "KV prefix reuse per keystroke, per prompt template (token counting, no model forward)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="results folder")


def command(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from engine.catalog import is_pulled
    from engine.models import resolve_model_path, special_tokens

    rows: dict[str, Any] = {}
    for label, name in MODELS.items():
        if not is_pulled(name):
            print(f"{name} is not pulled: skipped", file=sys.stderr)
            continue
        folder = resolve_model_path(name, "target").location
        tokenizer = AutoTokenizer.from_pretrained(folder)
        special = tuple(special_tokens(Path(folder)))
        rows[label] = reuse_while_typing(tokenizer, special, False, 3)
        if "PSM" in label:
            rows["plain PSM, the cursor's line in the prefix (before)"] = reuse_while_typing(
                tokenizer, special, True, 3
            )
    result = {"benchmark": "prompt-reuse", "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ"), "rows": rows}
    out = args.out
    (out / "prompt-reuse.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    lines = [
        "# KV prefix reuse per keystroke, per prompt template\n",
        f"{result['date_utc']}; `specls bench prompt-reuse`: 3 held-out files, the same regions as `specls "
        "bench keystrokes`, typed key by key; each prompt built by the server's context builder (default "
        "budget 1,536 tokens, sticky prompt start, token healing) and tokenized by the model's tokenizer. "
        "Token counting only (no forward), so machine load does not matter.\n",
        "| template | keystrokes | prefix reuse | tokens to prefill per key (mean) | keys recomputing over half |",
        "|---|---|---|---|---|",
    ]
    for label, row in rows.items():
        lines.append(
            f"| {label} | {row['keystrokes']} | {100 * row['prefix_reuse']:.1f}% | "
            f"{row['tokens_to_prefill_per_key']:.1f} | {row['keys_recomputing_over_half']} |"
        )
    (out / "prompt-reuse.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0
