"""The one small interface every drafter implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class Draft:
    token_ids: list[int]
    # Per drafted token, the drafter's probability distribution over the vocabulary ([k, vocab], float32),
    # or None for a deterministic drafter: verification then treats q as one-hot on the drafted token.
    draft_probs: torch.Tensor | None = None
    drafter: str = ""  # name of the drafter that produced it (the hybrid reports the one it picked)


class Drafter(Protocol):
    name: str

    def propose(self, context_ids: list[int], max_tokens: int) -> Draft:
        """Propose up to `max_tokens` tokens to follow `context_ids` (prompt + accepted tokens)."""
        ...

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        """Called after verification; `context_ids` now ends with the accepted tokens and the target's token."""
        ...
