"""What "lossless" means below fp32: greedy speculative output may leave plain greedy output only at near-ties.

A verify over k + 1 positions and a single-token step compute the same logits with different kernels and
accumulation orders. fp32 avoids that by construction (the lean decoder computes a verify's rows as steps
would, `LeanLlamaDecoder.rows_as_steps`: a ~1e-6 difference flipped a token on an AMD EPYC); in bf16, int8,
int4 or W8A8 (and llama.cpp's quantized kernels) it is ~0.01-0.1 of a logit, so when the plain run's two best tokens
are that close the speculative run may pick the other one, and the two texts part ways from there. vLLM
documents the same limit for batched verification.

`first_divergence` finds where two greedy outputs part; `top2_margin` is the plain run's gap between its
best and second-best logit there. A divergence is a genuine near-tie when that gap is at most
`NEAR_TIE_MARGIN`; anything wider is a bug in the loop, not numerics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from engine.decoder import CausalDecoder
from engine.sequences import first_divergence

# Logit gap below which two candidates count as tied under low-precision kernels. Measured verify-vs-step
# logit differences: up to ~0.1 with the lean decoder in bf16 (bundled target); up to 0.53 with llama.cpp's
# Q4_1 kernels on SmolLM2-135M over 300 arbitrary tokens (its batch and single-token paths quantize the
# activations differently). A flip needs a gap no wider than the difference between the two runs.
NEAR_TIE_MARGIN = 0.5


def top2_margin(logits: torch.Tensor) -> float:
    """Best minus second-best logit of one row."""
    best = torch.topk(logits.float(), 2).values
    return float(best[0] - best[1])


@dataclass(frozen=True)
class Divergence:
    position: int  # index into the generated tokens
    margin: float  # the plain run's top-2 logit gap at that position (inf where it stopped, e.g. at EOS)

    @property
    def near_tie(self) -> bool:
        return self.margin <= NEAR_TIE_MARGIN


def greedy_divergence(
    plain_ids: Sequence[int], speculative_ids: Sequence[int], plain_margins: Sequence[float]
) -> Divergence | None:
    """Where speculative output leaves plain output, with the plain run's margin there; None if identical.

    `plain_margins[i]` is the top-2 margin of the logits that chose plain token i. A speculative run that
    ends earlier than the plain one (a stop string inside a draft) diverges where it ended.
    """
    position = first_divergence(plain_ids, speculative_ids)
    if position is None:
        return None
    margin = plain_margins[position] if position < len(plain_margins) else float("inf")
    return Divergence(position, margin)


class MarginRecorder:
    """A `CausalDecoder` wrapper that records the top-2 margin of the last row of every forward.

    In a plain greedy run each forward chooses one token, so `margins[i]` belongs to generated token i.
    """

    def __init__(self, inner: CausalDecoder) -> None:
        self.inner = inner
        self.vocab_size = inner.vocab_size
        self.max_length = inner.max_length
        self.device = getattr(inner, "device", torch.device("cpu"))
        self.margins: list[float] = []

    @property
    def cached_tokens(self) -> list[int]:
        return self.inner.cached_tokens

    def forward(self, token_ids: list[int]) -> torch.Tensor:
        logits = self.inner.forward(token_ids)
        self.margins.append(top2_margin(logits[-1]))
        return logits

    def prefill(self, token_ids: list[int]) -> None:
        """The prompt chooses no token: append it without recording."""
        prefill = getattr(self.inner, "prefill", None)
        if prefill is not None:
            prefill(token_ids)
        else:
            self.inner.forward(token_ids)

    def crop(self, length: int) -> None:
        self.inner.crop(length)
