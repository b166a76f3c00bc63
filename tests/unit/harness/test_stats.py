"""harness/stats.py: the one percentile definition (nearest rank), on made-up values."""

from __future__ import annotations

import math

import pytest

from harness.stats import latency_ms, median, percentile, spread


def test_percentile_is_the_nearest_rank() -> None:
    values = list(range(1, 101))  # 1..100, shuffled order does not matter
    assert percentile(reversed(values), 50) == 50
    assert percentile(values, 99) == 99  # rank ceil(0.99 * 100) = 99, not the maximum
    assert percentile(values, 100) == 100
    assert percentile(values, 1) == 1
    assert percentile(values, 0.5) == 1
    assert percentile(range(1, 201), 99) == 198  # no floating-point rank of 198.00000000000003


def test_short_windows_give_an_observed_value() -> None:
    assert percentile([3.0, 1.0, 2.0], 99) == 3.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0  # nearest rank: the 2nd, never 2.5
    assert percentile([7.0], 10) == 7.0


def test_empty_and_out_of_range() -> None:
    assert math.isnan(percentile([], 50))
    assert math.isnan(median([]))
    for wrong in (0, -1, 100.5):
        with pytest.raises(ValueError, match="percentile"):
            percentile([1.0], wrong)


def test_spread_and_latency_figures() -> None:
    assert spread([float(x) for x in range(1, 11)]) == {"median": 5.5, "p10": 1.0, "p90": 9.0}
    figures = latency_ms([0.001 * x for x in range(1, 101)])
    assert figures == {"p50_ms": 50.0, "p99_ms": 99.0, "max_ms": 100.0}
    assert latency_ms([], (50, 90, 99)) == {
        "p50_ms": 0.0,
        "p90_ms": 0.0,
        "p99_ms": 0.0,
        "max_ms": 0.0,
    }


def test_no_bench_module_defines_a_percentile_of_its_own() -> None:
    from pathlib import Path  # noqa: PLC0415

    root = Path(__file__).resolve().parents[3]
    for path in [*(root / "bench").glob("*.py"), *(root / "tests").rglob("*.py")]:
        if path == Path(__file__).resolve():
            continue
        text = path.read_text()
        assert "statistics.quantiles" not in text, path
        assert "int(q / 100" not in text, path
        assert "def pct(" not in text, path
