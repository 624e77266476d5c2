"""Which prefix-only prompt suits a model without FIM tokens: the file path as a header, or nothing.

For each held-out cursor (`bench.prompts.cursor_in`: a code line at 60% of a file) and each header
variant, one forward over header + the file's lines before that line + the line itself (tokenized as one
text, with its indentation, as the model saw files) gives the mean negative log-likelihood of the line's
tokens and whether greedy decoding would reproduce every one of them (teacher-forced top-1 on the whole
line). Lower NLL and more whole lines mean the model is better placed to write the line the user is about
to type. Variants are compared prompt by prompt against no header (paired differences).

    specls bench prompt-template --target smollm2-135m --prompts 24
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.cli_args import positive, print_paths
from bench.metrics import markdown_table
from bench.prompts import cursor_in, held_out_files

# Header variants: how the file's path is put before its text.
VARIANTS: dict[str, str] = {
    "none": "",
    "comment": "# {path}\n",
    "filename-token": "<filename>{path}\n",
}


def measure(target: str, prompts: int, prefix_lines: int, threads: int) -> dict[str, Any]:
    import torch

    from engine.models import load_pair

    pair = load_pair(target, "none", "cpu", "fp32", num_threads=threads)
    tokenizer, model = pair.tokenizer, pair.target
    rows: dict[str, list[tuple[float, bool]]] = {name: [] for name in VARIANTS}
    used: list[str] = []
    for relative, text in held_out_files():
        if len(used) >= prompts:
            break
        found = cursor_in(text)
        if found is None:
            continue
        line, offset, removed = found
        if len(removed.strip()) < 4:
            continue
        line_start = text.rfind("\n", 0, offset) + 1
        before = "\n".join(text[:line_start].split("\n")[-prefix_lines - 1 :])
        line_text = text[line_start:offset] + removed + "\n"
        used.append(f"{relative}:{line + 1}")
        for name, header in VARIANTS.items():
            # One tokenization of the whole text, as the model saw files: the line's tokens are those that
            # end inside it (a token spanning the newline before it counts as the line's).
            context = header.format(path=relative) + before
            encoded = tokenizer(context + line_text, add_special_tokens=False, return_offsets_mapping=True)
            all_ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
            first = next(i for i, (_, end) in enumerate(offsets) if end > len(context))
            ids = torch.tensor([all_ids])
            with torch.inference_mode():
                logits = model(ids).logits[0, first - 1 : -1].float()
            wanted = torch.tensor(all_ids[first:])
            log_probs = torch.log_softmax(logits, dim=-1)
            nll = float(-log_probs[torch.arange(len(wanted)), wanted].mean())
            whole = bool((logits.argmax(dim=-1) == wanted).all())
            rows[name].append((nll, whole))
    base = rows["none"]
    summary = {
        name: {
            "mean_nll": sum(nll for nll, _ in values) / len(values),
            "whole_line_top1": sum(whole for _, whole in values) / len(values),
            "nll_minus_none": sum(v[0] - b[0] for v, b in zip(values, base, strict=True)) / len(values),
            "prompts_better_than_none": sum(v[0] < b[0] for v, b in zip(values, base, strict=True)),
        }
        for name, values in rows.items()
        if values
    }
    return {
        "benchmark": "prompt-template",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "target": target,
        "prefix_lines": prefix_lines,
        "prompts": used,
        "summary": summary,
        "per_prompt": {name: values for name, values in rows.items()},
    }


def markdown(result: dict[str, Any]) -> str:
    rows = [
        [name, s["mean_nll"], s["nll_minus_none"], s["prompts_better_than_none"], s["whole_line_top1"]]
        for name, s in result["summary"].items()
    ]
    return (
        f"# Prefix-only prompt header ({result['target']})\n\n"
        f"{result['date_utc']}; {len(result['prompts'])} held-out cursors, the last {result['prefix_lines']} "
        "lines before the cursor, the removed line as the answer (teacher-forced).\n\n"
        + markdown_table(
            [
                "header",
                "mean NLL of the line (nats/token)",
                "paired difference vs none",
                f"prompts better than none (of {len(result['prompts'])})",
                "whole line greedy-correct",
            ],
            rows,
        )
        + "\n"
    )


# --- `specls bench prompt-template` ---

NAME = "prompt-template"
HELP = "which prefix-only prompt header suits a model without FIM tokens (line NLL, whole lines)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="smollm2-135m", help="the model (default: smollm2-135m)")
    parser.add_argument("--prompts", type=positive, default=24, help="held-out cursors (default: 24)")
    parser.add_argument(
        "--prefix-lines", type=positive, default=40, help="lines before the cursor (default: 40)"
    )
    parser.add_argument("--threads", type=positive, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="results folder")


def command(args: argparse.Namespace) -> int:
    result = measure(args.target, args.prompts, args.prefix_lines, args.threads)
    stem = args.out / f"prompt-template-{Path(args.target).name}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    stem.with_suffix(".md").write_text(markdown(result), encoding="utf-8")
    return print_paths([stem.with_suffix(".json"), stem.with_suffix(".md")])
