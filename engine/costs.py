"""What a speculative round costs on this device, in units of one plain target decode step.

A draft-length policy needs the price of a longer draft: verifying k drafted tokens is one target forward
over k + 1 positions, and drafting them with a model costs k draft steps. On a GPU a wide verify costs about
the same as a plain step; on this CPU a 10M-parameter target pays ~1.3x for 2 positions and ~2.5x for 17
(bench/results/throughput-cpu.md). `measure_step_costs` times both decoders once, at load.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
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
    that repeats nothing they propose nothing. The rate is `engine.drafters.sizing.best_draft_length`'s at a
    constant acceptance, written out here: `engine.drafters` imports this module, so importing it back would
    close a loop."""
    best, tokens = 1.0, 1.0  # k = 0: a plain step yields one token for one step
    for k in range(1, CONSERVATIVE_MAX_DRAFT + 1):
        tokens += acceptance**k  # 1 + E[accepted drafts]: the k-th is accepted with probability acceptance^k
        best = max(best, tokens / costs.round_cost(k, drafted_by_model=True))
    return best


# The keystroke budget (`lsp_server.scheduling.budget` applies it): the first suggestion in a just-opened file
# reads MIN_PROMPT_TOKENS of prompt and writes FIRST_LINE_TOKENS within FIRST_SUGGESTION_S.
FIRST_SUGGESTION_S = 1.5  # the first suggestion in a just-opened file, from request to ghost text
# A suggestion started where the cursor comes to rest (`specls/cursor`, 0.2 s after a file opens) should be
# ready when the user, after a pause of about a second, asks for it: so it gets a tighter budget, a shorter
# prompt read sooner (the full one is grown aside afterwards). 0.8 s cut too deep: on an AVX2 laptop one of
# three probes' ~150-token suggestions was not served, and the request started over (bench/results/patched).
AT_REST_SUGGESTION_S = 1.0
# A line start while the user types: the prompt is mostly cached (a new line re-reads a line and the suffix),
# so what counts is writing the first line within the pause people make after Enter, about a second, as at
# rest. The first-suggestion budget alone let through a model that cannot keep up: on the 2-core AMX Xeon the
# 1.5B pair, its first line in a just-opened file estimated at 1.5 s (that budget's edge) and a line start's
# at 1.3 s, showed ghost text at 9.5% of a keystroke replay's keys, against 53-62% for the 0.5B at ~55-65 ms
# a step, whose line start's first line takes ~0.7 s (bench/results/keystrokes-qwen*-bf16-amx-xeon-6-files-*;
# on a faster day, 46% against 82%).
LINE_START_SUGGESTION_S = AT_REST_SUGGESTION_S
FIRST_LINE_TOKENS = 12  # tokens of a typical first line of code, generated after the prompt is read
MIN_PROMPT_TOKENS = 128  # below this the model sees too little of the file to be right


def readable_prompt_tokens(prompt_tokens_per_s: float, step_s: float, seconds: float) -> int:
    """Prompt tokens read from scratch within `seconds` that still leave time to write a first line of
    FIRST_LINE_TOKENS at `step_s` a token."""
    return int(prompt_tokens_per_s * max(0.0, seconds - FIRST_LINE_TOKENS * step_s))


def first_line_seconds(
    step_s: float, prompt_tokens_per_s: float, speedup: float = 1.0
) -> tuple[float, float]:
    """Seconds to read MIN_PROMPT_TOKENS of prompt and to write a first line of FIRST_LINE_TOKENS at `step_s` a
    step sped up by `speedup` (a draft model's credit, at least 1): the one arithmetic behind both the check of
    a loaded model (`first_line_fit`) and the estimate made before loading one (`estimate_first_line`)."""
    return MIN_PROMPT_TOKENS / prompt_tokens_per_s, FIRST_LINE_TOKENS * step_s / max(1.0, speedup)


def first_line_fits(
    read_s: float,
    line_s: float,
    seconds: float = FIRST_SUGGESTION_S,
    line_seconds: float = LINE_START_SUGGESTION_S,
) -> bool:
    """Whether a model that reads the smallest prompt in `read_s` and writes a first line in `line_s`
    (`first_line_seconds`) brings the first suggestion of a just-opened file within `seconds` and a line
    start's first line, its prompt cached, within `line_seconds`: the keystroke budget, both ways."""
    return read_s + line_s <= seconds and line_s <= line_seconds


