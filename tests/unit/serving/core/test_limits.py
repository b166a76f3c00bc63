"""The bounds on what a request may cost (core/limits.py)."""

from __future__ import annotations

from tf_entrypoint.serving.core import limits


def test_the_expansion_limit_is_eight_times_the_body_limit() -> None:
    assert limits.expansion_limit(8 * 1024 * 1024) == 64 * 1024 * 1024
