"""Syntax-tuned draft lengths: draft far ahead where code is predictable, briefly at decision points.

`syntax_context_of` names the situation before the next token. `SyntaxDraftPolicy` keeps, per drafter and
syntax context (split further by "the last draft held whole" and "the copied match is anchored on 4+
tokens"), how long drafts have held (an `AcceptanceCurve`, starting from the priors below), and each round
picks the length with the most expected tokens per unit of verify cost on this device
(`engine.drafters.sizing.best_draft_length`). Where drafts hold, that is long (an indented block, a closing
bracket, an identifier already in the file); at a decision point it is short, or no draft at all when a
wide verify would cost more than the tokens it is likely to win. The benchmark
(`specls bench draft-length`) measures acceptance per context with the same classifier and compares the
policy with every fixed length.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from engine.api import DraftContext, DraftLengthPolicy
from engine.costs import ASSUMED_COSTS
from engine.drafters.sizing import AcceptanceCurve, best_draft_length
from lsp_server.context.syntax import CLOSERS, OPENERS

SYNTAX_CONTEXTS = (
    "indentation",  # right after a newline: whitespace comes next
    "closing",  # right after a closing bracket: `:`, `)`, `;` or a newline usually follow
    "known-identifier",  # inside a word that starts an identifier already in the file
    "repeated",  # the line so far starts like an earlier line (repeated structure)
    "identifier",  # inside a word that matches nothing seen
    "other",
    "after-open",  # right after an opening bracket: the first argument is a choice
    "after-operator",  # right after an operator or comma: an operand is a choice
    "statement-start",  # indentation done, a new statement begins: the biggest choice
)

# How a syntax context shifts the chance that a draft token holds, before its own rounds are counted:
# up where code is predictable, down at decision points. Its rounds soon outweigh this (see `SyntaxAcceptance`).
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


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATOR_CHARS = set("=+-*/%<>!&|^~,.?:@")


def identifiers_in(text: str, min_length: int = 3) -> frozenset[str]:
    return frozenset(word for word in _IDENTIFIER.findall(text) if len(word) >= min_length)


def syntax_context_of(text_before: str, known_identifiers: Iterable[str] = ()) -> str:
    """Name the syntax context of the next token, given the text before it (one of SYNTAX_CONTEXTS)."""
    line_start = text_before.rfind("\n") + 1
    line = text_before[line_start:]
    if line_start > 0 and line == "":
        return "indentation"
    if line.strip() == "":
        return "statement-start" if line else "other"
    code = line.lstrip()
    if len(code) >= 4 and _starts_an_earlier_line(text_before[:line_start], code):
        return "repeated"
    last = line[-1]
    if last in CLOSERS:
        return "closing"
    if last in OPENERS:
        return "after-open"
    if last.isalnum() or last == "_":
        match = re.search(r"[A-Za-z_][A-Za-z0-9_]*$", line)
        if match is None:
            return "other"  # digits
        word = match.group(0)
        earlier = text_before[: line_start + match.start()]
        known = set(known_identifiers) | set(_IDENTIFIER.findall(earlier))
        if any(name.startswith(word) and name != word for name in known):
            return "known-identifier"
        return "identifier"
    stripped = line.rstrip()
    if stripped and stripped[-1] in _OPERATOR_CHARS:
        return "after-operator"
    if stripped and stripped[-1] in OPENERS:
        return "after-open"
    return "other"


def _starts_an_earlier_line(earlier_text: str, code: str) -> bool:
    # Compare against stripped earlier lines (indentation may differ), in a bounded window.
    return any(
        stripped.startswith(code) and len(stripped) > len(code)
        for stripped in (line.lstrip() for line in earlier_text[-4000:].split("\n"))
    )


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

    Share one `acceptance` across requests (the scheduler does, per loaded model) so the policy learns.
    """

    known_identifiers: frozenset[str] = frozenset()
    acceptance: SyntaxAcceptance = field(default_factory=SyntaxAcceptance)
    # Names the context a draft starts in; the benchmark swaps in a constant to measure what syntax adds.
    classify: Callable[[str, Iterable[str]], str] = field(
        default=lambda text, known: syntax_context_of(text, known)
    )
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
        context = self.classify(ctx.text_before, self.known_identifiers)
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


def shared_learning(policy: DraftLengthPolicy, acceptance: SyntaxAcceptance) -> DraftLengthPolicy:
    """The same policy, learning into `acceptance` (kept across requests) when it is a syntax policy."""
    if isinstance(policy, SyntaxDraftPolicy):
        return replace(policy, acceptance=acceptance)
    return policy


@dataclass(frozen=True)
class FixedDraftPolicy:
    """The baseline the syntax policy is compared against: the same length everywhere."""

    length: int

    def max_draft_tokens(self, ctx: DraftContext) -> int:
        return self.length
