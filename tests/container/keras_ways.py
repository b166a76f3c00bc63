"""What check_loading.py's `keras` check answers, checked: shared by
test_saved_model_loading (Keras 3, the image) and tests/matrix/test_serving.py
(Keras 2, the Python 3.10 cell)."""

from __future__ import annotations

from typing import Any

import pytest


def assert_keras_ways(ways: dict[str, Any], set_from_copies: dict[str, bool]) -> None:
    """check_loading.py keras's answer: each way a Session bundle (its variables
    set from their copies or not, as given), answering as tf.saved_model.load."""
    assert set(ways) == set(set_from_copies), ways
    for way, answers in ways.items():
        assert answers["session"][0] == "SessionBundle", (way, answers)
        assert answers["tf2"][0] == "FunctionBundle", (way, answers)
        assert answers["set_from_copies"] is set_from_copies[way], (way, answers)
        assert len(answers["session"][1]) == 6, (way, answers)
        assert answers["session"][1] == pytest.approx(answers["tf2"][1], rel=1e-5), (way, answers)
