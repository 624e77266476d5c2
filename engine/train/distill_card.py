"""Evaluate a draft distilled from a pretrained teacher and write its model card.

Three measures, all in one process on held-out files: teacher-forced greedy agreement (alpha) and
cross-entropy, the draft step's cost as a share of a target step on the engine's lean decoder, and
acceptance during generation: the hybrid drafter with the draft against the copy-only hybrid (same target,
interleaved prompt by prompt, natural stops).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from transformers import PreTrainedModel

from engine.costs import DRAFT_RUN, measure_step_costs
from engine.train import evaluate
from engine.train.corpus import HELD_OUT_BYTE_BELOW, SourceFile
from engine.train.distill import DistillPreset, DistillResult, load_teacher

# (label, engine with the draft or not, drafter), run in this order per prompt.
GENERATION_METHODS = (
    ("plain", False, "none"),
    ("copy-only hybrid", False, "hybrid"),
    ("hybrid with draft", True, "hybrid"),
    ("draft model only", True, "model"),
)


@torch.inference_mode()
def agreement_and_entropy(
    teacher: PreTrainedModel, draft: PreTrainedModel, windows: torch.Tensor
) -> dict[str, float]:
    """Greedy agreement and both models' cross-entropy from one teacher forward per batch of windows."""
    agree = count = 0
    entropy = {"teacher": 0.0, "draft": 0.0}
    for start in range(0, len(windows), 2):
        batch = windows[start : start + 2]
        labels = batch[:, 1:].flatten()
        logits = {"teacher": teacher(batch[:, :-1]).logits, "draft": draft(batch[:, :-1]).logits}
        agree += int((logits["teacher"].argmax(-1) == logits["draft"].argmax(-1)).sum())
        count += labels.numel()
        for name, values in logits.items():
            entropy[name] += F.cross_entropy(values.flatten(0, 1).float(), labels, reduction="sum").item()
    return {
        "alpha": agree / count,
        "ce_teacher": entropy["teacher"] / count,
        "ce_draft": entropy["draft"] / count,
        "tokens": count,
    }


def generation_prompts(files: list[SourceFile], count: int, chars: int = 1200) -> list[str]:
    """The code before a line start about 60% into each held-out file (files too short are skipped)."""
    prompts = []
    for source in files:
        cut = source.text.rfind("\n", 0, int(len(source.text) * 0.6)) + 1
        if cut > chars // 2:
            prompts.append(source.text[max(0, cut - chars) : cut])
        if len(prompts) == count:
            break
    return prompts


def generation_acceptance(
    teacher_dir: Path, draft_dir: Path, prompts: list[str], dtype: str, max_new_tokens: int = 64
) -> dict[str, dict[str, float | str]]:
    """Per method: tokens per target forward, mean drafts accepted per verify, decode tokens/s, and how
    many outputs equal plain decoding. Both engines share the loaded target weights."""
    from dataclasses import replace

    from engine.api import CompletionRequest
    from engine.models import load_pair
    from engine.service import LocalEngine

    pair = load_pair(str(teacher_dir), str(draft_dir), device="cpu", dtype=dtype, num_threads=1)
    engines = {
        True: LocalEngine(pair=pair, runtime="torch"),
        False: LocalEngine(pair=replace(pair, draft=None, draft_source=None), runtime="torch"),
    }
    totals: dict[str, dict[str, float]] = {
        label: dict.fromkeys(("new_tokens", "target_forwards", "accepted", "decode_s", "same"), 0.0)
        for label, _, _ in GENERATION_METHODS
    }
    for index, prompt in enumerate([prompts[0], *prompts]):  # the first prompt twice: the first run warms up
        warm_up = index == 0
        plain: list[int] = []
        for label, with_draft, drafter in GENERATION_METHODS:
            request = CompletionRequest(prompt=prompt, max_new_tokens=max_new_tokens, drafter=drafter)
            result = engines[with_draft].complete(request)
            plain = result.token_ids if drafter == "none" else plain
            if warm_up:
                continue
            total = totals[label]
            for key in ("new_tokens", "target_forwards", "accepted", "decode_s"):
                total[key] += getattr(result.stats, key)
            total["same"] += result.token_ids == plain
    prompts_run = len(prompts)
    return {
        label: {
            "tokens_per_target_forward": round(t["new_tokens"] / max(1.0, t["target_forwards"]), 3),
            "accepted_per_verify": round(t["accepted"] / max(1.0, t["target_forwards"]), 3),
            "decode_tokens_per_s": round(t["new_tokens"] / max(1e-9, t["decode_s"]), 2),
            "new_tokens": int(t["new_tokens"]),
            "same_as_plain": f"{int(t['same'])}/{prompts_run}",
        }
        for label, t in totals.items()
    }


def draft_step_share(teacher: PreTrainedModel, draft: PreTrainedModel) -> float:
    from engine.lean import LeanLlamaDecoder

    window = min(1024, teacher.config.max_position_embeddings, draft.config.max_position_embeddings)
    target_decoder, draft_decoder = LeanLlamaDecoder(teacher, window), LeanLlamaDecoder(draft, window)
    costs = measure_step_costs(
        target_decoder.forward, target_decoder.crop, draft_decoder.forward, draft_decoder.crop, window=window
    )
    return costs.draft_step


