"""tests/tf_text.py: TensorFlow's host-dependent words normalized, on the texts seen."""

from __future__ import annotations

import pytest

from tests.tf_text import SEEN, tf_text


@pytest.mark.parametrize(("text", "normalized"), SEEN)
def test_each_text_seen_is_normalized(text: str, normalized: str) -> None:
    assert tf_text(text) == normalized


def test_what_a_host_does_not_decide_is_left_as_it_is() -> None:
    plain = "Expects arg[0] to be float but int32 is provided"
    assert tf_text(plain) == plain
    for _, normalized in SEEN:  # a placeholder is not normalized again
        assert tf_text(normalized) == normalized
