"""What a speculative round costs on this device, in units of one plain target decode step.

A draft-length policy needs the price of a longer draft: verifying k drafted tokens is one target forward
over k + 1 positions, and drafting them with a model costs k draft steps. On a GPU a wide verify costs about
the same as a plain step; on this CPU a 10M-parameter target pays ~1.3x for 2 positions and ~2.5x for 17
(bench/results/throughput-cpu.md). `measure_step_costs` times both decoders once, at load.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

VERIFY_WIDTHS = (1, 2, 4, 8, 16, 32)  # draft tokens k whose verify cost is measured
DRAFT_RUN = 4  # draft steps timed together, as a typical draft runs them


@dataclass(frozen=True)
class StepCosts:
    """Costs relative to one target decode step; `verify[i]` is the cost of verifying `widths[i]` drafts."""

    widths: tuple[int, ...]
    verify: tuple[float, ...]
    draft_step: float  # one draft-model forward
    step_s: float = 0.0  # the plain target step these costs are relative to, in seconds (0: not measured)
    prompt_tokens_per_s: float = 0.0  # how fast the target reads a prompt (0: not measured)

    def __post_init__(self) -> None:
        if not self.widths or len(self.widths) != len(self.verify):
            raise ValueError("need one verify cost per width")
        if list(self.widths) != sorted(set(self.widths)) or self.widths[0] < 1:
            raise ValueError("widths must be increasing and positive")

    def verify_cost(self, k: float) -> float:
        """Cost of one target forward over k drafts (k = 0 is a plain step), interpolated between the measured
        widths and extended along the last segment beyond them."""
        if k <= 0:
            return 1.0
        points: list[tuple[float, float]] = [(0, 1.0), *zip(self.widths, self.verify, strict=True)]
        for (k0, v0), (k1, v1) in zip(points, points[1:], strict=False):
            if k <= k1:
                return v0 + (v1 - v0) * (k - k0) / (k1 - k0)
        (k0, v0), (k1, v1) = points[-2], points[-1]
        return v1 + max(0.0, (v1 - v0) / (k1 - k0)) * (k - k1)

    def round_cost(self, k: float, drafted_by_model: bool) -> float:
        return self.verify_cost(k) + (k * self.draft_step if drafted_by_model else 0.0)


# Used when nothing was measured (a policy built outside the engine, unit tests): a CPU-like linear price.
ASSUMED_COSTS = StepCosts(widths=(1, 32), verify=(1.3, 4.0), draft_step=0.15)

# The acceptance a budget estimate credits a draft model with: well below the 0.91 the 0.5B's drafts held for
# the 1.5B on held-out prompts (bench/results/throughput-qwen15-pair-warm-bf16-amx-cpu.md), so an estimate
# made with it still holds on code the draft guesses worse.
CONSERVATIVE_ACCEPTANCE = 0.6
CONSERVATIVE_MAX_DRAFT = 8


def conservative_speedup(costs: StepCosts, acceptance: float = CONSERVATIVE_ACCEPTANCE) -> float:
    """Tokens per plain step's time a draft model earns under these measured costs if each draft token is
    accepted with probability `acceptance`, at the best draft length (Leviathan et al. 2023, eq. 1); at least
    1, as the engine drafts nothing when drafting does not pay. Copying drafters are not credited: on code
    that repeats nothing they propose nothing."""
    from engine.drafters.sizing import best_draft_length

    def round_cost(k: int) -> float:
        return costs.round_cost(k, drafted_by_model=True)

    probs = [acceptance] * CONSERVATIVE_MAX_DRAFT
    return max(1.0, best_draft_length(probs, round_cost, CONSERVATIVE_MAX_DRAFT)[1])


# A step this slow is timed well by a few rounds (noise is a small share of it), and each extra round of all
# widths would cost the server's start seconds (a 0.5B model: ~0.1 s a step, ~10 widths a round).
SLOW_STEP_S = 0.02
SLOW_MODEL_ROUNDS = 3


def measure_step_costs(
    target_forward: Callable[[list[int]], object],
    target_crop: Callable[[int], None],
    draft_forward: Callable[[list[int]], object] | None,
    draft_crop: Callable[[int], None] | None,
    *,
    window: int,
    context_tokens: int = 256,
    repeats: int = 10,
    synchronize: Callable[[object], None] = lambda logits: None,
    clock: Callable[[], float] = time.perf_counter,
    target_prefill: Callable[[list[int]], object] | None = None,
) -> StepCosts:
    """Time a plain step, verifies of every width in VERIFY_WIDTHS that fits the window, and a draft step.

    With `target_prefill` (the decoder's prompt path), reading the context is timed too, once warmed up.
    Both decoders must start with an empty cache and are left empty. The widths are timed in turn, `repeats`
    rounds, and each keeps its fastest time: another process competing for the CPU only ever adds time, and
    taking turns spreads it over all widths alike. `synchronize` waits for an asynchronous device (a CUDA
    sync on the logits).
    """
    context_tokens = min(context_tokens, window // 2)
    context = [(7 * i + 3) % 251 for i in range(context_tokens)]
    widths = tuple(k for k in VERIFY_WIDTHS if context_tokens + k + 1 <= window)

    def timed(
        forward: Callable[[list[int]], object], crop: Callable[[int], None], width: int, calls: int = 1
    ) -> float:
        started = clock()
        for call in range(calls):
            synchronize(forward(context[call : call + width]))
        elapsed = clock() - started
        crop(context_tokens)
        return elapsed / calls

    target_forward(context)
    prompt_tokens_per_s = 0.0
    if target_prefill is not None:
        target_crop(0)
        started = clock()
        target_prefill(context)
        prompt_tokens_per_s = context_tokens / max(clock() - started, 1e-9)
    fastest = {width: float("inf") for width in (1, *(k + 1 for k in widths))}
    draft_fastest = float("inf")
    if draft_forward is not None and draft_crop is not None:
        draft_forward(context)
    for round_index in range(repeats + 1):  # the first round warms kernels and caches up
        if round_index >= SLOW_MODEL_ROUNDS and fastest[1] > SLOW_STEP_S:
            break  # a real model's steps are long enough to time in few rounds; loading must not wait
        for width in fastest:
            fastest[width] = min(fastest[width], timed(target_forward, target_crop, width))
        if draft_forward is not None and draft_crop is not None:
            # Drafts come in runs of steps: the first after a verify finds the draft's weights evicted.
            draft_fastest = min(draft_fastest, timed(draft_forward, draft_crop, 1, calls=DRAFT_RUN))
    target_crop(0)
    if draft_crop is not None:
        draft_crop(0)
    step = fastest[1]
    draft_step = draft_fastest / step if draft_fastest < float("inf") else 0.0
    if not widths:  # a window too small to measure: price verifies like plain steps
        return StepCosts(
            widths=(1,),
            verify=(1.0,),
            draft_step=draft_step,
            step_s=step,
            prompt_tokens_per_s=prompt_tokens_per_s,
        )
    return StepCosts(
        widths=widths,
        verify=tuple(fastest[k + 1] / step for k in widths),
        draft_step=draft_step,
        step_s=step,
        prompt_tokens_per_s=prompt_tokens_per_s,
    )


class TimedDecoder(Protocol):
    """What timing needs of a decoder (`engine.decoder.CausalDecoder` has it; importing that here would
    close a loop through `engine.api`)."""

    @property
    def max_length(self) -> int: ...

    def forward(self, token_ids: list[int]) -> object: ...

    def crop(self, length: int) -> None: ...


def time_decoders(
    target: TimedDecoder,
    draft: TimedDecoder | None = None,
    *,
    context_tokens: int = 256,
    repeats: int = 10,
    synchronize: Callable[[object], None] = lambda logits: None,
) -> StepCosts:
    """The one way to time decoders: empty both caches, then `measure_step_costs` over them (the engine at
    load, and every benchmark that prices a step)."""
    target.crop(0)
    if draft is not None:
        draft.crop(0)
    return measure_step_costs(
        target.forward,
        target.crop,
        draft.forward if draft is not None else None,
        draft.crop if draft is not None else None,
        window=target.max_length,
        context_tokens=context_tokens,
        repeats=repeats,
        synchronize=synchronize,
        target_prefill=getattr(target, "prefill", None),
    )
