"""Drafting from the text after the cursor: a completion often ends by running into code that is already
there (closing a call, reaching the next line), so once the last tokens match a spot in the suffix, the
suffix's next tokens are a free draft. The stop rules later trim what duplicates the suffix."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.drafters.base import Draft, DraftPlan
from engine.drafters.caps import MAX_LENGTH
from engine.drafters.lookup import NgramIndex, continue_from


class SuffixDrafter:
    """n-gram match of the context's tail against the suffix tokens; the match nearest the cursor wins."""

    name = "suffix"

    def __init__(
        self,
        suffix_ids: Sequence[int],
        *,
        max_ngram: int = 5,
        min_ngram: int = 2,
        max_tokens: int = MAX_LENGTH["copy"],
        stop_ids: Iterable[int] = (),
    ) -> None:
        self.max_ngram = max_ngram
        self.max_tokens = max_tokens
        self.stop_ids = frozenset(stop_ids)
        # "first": the earliest occurrence, i.e. the one closest to the cursor, is where completions run in.
        self._index = NgramIndex(min_ngram, max_ngram, keep="first")
        self._index.extend(suffix_ids)

    def _match(self, context_ids: list[int], max_tokens: int) -> tuple[list[int], int]:
        found = self._index.find(context_ids[-self.max_ngram :])
        if found is None:
            return [], 0
        start, ngram = found
        limit = min(max_tokens, self.max_tokens)
        return continue_from(self._index.tokens, start, limit, self.stop_ids), ngram

    def plans(self, context_ids: list[int]) -> list[DraftPlan]:
        tokens, ngram = self._match(context_ids, self.max_tokens)
        return [DraftPlan(self.name, copy_found=True, match_len=ngram)] if tokens else []

    def propose(self, context_ids: list[int], max_tokens: int, plan: DraftPlan | None = None) -> Draft:
        return Draft(token_ids=self._match(context_ids, max_tokens)[0], draft_probs=None, drafter=self.name)

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        """Stateless between rounds."""
