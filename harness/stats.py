"""The one statistics module of the tests and benchmarks: ONE percentile definition.

Percentiles are **nearest-rank**: the p-th percentile of n values is the
k-th smallest, k = ceil(p / 100 * n) (at least 1). It is always a value that
was observed (never an interpolation between two), p100 is the maximum, and
p99 of fewer than 100 values is the maximum too, which is the honest answer
for a short window. Before this module the benchmarks used two definitions
(this one, and `sorted[int(p / 100 * n)]`, which is one rank higher whenever
p / 100 * n is a whole number), plus `statistics.quantiles`' interpolation
for deciles; every bench module and test now calls `percentile`.

Stdlib only: the in-container probes import it too (bench/ and harness/ are
mounted side by side at /load, see bench/common.py's LOAD_MOUNTS).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

__all__ = ["latency_ms", "median", "percentile", "spread"]


def percentile(values: Iterable[float], p: float) -> float:
    """The nearest-rank p-th percentile (0 < p <= 100) of `values` (any order); nan if empty."""
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p}: from (0, 100]")
    ordered = sorted(values)
    if not ordered:
        return math.nan
    # round() first: 99 / 100 * 200 is 198.00000000000003 in floating point.
    rank = max(1, math.ceil(round(p / 100 * len(ordered), 9)))
    return ordered[rank - 1]


def median(values: Iterable[float]) -> float:
    """The median (the mean of the two middle values for an even count); nan if empty."""
    listed = list(values)
    return float(statistics.median(listed)) if listed else math.nan


def spread(values: Sequence[float], digits: int = 3) -> dict[str, float]:
    """median, p10 and p90 (nearest rank) of `values`, rounded."""
    return {
        "median": round(median(values), digits),
        "p10": round(percentile(values, 10), digits),
        "p90": round(percentile(values, 90), digits),
    }


def latency_ms(
    seconds: Iterable[float], points: Sequence[float] = (50, 99), digits: int = 3
) -> dict[str, float]:
    """`pNN_ms` for each of `points` and `max_ms`, from latencies in seconds; 0.0 when empty
    (a window with no answer has no latency, and JSON has no nan)."""
    ordered = sorted(seconds)
    found = {f"p{p:g}_ms": round(percentile(ordered, p) * 1e3, digits) if ordered else 0.0
             for p in points}  # fmt: skip
    found["max_ms"] = round(ordered[-1] * 1e3, digits) if ordered else 0.0
    return found
