"""A model together with its own KV cache, addressed by position.

Both the lean Llama path and the generic Hugging Face path implement `CausalDecoder`; the speculative loop,
the baseline and the draft-model drafter only ever talk to this protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from engine.api import CancelToken


class CausalDecoder(Protocol):
    vocab_size: int
    max_length: int  # positions the cache can hold (the model's context window, possibly capped)

    @property
    def cached_tokens(self) -> list[int]:
        """Token ids whose keys and values are in the cache, in order."""
        ...

    def forward(self, token_ids: list[int]) -> torch.Tensor:
        """Append `token_ids` after the cached ones; return float32 logits of shape [len(token_ids), vocab]."""
        ...

    def crop(self, length: int) -> None:
        """Keep only the first `length` cached positions: the rollback after a rejected draft."""
        ...


@runtime_checkable
class PrefillingDecoder(CausalDecoder, Protocol):
    """A decoder that can fill its cache without computing logits (skips the vocabulary projection)."""

    def prefill(self, token_ids: list[int]) -> None: ...


@runtime_checkable
class InterruptiblePrefill(Protocol):
    """A decoder whose prefill can stop part-way, keeping what it computed (`engine.generation.sync_cache`)."""

    def prefill_interruptibly(self, token_ids: list[int], should_stop: Callable[[], bool]) -> int:
        """Prefill `token_ids` (no logits) until `should_stop()`; return how many are now cached."""
        ...


@runtime_checkable
class InterruptibleForward(Protocol):
    """A decoder whose forward can stop between layers: a cancel then waits for one layer, not a whole
    forward (~90 ms for a Qwen2.5-Coder-0.5B verify on one core). A stopped forward caches nothing."""

    def forward_unless(self, token_ids: list[int], should_stop: Callable[[], bool]) -> torch.Tensor | None:
        """`forward(token_ids)`, or None (and the cache as it was) once `should_stop()` before a layer."""
        ...


def forward_or_cancel(
    decoder: CausalDecoder, token_ids: list[int], cancel: CancelToken | None
) -> torch.Tensor | None:
    """The logits of `token_ids`, or None when `cancel` fired during the forward (checked between layers
    where the decoder can, else only before it)."""
    if cancel is None:
        return decoder.forward(token_ids)
    if cancel.cancelled:
        return None
    if isinstance(decoder, InterruptibleForward):
        return decoder.forward_unless(token_ids, lambda: cancel.cancelled)
    return decoder.forward(token_ids)


@runtime_checkable
class CacheCloningDecoder(CausalDecoder, Protocol):
    """A decoder that can make another over the same weights with a cache of its own (empty)."""

    def with_own_cache(self) -> CausalDecoder: ...


@runtime_checkable
class PlacedDecoder(CausalDecoder, Protocol):
    """A decoder whose tensors live on a known device (where a sampling generator must live too)."""

    device: torch.device


def device_of(decoder: CausalDecoder) -> torch.device:
    return decoder.device if isinstance(decoder, PlacedDecoder) else torch.device("cpu")