@dataclass(frozen=True)
class ModelShape:
    """A decoder's projection shapes, from its config.json (Qwen2/Llama-style: attention, gated MLP, lm_head)."""

    hidden: int
    intermediate: int
    layers: int
    vocab: int
    heads: int
    kv_heads: int
    tied_embeddings: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> ModelShape:
        def number(key: str, default: object = None) -> int:
            value = config.get(key, default)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"config.json: {key} is {value!r}, not a positive integer")
            return value

        heads = number("num_attention_heads")
        return cls(
            hidden=number("hidden_size"),
            intermediate=number("intermediate_size"),
            layers=number("num_hidden_layers"),
            vocab=number("vocab_size"),
            heads=heads,
            kv_heads=number("num_key_value_heads", heads),
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        )

    @property
    def kv_width(self) -> int:
        """The width of the k and v projections' outputs (grouped-query attention: fewer heads than q)."""
        return self.hidden // self.heads * self.kv_heads

    @property
    def layer_params(self) -> int:
        """One layer's projections: q and o (hidden x hidden), k and v (hidden x kv width), the gated MLP."""
        return 2 * self.hidden * (self.hidden + self.kv_width) + 3 * self.hidden * self.intermediate

    @property
    def step_params(self) -> int:
        """The weights one decode step streams: every layer's projections and the lm_head (one embedding row
        is all the input side reads)."""
        return self.layers * self.layer_params + self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters (what `configure_threads` sizes threads by), norms and biases aside."""
        return self.step_params + (0 if self.tied_embeddings else self.vocab * self.hidden)


@dataclass(frozen=True)
class MachineRates:
    """What `engine.calibration` measured of this machine on a model's largest projection, before loading it."""

    bytes_per_s: float  # weight bytes a one-row matmul streams per second (a decode step)
    param_tokens_per_s: float  # parameters x rows a PROMPT_ROWS-row matmul gets through per second (a prompt)
    bytes_per_param: int  # 2: bf16
    threads: int
    source: str = ""  # how it was measured, or where it was cached


PROMPT_ROWS = 128  # rows of the prompt-reading matmul timed by the calibration
ESTIMATED_WIDTHS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class FirstLineEstimate:
    """A model's first line in a just-opened file, estimated before loading it (`estimate_first_line`)."""

    step_s: float
    prompt_tokens_per_s: float
    speedup: float  # the draft model's conservative credit (1: no draft)
    read_s: float
    line_s: float
    rates: MachineRates

    @property
    def seconds(self) -> float:
        return self.read_s + self.line_s

    def fits(
        self, seconds: float = FIRST_SUGGESTION_S, line_seconds: float = LINE_START_SUGGESTION_S
    ) -> bool:
        return first_line_fits(self.read_s, self.line_s, seconds, line_seconds)

    def detail(self, seconds: float = FIRST_SUGGESTION_S) -> str:
        drafted = f", / {self.speedup:.2f} for the draft model" if self.speedup > 1 else ""
        threads = f"{self.rates.threads} thread{'s' if self.rates.threads > 1 else ''}"
        opened = "<=" if self.seconds <= seconds else ">"
        typing = "<=" if self.line_s <= LINE_START_SUGGESTION_S else ">"
        return (
            f"estimated first line {self.seconds:.1f} s {opened} {seconds:g} s budget in a just-opened file, "
            f"{self.line_s:.2f} s {typing} {LINE_START_SUGGESTION_S:g} s at a line start while typing "
            f"(step ~{self.step_s * 1000:.0f} ms at {self.rates.bytes_per_s / 1e9:.1f} GB/s measured"
            f"{drafted}; prompt ~{self.prompt_tokens_per_s:.0f} tokens/s; {threads}; {self.rates.source})"
        )


def estimate_first_line(
    target: ModelShape, rates: MachineRates, draft: ModelShape | None
) -> FirstLineEstimate:
    """The first-line time `first_line_fit` would find once `target` is loaded (drafted by `draft`), from
    `rates`: a step streams the target's weights at the measured bytes/s (what else a step does, attention
    and norms, is ~10% of it on one core of the AMX Xeon and hidden at two: the 1.5B's step estimated 268 and
    153 ms, measured 290 and 141 ms); a prompt passes the layers' weights at the measured parameter-rows/s; a
    verify of k drafts costs what a (k + 1)-row matmul does, interpolated between the one-row and the
    PROMPT_ROWS-row rates; a draft step streams the draft's weights in the target's dtype (its int4 steps on
    AVX-512 are faster: the credit is a lower bound). The draft is credited `conservative_speedup`."""

    def step_s(shape: ModelShape) -> float:
        return shape.step_params * rates.bytes_per_param / rates.bytes_per_s

    step = step_s(target)
    prompt_tokens_per_s = rates.param_tokens_per_s / (target.layers * target.layer_params)
    speedup = 1.0
    if draft is not None:
        one_row = rates.bytes_per_param / rates.bytes_per_s  # seconds a parameter costs at one row
        prompt_rows = PROMPT_ROWS / rates.param_tokens_per_s
        per_row = max(0.0, prompt_rows - one_row) / (PROMPT_ROWS - 1)
        verify = tuple(1 + k * per_row / one_row for k in ESTIMATED_WIDTHS)
        costs = StepCosts(widths=ESTIMATED_WIDTHS, verify=verify, draft_step=step_s(draft) / step)
        speedup = conservative_speedup(costs)
    read_s, line_s = first_line_seconds(step, prompt_tokens_per_s, speedup)
    return FirstLineEstimate(step, prompt_tokens_per_s, speedup, read_s, line_s, rates)


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
