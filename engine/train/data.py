"""Training sequences: packed windows of source files, half of them FIM-transformed in PSM or SPM order.

Every batch is a pure function of (seed, step), so a resumed run sees exactly the batches it would have seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tokenizers import Tokenizer

from engine.tokens import EOS, FILE_SEP, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX
from engine.train.corpus import SourceFile
from engine.train.tokenizer import special_id

CHARS_PER_TOKEN = 3.2  # measured on the stdlib with the 8k byte-level BPE; sizes the character windows


@dataclass(frozen=True)
class FimParts:
    prefix: str
    middle: str
    suffix: str


def split_for_fim(text: str, rng: np.random.Generator) -> FimParts:
    """Pick a middle span at random character positions; short middles dominate, as in editor completions."""
    n = len(text)
    start = int(rng.integers(0, max(1, n)))
    max_middle = max(1, min(n - start, int(rng.choice([40, 120, 400]))))
    length = int(rng.integers(1, max_middle + 1))
    return FimParts(text[:start], text[start : start + length], text[start + length :])


class SequenceSampler:
    def __init__(self, files: list[SourceFile], tokenizer: Tokenizer, seq_len: int, fim_rate: float = 0.5):
        if not files:
            raise ValueError("the training corpus is empty")
        self.files = files
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.fim_rate = fim_rate
        self.weights = np.array([len(f.text) for f in files], dtype=np.float64)
        self.weights /= self.weights.sum()
        self.special = {
            t: special_id(tokenizer, t) for t in (EOS, FILE_SEP, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)
        }

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids if text else []

    def _window(self, rng: np.random.Generator, fraction: float) -> tuple[SourceFile, int, int]:
        """(file, start, end) of a character window that begins at a line start."""
        source = self.files[int(rng.choice(len(self.files), p=self.weights))]
        span = int(self.seq_len * CHARS_PER_TOKEN * fraction)
        if len(source.text) <= span:
            return source, 0, len(source.text)
        start = source.text.rfind("\n", 0, int(rng.integers(0, len(source.text) - span))) + 1
        return source, start, start + span

    def example(self, rng: np.random.Generator) -> list[int]:
        s = self.special
        use_fim = rng.random() < self.fim_rate
        # A FIM window must fit whole, or the packing would cut off the middle it is there to teach.
        fraction = float(rng.uniform(0.3, 0.85)) if use_fim else 1.0
        source, start, end = self._window(rng, fraction)
        text = source.text[start:end]
        header = [s[FILE_SEP], *self._encode(source.path + "\n")] if start == 0 else []
        if not use_fim:
            return header + self._encode(text) + ([s[EOS]] if end >= len(source.text) else [])
        parts = split_for_fim(text, rng)
        prefix, suffix, middle = (
            self._encode(parts.prefix),
            self._encode(parts.suffix),
            self._encode(parts.middle),
        )
        if rng.random() < 0.5:  # PSM
            body = [s[FIM_PREFIX], *prefix, s[FIM_SUFFIX], *suffix, s[FIM_MIDDLE], *middle, s[EOS]]
        else:  # SPM
            body = [s[FIM_SUFFIX], *suffix, s[FIM_PREFIX], *prefix, s[FIM_MIDDLE], *middle, s[EOS]]
        return header + body

    def sequence(self, rng: np.random.Generator) -> list[int]:
        """Examples packed back to back until seq_len + 1 tokens (inputs and shifted labels)."""
        tokens: list[int] = []
        while len(tokens) < self.seq_len + 1:
            tokens.extend(self.example(rng))
        return tokens[: self.seq_len + 1]

    def batch(self, seed: int, step: int, batch_size: int) -> torch.Tensor:
        rng = np.random.default_rng([seed, step])
        return torch.tensor([self.sequence(rng) for _ in range(batch_size)], dtype=torch.long)
