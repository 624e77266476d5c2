"""Draft-length control, in one place: how many tokens a drafter proposes each round.

- `SyntaxDraftPolicy` (what the server uses): keeps, per drafter and syntax context (split further by "the
  last draft held whole" and "the copied match is anchored on 4+ tokens"), how long drafts have held (an
  `AcceptanceCurve`, starting from the priors below), and each round picks the length with the most
  expected tokens per unit of verify cost on this device (`engine.drafters.sizing.best_draft_length`).
  Where drafts hold that is long (an indented block, a closing bracket, an identifier already in the file);
  at a decision point it is short, or no draft at all when a wide verify would cost more than the tokens
  it is likely to win. The syntax context comes from the request's classifier (`SyntaxClassifier`, the
  server's `syntax_context_of`); what is learned (`SyntaxAcceptance`) belongs to the loaded model
  (`LocalEngine.draft_acceptance`).
- `AdaptiveDraftLength`, the default when a request brings no classifier: long copied drafts, short model
  drafts that grow after a fully accepted draft and shrink otherwise (transformers' assisted-generation
  schedule).
- `FixedDraftPolicy`, the baseline: the same length everywhere.

`specls bench draft-length` measures acceptance per context and compares these policies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from engine.api import DraftContext, SyntaxClassifier
from engine.costs import ASSUMED_COSTS
from engine.drafters.sizing import AcceptanceCurve, best_draft_length

# How a syntax context shifts the chance that a draft token holds, before its own rounds are counted:
# up where code is predictable, down at decision points. Its rounds soon outweigh this (see `SyntaxAcceptance`).
# The names are the server's syntax contexts (`lsp_server.context.syntax_context`); others get no shift.
CONTEXT_SHIFT: Mapping[str, float] = MappingProxyType(
    {
        "indentation": 0.15,
        "closing": 0.15,
        "known-identifier": 0.1,
        "repeated": 0.1,
        "identifier": 0.0,
        "other": 0.0,
        "after-open": -0.05,
        "after-operator": -0.05,
        "statement-start": -0.1,
    }
)
MAX_LENGTH = {"model": 16, "copy": 32}
QUALIFIER = " | "  # joins a syntax context and what else is known about the round, as in "closing | streak"
LONG_ANCHOR = 4  # a copied draft whose match is anchored on this many tokens is a different bet


def base_prior(kind: str) -> list[float]:
    """Per-position acceptance before any round: a draft model's tokens hold at a flat rate; copied text
    either breaks at once or runs on, so each token that held makes the next more likely to hold.

    Both start optimistic on purpose: a prior under which drafting never pays would never be tested, and a
    context that is not drafted learns nothing.
    """
    if kind == "model":
        return [0.8] * MAX_LENGTH[kind]
    return [1.0 - 0.3 / math.sqrt(j) for j in range(1, MAX_LENGTH[kind] + 1)]


@dataclass
class SyntaxAcceptance:
    """Acceptance curves per drafter and per (drafter, syntax context), learned across completions of one
    loaded model.

    A context's estimate shrinks toward its drafter's pooled curve moved by the context's `CONTEXT_SHIFT`,
    so a rare context starts from what the drafter does everywhere and a common one soon follows its own
    rounds (empirical Bayes, in counts).
    """

    curves: dict[tuple[str, str], AcceptanceCurve] = field(default_factory=dict)
    pooled: dict[str, AcceptanceCurve] = field(default_factory=dict)

    def continue_probs(self, drafter: str, context: str) -> list[float]:
        kind = "model" if drafter == "model" else "copy"
        shared = self._pooled(drafter, kind).continue_probs(base_prior(kind))
        shift = CONTEXT_SHIFT.get(context.split(QUALIFIER)[0], 0.0)
        prior = [min(0.98, max(0.02, rate + shift)) for rate in shared]
        return self._curve(drafter, context, kind).continue_probs(prior)

    def record(self, drafter: str, context: str, drafted: int, accepted: int) -> None:
        kind = "model" if drafter == "model" else "copy"
        self._pooled(drafter, kind).record(drafted, accepted)
        self._curve(drafter, context, kind).record(drafted, accepted)

    def forget(self, drafter: str, context: str, factor: float) -> None:
        kind = "model" if drafter == "model" else "copy"
        self._pooled(drafter, kind).forget(factor)
        self._curve(drafter, context, kind).forget(factor)

    def _pooled(self, drafter: str, kind: str) -> AcceptanceCurve:
        return self.pooled.setdefault(drafter, AcceptanceCurve(max_length=MAX_LENGTH[kind]))

    def _curve(self, drafter: str, context: str, kind: str) -> AcceptanceCurve:
        return self.curves.setdefault((drafter, context), AcceptanceCurve(max_length=MAX_LENGTH[kind]))


@dataclass
class SyntaxDraftPolicy:
    """An engine.api.DraftLengthPolicy that sizes each draft from the acceptance seen in its syntax context.

    Share one `acceptance` across requests (`LocalEngine` keeps one per loaded model) so the policy learns.
    """

    # Names the syntax context a draft starts in, from the text before it (the request's classifier); the
    # default, one context for all, sizes by cost alone.
    classify: SyntaxClassifier = field(default=lambda text_before: "other")
    acceptance: SyntaxAcceptance = field(default_factory=SyntaxAcceptance)
    max_length: int = 32
    stale_length: int = 64  # an earlier suggestion's remainder is re-verified whole: it is usually right
    retry_factor: float = 0.99  # each round a context is not drafted, its evidence fades toward the prior
    _pending: tuple[str, str] | None = None  # (drafter, context) of the round in flight
    _held_whole: set[str] = field(default_factory=set)  # drafters whose last draft was accepted whole

    def max_draft_tokens(self, ctx: DraftContext) -> int:
        self._pending = None
        if ctx.drafter == "none":
            return 0
        if ctx.drafter == "stale":
            return self.stale_length
        context = self.classify(ctx.text_before)
        if ctx.drafter in self._held_whole:
            # Code repeats in runs: right after a draft held whole, the next one tends to hold longer.
            context += QUALIFIER + "streak"
        if ctx.match_len >= LONG_ANCHOR:
            context += QUALIFIER + "anchored"
        probs = self.acceptance.continue_probs(ctx.drafter, context)
        costs = ctx.step_costs or ASSUMED_COSTS
        by_model = ctx.drafter == "model"
        k = best_draft_length(probs, lambda k: costs.round_cost(k, by_model), self.max_length)
        if k == 0:
            self.acceptance.forget(ctx.drafter, context, self.retry_factor)
        else:
            self._pending = (ctx.drafter, context)
        return k

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
    """The baseline the syntax policy is compared against: the same length everywhere."""

    length: int

    def max_draft_tokens(self, ctx: DraftContext) -> int:
        return self.length


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
