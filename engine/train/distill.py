"""Distil a draft for a pretrained target (`specls train --teacher NAME`): no tokenizer or target stage.

The draft speaks the teacher's tokenizer, so the engine can verify its proposals. It learns from the
teacher's top-k logits on plain code windows of the local corpus, computed once and cached in shards (a
killed run resumes at the last finished shard, then at the last training checkpoint). With a vocabulary
of ~50k tokens the embedding is most of a small draft, so it starts as the teacher's embedding projected on
its top principal directions: the tied head ranks tokens roughly as the teacher's does from the first step.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PretrainedConfig, PreTrainedModel

from engine.train.corpus import SourceFile, iter_source_files, split_corpus, stdlib_root
from engine.train.data import SequenceSampler
from engine.train.pipeline import ModelShape, StageLog, distillation_loss, train_loop


@dataclass(frozen=True)
class DistillPreset:
    name: str
    seq_len: int
    draft: ModelShape
    batch_size: int
    teacher_batches: int  # batches whose teacher top-k logits are computed once
    epochs: int
    lr: float
    top_k_logits: int = 32
    kl_weight: float = 0.9  # the rest goes to plain cross-entropy on the real next token
    max_files: int | None = None
    eval_windows: int = 24
    checkpoint_every: int = 50
    shard_batches: int = 10  # teacher batches per cached shard: the resume granularity of that stage


DISTILL_PRESETS: dict[str, DistillPreset] = {
    "full": DistillPreset(
        name="full",
        seq_len=1024,  # prompts run to 1536 tokens: the draft must have seen far positions
        draft=ModelShape(layers=3, hidden=192, heads=3, ffn=512),
        batch_size=2,
        teacher_batches=300,
        epochs=3,
        lr=3e-3,
        eval_windows=12,
    ),
    "tiny": DistillPreset(
        name="tiny",
        seq_len=64,
        draft=ModelShape(layers=1, hidden=32, heads=2, ffn=64),
        batch_size=4,
        teacher_batches=6,
        epochs=2,
        lr=5e-3,
        max_files=40,
        eval_windows=4,
        checkpoint_every=4,
        shard_batches=4,
    ),
}


class PlainCodeSampler(SequenceSampler):
    """Plain code windows packed back to back, each file ended by the teacher's end-of-text id: a pretrained
    model without FIM tokens sees a prefix-only prompt, so that is what its draft must predict."""

    def __init__(self, files: list[SourceFile], tokenizer: Tokenizer, seq_len: int, eos_id: int):
        if not files:
            raise ValueError("the training corpus is empty")
        self.files = files
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.fim_rate = 0.0
        self.weights = np.array([len(f.text) for f in files], dtype=np.float64)
        self.weights /= self.weights.sum()
        self.eos_id = eos_id

    def example(self, rng: np.random.Generator) -> list[int]:
        source, start, end = self._window(rng, 1.0)
        return self._encode(source.text[start:end]) + ([self.eos_id] if end >= len(source.text) else [])


def draft_config(shape: ModelShape, teacher: PretrainedConfig) -> LlamaConfig:
    """The teacher's vocabulary, special ids, context length and RoPE base at the draft's size: the engine's
    window is the smaller of the two models' contexts, so the draft must not shorten it."""
    config = shape.llama_config(teacher.vocab_size, teacher.max_position_embeddings, teacher.eos_token_id)
    config.bos_token_id = teacher.bos_token_id
    config.pad_token_id = teacher.pad_token_id
    config.rope_parameters = dict(teacher.rope_parameters)
    return config


def projected_embedding(teacher_embedding: torch.Tensor, width: int) -> torch.Tensor:
    """The teacher's token embedding in its `width` top principal directions (uncentred, so the mean
    direction that shifts every logit alike is kept). Its scale is kept too: shrunk to a fresh model's
    0.02, the first steps of a 3e-3 learning rate would wash the structure out."""
    embedding = teacher_embedding.detach().float()
    _, _, directions = torch.linalg.svd(embedding, full_matrices=False)
    projected: torch.Tensor = embedding @ directions[:width].T
    return projected


