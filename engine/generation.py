"""Pieces the baseline and the speculative loop share, so both decode under exactly the same rules.

- `fit_prompt`: the window rule (left truncation) and input checks.
- `sync_cache`: prefix reuse across calls (prefill only the new tokens).
- `TokenPicker`: the target's own choice of a token (greedy argmax, or warped sampling).
- `OutputTracker`: EOS, max new tokens, stop strings, the stop callback, and streaming via `on_text`.
- `start_decoding` / `Decoding.finish`: the set-up before the first forward and the result after the last.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from time import perf_counter

import torch

from engine.api import (
    CancelToken,
    CompletionRequest,
    CompletionResult,
    ConfidenceReader,
    EngineStats,
    FinishReason,
    OnText,
    StopCheck,
    cut_at_stop,
)
from engine.decoder import CausalDecoder, InterruptiblePrefill, PrefillingDecoder, device_of
from engine.healing import ForcedPrefix
from engine.sequences import common_prefix_length
from engine.verify import warp_logits

Decode = Callable[[list[int]], str]


@dataclass(frozen=True)
class DecodeSettings:
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0 is greedy
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop_strings: tuple[str, ...] = ()
    stop_check: StopCheck | None = None
    eos_ids: frozenset[int] = field(default_factory=frozenset)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def from_request(cls, request: CompletionRequest, eos_ids: frozenset[int]) -> DecodeSettings:
        return cls(
            max_new_tokens=request.max_new_tokens,
            temperature=request.temperature,
            top_k=request.top_k,
            top_p=request.top_p,
            seed=request.seed,
            stop_strings=tuple(s for s in request.stop_strings if s),
            stop_check=request.stop_check,
            eos_ids=eos_ids,
        )


def fit_prompt(prompt_ids: Sequence[int], window: int, max_new_tokens: int) -> tuple[list[int], int]:
    """Return (prompt ids that fit, number dropped).

    Rule: prompt and completion must share the window, so when len(prompt) + max_new_tokens > window the
    prompt keeps only its LAST window - max_new_tokens tokens (the text nearest the cursor matters most).
    An empty prompt, max_new_tokens < 1, or max_new_tokens >= window (no room for any prompt) is an error.
    """
    if len(prompt_ids) == 0:
        raise ValueError("the prompt is empty: the model needs at least one token to continue")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if max_new_tokens >= window:
        raise ValueError(
            f"max_new_tokens ({max_new_tokens}) must be smaller than the context window ({window})"
        )
    keep = window - max_new_tokens
    dropped = max(0, len(prompt_ids) - keep)
    return list(prompt_ids[dropped:]), dropped


def sync_cache(decoder: CausalDecoder, prompt_ids: list[int], cancel: CancelToken | None = None) -> int:
    """Make the cache hold prompt_ids[:-1], reusing the common prefix; return the number of reused tokens.

    The last prompt token stays "pending": the first decode step feeds it (with any drafts) and reads the
    logits that choose the first new token, so every round is one forward and prefill needs no logits.

    With `cancel`, the prefill stops soon after a cancel and the cache keeps the part already computed
    (resumable prefill): the next call with the same prompt start goes on from there instead of starting
    over. The caller sees the cancel itself and ends the call.
    """
    reused = common_prefix_length(decoder.cached_tokens, prompt_ids[:-1])
    decoder.crop(reused)
    remaining = prompt_ids[reused:-1]
    if remaining:
        prefill_unless_cancelled(decoder, remaining, cancel)
    return reused


PREFILL_PIECE = 64  # tokens per piece of a cancellable prefill on decoders that cannot stop inside one


def prefill_unless_cancelled(decoder: CausalDecoder, token_ids: list[int], cancel: CancelToken | None) -> int:
    """Append `token_ids` without logits, stopping soon after a cancel (within a layer where the decoder
    can, else between pieces of PREFILL_PIECE tokens) and keeping what was computed; returns how many of
    them are now cached."""
    if cancel is None:
        _prefill(decoder, token_ids)
        return len(token_ids)
    if isinstance(decoder, InterruptiblePrefill):
        return decoder.prefill_interruptibly(token_ids, lambda: cancel.cancelled)
    done = 0
    while done < len(token_ids) and not cancel.cancelled:
        piece = token_ids[done : done + PREFILL_PIECE]
        _prefill(decoder, piece)
        done += len(piece)
    return done


def _prefill(decoder: CausalDecoder, token_ids: list[int]) -> None:
    if isinstance(decoder, PrefillingDecoder):
        decoder.prefill(token_ids)
    else:
        decoder.forward(token_ids)


def token_probabilities(logits: torch.Tensor, token_ids: Sequence[int]) -> list[float]:
    """The probability row i of `logits` gives token_ids[i] (softmax at temperature 1, no warp): how sure the
    target was of what it generated. Reads only; the tokens themselves are chosen elsewhere."""
    rows = logits[: len(token_ids)].float()
    chosen = rows[torch.arange(len(token_ids)), torch.tensor(token_ids, device=rows.device)]
    return (chosen - rows.logsumexp(-1)).exp().tolist()


class TokenPicker:
    """The target's choice from one row of logits: argmax when greedy, else a warped, seeded sample."""

    def __init__(self, settings: DecodeSettings, device: torch.device | str = "cpu") -> None:
        self.settings = settings
        self.generator = torch.Generator(device=device)
        if settings.seed is not None:
            self.generator.manual_seed(settings.seed)
        else:
            self.generator.seed()

    def warp(self, logits: torch.Tensor) -> torch.Tensor:
        s = self.settings
        return warp_logits(logits, s.temperature, s.top_k, s.top_p)

    def pick(self, logits: torch.Tensor) -> int:
        if self.settings.greedy:
            return int(logits.argmax())
        return int(torch.multinomial(self.warp(logits), 1, generator=self.generator))


class OutputTracker:
    """Collects accepted tokens, applies every stop rule, and streams the text that is final."""

    def __init__(
        self,
        settings: DecodeSettings,
        decode: Decode,
        on_text: OnText | None = None,
        hidden_prefix: str = "",
    ) -> None:
        self.settings = settings
        self.decode = decode
        self.on_text = on_text
        self.hidden_prefix = hidden_prefix  # a forced prefix (`engine.healing`): generated, but already typed
        self.token_ids: list[int] = []
        self.token_probs: list[float] = []  # the target's probability of each token (`token_probabilities`)
        self.token_ends: list[int] = []  # where each token's text ends in the visible text
        self.text = ""
        self.finish: FinishReason | None = None
        self._streamed = ""
        stop_check = settings.stop_check
        self._confidence = stop_check if isinstance(stop_check, ConfidenceReader) else None

    @property
    def remaining(self) -> int:
        return self.settings.max_new_tokens - len(self.token_ids)

    def extend(self, new_ids: list[int], probs: Sequence[float] | None = None) -> None:
        """Add the tokens accepted this round (with the target's probability of each, when known); sets
        `finish` when a stop rule fires.

        The rules see the text after every token, also when a round accepted several: a rule that cuts
        before the text that triggered it then cuts at the same place in the plain and the speculative loop.
        Decoding a few hundred ids costs tens of microseconds.
        """
        for index, token in enumerate(new_ids):
            if token in self.settings.eos_ids:
                self.finish = "eos"
                break
            if self.remaining <= 0:
                break
            self.token_ids.append(token)
            self.token_probs.append(float(probs[index]) if probs is not None else float("nan"))
            if self.remaining <= 0:
                self.finish = "length"
            self._apply_stop_rules()
            if self.finish is not None:
                break
        self._stream()

    def cancel(self) -> None:
        if self.finish is None:
            self.finish = "cancelled"

    def result_parts(self) -> tuple[str, list[int]]:
        return self.text, self.token_ids

    def _apply_stop_rules(self) -> None:
        visible = self._visible(self.token_ids)
        self.token_ends.append(len(visible))
        if self._confidence is not None:
            self._confidence.read_token_probs(self.token_probs, self.token_ends)
        text, stopped = cut_at_stop(visible, self.settings.stop_strings, self.settings.stop_check)
        if stopped:
            self.token_ids = self._ids_covering(text)
            del self.token_probs[len(self.token_ids) :], self.token_ends[len(self.token_ids) :]
            self.finish = "stop"
        self.text = text

    def _visible(self, token_ids: list[int]) -> str:
        """The completion text of these ids: what follows the hidden prefix ("" while still inside it)."""
        text = self.decode(token_ids)
        if not self.hidden_prefix:
            return text
        return text[len(self.hidden_prefix) :] if text.startswith(self.hidden_prefix) else ""

    def _ids_covering(self, text: str) -> list[int]:
        """The shortest prefix of the accepted ids whose text covers the cut text (may overrun the cut)."""
        for count in range(len(self.token_ids) + 1):
            if len(self._visible(self.token_ids[:count]).rstrip("\ufffd")) >= len(text):
                return self.token_ids[:count]
        return self.token_ids

    def _stream(self) -> None:
        if self.on_text is None:
            return
        visible = self.text if self.finish is not None else self._settled(self.text)
        if len(visible) > len(self._streamed):
            self._streamed = visible
            self.on_text(visible)

    def _settled(self, text: str) -> str:
        """Hold back an incomplete UTF-8 character and any tail that could still become a stop string."""
        text = text.rstrip("\ufffd")
        hold = 0
        for stop in self.settings.stop_strings:
            for size in range(min(len(stop) - 1, len(text)), hold, -1):
                if text.endswith(stop[:size]):
                    hold = size
                    break
        return text[: len(text) - hold]


@dataclass
class Decoding:
    """One call from prefill to result, the part both loops share: `start_decoding` fits the prompt and
    prefills it, the loop feeds `output`, and `finish` turns what it produced into the result."""

    prompt_ids: list[int]  # as fitted to the window
    stats: EngineStats
    picker: TokenPicker
    output: OutputTracker
    forced: ForcedPrefix | None  # token healing's forced prefix (`engine.healing`), if any
    started: float  # perf_counter() times
    prefilled: float

    def finish(self, unfinished: FinishReason) -> CompletionResult:
        """The result; `unfinished` is the finish reason when no stop rule fired."""
        text, token_ids = self.output.result_parts()
        stats, end = self.stats, perf_counter()
        stats.prefill_s = self.prefilled - self.started
        stats.decode_s, stats.wall_s = end - self.prefilled, end - self.started
        stats.new_tokens = len(token_ids)
        stats.forced_tokens = self.forced.spelled_tokens if self.forced is not None else 0
        return CompletionResult(
            text=text,
            finish_reason=self.output.finish or unfinished,
            token_ids=token_ids,
            stats=stats,
            token_probs=list(self.output.token_probs),
            token_ends=list(self.output.token_ends),
        )


def start_decoding(
    target: CausalDecoder,
    prompt_ids: Sequence[int],
    settings: DecodeSettings,
    *,
    decode: Decode,
    on_text: OnText | None,
    forced: ForcedPrefix | None,
    cancel: CancelToken | None = None,
) -> Decoding:
    """Fit the prompt to the window (`fit_prompt`) and prefill it, reusing the cached prefix (`sync_cache`).
    Call under `torch.inference_mode()`."""
    started = perf_counter()
    fitted, dropped = fit_prompt(prompt_ids, target.max_length, settings.max_new_tokens)
    reused = sync_cache(target, fitted, cancel)
    prefilled = perf_counter()
    return Decoding(
        prompt_ids=fitted,
        stats=EngineStats(len(fitted), reused, dropped),
        picker=TokenPicker(settings, device_of(target)),
        output=OutputTracker(settings, decode, on_text, forced.text if forced is not None else ""),
        forced=forced,
        started=started,
        prefilled=prefilled,
    )
