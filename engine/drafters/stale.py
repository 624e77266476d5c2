"""Re-verifying an earlier completion: when the user types into a shown suggestion (or the same spot is
asked again), what the earlier completion still predicts is proposed whole, so one target forward can
confirm many tokens instead of regenerating them one by one."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine.drafters.base import Draft, DraftPlan
from engine.drafters.caps import STALE_LENGTH


class StaleCompletionDrafter:
    """Proposes the unseen remainder of `completion_ids`, the tokens an earlier completion predicted
    after the cursor (the caller drops the part the user has typed since).

    Alignment: the longest overlap between the end of the context and the earlier completion; an overlap
    of fewer than `min_overlap` tokens only counts when it is the completion's head (the first generated
    tokens). In the first round nothing has been generated yet and a FIM prompt ends in a special token,
    so the whole completion is proposed from its start.

    With token healing the typed word is generated again, and its last token may run past the cursor
    ("subprocess" for a typed "subp"): `realign` then re-encodes the completion's text after that overshoot,
    so its tokens start on the context's token boundary (needs `text` and `encode`).
    """

    name = "stale"

    def __init__(
        self,
        completion_ids: Sequence[int],
        *,
        min_overlap: int = 2,
        max_overlap: int = 16,
        max_tokens: int = STALE_LENGTH,
        text: str = "",
        encode: Callable[[str], list[int]] | None = None,
    ) -> None:
        self.completion = list(completion_ids)
        self.text = text
        self.encode = encode
        self.min_overlap = min_overlap
        self.max_overlap = max_overlap
        self.max_tokens = max_tokens
        self._prompt_len: int | None = None  # context length at the first round
        self._progress = 0  # completion position aligned last time; alignment prefers to move forward

    def realign(self, overshoot: str, context_len: int) -> None:
        """The forced prefix ended `overshoot` past the cursor, when the context had `context_len` tokens."""
        if self.encode is None or not self.text.startswith(overshoot):
            return  # no text to re-encode, or the earlier completion disagrees with what was generated
        if overshoot:
            self.completion = self.encode(self.text[len(overshoot) :])
        self._prompt_len = context_len
        self._progress = 0

    def align(self, context_ids: list[int]) -> tuple[int, int] | None:
        """(position in the completion where the context leaves off, overlap length), or None."""
        if self._prompt_len is None:
            self._prompt_len = len(context_ids)
        completion = self.completion
        if len(context_ids) == self._prompt_len:
            return 0, 0
        for m in range(min(self.max_overlap, len(completion), len(context_ids)), 0, -1):
            tail = context_ids[-m:]
            if m < self.min_overlap:
                if completion[:m] == tail:
                    return m, m
                continue
            ends = [j for j in range(m, len(completion) + 1) if completion[j - m : j] == tail]
            if ends:
                forward = [j for j in ends if j >= self._progress]
                return (forward[0] if forward else ends[0]), m
        return None

    def _remainder(self, context_ids: list[int], max_tokens: int) -> tuple[list[int], int]:
        aligned = self.align(context_ids)
        if aligned is None:
            return [], 0
        start, overlap = aligned
        self._progress = start
        return self.completion[start : start + min(max_tokens, self.max_tokens)], overlap

    def plans(self, context_ids: list[int]) -> list[DraftPlan]:
        tokens, overlap = self._remainder(context_ids, self.max_tokens)
        return [DraftPlan(self.name, copy_found=True, match_len=overlap)] if tokens else []

    def propose(self, context_ids: list[int], max_tokens: int, plan: DraftPlan | None = None) -> Draft:
        tokens = self._remainder(context_ids, max_tokens)[0]
        return Draft(token_ids=tokens, draft_probs=None, drafter=self.name)

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        """Alignment is recomputed from the context each round."""