def evaluate_draft(
    result: DistillResult,
    preset: DistillPreset,
    dtype: str = "auto",
    generation_prompt_count: int = 12,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    from engine.models import choose_dtype, cpu_bf16_support, safetensors_params, torch_dtype

    started = time.perf_counter()
    params = safetensors_params(result.teacher_dir)
    dtype_name, _ = choose_dtype(dtype, "cpu", params, cpu_bf16_support())
    teacher = load_teacher(result.teacher_dir, torch_dtype(dtype_name))
    draft = load_teacher(result.draft_dir, torch_dtype(dtype_name))
    tokenizer = Tokenizer.from_file(str(result.draft_dir / "tokenizer.json"))
    windows = evaluate.held_out_windows(tokenizer, result.held_out, preset.seq_len, preset.eval_windows)
    quality = agreement_and_entropy(teacher, draft, windows)
    log(f"held-out greedy agreement {quality['alpha']:.4f} over {quality['tokens']} tokens")
    share = draft_step_share(teacher, draft)
    log(f"draft step / target step {share:.4f}")
    prompts = generation_prompts(result.held_out, generation_prompt_count)
    generation = generation_acceptance(result.teacher_dir, result.draft_dir, prompts, dtype_name)
    return {
        "preset": preset.name,
        "dtype": dtype_name,
        "teacher": str(result.teacher_dir),
        "held_out_files": len(result.held_out),
        "train_files": result.train_files,
        "teacher_tokens": result.teacher_tokens,
        "teacher_seconds": round(result.teacher_seconds, 1),
        "train_steps": result.log.steps,
        "train_seconds": round(result.log.seconds, 1),
        "final_train_loss": round(sum(result.log.losses[-20:]) / max(1, len(result.log.losses[-20:])), 4),
        "draft_params": sum(p.numel() for p in draft.parameters()),
        "draft_bytes": sum(p.stat().st_size for p in result.draft_dir.iterdir() if p.is_file()),
        "held_out_tokens": quality["tokens"],
        "greedy_agreement_alpha": round(quality["alpha"], 4),
        "held_out_ce_teacher": round(quality["ce_teacher"], 4),
        "held_out_ce_draft": round(quality["ce_draft"], 4),
        "draft_step_over_target_step": round(share, 4),
        "generation_prompts": len(prompts),
        "generation": generation,
        "eval_seconds": round(time.perf_counter() - started, 1),
        "machine": f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads",
    }


def write_draft_card(out_dir: Path, metrics: dict[str, Any], preset: DistillPreset, command: str) -> Path:
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    m = metrics
    shape = preset.draft
    rows = "\n".join(
        f"| {label} | {g['tokens_per_target_forward']} | {g['accepted_per_verify']} | "
        f"{g['decode_tokens_per_s']} | {g['same_as_plain']} |"
        for label, g in m["generation"].items()
    )
    card = f"""# Draft model for {Path(m["teacher"]).name} ({preset.name} preset)

A {shape.layers}-layer, {shape.hidden}-wide Llama that speaks the teacher's tokenizer, distilled by `specls train
--teacher` on this machine's CPU from the teacher's top-{preset.top_k_logits} logits
({preset.kl_weight} KL + {1 - preset.kl_weight:.1f} cross-entropy on the real next token). Its tied embedding
started as the teacher's embedding projected on its top {shape.hidden} principal directions. bf16 safetensors,
{m["draft_params"]:,} parameters, {m["draft_bytes"] / 1e6:.1f} MB on disk.

## Reproduce
```
{command}
```

## Data
- Corpus: the Python standard library of the interpreter that ran training, plain code windows of
  {preset.seq_len} tokens packed back to back (no FIM: the teacher has no FIM tokens), `<|endoftext|>` at file ends.
- Held out: files whose relative path's SHA-1 has a first byte below {HELD_OUT_BYTE_BELOW} (~5%):
  {m["held_out_files"]} held-out files, {m["train_files"]} training files.
- Teacher logits: {m["teacher_tokens"]:,} tokens in {m["teacher_seconds"]} s; training: {m["train_steps"]} steps
  ({preset.epochs} epochs) in {m["train_seconds"]} s, final loss {m["final_train_loss"]}.
  Machine: {m["machine"]}; models evaluated in {m["dtype"]}.

## Held-out results
| measure | value |
|---|---|
| teacher-forced greedy agreement with the teacher (alpha, {m["held_out_tokens"]:,} tokens) | {m["greedy_agreement_alpha"]} |
| teacher cross-entropy (nats/token) | {m["held_out_ce_teacher"]} |
| draft cross-entropy | {m["held_out_ce_draft"]} |
| draft step / target step (lean decoder, runs of {DRAFT_RUN} draft steps) | {m["draft_step_over_target_step"]} |

Generation ({m["generation_prompts"]} held-out prompts cut at a line start, greedy, up to 64 new tokens with
natural stops, one process, methods interleaved per prompt):

| method | tokens per target forward | drafts accepted per verify | decode tokens/s | output = plain |
|---|---|---|---|---|
{rows}
"""
    path = out_dir / "MODEL_CARD.md"
    path.write_text(card)
    return path
