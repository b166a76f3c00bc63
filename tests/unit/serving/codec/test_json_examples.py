"""Classify and Regress over REST (codec/json_examples.py): tf.Example from JSON, the answers.

Serialized examples are decoded by protobuf itself (tests/unit/serving/example_protos.py,
classes built from descriptors of TensorFlow's .proto files), not by the code
under test.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.serving import example_protos as ep
from tests.unit.serving.example_helpers import LIMIT, raises
from tf_entrypoint.serving.codec import json_examples, json_values
from tf_entrypoint.serving.core import inference
from tf_entrypoint.serving.core.errors import ServingError
from tf_entrypoint.serving.rest.errors import http_status


def f32(value: float) -> float:
    """`value` rounded to float32, as TensorFlow stores a float feature."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


def parse_body(body: bytes) -> json_examples.ExamplesRequest:
    return json_examples.parse_examples_request(body, limit=LIMIT)


# -- JSON -> tf.Example


def test_json_values_become_typed_features() -> None:
    serialized = json_examples.encode_example(
        {
            "age": 42,
            "ids": [1, -3, 2**63 - 1, -(2**63)],
            "flags": [True, False],
            "x": 0.1,
            "xs": [1.5, -2.0, 1e300],
            "word": "héllo",
            "blobs": ["a", {"b64": "AAH/"}],
            "empty": [],
            "huge": 2**70,
        }
    )
    assert ep.features(serialized) == {
        "age": ("int64_list", [42]),
        "ids": ("int64_list", [1, -3, 2**63 - 1, -(2**63)]),
        "flags": ("int64_list", [1, 0]),
        "x": ("float_list", [f32(0.1)]),
        "xs": ("float_list", [1.5, -2.0, math.inf]),
        "word": ("bytes_list", ["héllo".encode()]),
        "blobs": ("bytes_list", [b"a", b"\x00\x01\xff"]),
        "empty": (None, []),
        # rapidjson reads an integer beyond 64 bits as a double
        "huge": ("float_list", [f32(2.0**70)]),
    }


def test_an_empty_object_is_an_empty_example() -> None:
    assert json_examples.encode_example({}) == b""
    assert ep.features(json_examples.encode_example({})) == {}


_VALUE = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.floats(width=32, allow_nan=False),
    st.text(st.characters(exclude_categories=["Cs"])),
    st.binary().map(lambda b: {"b64": base64.b64encode(b).decode()}),
)


@given(st.dictionaries(st.text(max_size=8), st.lists(_VALUE, max_size=4)))
def test_any_json_example_decodes_to_its_values(document: dict[str, list[Any]]) -> None:
    """Homogeneous lists round-trip; a mixed list is refused (TF Serving's rule)."""

    def kind(value: Any) -> str:
        if isinstance(value, bool | int):
            return "int64_list"
        if isinstance(value, float):
            return "float_list"
        return "bytes_list"

    mixed = [name for name, values in document.items() if len({kind(v) for v in values}) > 1]
    body = json.loads(json.dumps(document))  # as the server sees it: ints stay ints
    if mixed:
        assert "Unexpected element type in feature:" in raises(json_examples.encode_example, body)
        return
    decoded = ep.features(json_examples.encode_example(body))
    assert set(decoded) == set(document)
    for name, values in document.items():
        want: list[Any] = []
        for value in values:
            if isinstance(value, dict):
                want.append(base64.b64decode(value["b64"]))
            elif isinstance(value, str):
                want.append(value.encode())
            else:
                want.append(value)
        assert decoded[name] == ((kind(values[0]) if values else None), want)


@pytest.mark.parametrize(
    ("example", "message"),
    [
        ([1], "Example must be JSON object but got JSON Array"),
        ("x", "Example must be JSON object but got JSON String"),
        ({"x": None}, "Feature: x has element with unexpected JSON type: Null"),
        ({"x": [[1]]}, "Feature: x has element with unexpected JSON type: Array"),
        ({"x": {"a": 1}}, "Feature: x has element with unexpected JSON type: Object"),
        ({"x": [1.5, 2]}, "Unexpected element type in feature: x expecting type: float"),
        ({"x": [1, 1.5]}, "Unexpected element type in feature: x expecting type: int64"),
        ({"x": ["a", True]}, "Unexpected element type in feature: x expecting type: bytes"),
        ({"x": 2**64 - 1}, "Feature: x has uint64_t element. Only int64_t is supported."),
        ({"x": {"b64": "!!"}}, "Unable to base64 decode"),
    ],
)
def test_bad_examples_get_tf_serving_errors(example: Any, message: str) -> None:
    assert raises(json_examples.encode_example, example) == message


# -- request bodies


