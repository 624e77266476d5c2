"""Each round's draft decision, in one place: which drafter drafts and how many tokens.

- `LearnedDraftPolicy` (what the engine uses): keeps, per drafter, how long its drafts have held (an
  `AcceptanceCurve`, starting from the priors below). Each round it prices every drafter's offer at its best
  length by expected tokens per unit of verify cost on this device (`engine.drafters.sizing`), a draft
  model's own steps included, and picks the best offer, or a plain step when none beats it. A drafter whose
  drafts keep failing so loses its rounds to the others (or to plain steps), and its evidence fades while it
  loses, so it is tried again later. A draft model whose cache is behind the context (a new prompt, or
  rounds the copies won) must read what it missed first: that one-time cost is priced too, spread over the
  tokens the completion may still generate. An earlier suggestion's remainder (stale) is re-verified whole.
  Two things known about a round split what is learned, because each measurably changes how long drafts
  hold: the drafter's last draft held whole (code repeats in runs), and a copied match is anchored on
  `LONG_ANCHOR`+ tokens. What is learned (`DraftAcceptance`) belongs to the loaded model
  (`LocalEngine.draft_acceptance`).
- `FixedDraftPolicy`, the baseline: the first offer, at the same length everywhere.

`specls bench draft-length` compares them and measures acceptance per syntax context. Splitting what is
learned by syntax context as well, or shifting it by syntax, lost to this policy on the bundled pair and on
SmolLM2-135M; so did an adaptive grow/shrink schedule (bench/README.md, "Draft length").
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.api import NO_DRAFT, DraftChoice, DraftContext
from engine.costs import ASSUMED_COSTS
from engine.drafters.caps import LONG_ANCHOR, MAX_LENGTH, STALE_LENGTH
from engine.drafters.sizing import AcceptanceCurve, best_draft_length


def base_prior(kind: str) -> list[float]:
    """Per-position acceptance before any round: a draft model's tokens hold at a flat rate; copied text
    either breaks at once or runs on, so each token that held makes the next more likely to hold.

    Both start optimistic on purpose: a prior under which drafting never pays would never be tested, and a
    drafter that is not drafted learns nothing.
    """
    if kind == "model":
        return [0.8] * MAX_LENGTH[kind]
    return [1.0 - 0.3 / math.sqrt(j) for j in range(1, MAX_LENGTH[kind] + 1)]


@dataclass
class DraftAcceptance:
    """Acceptance curves per drafter and per (drafter, situation), learned across completions of one loaded
    model. A situation ("streak", "anchored", both, or "" for neither) shrinks toward its drafter's pooled
    curve, so a rare one starts from what the drafter does everywhere and a common one soon follows its own
    rounds (empirical Bayes, in counts)."""

    curves: dict[tuple[str, str], AcceptanceCurve] = field(default_factory=dict)
    pooled: dict[str, AcceptanceCurve] = field(default_factory=dict)

    def continue_probs(self, drafter: str, situation: str) -> list[float]:
        pooled = self._pooled(drafter).continue_probs(base_prior(_kind(drafter)))
        # As a prior, the pooled rate is never certain nor hopeless, so a situation can still move it.
        prior = [min(0.98, max(0.02, rate)) for rate in pooled]
        return self._curve(drafter, situation).continue_probs(prior)

    def record(self, drafter: str, situation: str, drafted: int, accepted: int) -> None:
        self._pooled(drafter).record(drafted, accepted)
        self._curve(drafter, situation).record(drafted, accepted)

    def forget(self, drafter: str, situation: str, factor: float) -> None:
        self._pooled(drafter).forget(factor)
        self._curve(drafter, situation).forget(factor)

    def _pooled(self, drafter: str) -> AcceptanceCurve:
        return self.pooled.setdefault(drafter, AcceptanceCurve(max_length=MAX_LENGTH[_kind(drafter)]))

    def _curve(self, drafter: str, situation: str) -> AcceptanceCurve:
        key = (drafter, situation)
        return self.curves.setdefault(key, AcceptanceCurve(max_length=MAX_LENGTH[_kind(drafter)]))


def _kind(drafter: str) -> str:
    return "model" if drafter == "model" else "copy"


@dataclass
class LearnedDraftPolicy:
    """An engine.api.DraftPolicy that prices each offer from the acceptance its drafter has seen.

    Share one `acceptance` across requests (`LocalEngine` keeps one per loaded model) so the policy learns.
    """

    acceptance: DraftAcceptance = field(default_factory=DraftAcceptance)
    max_length: int = MAX_LENGTH["copy"]
    stale_length: int = STALE_LENGTH
    retry_factor: float = 0.99  # each round a drafter does not draft, its evidence fades toward the prior
    _pending: tuple[str, str] | None = None  # (drafter, situation) of the round in flight
    _held_whole: set[str] = field(default_factory=set)  # drafters whose last draft was accepted whole

    def choose(self, options: Sequence[DraftContext]) -> DraftChoice:
        self._pending = None
        for i, ctx in enumerate(options):
            if ctx.drafter == "stale":  # an earlier suggestion's remainder: usually right, verified whole
                return DraftChoice(i, self.stale_length)
        best, best_rate, best_key = NO_DRAFT, 1.0, None  # a plain step yields one token per step
        priced: list[tuple[str, str]] = []
        for i, ctx in enumerate(options):
            key = (ctx.drafter, self.situation(ctx))
            priced.append(key)
            probs = self.acceptance.continue_probs(*key)
            costs = ctx.step_costs or ASSUMED_COSTS
            round_cost = functools.partial(costs.round_cost, drafted_by_model=ctx.drafter == "model")
            # Reading n missed tokens costs a draft step times a forward of n tokens, less the usual one.
            catch_up = costs.draft_step * (costs.verify_cost(ctx.catch_up) - 1.0) if ctx.catch_up else 0.0
            k, rate = best_draft_length(
                probs, round_cost, self.max_length, one_time_cost=catch_up, tokens_left=ctx.tokens_left
            )
            if k > 0 and rate > best_rate:
                best, best_rate, best_key = DraftChoice(i, k), rate, key
        for key in priced:
            if key != best_key:
                self.acceptance.forget(*key, self.retry_factor)
        self._pending = best_key
        return best

    def situation(self, ctx: DraftContext) -> str:
        """What else is known about this round: "streak" right after the drafter's last draft held whole,
        "anchored" when a copied match rests on LONG_ANCHOR+ tokens."""
        parts = []
        if ctx.drafter in self._held_whole:
            parts.append("streak")
        if ctx.match_len >= LONG_ANCHOR:
            parts.append("anchored")
        return " ".join(parts)

    def observe(self, drafter: str, num_drafted: int, num_accepted: int) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and num_drafted > 0:
            self.acceptance.record(*pending, num_drafted, num_accepted)
            if num_accepted == num_drafted:
                self._held_whole.add(drafter)
            else:
                self._held_whole.discard(drafter)


@dataclass(frozen=True)
class FixedDraftPolicy:
    """The baseline the learned policy is compared against: the first offer, at the same length everywhere."""

    length: int

    def choose(self, options: Sequence[DraftContext]) -> DraftChoice:
        return DraftChoice(0, self.length) if options else NO_DRAFT
