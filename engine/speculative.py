"""Lossless speculative decoding: drafters propose, the target verifies all drafts in one forward.

Greedy output is token-identical to `engine.autoregressive` on the same target; sampled output follows the
target's distribution (Leviathan et al. 2023, Alg. 1, in `engine.verify`).

Cache invariant: the target caches every context token except the last ("pending") one. A round feeds
[pending] + k drafts, reads k + 1 rows of logits, accepts n drafts plus one target token, and crops the cache
back to the context minus its new last token; rejected positions are simply forgotten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from engine.api import (
    CancelToken,
    CompletionResult,
    DraftContext,
    DraftPolicy,
    LearningDraftPolicy,
    OnText,
)
from engine.costs import StepCosts
from engine.decoder import CausalDecoder, forward_or_cancel
from engine.drafters.base import Draft, Drafter, DraftPlan
from engine.drafters.forced import ForcedPrefixDrafter
from engine.generation import (
    Decode,
    DecodeSettings,
    OutputTracker,
    prefill_unless_cancelled,
    start_decoding,
    token_probabilities,
)
from engine.healing import ForcedPrefix
from engine.imports import ImportLineConstraint
from engine.verify import greedy_accept, speculative_sample_accept

CONTEXT_CHARS = 400  # characters of text before the next token that a draft policy sees


class DraftCancelled(Exception):
    """Raised from inside a drafter (e.g. by `PollingDecoder` between draft-model steps) to end the round."""


class PollingDecoder:
    """Wraps a drafter's decoder for one call so a cancel is seen between every draft step, not only between
    rounds (and between layers where the decoder allows): `forward` raises `DraftCancelled` once `cancel`
    fires. The wrapped cache is never left half-written: a stopped forward caches nothing.
    """

    def __init__(self, inner: CausalDecoder, cancel: CancelToken | None) -> None:
        self.inner = inner
        self.cancel = cancel
        self.vocab_size = inner.vocab_size
        self.max_length = inner.max_length

    @property
    def cached_tokens(self) -> list[int]:
        return self.inner.cached_tokens

    def forward(self, token_ids: list[int]) -> torch.Tensor:
        logits = forward_or_cancel(self.inner, token_ids, self.cancel)
        if logits is None:
            raise DraftCancelled
        return logits

    def crop(self, length: int) -> None:
        self.inner.crop(length)

    def prefill(self, token_ids: list[int]) -> None:
        """Catch the draft up on a prompt without logits; a cancel stops it soon, keeping what it computed."""
        if prefill_unless_cancelled(self.inner, token_ids, self.cancel) < len(token_ids):
            raise DraftCancelled


def speculative_generate(
    target: CausalDecoder,
    drafter: Drafter,
    prompt_ids: list[int],
    settings: DecodeSettings,
    policy: DraftPolicy,
    *,
    decode: Decode,
    on_text: OnText | None = None,
    cancel: CancelToken | None = None,
    step_costs: StepCosts | None = None,
    forced: ForcedPrefix | None = None,
    imports: ImportLineConstraint | None = None,
) -> CompletionResult:
    """Generate a completion of `prompt_ids`; prompts longer than the window are cut from the left.

    Window rule (`engine.generation.fit_prompt`): prompt + max_new_tokens must fit the target's window, so
    an over-long prompt keeps only its last window - max_new_tokens tokens. The cancel token is polled
    before every draft and before every verify; a cancelled call returns what it has accepted, and the
    cache invariant holds after every round, so the next call is unaffected.

    With `forced` (token healing), the drafter is wrapped in a `ForcedPrefixDrafter`, whose first rounds
    draft the forced text's own spelling, and every verify is constrained as in the plain loop
    (`ForcedPrefix.constrain`); the spelling rounds teach neither the drafter nor the policy. With `imports`,
    an import line is steered the same way, after healing's constraint (`engine.imports`).
    """
    if forced is not None:
        drafter = ForcedPrefixDrafter(drafter, forced)
    constrain = _chained(forced, imports)
    learner = policy if isinstance(policy, LearningDraftPolicy) else None
    with torch.inference_mode():
        # 1. Prefill: reuse the cached prefix shared with the previous call, feed only the new tokens (a
        #    cancel stops it part-way and the cache keeps what it computed).
        run = start_decoding(
            target, prompt_ids, settings, decode=decode, on_text=on_text, forced=forced, cancel=cancel
        )
        stats, picker, output = run.stats, run.picker, run.output
        context = list(run.prompt_ids)
        while output.finish is None:
            # 2. Decide this round's draft: the drafter offers its plans, the policy picks one and its
            #    length (unless a plan fixed it: a forced prefix's spelling).
            if _cancelled(cancel):
                break
            room = min(output.remaining - 1, target.max_length - len(context))
            plans = drafter.plans(context)
            fixed = next(((plan, plan.length) for plan in plans if plan.length is not None), None)
            sized_by_policy = fixed is None
            plan, k = fixed or _choose(plans, policy, context, output, decode, step_costs)
            k = min(k, room)
            # 3. Draft; a draft model polls the cancel token before each of its steps (`PollingDecoder`).
            try:
                draft = (
                    drafter.propose(context, k, plan)
                    if plan is not None and k > 0
                    else Draft([], None, "none")
                )
            except DraftCancelled:
                break
            draft_ids = draft.token_ids[: max(0, k)]
            if _cancelled(cancel):
                break
            # 4. Verify every draft in ONE target forward: k + 1 rows of logits, under any constraint. A cancel
            #    stops it between layers, leaving the cache as it was.
            verified = forward_or_cancel(target, [context[-1], *draft_ids], cancel)
            if verified is None:
                break
            logits = constrain(verified, draft_ids)
            stats.target_forwards += 1
            # 5. Accept: greedy prefix match, or Leviathan Alg. 1 with the drafter's q (one-hot when None).
            if settings.greedy:
                accepted, next_token = greedy_accept(draft_ids, logits)
            else:
                draft_probs = draft.draft_probs[: len(draft_ids)] if draft.draft_probs is not None else None
                accepted, next_token = speculative_sample_accept(
                    draft_ids, draft_probs, picker.warp(logits), picker.generator
                )
            # 6. Roll back: keep the pending token and the accepted drafts; tell the drafter and the policy
            #    that sized the draft (a round it did not size is counted apart).
            target.crop(len(context) + accepted)
            new_tokens = [*draft_ids[:accepted], next_token]
            context.extend(new_tokens)
            if imports is not None:
                imports.advance(new_tokens)
            used = draft.drafter or drafter.name
            stats.count_round(used, len(draft_ids), accepted, in_totals=sized_by_policy)
            drafter.observe(context, accepted, len(draft_ids))
            if learner is not None and sized_by_policy:
                learner.observe(used, len(draft_ids), accepted)
            # 7. Stream the accepted text and apply the stop rules (EOS, length, stop strings, callback), with
            #    the target's probability of each accepted token (row i of the verify predicts token i).
            output.extend(new_tokens, token_probabilities(logits, new_tokens))
        if output.finish is None:
            output.cancel()
    return run.finish(unfinished="cancelled")


def _cancelled(cancel: CancelToken | None) -> bool:
    return cancel is not None and cancel.cancelled


def _chained(
    forced: ForcedPrefix | None, imports: ImportLineConstraint | None
) -> Callable[[torch.Tensor, Sequence[int]], torch.Tensor]:
    """One verify's constraint: token healing's, then the import line's (each masks only its own rows)."""

    def constrain(logits: torch.Tensor, path: Sequence[int]) -> torch.Tensor:
        if forced is not None:
            logits = forced.constrain(logits, path)
        if imports is not None:
            logits = imports.constrain(logits, path)
        return logits

    return constrain


def _choose(
    plans: Sequence[DraftPlan],
    policy: DraftPolicy,
    context: list[int],
    output: OutputTracker,
    decode: Decode,
    step_costs: StepCosts | None,
) -> tuple[DraftPlan | None, int]:
    """Ask the policy which plan drafts and how far; (None, 0) when nothing is offered or nothing pays."""
    if not plans:
        return None, 0
    text_before = decode(context[-CONTEXT_CHARS // 3 :])[-CONTEXT_CHARS:]
    options = [
        DraftContext(
            text_before=text_before,
            generated=output.text,
            drafter=plan.drafter,
            copy_found=plan.copy_found,
            step_costs=step_costs,
            match_len=plan.match_len,
            catch_up=plan.catch_up,
            tokens_left=output.remaining,
        )
        for plan in plans
    ]
    choice = policy.choose(options)
    if choice.length <= 0:
        return None, 0
    return plans[choice.option], choice.length