def test_request_with_context_merges_it_into_every_example() -> None:
    body = {
        "signature_name": "classify",
        "context": {"y": 0.5, "lang": "en"},
        "examples": [{"x": 1.0}, {"x": 2.0, "y": 3.0}],
    }
    request = parse_body(json.dumps(body).encode())
    assert request.signature_name == "classify"
    assert [ep.features(e) for e in request.examples] == [
        {"x": ("float_list", [1.0]), "y": ("float_list", [0.5]), "lang": ("bytes_list", [b"en"])},
        # the example's own feature wins over the context's
        {"x": ("float_list", [2.0]), "y": ("float_list", [3.0]), "lang": ("bytes_list", [b"en"])},
    ]


def test_request_without_context_or_signature() -> None:
    request = parse_body(b'{"examples": [{"x": 1}, {}]}')
    assert request.signature_name == ""
    assert [ep.features(e) for e in request.examples] == [{"x": ("int64_list", [1])}, {}]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "JSON Parse error: The document is empty"),
        (b"[]", "JSON Value: [] Is not object"),
        (b"{}", "JSON Value: {} When method is classify, key 'examples' is expected"),
        (b'{"examples": {}}', "Expecting 'examples' value to be an list/array"),
        (b'{"examples": []}', "'examples' value is an empty array"),
        (b'{"signature_name": 1, "examples": [{}]}', "'signature_name' key must be a string"),
        (b'{"context": [], "examples": [{}]}', "Example must be JSON object but got JSON Array"),
        (b'{"examples": [{"x": null}]}', "Feature: x has element with unexpected JSON type"),
    ],
)
def test_bad_request_bodies(body: bytes, message: str) -> None:
    assert message in raises(parse_body, body)


# -- gRPC Input


# -- the bound on what a context multiplies


def test_a_context_copied_into_many_examples_is_refused_before_any_copy() -> None:
    """1,000 examples of 3 body bytes each and a 10 kB context: 10 MB once copied."""
    context = "A" * 10_000
    body = json.dumps({"context": {"pad": context}, "examples": [{}] * 1000}).encode()
    assert len(body) < 20_000
    with pytest.raises(ServingError) as caught:
        json_examples.parse_examples_request(body, limit=1_000_000)
    err = caught.value
    assert (http_status(err), err.code.name) == (413, "RESOURCE_EXHAUSTED")
    context_size = len(json_examples.encode_example({"pad": context}))
    assert err.message == (
        f"1000 examples with their context ({context_size} bytes) copied into each would "
        f"take {1000 * context_size} bytes, more than the limit of 1000000 bytes "
        "(8 x --max-body-bytes); send fewer examples per request or a smaller context, or "
        "raise --max-body-bytes"
    )


def test_the_limit_counts_the_examples_and_the_copies_exactly() -> None:
    context = json_examples.encode_example({"y": 0.5})
    example = json_examples.encode_example({"x": 1.0})
    body = json.dumps({"context": {"y": 0.5}, "examples": [{"x": 1.0}] * 3}).encode()
    exact = 3 * (len(context) + len(example))
    assert len(json_examples.parse_examples_request(body, limit=exact).examples) == 3
    with pytest.raises(ServingError, match=f"would take {exact} bytes"):
        json_examples.parse_examples_request(body, limit=exact - 1)


def test_examples_without_context_have_the_limit_too() -> None:
    body = json.dumps({"examples": [{"x": [1.0] * 100}] * 10}).encode()
    with pytest.raises(ServingError) as caught:
        json_examples.parse_examples_request(body, limit=1000)
    size = 10 * len(json_examples.encode_example({"x": [1.0] * 100}))
    assert caught.value.message.startswith(f"10 examples would take {size} bytes, more than")
    assert "send fewer examples per request, or raise --max-body-bytes" in caught.value.message


# -- signatures


# -- results


def test_json_results_as_tf_serving_writes_them() -> None:
    answer = json_examples.classify_json([[(b"a", 0.5), (b"\xff", 1.0)], [(b"", math.nan)]])
    assert answer == b'{"results":[[["a",0.5],["\\ufffd",1.0]],[["",NaN]]]}'
    assert (
        json_values.encode(json_examples.regress_response([1.0, math.nan]))
        == b'{"results":[1.0,NaN]}'
    )
    assert (
        raises(json_examples.classify_json, [])
        == "Cannot convert empty ClassificationResults to JSON"
    )
    assert (
        raises(json_examples.regress_response, [])
        == "Cannot convert empty RegressionResults to JSON"
    )


def test_a_classification_is_written_a_chunk_at_a_time_and_consumed() -> None:
    rows = 2 * json_examples.JSON_ROWS + 3
    result: inference.Classifications = [
        [(b"sum", float(i)), (b"diff", -float(i))] for i in range(rows)
    ]
    expected = json_values.encode(
        {"results": [[["sum", float(i)], ["diff", -float(i)]] for i in range(rows)]}
    )
    assert json_examples.classify_json(result) == expected
    assert result == []


# -- TensorFlow's messages
