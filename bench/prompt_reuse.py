"""KV prefix reuse per keystroke, per prompt layout: how much of each prompt a prefix-reusing cache already
holds from the prompt before it, while a person types held-out code into a file (`specls bench
prompt-reuse`). Counting only, no model forward: not a timed benchmark.

Each keystroke's prompt is built by the server's own context builder (its budget, the sticky prompt start,
token healing), with each model's own tokenizer and template. For Qwen's PSM the same prefix and suffix are
also laid out two other ways: with the whole prefix before the suffix (plain PSM, the layout before the
cursor's line moved after the middle token), and with the lines since the start of the cursor's block of
MIDDLE_BLOCK lines after the middle token too (tried on 2026-12-05, not adopted: docs/line-starts.md).
Besides the mean, the keys that re-read more than LONG_PREFILL tokens are counted: where the lines above the
cursor come before the suffix, each new line re-reads all of the suffix (at the key after Enter, as token
healing holds the new line's whitespace back).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.keystrokes import KeystrokeConfig, default_regions
from engine.api import BackendInfo
from engine.sequences import common_prefix_length
from lsp_server.context import CompletionContext, ContextSettings, build_completion_context
from lsp_server.documents import DocumentStore, TextChange
from lsp_server.typist.keystrokes import plan_keystrokes

MODELS = {
    "prefix-only (smollm2-135m)": "smollm2-135m",
    "qwen2.5-coder PSM (qwen2.5-coder-0.5b)": "qwen2.5-coder-0.5b",
}

Layout = Callable[[CompletionContext, int], str]  # the context, and the cursor's line in the file
MIDDLE_BLOCK = 8
LONG_PREFILL = 32  # tokens: ~80 ms on an AVX2 laptop in W8A8, most of the time between two keys


def as_served(ctx: CompletionContext, cursor_line: int) -> str:
    return ctx.prompt


def plain_psm(ctx: CompletionContext, cursor_line: int) -> str:
    return _psm(ctx, _healed(ctx), "")


def block_after_middle(ctx: CompletionContext, cursor_line: int) -> str:
    """The lines since the start of the cursor's block of MIDDLE_BLOCK lines (counted from the file's start)
    after the middle token, with the cursor's line: a new line then appends to the prompt, and the suffix is
    re-read once per block; the block's lines move before the suffix when the next block starts."""
    starts = [0, *(i + 1 for i, char in enumerate(ctx.prefix) if char == "\n")]  # the prefix's line starts
    held = min(cursor_line % MIDDLE_BLOCK, len(starts) - 1)
    middle_from = starts[len(starts) - 1 - held]
    healed = _healed(ctx)
    return _psm(ctx, healed[:middle_from], healed[middle_from:])


def _healed(ctx: CompletionContext) -> str:
    return ctx.prefix[: len(ctx.prefix) - len(ctx.forced_prefix)]


def _psm(ctx: CompletionContext, above: str, middle: str) -> str:
    """`above` before the suffix and `middle` after the middle token, in the context's PSM template."""
    t = ctx.template
    return f"{t.prefix_token}{above}{t.suffix_token}{ctx.suffix}{t.middle_token}{middle}"


@dataclass
class Reuse:
    keys: int = 0
    reused: int = 0
    total: int = 0
    long_prefills: int = 0  # keys re-reading more than LONG_PREFILL tokens
    most_prefill: int = 0
    over_half: int = 0  # keys whose prompt shares less than half with the one before

    def add(self, shared: int, length: int) -> None:
        prefill = length - shared
        self.keys += 1
        self.reused += shared
        self.total += length
        self.most_prefill = max(self.most_prefill, prefill)
        self.over_half += shared < length // 2
        self.long_prefills += prefill > LONG_PREFILL

    def row(self) -> dict[str, Any]:
        return {
            "keystrokes": self.keys,
            "prefix_reuse": self.reused / self.total if self.total else None,
            "tokens_to_prefill_per_key": (self.total - self.reused) / self.keys if self.keys else None,
            "keys_prefilling_over_long_prefill": self.long_prefills,
            "most_tokens_to_prefill": self.most_prefill,
            "keys_recomputing_over_half": self.over_half,
        }


