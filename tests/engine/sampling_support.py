"""What the sampling-law tests share: a decoder that memoises the logits of every prefix, so that thousands of
seeded trials through the speculative loop stay cheap, and the chi-square check of the tokens they emitted
against the exact joint law (`test_drafters_sampling_loop` holds the negative control that shows it can
fail)."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import torch


class MemoDecoder:
    """Test-only `CausalDecoder`: logits for each prefix come from one full forward, computed once."""

    def __init__(self, model: Any, max_length: int) -> None:
        self.model = model
        self.vocab_size = int(model.config.vocab_size)
        self.max_length = max_length
        self.tokens: list[int] = []
        self.memo: dict[tuple[int, ...], torch.Tensor] = {}

    @property
    def cached_tokens(self) -> list[int]:
        return list(self.tokens)

    def next_logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        if prefix not in self.memo:
            with torch.inference_mode():
                self.memo[prefix] = self.model(torch.tensor([prefix])).logits[0, -1].float()
        return self.memo[prefix]

    def forward(self, token_ids: list[int]) -> torch.Tensor:
        rows = []
        for token in token_ids:
            self.tokens.append(token)
            rows.append(self.next_logits(tuple(self.tokens)))
        return torch.stack(rows)

    def crop(self, length: int) -> None:
        del self.tokens[length:]


def chi_square_against(counts: Counter[tuple[int, ...]], joint: dict[tuple[int, ...], float]) -> None:
    trials = sum(counts.values())
    statistic, buckets = 0.0, 0
    pooled_expected, pooled_observed = 0.0, 0
    for seq, prob in joint.items():
        if prob == 0.0:
            assert counts[seq] == 0, f"emitted {seq}, which the warped target gives probability 0"
        elif trials * prob < 5:
            pooled_expected += trials * prob
            pooled_observed += counts[seq]
        else:
            statistic += (counts[seq] - trials * prob) ** 2 / (trials * prob)
            buckets += 1
    if pooled_expected > 0:
        statistic += (pooled_observed - pooled_expected) ** 2 / pooled_expected
        buckets += 1
    df = buckets - 1
    threshold = df * (1 - 2 / (9 * df) + 3.0902 * math.sqrt(2 / (9 * df))) ** 3
    assert statistic < threshold, f"chi-square {statistic:.1f} over {df} degrees of freedom"
