"""Counters for `specls/stats` and `specls/status`, kept locally and never sent anywhere else, and the one
percentile that the server, the demo and the benchmarks report with."""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.api import SUMMED_STATS, CompletionResult


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0..100) by linear interpolation between closest ranks; None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0..100, got {p}")
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    fraction = rank - low
    if fraction == 0 or ordered[high] == ordered[low]:  # also keeps inf - inf from turning into nan
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


def _rounded(value: float | None) -> float | None:
    return round(value, 2) if value is not None else None


@dataclass
class Statistics:
    requests: int = 0
    answered_empty: int = 0
    typed_ahead_hits: int = 0
    cache_hits: int = 0  # answered from a finished suggestion made at this spot or on the way to it
    prefetches: int = 0  # generations started as if the suggestion on screen were accepted
    prefetch_hits: int = 0  # requests answered from a prefetch
    generations: int = 0
    finished_generations: int = 0  # the engine returned (whole, cut short, cancelled or failed)
    cancelled_generations: int = 0
    failed_generations: int = 0
    shown: int = 0
    accepted: int = 0
    partially_accepted: int = 0
    rejected: int = 0
    latencies_ms: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=500))
    engine_totals: collections.Counter[str] = field(default_factory=collections.Counter)
    # From a cancel to the engine returning (the worker is free again), per cancelled generation.
    cancel_to_idle_ms: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=500))
    last_engine_stats: dict[str, Any] = field(default_factory=dict)
    last_finish_reason: str | None = None
    # Completions each stop rule cut, by rule name ("repetition" is the degeneration guard).
    stop_rules_fired: collections.Counter[str] = field(default_factory=collections.Counter)
    # Empty answers by why: "superseded", "diverged", "mode-none:mid-word", "generated-nothing", ...
    empty_reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    # Warm-ups that ran, by why ("open", "cursor", "save", "idle"), and what the last one left cached:
    # (prompt tokens cached, prompt tokens).
    warmups: collections.Counter[str] = field(default_factory=collections.Counter)
    warm_cached: tuple[int, int] | None = None
    last_error: str | None = None  # the last failed completion, for the editors' status

    # --- recording: the scheduler and the feedback handlers count through these, never by writing fields ---

    def record_request(self) -> None:
        self.requests += 1

    def record_answer(self, latency_ms: float, empty_reason: str | None) -> None:
        """A request was answered: with a suggestion (`empty_reason` None), or empty, and why."""
        if empty_reason is not None:
            self.answered_empty += 1
            self.empty_reasons[str(empty_reason)] += 1
        self.latencies_ms.append(latency_ms)

    def record_typed_ahead_hit(self) -> None:
        self.typed_ahead_hits += 1

    def record_served(self, *, typed_ahead: bool, prefetched: bool) -> None:
        """A request answered from a finished suggestion: the one it typed ahead of, or one found again in
        the cache (`prefetched`: made by a prefetch that was never taken)."""
        if typed_ahead:
            self.typed_ahead_hits += 1
            return
        self.cache_hits += 1
        if prefetched:
            self.prefetch_hits += 1

    def record_prefetch_started(self) -> None:
        self.prefetches += 1

    def record_prefetch_taken(self) -> None:
        self.prefetch_hits += 1

    def record_generation_started(self) -> None:
        self.generations += 1

    def record_generation_done(self, result: CompletionResult | None, error: str | None) -> None:
        """The engine returned: `result` (whole, cut short or cancelled), or None when it raised `error`."""
        self.finished_generations += 1
        if result is not None:
            self.record_engine(result)
            if result.finish_reason == "cancelled":
                self.cancelled_generations += 1
        if error is not None:
            self.failed_generations += 1
            self.last_error = f"completion failed: {error}"

    def record_cancel_to_idle(self, ms: float) -> None:
        self.cancel_to_idle_ms.append(ms)

    def record_warm(self, trigger: str, cached_tokens: int, prompt_tokens: int) -> None:
        self.warmups[str(trigger)] += 1
        self.warm_cached = (cached_tokens, prompt_tokens)

    def record_shown(self) -> None:
        self.shown += 1

    def record_accepted(self) -> None:
        self.accepted += 1

    def record_partially_accepted(self) -> None:
        self.partially_accepted += 1

    def record_rejected(self) -> None:
        self.rejected += 1

    def record_engine(self, result: CompletionResult) -> None:
        self.last_finish_reason = result.finish_reason
        self.last_engine_stats = result.stats.as_dict()
        for key in SUMMED_STATS:
            self.engine_totals[key] += int(getattr(result.stats, key))
        self.stop_rules_fired.update(result.stats.stop_rules_fired)

    def acceptance_rate(self) -> float | None:
        decided = self.accepted + self.rejected
        return self.accepted / decided if decided else None

    def as_dict(self) -> dict[str, Any]:
        latencies = list(self.latencies_ms)
        return {
            "requests": self.requests,
            "answered_empty": self.answered_empty,
            "typed_ahead_hits": self.typed_ahead_hits,
            "cache_hits": self.cache_hits,
            "prefetches": self.prefetches,
            "prefetch_hits": self.prefetch_hits,
            "generations": self.generations,
            "finished_generations": self.finished_generations,
            "cancelled_generations": self.cancelled_generations,
            "failed_generations": self.failed_generations,
            "shown": self.shown,
            "accepted": self.accepted,
            "partially_accepted": self.partially_accepted,
            "rejected": self.rejected,
            "acceptance_rate": self.acceptance_rate(),
            "latency_ms": {
                "p50": _rounded(percentile(latencies, 50)),
                "p90": _rounded(percentile(latencies, 90)),
                "p99": _rounded(percentile(latencies, 99)),
                "count": len(latencies),
            },
            "engine_totals": dict(self.engine_totals),
            "cancel_to_idle_ms": list(self.cancel_to_idle_ms),
            "last_engine_stats": self.last_engine_stats,
            "last_finish_reason": self.last_finish_reason,
            "stop_rules_fired": dict(self.stop_rules_fired),
            # Pairs, not an object: pygls turns objects into named tuples, which rename keys like "mode-none:...".
            "empty_reasons": sorted(self.empty_reasons.items()),
            "warmups": dict(self.warmups),
            "warm_cached": list(self.warm_cached) if self.warm_cached is not None else None,
            "last_error": self.last_error,
        }