def reuse_while_typing(
    tokenizer: Any,
    special: tuple[str, ...],
    layouts: Mapping[str, Layout],
    config: KeystrokeConfig,
    settings: ContextSettings,
) -> dict[str, dict[str, Any]]:
    """Type the regions of `config` key by key; per layout, how many of each prompt's tokens the previous
    key's prompt shares as a prefix."""
    info = BackendInfo("local", "t", None, special, 32768, "cpu", token_healing=True)

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    counts = {name: Reuse() for name in layouts}
    for region in default_regions(config):
        store = DocumentStore()
        uri = "file:///bench/" + Path(region.name).name
        text = region.text[: region.start] + region.text[region.end :]
        store.open(uri, "python", 1, text)
        cursor = region.start
        previous: dict[str, list[int]] = {}
        for version, key in enumerate(plan_keystrokes(region.text[region.start : region.end]), start=2):
            line, character = store.position_at(uri, cursor)
            store.change(uri, version, [TextChange((line, character, line, character), key)])
            cursor += len(key)
            ctx = build_completion_context(store, uri, cursor, info, settings, count_tokens)
            if ctx.mode == "none":  # no prompt here: the cache still holds the last one read
                continue
            cursor_line = store.position_at(uri, cursor)[0]
            for name, layout in layouts.items():
                ids = tokenizer.encode(layout(ctx, cursor_line), add_special_tokens=False)
                if name in previous:
                    counts[name].add(common_prefix_length(previous[name], ids), len(ids))
                previous[name] = ids
    return {name: count.row() for name, count in counts.items()}


# --- `specls bench prompt-reuse` ---

NAME = "prompt-reuse"
HELP = "KV prefix reuse per keystroke, per prompt layout (token counting, no model forward)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--file", type=Path, action="append", default=[], help="a file to type (repeatable)")
    parser.add_argument("--chars", type=int, default=300, help="characters typed per file")
    parser.add_argument("--context-tokens", type=int, default=1536, help="the prompt's budget")
    parser.add_argument(
        "--suffix-tokens",
        type=int,
        default=64,
        help="tokens after the cursor (64: what the CPUs measured take)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="results folder")
    parser.add_argument("--tag", default="", help="appended to the result files' names")


def command(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from engine.catalog import is_pulled
    from engine.models import resolve_model_path, special_tokens

    config = KeystrokeConfig(files=tuple(args.file), chars=args.chars)
    settings = ContextSettings(max_prompt_tokens=args.context_tokens, max_suffix_tokens=args.suffix_tokens)
    rows: dict[str, Any] = {}
    for label, name in MODELS.items():
        if not is_pulled(name):
            print(f"{name} is not pulled: skipped", file=sys.stderr)
            continue
        folder = resolve_model_path(name, "target").location
        tokenizer = AutoTokenizer.from_pretrained(folder)
        special = tuple(special_tokens(Path(folder)))
        layouts: dict[str, Layout] = {label: as_served}
        if "PSM" in label:
            layouts["the same, plain PSM (the whole prefix before the suffix; before 2230dbf)"] = plain_psm
            layouts[
                f"the same, the cursor's block of {MIDDLE_BLOCK} lines after the middle token (not adopted)"
            ] = block_after_middle
        rows.update(reuse_while_typing(tokenizer, special, layouts, config, settings))
    files = ", ".join(str(path) for path in args.file) or "3 held-out stdlib files"
    result = {
        "benchmark": "prompt-reuse",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "files": files,
        "chars": args.chars,
        "context_tokens": args.context_tokens,
        "suffix_tokens": args.suffix_tokens,
        "rows": rows,
    }
    stem = "prompt-reuse" + (f"-{args.tag}" if args.tag else "")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    lines = [
        "# KV prefix reuse per keystroke, per prompt layout\n",
        f"{result['date_utc']}; `specls bench prompt-reuse`: {files}, {args.chars} characters each, the same "
        "regions as `specls bench keystrokes`, typed key by key; each prompt built by the server's context "
        f"builder ({args.context_tokens:,} tokens, {args.suffix_tokens} after the cursor, sticky prompt start, "
        "token healing) and tokenized by the model's tokenizer. Token counting only (no forward), so machine "
        "load does not matter.\n",
        f"| layout | keystrokes | prefix reuse | tokens to prefill per key (mean) | keys prefilling over "
        f"{LONG_PREFILL} | most at one key | keys recomputing over half |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, row in rows.items():
        lines.append(
            f"| {label} | {row['keystrokes']} | {100 * row['prefix_reuse']:.1f}% | "
            f"{row['tokens_to_prefill_per_key']:.1f} | {row['keys_prefilling_over_long_prefill']} | "
            f"{row['most_tokens_to_prefill']} | {row['keys_recomputing_over_half']} |"
        )
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0
