"""The answer's JSON writer: orjson where it writes json's bytes, json elsewhere (issue 24).

json_values.encode_numbers must give exactly json_values.encode's bytes for
every body it is given (numbers, bools, lists, dicts with plain keys), and
predict_json the same answer whether orjson is there or not; and the common
answer (finite floats of any size) must be written by orjson, or the fast
path is gone without a test noticing.
"""

from __future__ import annotations

import json
import math
import random
import struct
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tf_entrypoint.serving.codec import json_tensor, json_values
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import ServingError

NUMBERS: list[Any] = [
    0.0, -0.0, 1.0, -2.5, 0.1, 100.0, 1e15, 1e16, 1.5e16, 9.999e15, 1e17, 1e22, 1e308,
    1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 1e-45, 3.4028234663852886e38,
    0.0001, 0.00015, 1e-4 * (1 - 2**-52), 9.99e-5, 1e-5, 1.2345e-5, 1e-6, 1e-7, 1e-9, 1e-10,
    1.5e-10, 1e-11, 2.7000000476837158, 2.2692308, 16777216.0, 123456789.0, 1234567890123456.8,
    0, -1, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30,
    True, False, math.nan, math.inf, -math.inf,
]  # fmt: skip


def random_numbers(seed: int, count: int) -> Iterator[list[Any]]:
    """Lists of 1,000: doubles of any bit pattern, float32 values widened, short decimals
    at every exponent, and integers of up to 64 bits."""
    generator = random.Random(seed)
    for _ in range(count):
        yield list(struct.unpack("<1000d", generator.randbytes(8000)))
        yield list(struct.unpack("<1000f", generator.randbytes(4000)))
        yield [
            round(generator.uniform(-1e6, 1e6), generator.randint(0, 9))
            * 10.0 ** generator.randint(-40, 40)
            for _ in range(1000)
        ]
        yield [generator.randint(-(2**63), 2**64 - 1) for _ in range(1000)]


def test_the_number_writer_writes_json_s_bytes_for_each_number() -> None:
    for value in NUMBERS:
        assert json_values.encode_numbers(value) == json_values.encode(value), value
        assert json_values.encode_numbers([value]) == json_values.encode([value]), value


def test_the_number_writer_writes_json_s_bytes_for_random_numbers() -> None:
    for values in random_numbers(24, 25):
        assert json_values.encode_numbers(values) == json_values.encode(values)
        for value in values[:50]:  # one at a time too: no neighbour hides a difference
            assert json_values.encode_numbers(value) == json_values.encode(value), value


BODIES: list[Any] = [
    {"predictions": [[1.0, 2.5], [1e-7, 3.0]]},
    {"predictions": [{"a": 1.5, "b": [1, 2]}, {"a": 2.5, "b": [3, 4]}]},
    {"outputs": {"y": [[True, False]], "z": 7}},
    [[[]]],
    {"é": 1.0},  # not a plain key: json escapes it, orjson would not
    {"predictions": ["ü"]},  # no string belongs here, but one is written as json writes it
    {"predictions": [1e-05]},
    {"null": 1.0, "e-1": 2.0},
]


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_the_number_writer_writes_json_s_bytes_for_whole_bodies(body: Any) -> None:
    assert json_values.encode_numbers(body) == json_values.encode(body)


def test_a_common_answer_is_written_by_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = random.Random(7)
    floats = [generator.uniform(-1e6, 1e6) for _ in range(2000)]
    floats += list(struct.unpack("<2000f", struct.pack("<2000f", *floats)))
    floats += [1e-4, 0.5, 1e-30, -3.5e38, 1e100, 16777216.0]  # exponents of two digits or more
    outputs = {"y": p.Tensor("DT_FLOAT", (len(floats),), floats)}
    expected = json_values.encode({"predictions": floats})

    def refused(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("json wrote the answer")

    monkeypatch.setattr(json, "dumps", refused)
    assert json_tensor.predict_json("row", outputs) == expected


@pytest.mark.parametrize(
    ("name", "plain"),
    [("y", True), ("scores/0:x-1", True), ("a b", True), ("é", False), ('a"', False),
     ("a\\b", False), ("a\nb", False), ("\x7f", False), ("", True)],
)  # fmt: skip
def test_plain_keys(name: str, plain: bool) -> None:
    assert json_values.plain_key(name) is plain
    if plain:
        assert json.dumps(name).encode() == orjson.dumps(name)


def answers(outputs: dict[str, p.Tensor], monkeypatch: pytest.MonkeyPatch) -> list[bytes | str]:
    """predict_json's answers (or errors), row and columnar, with orjson and without."""

    def answer(request_format: json_tensor.RequestFormat) -> bytes | str:
        try:
            return json_tensor.predict_json(request_format, outputs)
        except ServingError as err:
            return err.message

    found = []
    formats: tuple[json_tensor.RequestFormat, ...] = ("row", "columnar")
    for request_format in formats:
        found.append(answer(request_format))
        with monkeypatch.context() as patched:
            patched.setattr(json_values, "orjson", None)
            found.append(answer(request_format))
    return found


def tensor(dtype: str, shape: tuple[int, ...], values: list[Any]) -> p.Tensor:
    return p.Tensor(dtype, shape, values)


WIDE = json_tensor.JSON_VALUES + 5  # written in chunks
OUTPUTS: dict[str, dict[str, p.Tensor]] = {
    "one float": {"y": tensor("DT_FLOAT", (3,), [2.5, 0.1, 1e-7])},
    "nan": {"y": tensor("DT_FLOAT", (2,), [math.nan, -math.inf])},
    "two outputs": {
        "a": tensor("DT_FLOAT", (2, 2), [1.0, 2.0, 3.0, 1e-5]),
        "b": tensor("DT_INT64", (2,), [2**63 - 1, -(2**63)]),
    },
    "a scalar and a vector": {
        "s": tensor("DT_BOOL", (), [True]),
        "v": tensor("DT_UINT64", (1,), [2**64 - 1]),
    },
    "strings beside numbers": {
        "a": tensor("DT_FLOAT", (1,), [1.0]),
        "b": tensor("DT_STRING", (1,), [b"caf\xc3\xa9"]),
    },
    "a name orjson writes otherwise": {"é": tensor("DT_FLOAT", (1,), [1.0])},
    "wide": {"y": tensor("DT_FLOAT", (WIDE,), [i / 7 for i in range(WIDE)])},
    "wide, two outputs": {
        "a": tensor("DT_DOUBLE", (WIDE, 1), [i * 1e-3 for i in range(WIDE)]),
        "b": tensor("DT_INT32", (WIDE,), list(range(WIDE))),
    },
}


@pytest.mark.parametrize("case", list(OUTPUTS))
def test_an_answer_is_the_same_with_orjson_and_without(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = OUTPUTS[case]
    row, row_json, columnar, columnar_json = answers(outputs, monkeypatch)
    assert row == row_json
    assert columnar == columnar_json
    expected = json_tensor.predict_response("columnar", outputs)
    assert columnar == json_values.encode(expected)
