"""Shared facts about the classify/regress model (library folder "examples":
make_models.py --kind classify_regress) for the tests that call it."""

from __future__ import annotations

import struct

#: A REST classify/regress body: a context (y) and three examples.
BODY = {"context": {"y": 0.2}, "examples": [{"x": 0.1}, {"x": 1.5, "y": 3.0}, {"x": -2.25}]}


def f32(value: float) -> float:
    """`value` rounded to float32 (TensorFlow's arithmetic here is float32, step by step)."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded
