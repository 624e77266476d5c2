"""Train the bundled pair end to end: tokenizer -> FIM target -> teacher top-k logits -> distilled draft -> card.

Every stage writes its result into `work_dir`; a killed run resumes from the last checkpoint of the stage it was
in, and the batches are a pure function of (seed, step), so a resumed run matches an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM

from engine.tokens import EOS
from engine.train.corpus import SourceFile, iter_source_files, split_corpus, stdlib_root
from engine.train.data import SequenceSampler
from engine.train.tokenizer import special_id, train_code_tokenizer


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    heads: int
    ffn: int

    def llama_config(self, vocab_size: int, context: int, eos_id: int) -> LlamaConfig:
        return LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden,
            intermediate_size=self.ffn,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.heads,
            max_position_embeddings=context,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            bos_token_id=eos_id,
            eos_token_id=eos_id,
            pad_token_id=eos_id,
        )


@dataclass(frozen=True)
class TrainPreset:
    name: str
    vocab_size: int
    seq_len: int
    target: ModelShape
    draft: ModelShape
    batch_size: int
    target_steps: int
    target_lr: float
    distill_batches: int  # batches whose teacher top-k logits are precomputed once
    distill_epochs: int
    draft_lr: float
    top_k_logits: int = 32
    kl_weight: float = 0.8  # the rest goes to plain cross-entropy on the real next token
    max_files: int | None = None
    eval_chunks: int = 64
    eval_functions: int = 100
    checkpoint_every: int = 50


PRESETS: dict[str, TrainPreset] = {
    "full": TrainPreset(
        name="full",
        vocab_size=8192,
        seq_len=512,
        target=ModelShape(layers=6, hidden=320, heads=5, ffn=864),
        draft=ModelShape(layers=3, hidden=192, heads=3, ffn=512),
        batch_size=4,  # small batches and many steps: more loss drop per token and per second on this CPU
        target_steps=6000,
        target_lr=1.5e-3,
        distill_batches=2500,  # the draft's agreement was still climbing steeply at 3000 steps
        distill_epochs=2,
        draft_lr=3e-3,
        kl_weight=0.9,  # agreement is the draft's job: in a 1000-step probe, pure KL gave 0.02 more alpha than 0.8
        checkpoint_every=100,
    ),
    "tiny": TrainPreset(
        name="tiny",
        vocab_size=512,
        seq_len=128,
        target=ModelShape(layers=2, hidden=64, heads=2, ffn=128),
        draft=ModelShape(layers=1, hidden=32, heads=2, ffn=64),
        batch_size=8,
        target_steps=60,
        target_lr=3e-3,
        distill_batches=6,
        distill_epochs=3,
        draft_lr=5e-3,
        max_files=60,
        eval_chunks=8,
        eval_functions=8,
        checkpoint_every=20,
    ),
}


@dataclass
class StageLog:
    seconds: float = 0.0
    steps: int = 0
    losses: list[float] = field(default_factory=list)


def use_bf16_autocast() -> bool:
    """bf16 autocast pays only where the CPU has bf16 matmul units; elsewhere (AVX2-only) it is ~20x slower."""
    capability = torch.backends.cpu.get_cpu_capability()
    return "AVX512" in capability or "AMX" in capability


def cosine_lr(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _save_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, log: StageLog
) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "log": asdict(log)}, tmp)
    tmp.replace(path)  # atomic: a kill mid-save leaves the previous checkpoint intact


def train_loop(
    stage: str,
    model: torch.nn.Module,
    total_steps: int,
    peak_lr: float,
    loss_at_step: Callable[[int], torch.Tensor],
    checkpoint: Path,
    every: int,
    progress: bool,
) -> StageLog:
    optimizer = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.1)
    log = StageLog()
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        log = StageLog(**state["log"])
    warmup = max(1, total_steps // 20)
    model.train()
    autocast = use_bf16_autocast()
    bar = tqdm(total=total_steps, initial=log.steps, desc=stage, disable=not progress, dynamic_ncols=True)
    while log.steps < total_steps:
        started = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(log.steps, total_steps, peak_lr, warmup)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_at_step(log.steps)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        log.steps += 1
        log.losses.append(round(loss.item(), 4))
        log.seconds += time.perf_counter() - started
        bar.set_postfix(loss=f"{sum(log.losses[-20:]) / len(log.losses[-20:]):.3f}")
        bar.update(1)
        if log.steps % every == 0 or log.steps == total_steps:
            _save_checkpoint(checkpoint, model, optimizer, log)
    bar.close()
    model.eval()
    return log


def _teacher_topk(
    target: LlamaForCausalLM,
    sampler: SequenceSampler,
    preset: TrainPreset,
    seed: int,
    path: Path,
    progress: bool,
) -> dict[str, torch.Tensor]:
    """Run the teacher once over the distillation batches and keep its top-k logits (cheap to store, reused per epoch)."""
    if path.exists():
        cached: dict[str, torch.Tensor] = torch.load(path)
        return cached
    tokens, top_values, top_indices = [], [], []
    with torch.inference_mode():
        for i in tqdm(range(preset.distill_batches), desc="teacher logits", disable=not progress):
            batch = sampler.batch(seed + 1, i, preset.batch_size)  # other batches than the target saw last
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16_autocast()):
                logits = target(batch[:, :-1]).logits.float()
            values, indices = logits.topk(preset.top_k_logits, dim=-1)
            tokens.append(batch)
            top_values.append(values.half())
            top_indices.append(indices.short() if preset.vocab_size < 32768 else indices)
    result = {"tokens": torch.cat(tokens), "values": torch.cat(top_values), "indices": torch.cat(top_indices)}
    torch.save(result, path)
    return result


def distillation_loss(
    draft_logits: torch.Tensor,
    teacher_values: torch.Tensor,
    teacher_indices: torch.Tensor,
    labels: torch.Tensor,
    kl_weight: float,
) -> torch.Tensor:
    """kl_weight * KL(teacher_topk || draft) + (1 - kl_weight) * CE(labels).

    The teacher distribution is its softmax renormalised over its top-k; the draft's log-probs are taken over the
    full vocabulary, so mass the draft puts outside the teacher's top-k is penalised.
    """
    draft_log_probs = F.log_softmax(draft_logits.float(), dim=-1)
    teacher_probs = F.softmax(teacher_values.float(), dim=-1)
    draft_at_topk = draft_log_probs.gather(-1, teacher_indices.long())
    kl = (teacher_probs * (teacher_probs.clamp_min(1e-9).log() - draft_at_topk)).sum(-1).mean()
    ce = F.nll_loss(draft_log_probs.flatten(0, 1), labels.flatten())
    return kl_weight * kl + (1 - kl_weight) * ce


def save_pretrained_pair(
    model: LlamaForCausalLM, tokenizer: Tokenizer, out_dir: Path, tokenizer_config: dict[str, object]
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out_dir)  # type: ignore[arg-type]  # 16-bit on disk; loaders upcast on CPU
    model.float()
    tokenizer.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (out_dir / "generation_config.json").unlink(missing_ok=True)


@dataclass
class TrainResult:
    target_dir: Path
    draft_dir: Path
    target_log: StageLog
    draft_log: StageLog
    tokenizer_seconds: float
    held_out: list[SourceFile]
    train_files: int


def run_training(
    preset: TrainPreset,
    out_dir: Path,
    work_dir: Path,
    extra_roots: tuple[Path, ...] = (),
    seed: int = 0,
    progress: bool = True,
    include_stdlib: bool = True,
) -> TrainResult:
    from engine.train.tokenizer import tokenizer_config

    torch.manual_seed(seed)
    work_dir.mkdir(parents=True, exist_ok=True)
    roots = ([stdlib_root()] if include_stdlib else []) + list(extra_roots)
    train_files, held_out = split_corpus(iter_source_files(roots))
    if preset.max_files is not None:
        train_files = train_files[: preset.max_files]
        held_out = held_out[: max(2, preset.max_files // 10)]

    # 1. Tokenizer
    tokenizer_path = work_dir / "tokenizer.json"
    started = time.perf_counter()
    if tokenizer_path.exists():
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
    else:
        tokenizer = train_code_tokenizer((f.text for f in train_files), preset.vocab_size)
        tokenizer.save(str(tokenizer_path))
    tokenizer_seconds = time.perf_counter() - started
    eos_id = special_id(tokenizer, EOS)
    vocab_size = tokenizer.get_vocab_size()
    sampler = SequenceSampler(train_files, tokenizer, preset.seq_len)

    # 2. Target: next-token loss on packed sequences, half of them FIM
    torch.manual_seed(seed)
    target = LlamaForCausalLM(preset.target.llama_config(vocab_size, preset.seq_len, eos_id))

    def target_loss(step: int) -> torch.Tensor:
        batch = sampler.batch(seed, step, preset.batch_size)
        logits = target(batch[:, :-1]).logits
        return F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())

    target_log = train_loop(
        "target",
        target,
        preset.target_steps,
        preset.target_lr,
        target_loss,
        work_dir / "target.ckpt",
        preset.checkpoint_every,
        progress,
    )

    # 3. Draft: distilled from the teacher's precomputed top-k logits
    teacher = _teacher_topk(target, sampler, preset, seed, work_dir / "teacher_topk.pt", progress)
    torch.manual_seed(seed + 2)
    draft = LlamaForCausalLM(preset.draft.llama_config(vocab_size, preset.seq_len, eos_id))
    rows = teacher["tokens"].shape[0]
    draft_steps = preset.distill_epochs * preset.distill_batches

    def draft_loss(step: int) -> torch.Tensor:
        order = torch.randperm(
            rows, generator=torch.Generator().manual_seed(seed * 1000 + step // preset.distill_batches)
        )
        start = (step % preset.distill_batches) * preset.batch_size
        rows_now = order[start : start + preset.batch_size]
        batch = teacher["tokens"][rows_now]
        logits = draft(batch[:, :-1]).logits
        return distillation_loss(
            logits, teacher["values"][rows_now], teacher["indices"][rows_now], batch[:, 1:], preset.kl_weight
        )

    draft_log = train_loop(
        "draft",
        draft,
        draft_steps,
        preset.draft_lr,
        draft_loss,
        work_dir / "draft.ckpt",
        preset.checkpoint_every,
        progress,
    )

    # 4. Ship both in Hugging Face format
    config = tokenizer_config(preset.seq_len)
    save_pretrained_pair(target, tokenizer, out_dir / "target", config)
    save_pretrained_pair(draft, tokenizer, out_dir / "draft", config)
    return TrainResult(
        out_dir / "target",
        out_dir / "draft",
        target_log,
        draft_log,
        tokenizer_seconds,
        held_out,
        len(train_files),
    )
