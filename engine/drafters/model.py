"""A small draft model proposing tokens autoregressively from its own KV cache."""

from __future__ import annotations

import torch

from engine.decoder import CausalDecoder, PrefillingDecoder
from engine.drafters.base import Draft, DraftPlan
from engine.drafters.caps import CONFIDENCE_STOP, MAX_LENGTH
from engine.sequences import common_prefix_length
from engine.verify import warp_logits

USUAL_FEED = 2  # tokens a round's first draft step feeds after the model's own last round (the target's)


class ModelDrafter:
    """Drafts with a `CausalDecoder`, greedily (temperature 0) or by sampling from the warped distribution.

    Each round it syncs the decoder's cache to the context (crop to the common prefix, feed the rest), then
    drafts one token per forward. It stops early when its confidence (the top probability) falls below
    `confidence_threshold`: a token the draft itself doubts is likely to be rejected, and on CPU every
    extra verified position costs target time. After verification `observe` crops the rejected tokens.

    When sampling, `Draft.draft_probs` holds the warped distributions the tokens were drawn from (the q of
    Leviathan et al.), warped with the same temperature/top-k/top-p as the target.
    """

    name = "model"

    def __init__(
        self,
        decoder: CausalDecoder,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
        confidence_threshold: float = CONFIDENCE_STOP,
        max_tokens: int = MAX_LENGTH["model"],
        min_tokens: int = 1,
    ) -> None:
        if not 0.0 <= confidence_threshold <= 1.0:
            raise ValueError(f"confidence_threshold must be in [0, 1], got {confidence_threshold}")
        self.decoder = decoder
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.generator = generator
        self.confidence_threshold = confidence_threshold
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self._view_start = 0  # context position of the decoder's first cached token (left truncation)
        self._draft_base: int | None = None  # cached context tokens when the pending draft began
        self._cached_len = 0  # tokens in the decoder's cache after the pending draft

    def plans(self, context_ids: list[int]) -> list[DraftPlan]:
        view = context_ids[self._window_start(len(context_ids), 1) :]
        cached = min(common_prefix_length(self.decoder.cached_tokens, view), len(view) - 1)
        return [DraftPlan(self.name, copy_found=False, catch_up=max(0, len(view) - cached - USUAL_FEED))]

    def _window_start(self, context_len: int, k: int) -> int:
        """Left-truncate when the context plus the draft does not fit the decoder's window.

        The start moves in steps of a quarter window, so the cache stays reusable between steps.
        """
        excess = context_len + k - 1 - self.decoder.max_length
        if excess <= 0:
            return 0
        stride = max(1, self.decoder.max_length // 4)
        return -(-excess // stride) * stride

    @torch.inference_mode()
    def _sync(self, view: list[int]) -> torch.Tensor:
        """Make the cache hold `view[:-1]` or more of it, feed the rest; return the logits after `view`."""
        cached = self.decoder.cached_tokens
        keep = min(common_prefix_length(cached, view), len(view) - 1)
        if keep < len(cached):
            self.decoder.crop(keep)
        missed = view[keep:]
        if len(missed) > USUAL_FEED and isinstance(self.decoder, PrefillingDecoder):
            # Catching up on a prompt: only the last position's logits are read, so the rest skip the
            # vocabulary projection (151,936 wide for Qwen; a quantized one is slow over many rows).
            self.decoder.prefill(missed[:-1])
            missed = missed[-1:]
        return self.decoder.forward(missed)[-1]

    @torch.inference_mode()
    def propose(self, context_ids: list[int], max_tokens: int, plan: DraftPlan | None = None) -> Draft:
        k = min(max_tokens, self.max_tokens, self.decoder.max_length // 2)  # leave room for context
        if k <= 0 or not context_ids:
            return Draft(token_ids=[], draft_probs=None, drafter=self.name)
        self._view_start = self._window_start(len(context_ids), k)
        view = context_ids[self._view_start :]
        logits = self._sync(view)
        self._draft_base = len(view)
        sampling = self.temperature > 0
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(k):
            if sampling:
                probs = warp_logits(logits, self.temperature, self.top_k, self.top_p)
                token = int(torch.multinomial(probs, 1, generator=self.generator))
                confidence = float(probs.max())
            elif self.confidence_threshold > 0.0:
                top = torch.softmax(logits, dim=-1).max(dim=-1)
                token, confidence = int(top.indices), float(top.values)
            else:  # no stopping rule: the argmax alone is enough
                token, confidence = int(logits.argmax()), 1.0
            if i >= self.min_tokens and confidence < self.confidence_threshold:
                break
            tokens.append(token)
            if sampling:
                rows.append(probs)
            if i + 1 < k:
                logits = self.decoder.forward([token])[-1]
        # The last drafted token is only fed when drafting stopped early on low confidence.
        self._cached_len = len(view) + (len(tokens) if len(tokens) < k else k - 1)
        draft_probs = torch.stack(rows) if rows else None
        return Draft(token_ids=tokens, draft_probs=draft_probs, drafter=self.name)

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        """Roll the cache back to the context plus the accepted drafts, dropping rejected keys and values."""
        if self._draft_base is None:
            return  # this drafter did not draft this round
        keep = self._draft_base + num_accepted
        if self._cached_len > keep:
            self.decoder.crop(keep)
        self._draft_base = None