def new_draft(shape: ModelShape, teacher: PreTrainedModel, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    draft = LlamaForCausalLM(draft_config(shape, teacher.config))
    teacher_embedding = teacher.get_input_embeddings().weight
    assert isinstance(teacher_embedding, torch.Tensor)
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(projected_embedding(teacher_embedding, shape.hidden))
    return draft


def _save_atomic(value: dict[str, torch.Tensor], path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(value, tmp)
    tmp.replace(path)


def teacher_topk(
    teacher: PreTrainedModel,
    sampler: SequenceSampler,
    preset: DistillPreset,
    seed: int,
    folder: Path,
    progress: bool,
) -> dict[str, torch.Tensor]:
    """The teacher's top-k logits over `preset.teacher_batches` batches, one shard file per
    `shard_batches`; shards already on disk are reused, so a killed run loses at most one shard, and a
    longer run extends a shorter one. "seconds" holds each shard's compute time."""
    folder.mkdir(parents=True, exist_ok=True)
    shards = math.ceil(preset.teacher_batches / preset.shard_batches)
    bar = tqdm(total=preset.teacher_batches, desc="teacher logits", disable=not progress, dynamic_ncols=True)
    parts: list[dict[str, torch.Tensor]] = []
    for shard in range(shards):
        first = shard * preset.shard_batches
        steps = range(first, min(first + preset.shard_batches, preset.teacher_batches))
        path = folder / f"batches-{first:05d}-{steps.stop - 1:05d}.pt"
        if not path.exists():
            started = time.perf_counter()
            tokens, values, indices = [], [], []
            with torch.inference_mode():
                for step in steps:
                    batch = sampler.batch(seed + 1, step, preset.batch_size)
                    logits = teacher(batch[:, :-1]).logits
                    top = logits.float().topk(preset.top_k_logits, dim=-1)
                    tokens.append(batch)
                    values.append(top.values.half())
                    indices.append(top.indices.int())
                    bar.update(1)
            seconds = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
            part = {"tokens": torch.cat(tokens), "values": torch.cat(values), "indices": torch.cat(indices)}
            _save_atomic(part | {"seconds": seconds}, path)
        else:
            bar.update(len(steps))
        parts.append(torch.load(path))
    bar.close()
    return {
        key: torch.cat([part[key] for part in parts]) for key in ("tokens", "values", "indices", "seconds")
    }


def teacher_cache_folder(work_dir: Path, preset: DistillPreset, seed: int) -> Path:
    """Everything a cached batch depends on is in the name, so a changed preset never reuses stale logits."""
    shape = f"{preset.batch_size}x{preset.seq_len}-top{preset.top_k_logits}-per{preset.shard_batches}"
    return work_dir / f"teacher-seed{seed}-{shape}-files{preset.max_files or 'all'}"


def train_draft(
    teacher: PreTrainedModel,
    topk: dict[str, torch.Tensor],
    preset: DistillPreset,
    seed: int,
    checkpoint: Path,
    progress: bool,
) -> tuple[LlamaForCausalLM, StageLog]:
    """`preset.epochs` passes over the cached batches, shuffled per epoch as a pure function of the seed."""
    draft = new_draft(preset.draft, teacher, seed + 2)
    rows = topk["tokens"].shape[0]
    steps_per_epoch = rows // preset.batch_size

    def loss_at(step: int) -> torch.Tensor:
        epoch, within = divmod(step, steps_per_epoch)
        order = torch.randperm(rows, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        picked = order[within * preset.batch_size : (within + 1) * preset.batch_size]
        batch = topk["tokens"][picked]
        logits = draft(batch[:, :-1]).logits
        return distillation_loss(
            logits, topk["values"][picked], topk["indices"][picked], batch[:, 1:], preset.kl_weight
        )

    log = train_loop(
        "draft",
        draft,
        preset.epochs * steps_per_epoch,
        preset.lr,
        loss_at,
        checkpoint,
        preset.checkpoint_every,
        progress,
    )
    return draft, log


@dataclass
class DistillResult:
    draft_dir: Path
    teacher_dir: Path
    log: StageLog
    teacher_seconds: float
    teacher_tokens: int
    held_out: list[SourceFile]
    train_files: int


def load_teacher(folder: Path, dtype: torch.dtype) -> PreTrainedModel:
    from transformers import AutoModelForCausalLM

    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    model.eval().requires_grad_(False)
    return model


def save_draft(draft: LlamaForCausalLM, teacher_dir: Path, out_dir: Path) -> None:
    """bf16 safetensors plus the teacher's own tokenizer files, so the engine's same-tokenizer check passes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    draft.to(torch.bfloat16).save_pretrained(out_dir)  # type: ignore[arg-type]
    draft.float()
    (out_dir / "generation_config.json").unlink(missing_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (teacher_dir / name).is_file():
            shutil.copyfile(teacher_dir / name, out_dir / name)


def run_distillation(
    teacher_dir: Path,
    preset: DistillPreset,
    out_dir: Path,
    work_dir: Path,
    extra_roots: tuple[Path, ...] = (),
    seed: int = 0,
    progress: bool = True,
    include_stdlib: bool = True,
    teacher_dtype: torch.dtype = torch.bfloat16,
) -> DistillResult:
    work_dir.mkdir(parents=True, exist_ok=True)
    roots = ([stdlib_root()] if include_stdlib else []) + list(extra_roots)
    train_files, held_out = split_corpus(iter_source_files(roots))
    if preset.max_files is not None:
        train_files = train_files[: preset.max_files]
        held_out = held_out[: max(2, preset.max_files // 10)]
    tokenizer = Tokenizer.from_file(str(teacher_dir / "tokenizer.json"))
    teacher = load_teacher(teacher_dir, teacher_dtype)
    eos_id = teacher.config.eos_token_id
    eos_id = eos_id[0] if isinstance(eos_id, list) else eos_id
    end_of_text = tokenizer.token_to_id("<|endoftext|>")
    sampler = PlainCodeSampler(
        train_files, tokenizer, preset.seq_len, end_of_text if end_of_text is not None else eos_id
    )

    topk = teacher_topk(
        teacher, sampler, preset, seed, teacher_cache_folder(work_dir, preset, seed), progress
    )
    teacher_seconds = float(topk["seconds"].sum())  # compute time, summed over shards (cached ones too)
    draft, log = train_draft(
        teacher,
        topk,
        preset,
        seed,
        work_dir / f"draft-{preset.name}-{preset.teacher_batches}x{preset.epochs}-seed{seed}.ckpt",
        progress,
    )
    save_draft(draft, teacher_dir, out_dir)
    return DistillResult(
        out_dir,
        teacher_dir,
        log,
        teacher_seconds,
        int(topk["tokens"][:, 1:].numel()),
        held_out,
        len(train_files),
    )
