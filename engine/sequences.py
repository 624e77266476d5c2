"""Sequence arithmetic shared by the engine, the context builder and the benchmarks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def common_prefix_length(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Length of the longest common prefix of two token lists or strings, by bisection on slice equality
    (C-speed compares)."""
    if type(a) is not type(b):  # a list never equals a tuple, so compare like with like
        a, b = list(a), list(b)
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def first_divergence(reference: Sequence[int], other: Sequence[int]) -> int | None:
    """Index of the first position where two token sequences differ (one ending early counts); None if equal."""
    shared = common_prefix_length(reference, other)
    return None if shared == len(reference) == len(other) else shared
