"""A `CausalDecoder` over any Hugging Face causal LM, with transformers' `DynamicCache`.

Covers what the lean path does not (GPT-2 family and others). transformers 5.x names the cache argument
`cache=` and its `DynamicCache.crop` takes a NEGATIVE count of tokens to drop (a positive size raises).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from engine.decoder import CausalDecoder


def context_length(model: PreTrainedModel) -> int:
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048


class HFDecoder:
    def __init__(self, model: PreTrainedModel, max_length: int | None = None) -> None:
        from transformers import DynamicCache

        self.model = model
        window = context_length(model)
        self.max_length = min(max_length, window) if max_length else window
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.device: torch.device = model.device
        self._cache = DynamicCache(config=model.config)
        self._tokens: list[int] = []

    @property
    def cached_tokens(self) -> list[int]:
        return list(self._tokens)

    def crop(self, length: int) -> None:
        drop = len(self._tokens) - max(0, length)
        if drop > 0:
            self._cache.crop(-drop)
            del self._tokens[len(self._tokens) - drop :]

    def forward(self, token_ids: list[int]) -> torch.Tensor:
        return self._run(token_ids, keep_logits=0)

    def prefill(self, token_ids: list[int]) -> None:
        """Append prompt tokens; only one row of logits is computed because nobody reads them."""
        self._run(token_ids, keep_logits=1)

    @torch.inference_mode()
    def _run(self, token_ids: list[int], keep_logits: int) -> torch.Tensor:
        count = len(token_ids)
        if count == 0:
            return torch.empty(0, self.vocab_size)
        start = len(self._tokens)
        if start + count > self.max_length:
            raise ValueError(
                f"cache holds {self.max_length} positions; {start} cached + {count} new do not fit"
            )
        ids = torch.tensor([token_ids], device=self.device)
        positions = torch.arange(start, start + count, device=self.device)[None]
        out = self.model(
            input_ids=ids,
            position_ids=positions,
            cache=self._cache,
            use_cache=True,
            logits_to_keep=keep_logits,
        )
        self._tokens.extend(token_ids)
        logits: torch.Tensor = out.logits[0].float()
        return logits


def make_decoder(model: PreTrainedModel, max_length: int | None = None) -> CausalDecoder:
    """The lean static-cache path for Llama-family checkpoints, the generic HF path for everything else."""
    from engine.lean import LeanLlamaDecoder, supports_lean

    if supports_lean(model):
        return LeanLlamaDecoder(model, max_length)
    return HFDecoder(model, max_length)
