"""Prompt-lookup drafting: code repeats itself, so the tokens that followed the same n-gram earlier are a
free draft. Searches the context (prompt + accepted tokens) and extra token sequences (other open files).

The context is indexed incrementally (a dict from n-gram to its most recent end position), so a round
costs a few dict look-ups plus indexing the tokens accepted since the last round, not a rescan.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.drafters.base import Draft, DraftPlan
from engine.drafters.caps import MAX_LENGTH


class NgramIndex:
    """Maps every n-gram (min_n <= n <= max_n) of a growing token sequence to where its continuation starts.

    `keep="last"` remembers the most recent occurrence, `keep="first"` the earliest. Only n-grams followed by
    at least one token are indexed, so the query (the sequence's own tail) never matches itself.
    """

    def __init__(self, min_n: int, max_n: int, keep: str = "last") -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        if keep not in ("last", "first"):
            raise ValueError(f"keep must be 'last' or 'first', got {keep!r}")
        self.min_n = min_n
        self.max_n = max_n
        self._keep_last = keep == "last"
        self.tokens: list[int] = []
        self._ends: dict[tuple[int, ...], int] = {}
        self._indexed_until = 0  # n-grams ending at positions < this are indexed

    def reset(self, tokens: Sequence[int]) -> None:
        self.tokens = []
        self._ends = {}
        self._indexed_until = 0
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        self.tokens.extend(tokens)
        seq = self.tokens
        last_end = len(seq) - 1  # an n-gram ending at `end` is indexed once a token follows it
        for n in range(self.min_n, self.max_n + 1):
            first_end = max(self._indexed_until, n)
            if first_end > last_end:
                continue
            # zip builds the n-gram tuples in C: the j-th one is seq[first_end - n + j : first_end + j].
            window = seq[first_end - n : last_end]
            grams = zip(*(window[i:] for i in range(n)), strict=False)  # shifted copies: lengths differ
            positions = range(first_end, last_end + 1)
            if self._keep_last:
                self._ends.update(zip(grams, positions, strict=True))
            else:
                for gram, end in zip(grams, positions, strict=True):
                    self._ends.setdefault(gram, end)
        self._indexed_until = max(self._indexed_until, last_end + 1)

    def sync(self, tokens: list[int]) -> None:
        """Make the index describe `tokens`: extend it when they only grew (generation), else rebuild it.

        A rebuild costs about a millisecond per thousand tokens, once per keystroke; rebuilding (rather
        than patching) keeps the index a function of the tokens alone, so a seeded call is reproducible.
        """
        known = len(self.tokens)
        if len(tokens) >= known and tokens[:known] == self.tokens:
            self.extend(tokens[known:])
        else:
            self.reset(tokens)

    def find(self, tail: Sequence[int]) -> tuple[int, int] | None:
        """Longest n-gram at the end of `tail` that occurs in the index: (continuation start, n), or None."""
        for n in range(min(self.max_n, len(tail)), self.min_n - 1, -1):
            end = self._ends.get(tuple(tail[len(tail) - n :]))
            if end is not None:
                return end, n
        return None


def continue_from(
    seq: Sequence[int], start: int, max_tokens: int, stop_ids: frozenset[int], *, periodic: bool = False
) -> list[int]:
    """Up to `max_tokens` tokens of `seq` from `start`, ending before any stop id.

    With `periodic`, `seq` is the context itself: when the copy reaches its end it keeps copying from what
    it has just produced, so a pattern that repeats up to the cursor (`0, 0, 0,`) continues with its period.
    """
    out: list[int] = []
    length = len(seq)
    end = start + max_tokens if periodic else min(start + max_tokens, length)
    for pos in range(start, end):
        token = seq[pos] if pos < length else out[pos - length]
        if token in stop_ids:
            break
        out.append(token)
    return out


@dataclass
class _Match:
    tokens: list[int]
    ngram: int
    source: str  # "context" or "extra"


class PromptLookupDrafter:
    """n-gram lookup over context and extra sequences; longer n-grams win, then the context, then recency."""

    name = "lookup"

    def __init__(
        self,
        extra_sequences: Sequence[Sequence[int]] = (),
        *,
        max_ngram: int = 5,
        min_ngram: int = 2,
        max_tokens: int = MAX_LENGTH["copy"],
        stop_ids: Iterable[int] = (),
    ) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.max_tokens = max_tokens
        self.stop_ids = frozenset(stop_ids)
        self._context = NgramIndex(min_ngram, max_ngram, keep="last")
        self._extras: list[NgramIndex] = []
        for seq in extra_sequences:
            index = NgramIndex(min_ngram, max_ngram, keep="last")
            index.extend(seq)
            self._extras.append(index)

    def _match(self, context_ids: list[int], max_tokens: int) -> _Match | None:
        self._context.sync(context_ids)
        tail = context_ids[-self.max_ngram :]
        best: tuple[int, str, Sequence[int], int] | None = None  # (n, source, sequence, start)
        found = self._context.find(tail)
        if found is not None:
            best = (found[1], "context", self._context.tokens, found[0])
        for index in reversed(self._extras):  # later extras (closer to the cursor in prompt order) first
            found = index.find(tail)
            if found is not None and (best is None or found[1] > best[0]):
                best = (found[1], "extra", index.tokens, found[0])
        if best is None:
            return None
        n, source, seq, start = best
        limit = min(max_tokens, self.max_tokens)
        tokens = continue_from(seq, start, limit, self.stop_ids, periodic=source == "context")
        return _Match(tokens, n, source) if tokens else None

    def plans(self, context_ids: list[int]) -> list[DraftPlan]:
        match = self._match(context_ids, self.max_tokens)
        return [DraftPlan(self.name, copy_found=True, match_len=match.ngram)] if match is not None else []

    def propose(self, context_ids: list[int], max_tokens: int, plan: DraftPlan | None = None) -> Draft:
        match = self._match(context_ids, max_tokens)
        return Draft(token_ids=match.tokens if match else [], draft_probs=None, drafter=self.name)

    def observe(self, context_ids: list[int], num_accepted: int, num_drafted: int) -> None:
        """Nothing to undo: the index follows the context lazily on the next round."""
