"""Evaluate a trained pair and write its model card (MODEL_CARD.md + metrics.json beside the pair)."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import LlamaForCausalLM

from engine.costs import DRAFT_RUN, StepCosts, measure_step_costs
from engine.lean import LeanLlamaDecoder
from engine.train import evaluate
from engine.train.corpus import HELD_OUT_BYTE_BELOW, SourceFile
from engine.train.pipeline import TrainPreset, TrainResult, use_bf16_autocast


def _lean_step_costs(target: LlamaForCausalLM, draft: LlamaForCausalLM) -> StepCosts:
    """A draft step and wide verifies priced in target steps on the engine's lean decoder path."""
    lean_target, lean_draft = LeanLlamaDecoder(target), LeanLlamaDecoder(draft)
    return measure_step_costs(
        lean_target.forward,
        lean_target.crop,
        lean_draft.forward,
        lean_draft.crop,
        window=min(lean_target.max_length, lean_draft.max_length),
    )


def _parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def evaluate_pair(
    result: TrainResult, preset: TrainPreset, train_files: list[SourceFile], progress: bool = True
) -> dict[str, Any]:
    tokenizer = Tokenizer.from_file(str(result.target_dir / "tokenizer.json"))
    target = LlamaForCausalLM.from_pretrained(result.target_dir, dtype=torch.float32).eval()
    draft = LlamaForCausalLM.from_pretrained(result.draft_dir, dtype=torch.float32).eval()
    started = time.perf_counter()
    windows = evaluate.held_out_windows(tokenizer, result.held_out, preset.seq_len, preset.eval_chunks)
    # The n-gram baseline counts every third training file: ~3M tokens is plenty for trigram statistics.
    ngram_ids = np.concatenate(
        [np.array(tokenizer.encode(f.text).ids, dtype=np.int32) for f in train_files[::3]]
    )
    target_ce = evaluate.mean_cross_entropy(target, windows)
    draft_ce = evaluate.mean_cross_entropy(draft, windows)
    ngram_ce = evaluate.ngram_cross_entropy(ngram_ids, windows, tokenizer.get_vocab_size())
    alpha = evaluate.greedy_agreement(target, draft, windows)
    cases = evaluate.fim_cases(result.held_out, preset.eval_functions)
    fim_em = evaluate.fim_exact_match(target, tokenizer, cases)
    samples = evaluate.sample_completions(target, tokenizer, result.held_out)
    costs = _lean_step_costs(target, draft)
    return {
        "preset": preset.name,
        "held_out_files": len(result.held_out),
        "train_files": result.train_files,
        "held_out_tokens": int(windows[:, 1:].numel()),
        "target_params": _parameter_count(target),
        "draft_params": _parameter_count(draft),
        "target_bytes": _folder_bytes(result.target_dir),
        "draft_bytes": _folder_bytes(result.draft_dir),
        "target_train_tokens": result.target_log.steps * preset.batch_size * preset.seq_len,
        "target_train_seconds": round(result.target_log.seconds, 1),
        "draft_train_seconds": round(result.draft_log.seconds, 1),
        "tokenizer_seconds": round(result.tokenizer_seconds, 1),
        "target_final_train_loss": float(np.mean(result.target_log.losses[-20:])),
        "held_out_ce_target": round(target_ce, 4),
        "held_out_ce_draft": round(draft_ce, 4),
        "held_out_ce_trigram": round(ngram_ce, 4),
        "greedy_agreement_alpha": round(alpha, 4),
        "fim_cases": len(cases),
        "fim_line_exact_match": round(fim_em, 4),
        "draft_step_over_target_step": round(costs.draft_step, 4),
        "verify_cost_in_target_steps": dict(
            zip(costs.widths, [round(v, 3) for v in costs.verify], strict=True)
        ),
        "eval_seconds": round(time.perf_counter() - started, 1),
        "samples": [{"prompt_tail": p, "completion": c} for p, c in samples],
        "machine": f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads",
        "bf16_autocast": use_bf16_autocast(),
    }


def write_model_card(out_dir: Path, metrics: dict[str, Any], preset: TrainPreset, command: str) -> Path:
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    m = metrics
    samples = "\n\n".join(
        f"Prompt (tail):\n```python\n{s['prompt_tail']}\n```\nGreedy continuation:\n```python\n{s['completion']}\n```"
        for s in m["samples"]
    )
    card = f"""# specls bundled model pair ({preset.name} preset)

A FIM code target and a distilled draft, trained by `specls train` on this machine's CPU. They ship in Hugging
Face format (bf16 safetensors) and load through the same code as any checkpoint.

## Reproduce
```
{command}
```

## Data
- Corpus: the Python standard library of the interpreter that ran training (`sysconfig` "stdlib" path),
  non-UTF-8 bytes replaced; `site-packages`, `idlelib`, `lib2to3`, `ensurepip` and files over 400 kB skipped.
- Held out: files whose relative path's SHA-1 has a first byte below {HELD_OUT_BYTE_BELOW} (~5%):
  {m["held_out_files"]} held-out files, {m["train_files"]} training files.
- Examples: packed windows of {preset.seq_len} tokens; half FIM-transformed (PSM and SPM in equal parts), the rest
  plain code; a `<|sp_file_sep|>path` header at file starts.

## Models
| | layers x width | parameters | on disk | training time |
|---|---|---|---|---|
| target | {preset.target.layers} x {preset.target.hidden} | {m["target_params"]:,} | {m["target_bytes"] / 1e6:.1f} MB | {m["target_train_seconds"]} s ({m["target_train_tokens"]:,} tokens) |
| draft | {preset.draft.layers} x {preset.draft.hidden} | {m["draft_params"]:,} | {m["draft_bytes"] / 1e6:.1f} MB | {m["draft_train_seconds"]} s (distilled: {preset.kl_weight} KL to the target's top-{preset.top_k_logits} logits + {1 - preset.kl_weight:.1f} CE) |

Tokenizer: byte-level BPE, GPT-2 split, {preset.vocab_size} tokens, special tokens `<|endoftext|>`,
`<|sp_fim_prefix|>`, `<|sp_fim_suffix|>`, `<|sp_fim_middle|>`, `<|sp_file_sep|>`. Context window {preset.seq_len}.
Machine: {m["machine"]}; training {"in bf16 autocast" if m.get("bf16_autocast") else "in fp32 (this CPU has no bf16 matmul units)"}.

## Held-out results ({m["held_out_tokens"]:,} tokens of held-out code)
| measure | value |
|---|---|
| target cross-entropy (nats/token) | {m["held_out_ce_target"]} |
| draft cross-entropy | {m["held_out_ce_draft"]} |
| interpolated trigram baseline cross-entropy | {m["held_out_ce_trigram"]} |
| draft-target greedy token agreement (alpha) | {m["greedy_agreement_alpha"]} |
| draft step / target step (lean decoder, runs of {DRAFT_RUN} draft steps after a target step) | {m["draft_step_over_target_step"]} |
| verify of k drafts, in target steps (k: cost) | {", ".join(f"{k}: {v}" for k, v in m["verify_cost_in_target_steps"].items())} |
| FIM middle exact match (one masked line per held-out function, {m["fim_cases"]} functions) | {m["fim_line_exact_match"]} |

## Samples (greedy, held-out files)
{samples}

## Limits
This pair was trained for minutes on two CPU cores: it completes Python idioms, indentation and repeated
structure, not intent. Point specls at a real checkpoint pair for real work (see docs/models.md).
"""
    path = out_dir / "MODEL_CARD.md"
    path.write_text(card)
    return path
