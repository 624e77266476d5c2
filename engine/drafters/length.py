"""The default draft-length policy, used when the caller supplies no `DraftLengthPolicy`.

Copied drafts (lookup, suffix) are long: they cost nothing to produce, and one wide target forward
confirms many tokens when they hold. A stale completion is proposed whole, to be re-verified in one
pass. Model drafts are short and adapt to how much was accepted recently, with the schedule transformers
uses for assisted generation (+2 after a fully accepted draft, -1 otherwise); the model drafter also
stops on its own when its confidence drops.
"""

from __future__ import annotations

from engine.api import DraftContext


class AdaptiveDraftLength:
    """Implements `engine.api.DraftLengthPolicy`; the loop that owns it reports each round to `observe`."""

    def __init__(
        self,
        *,
        model_start: int = 6,
        model_min: int = 2,
        model_max: int = 16,
        copy_start: int = 16,
        copy_min: int = 16,
        copy_max: int = 32,
        stale_max: int = 64,
    ) -> None:
        if not 1 <= model_min <= model_start <= model_max:
            raise ValueError("need 1 <= model_min <= model_start <= model_max")
        if not 1 <= copy_min <= copy_start <= copy_max:
            raise ValueError("need 1 <= copy_min <= copy_start <= copy_max")
        self.model_min, self.model_max = model_min, model_max
        self.copy_min, self.copy_max = copy_min, copy_max
        self.stale_max = stale_max
        self.model_tokens = model_start
        self.copy_tokens = copy_start

    def max_draft_tokens(self, ctx: DraftContext) -> int:
        if ctx.drafter == "stale":
            return self.stale_max
        if ctx.copy_found or ctx.drafter in ("lookup", "suffix"):
            return self.copy_tokens
        return self.model_tokens

    def observe(self, drafter: str, num_drafted: int, num_accepted: int) -> None:
        """Grow after a fully accepted draft, shrink after a rejection."""
        if num_drafted <= 0:
            return
        all_accepted = num_accepted == num_drafted
        if drafter == "model":
            step = 2 if all_accepted else -1
            self.model_tokens = min(self.model_max, max(self.model_min, self.model_tokens + step))
        elif drafter in ("lookup", "suffix"):
            step = 8 if all_accepted else -4
            self.copy_tokens = min(self.copy_max, max(self.copy_min, self.copy_tokens + step))
