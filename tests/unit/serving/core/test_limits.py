"""The bounds on what a request may cost (core/limits.py)."""

from __future__ import annotations

import ctypes

import pytest

from tf_entrypoint.serving.core import limits
from tf_entrypoint.serving.core.errors import ServingError
from tf_entrypoint.serving.rest.errors import http_status


def test_the_expansion_limit_is_eight_times_the_body_limit() -> None:
    assert limits.expansion_limit(8 * 1024 * 1024) == 64 * 1024 * 1024


def test_element_count_follows_tensorshape_isvalid() -> None:
    assert limits.element_count("x", []) == 1
    assert limits.element_count("x", [2, 3]) == 6
    assert limits.element_count("x", [0, 2**62, 4]) == 0
    assert limits.element_count("x", [1] * 254) == 1
    for dims in ([-1], [3, -2], [1] * 255, [2**62, 4, 0], [2**32, 2**31]):
        with pytest.raises(ServingError) as caught:
            limits.element_count("x", dims)
        assert (http_status(caught.value), caught.value.message) == (400, "tensor parsing error: x")


def test_strings_count_their_bytes_and_sixteen_each() -> None:
    # one 5-byte string filling 10 elements
    assert limits.string_bytes(10, sent=1, sent_bytes=5, last_bytes=5) == 10 * 16 + 5 + 9 * 5
    # none: empty strings
    assert limits.string_bytes(10, sent=0, sent_bytes=0, last_bytes=0) == 160
    # more sent than the shape holds: only those used count (the caller sums them)
    assert limits.string_bytes(2, sent=5, sent_bytes=7, last_bytes=3) == 32 + 7


def test_a_spelled_out_string_never_meets_the_limit() -> None:
    """Each string takes at least its length + 2 bytes on the wire (tag and length),
    so one the message spells out counts at most EXPANSION times its wire size."""
    for length in (0, 1, 10, 1000):
        counted = limits.string_bytes(1, sent=1, sent_bytes=length, last_bytes=length)
        assert counted <= limits.EXPANSION * (length + 2)


def test_too_large_is_413_resource_exhausted_naming_the_flag() -> None:
    err = limits.too_large("The thing", 100, 64, "send less")
    assert (http_status(err), err.code.name) == (413, "RESOURCE_EXHAUSTED")
    assert err.message == (
        "The thing would take 100 bytes, more than the limit of 64 bytes "
        "(8 x --max-body-bytes); send less, or raise --max-body-bytes"
    )


def test_check_examples_allows_exactly_the_limit() -> None:
    limits.check_examples(10, [5, 5], 30)
    with pytest.raises(ServingError, match=r"2 examples with their context \(10 bytes\) copied"):
        limits.check_examples(10, [5, 6], 30)
    with pytest.raises(ServingError, match=r"^1 example would take 31 bytes"):
        limits.check_examples(0, [31], 30)


def test_request_limits() -> None:
    request_limits = limits.RequestLimits.of(1000, workers=3)
    assert request_limits.expansion == 8000
    slots = [request_limits.converting.acquire(blocking=False) for _ in range(4)]
    assert slots == [True, True, True, False]


def test_malloc_arenas_are_two_per_worker_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[int, int]] = []

    class Libc:
        @staticmethod
        def mallopt(param: int, value: int) -> int:
            calls.append((param, value))
            return 1

    monkeypatch.setattr(ctypes, "CDLL", lambda name: Libc())
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert limits.limit_malloc_arenas(3) == 6
    assert limits.limit_malloc_arenas(1) == 2
    assert calls == [(-8, 6), (-8, 2)]  # M_ARENA_MAX
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limits.limit_malloc_arenas(3) is None
    assert len(calls) == 2
