"""Held-out measurements for the model card: loss against an n-gram baseline, FIM exact match, draft agreement."""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from transformers import PreTrainedModel

from engine.tokens import EOS, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX
from engine.train.corpus import SourceFile
from engine.train.tokenizer import special_id


def held_out_windows(
    tokenizer: Tokenizer, files: list[SourceFile], seq_len: int, max_windows: int
) -> torch.Tensor:
    """Non-overlapping plain-code windows of seq_len + 1 tokens, taken round-robin across held-out files."""
    per_file = [tokenizer.encode(f.text).ids for f in files]
    windows: list[list[int]] = []
    offset = 0
    while len(windows) < max_windows and any(len(ids) >= offset + seq_len + 1 for ids in per_file):
        for ids in per_file:
            if len(ids) >= offset + seq_len + 1 and len(windows) < max_windows:
                windows.append(ids[offset : offset + seq_len + 1])
        offset += seq_len + 1
    if not windows:
        raise ValueError("held-out files are too short for one evaluation window")
    return torch.tensor(windows, dtype=torch.long)


@torch.inference_mode()
def mean_cross_entropy(model: PreTrainedModel, windows: torch.Tensor, batch_size: int = 4) -> float:
    total, count = 0.0, 0
    for start in range(0, len(windows), batch_size):
        batch = windows[start : start + batch_size]
        logits = model(batch[:, :-1]).logits.float()
        total += F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum").item()
        count += batch[:, 1:].numel()
    return total / count


@torch.inference_mode()
def greedy_agreement(target: PreTrainedModel, draft: PreTrainedModel, windows: torch.Tensor) -> float:
    """alpha for greedy drafting: how often the draft's argmax equals the target's, teacher-forced on real code."""
    agree, count = 0, 0
    for start in range(0, len(windows), 4):
        batch = windows[start : start + 4, :-1]
        same = target(batch).logits.argmax(-1) == draft(batch).logits.argmax(-1)
        agree += int(same.sum())
        count += same.numel()
    return agree / count


def ngram_cross_entropy(train_ids: np.ndarray, windows: torch.Tensor, vocab_size: int) -> float:
    """Held-out cross-entropy (nats) of an interpolated trigram model (Jelinek-Mercer, add-one unigram).

    The baseline the target must clearly beat: same tokens, same held-out windows.
    """
    weights = (0.6, 0.3, 0.1)
    ids = train_ids.astype(np.int64)
    unigram = (np.bincount(ids, minlength=vocab_size) + 1.0) / (len(ids) + vocab_size)

    def table(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        unique, counts = np.unique(keys, return_counts=True)
        return unique, counts

    def lookup(unique: np.ndarray, counts: np.ndarray, keys: np.ndarray) -> np.ndarray:
        at = np.searchsorted(unique, keys).clip(0, len(unique) - 1)
        return np.where(unique[at] == keys, counts[at], 0).astype(np.float64)

    v = vocab_size
    bigrams = table(ids[:-1] * v + ids[1:])
    trigrams = table((ids[:-2] * v + ids[1:-1]) * v + ids[2:])
    contexts1 = table(ids[:-1])
    contexts2 = table(ids[:-2] * v + ids[1:-1])

    seq = windows.numpy().astype(np.int64)
    prev2, prev1, nxt = seq[:, :-2].ravel(), seq[:, 1:-1].ravel(), seq[:, 2:].ravel()
    c2 = lookup(*contexts2, prev2 * v + prev1)
    c1 = lookup(*contexts1, prev1)
    p3 = np.divide(lookup(*trigrams, (prev2 * v + prev1) * v + nxt), c2, out=np.zeros_like(c2), where=c2 > 0)
    p2 = np.divide(lookup(*bigrams, prev1 * v + nxt), c1, out=np.zeros_like(c1), where=c1 > 0)
    probs = weights[0] * p3 + weights[1] * p2 + weights[2] * unigram[nxt]
    return float(-np.log(probs).mean())


@dataclass(frozen=True)
class FimCase:
    path: str
    prefix: str
    middle: str
    suffix: str


def fim_cases(files: list[SourceFile], limit: int, context_chars: int = 1200) -> list[FimCase]:
    """One masked line per held-out function: the middle of its body (not its first line, not blank)."""
    cases: list[FimCase] = []
    for source in files:
        try:
            tree = ast.parse(source.text)
        except SyntaxError:
            continue
        lines = source.text.splitlines(keepends=True)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.end_lineno is None:
                continue
            body = [n for n in range(node.body[0].lineno, node.end_lineno + 1) if lines[n - 1].strip()]
            if len(body) < 3:
                continue
            line_no = body[len(body) // 2]
            line = lines[line_no - 1]
            indent = len(line) - len(line.lstrip())
            start = sum(len(x) for x in lines[: line_no - 1]) + indent
            end = start + len(line.rstrip("\n")) - indent
            cases.append(
                FimCase(
                    source.path,
                    source.text[max(0, start - context_chars) : start],
                    source.text[start:end],
                    source.text[end : end + context_chars // 3],
                )
            )
            if len(cases) >= limit:
                return cases
    return cases


@torch.inference_mode()
def fim_exact_match(
    model: PreTrainedModel, tokenizer: Tokenizer, cases: list[FimCase], max_new_tokens: int = 40
) -> float:
    """Share of masked lines the target reproduces exactly (SPM prompt, greedy, up to end of text or newline)."""
    if not cases:
        return float("nan")

    def ids_of(token: str) -> int:
        return special_id(tokenizer, token)

    eos = ids_of(EOS)
    hits = 0
    budget = model.config.max_position_embeddings - max_new_tokens - 3  # 3 FIM tokens
    for case in cases:
        # Fit the window by cutting the suffix's end and the prefix's start, never the FIM tokens.
        suffix = tokenizer.encode(case.suffix).ids[: budget // 3]
        prefix = tokenizer.encode(case.prefix).ids[-(budget - len(suffix)) :]
        prompt = [ids_of(FIM_SUFFIX), *suffix, ids_of(FIM_PREFIX), *prefix, ids_of(FIM_MIDDLE)]
        output = model.generate(  # type: ignore[operator]
            torch.tensor([prompt]),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=eos,
        )
        text = tokenizer.decode(output[0, len(prompt) :].tolist(), skip_special_tokens=True)
        hits += text.split("\n")[0].strip() == case.middle.strip()
    return hits / len(cases)


@torch.inference_mode()
def sample_completions(
    model: PreTrainedModel,
    tokenizer: Tokenizer,
    files: list[SourceFile],
    count: int = 3,
    max_new_tokens: int = 60,
) -> list[tuple[str, str]]:
    """(prompt tail, greedy continuation) pairs from held-out files, for a human look at the card."""
    samples = []
    for source in files[:count]:
        cut = source.text.find("\ndef ")
        prompt_text = source.text[: (cut if cut > 0 else len(source.text) // 2) + 1][-800:]
        ids = tokenizer.encode(prompt_text).ids
        output = model.generate(  # type: ignore[operator]
            torch.tensor([ids]),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=tokenizer.token_to_id(EOS),
            pad_token_id=tokenizer.token_to_id(EOS),
        )
        samples.append((prompt_text[-200:], tokenizer.decode(output[0, len(ids) :].tolist())))
    return samples
