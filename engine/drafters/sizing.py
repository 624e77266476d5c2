"""Choosing a draft length from how long drafts have held and what a wider verify costs.

A round that drafts k tokens yields 1 + A tokens (A drafts accepted, plus the target's own next token) and
costs `StepCosts.round_cost(k)`; drafting nothing yields one token for one step. If p_j is the chance that
draft token j is accepted given that tokens 1..j-1 were, then E[A | k] = sum over n <= k of p_1 * ... * p_n
(the expected accepted length of Leviathan et al., with a per-position rate in place of one alpha). The
best k maximises tokens per unit of cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


def expected_accepted_by_length(continue_probs: Sequence[float]) -> list[float]:
    """E[accepted drafts] for every draft length k = 0..len(continue_probs): sum_{n<=k} prod_{j<=n} p_j."""
    expected, survive = [0.0], 1.0
    for p in continue_probs:
        survive *= p
        expected.append(expected[-1] + survive)
    return expected


def best_draft_length(
    continue_probs: Sequence[float],
    round_cost: Callable[[int], float],
    max_length: int,
    *,
    one_time_cost: float = 0.0,
    tokens_left: int = 1,
) -> tuple[int, float]:
    """The k in 0..max_length with the most expected tokens per unit of cost (0: a plain step pays best),
    and that rate (a plain step's is 1).

    `one_time_cost` is paid before the first draft (a draft model reading context it missed) and pays off
    over the `tokens_left` the completion may still generate: a round bears the share of the tokens it yields.
    """
    expected = expected_accepted_by_length(continue_probs[:max_length])
    share = one_time_cost / max(1, tokens_left)
    rates = [
        (1.0 + accepted) / (round_cost(k) + (share * (1.0 + accepted) if k else 0.0))
        for k, accepted in enumerate(expected)
    ]
    best = max(range(len(rates)), key=rates.__getitem__)
    return best, rates[best]


@dataclass
class AcceptanceCurve:
    """Per-position acceptance counts for one kind of draft.

    Position j was *tried* when a draft reached it with tokens 1..j-1 accepted, and *held* when token j was
    accepted too. `continue_probs(prior)` estimates p_j as (held_j + w * prior_j) / (tried_j + w): a position
    with little data follows the prior, one with much data follows the data.
    """

    max_length: int = 32
    prior_weight: float = 4.0
    tried: list[float] = field(default_factory=list)
    held: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tried = self.tried or [0.0] * self.max_length
        self.held = self.held or [0.0] * self.max_length

    def continue_probs(self, prior: Sequence[float]) -> list[float]:
        if len(prior) < self.max_length:
            raise ValueError(f"need a prior for each of {self.max_length} positions, got {len(prior)}")
        return [
            (held + self.prior_weight * rate) / (tried + self.prior_weight)
            for tried, held, rate in zip(self.tried, self.held, prior, strict=False)
        ]

    def record(self, drafted: int, accepted: int) -> None:
        """One verified draft: positions 1..min(accepted + 1, drafted) were tried, 1..accepted held."""
        for j in range(min(drafted, accepted + 1, self.max_length)):
            self.tried[j] += 1.0
            if j < accepted:
                self.held[j] += 1.0

    def forget(self, factor: float) -> None:
        """Scale the counts down, so the prior regains weight (a kind that is never drafted gets retried)."""
        self.tried = [count * factor for count in self.tried]
        self.held = [count * factor for count in self.held]

    @property
    def rounds(self) -> float:
        return self.tried[0]
