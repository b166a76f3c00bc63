"""Classify and Regress without TensorFlow: tf.Example from JSON, Input protos, the checks.

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
from tf_entrypoint.serving.codec import example_proto, json_examples, json_values
from tf_entrypoint.serving.core import inference, limits
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.rest.errors import http_status


def f32(value: float) -> float:
    """`value` rounded to float32, as TensorFlow stores a float feature."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


#: Room for every example these tests build (the limit has tests of its own).
LIMIT = 1 << 20


def parse_body(body: bytes) -> json_examples.ExamplesRequest:
    return json_examples.parse_examples_request(body, limit=LIMIT)


def serialized(message: Any) -> list[bytes]:
    return example_proto.serialized_examples(message, limit=LIMIT)


def raises(call: Any, *args: Any) -> str:
    with pytest.raises(ServingError) as caught:
        call(*args)
    assert caught.value.code == Code.INVALID_ARGUMENT
    return caught.value.message


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


def test_input_example_list() -> None:
    message = ep.Input()
    message.example_list.examples.add().CopyFrom(ep.example(x=1.0))
    message.example_list.examples.add().CopyFrom(ep.example(n=[1, 2], s=b"z"))
    assert [ep.features(e) for e in serialized(message)] == [
        {"x": ("float_list", [1.0])},
        {"n": ("int64_list", [1, 2]), "s": ("bytes_list", [b"z"])},
    ]


def test_input_with_context_merges_as_tf_serving() -> None:
    message = ep.Input()
    with_context = message.example_list_with_context
    with_context.context.CopyFrom(ep.example(y=0.5, x=9.0))
    with_context.examples.add().CopyFrom(ep.example(x=1.0))
    with_context.examples.add()  # an empty example gets the context alone
    assert [ep.features(e) for e in serialized(message)] == [
        {"x": ("float_list", [1.0]), "y": ("float_list", [0.5])},
        {"x": ("float_list", [9.0]), "y": ("float_list", [0.5])},
    ]


def test_empty_inputs_give_no_examples_and_the_servable_says_so() -> None:
    assert serialized(ep.Input()) == []
    message = ep.Input()
    message.example_list_with_context.context.CopyFrom(ep.example(y=1.0))
    assert serialized(message) == []
    assert raises(inference.check_examples, []) == "Input is empty."


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


def test_a_grpc_context_is_measured_before_it_is_copied() -> None:
    message = ep.Input()
    with_context = message.example_list_with_context
    with_context.context.CopyFrom(ep.example(pad=b"z" * 5000))
    for _ in range(100):
        with_context.examples.add()
    context_size = with_context.context.ByteSize()
    with pytest.raises(ServingError) as caught:
        example_proto.serialized_examples(message, limit=100 * context_size - 1)
    assert caught.value.code.name == "RESOURCE_EXHAUSTED"
    assert f"100 examples with their context ({context_size} bytes)" in caught.value.message
    assert len(example_proto.serialized_examples(message, limit=100 * context_size)) == 100


def test_a_grpc_example_list_has_the_limit_too() -> None:
    message = ep.Input()
    message.example_list.examples.add().CopyFrom(ep.example(pad=b"z" * 500))
    size = message.example_list.examples[0].ByteSize()
    assert serialized(message) == [message.example_list.examples[0].SerializeToString()]
    with pytest.raises(ServingError, match=f"1 example would take {size} bytes"):
        example_proto.serialized_examples(message, limit=size - 1)


def test_the_expansion_limit_is_eight_times_the_body_limit() -> None:
    assert limits.expansion_limit(8 * 1024 * 1024) == 64 * 1024 * 1024


# -- signatures

STR = p.TensorSpec("DT_STRING", (-1,))
F32 = p.TensorSpec("DT_FLOAT", (-1,))


def test_signature_lookup() -> None:
    signatures = {"serving_default": p.Signature({"x": F32}, {"y": F32})}
    assert inference.find_signature("", signatures) == "serving_default"
    assert raises(inference.find_signature, "nope", signatures) == (
        "No signature was found with the name: nope"
    )


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        (p.Signature({"inputs": STR, "b": STR}, {"scores": F32}), "Expected one input Tensor."),
        (p.Signature({"inputs": STR}, {}), "Expected one or two output Tensors, found 0"),
        (
            p.Signature({"inputs": STR}, {"a": F32, "b": F32, "c": F32}),
            "Expected one or two output Tensors, found 3",
        ),
        (p.Signature({"x": F32}, {"y": F32}), "No classification inputs found in SignatureDef: T"),
        (
            p.Signature({"inputs": STR}, {"y": F32}),
            'Expected classification signature outputs to contain at least one of "classes" '
            'or "scores". Signature was: T',
        ),
    ],
)
def test_classification_signature_checks(signature: p.Signature, message: str) -> None:
    assert raises(inference.check_classification_signature, signature, "T") == message


@pytest.mark.parametrize(
    ("signature", "message"),
    [
        (p.Signature({"inputs": STR, "b": STR}, {"outputs": F32}), "Expected one input Tensor."),
        (p.Signature({"inputs": STR}, {"outputs": F32, "b": F32}), "Expected one output Tensor."),
        (
            p.Signature({"x": STR}, {"outputs": F32}),
            "No regression inputs found in SignatureDef: T",
        ),
        (
            p.Signature({"inputs": STR}, {"y": F32}),
            "No regression outputs found in SignatureDef: T",
        ),
    ],
)
def test_regression_signature_checks(signature: p.Signature, message: str) -> None:
    assert raises(inference.check_regression_signature, signature, "T") == message


def test_method_name_check_is_off_by_default_as_in_tf_serving() -> None:
    native = p.Signature({"inputs": STR}, {"outputs": F32}, p.PREDICT_METHOD)
    inference.check_regression_signature(native, "T")  # TF2 exports say predict: accepted
    assert raises(
        lambda: inference.check_regression_signature(native, "T", method_name_check=True)
    ) == (
        "Expected regression signature method_name to be tensorflow/serving/regress. "
        "Was: tensorflow/serving/predict"
    )
    scores = p.Signature({"inputs": STR}, {"scores": F32}, p.PREDICT_METHOD)
    inference.check_classification_signature(scores, "T")
    assert raises(
        lambda: inference.check_classification_signature(scores, "T", method_name_check=True)
    ) == (
        "Expected classification signature method_name to be tensorflow/serving/classify. "
        "Was: tensorflow/serving/predict"
    )


# -- results


def test_classification_result_pairs_labels_and_scores() -> None:
    classes = p.Tensor("DT_STRING", (2, 2), [b"a", b"b", b"c", b"d"])
    scores = p.Tensor("DT_FLOAT", (2, 2), [0.25, 0.75, 1.0, 0.0])
    assert inference.classification_result(2, classes, scores) == [
        [(b"a", 0.25), (b"b", 0.75)],
        [(b"c", 1.0), (b"d", 0.0)],
    ]
    assert inference.classification_result(2, None, scores) == [
        [(b"", 0.25), (b"", 0.75)],
        [(b"", 1.0), (b"", 0.0)],
    ]
    assert inference.classification_result(2, classes, None) == [
        [(b"a", 0.0), (b"b", 0.0)],
        [(b"c", 0.0), (b"d", 0.0)],
    ]


@pytest.mark.parametrize(
    ("classes", "scores", "message"),
    [
        (
            p.Tensor("DT_STRING", (2,), [b"a", b"b"]),
            None,
            "Expected Tensor shape: [batch_size num_classes] but got [2]",
        ),
        (
            p.Tensor("DT_INT32", (2, 1), [1, 2]),
            None,
            "Expected classes Tensor of DT_STRING. Got: DT_INT32",
        ),
        (
            p.Tensor("DT_STRING", (3, 1), [b"a", b"b", b"c"]),
            None,
            "Expected classes output batch size of 2. Got: 3",
        ),
        (
            None,
            p.Tensor("DT_DOUBLE", (2, 1), [1.0, 2.0]),
            "Expected scores Tensor of DT_FLOAT. Got: DT_DOUBLE",
        ),
        (
            None,
            p.Tensor("DT_FLOAT", (1, 2), [1.0, 2.0]),
            "Expected scores output batch size of 2. Got: 1",
        ),
        (
            p.Tensor("DT_STRING", (2, 1), [b"a", b"b"]),
            p.Tensor("DT_FLOAT", (2, 2), [1.0, 2.0, 3.0, 4.0]),
            "Tensors class and score should match in dim_size(1). Got 1 vs. 2",
        ),
    ],
)
def test_classification_output_checks(
    classes: p.Tensor | None, scores: p.Tensor | None, message: str
) -> None:
    assert raises(inference.classification_result, 2, classes, scores) == message


def test_regression_result() -> None:
    assert inference.regression_result(2, p.Tensor("DT_FLOAT", (2,), [1.5, 2.5])) == [1.5, 2.5]
    assert inference.regression_result(2, p.Tensor("DT_FLOAT", (2, 1), [1.5, 2.5])) == [1.5, 2.5]


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (
            p.Tensor("DT_FLOAT", (2, 2), [1.0] * 4),
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
            "[2,2]",
        ),
        (
            p.Tensor("DT_FLOAT", (), [1.0]),
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got []",
        ),
        (
            p.Tensor("DT_FLOAT", (3,), [1.0] * 3),
            "Input batch size did not match output batch size: 2 vs. 3",
        ),
        (p.Tensor("DT_INT64", (2,), [1, 2]), "Expected output Tensor of DT_FLOAT.  Got: DT_INT64"),
    ],
)
def test_regression_output_checks(output: p.Tensor, message: str) -> None:
    assert raises(inference.regression_result, 2, output) == message


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


def test_tensorflow_error_message_keeps_the_kernel_message() -> None:
    eager = (
        "Graph execution error:\n\nDetected at node ParseExample/ParseExampleV2 defined at "
        '(most recent call last):\n  File "/x.py", line 3, in <module>\n\n  File '
        '"/y.py", line 9, in f\n\nName: <unknown>, Feature: x (data type: float) is required '
        "but could not be found.\n\t [[{{node ParseExample/ParseExampleV2}}]] "
        "[Op:__inference_pruned_131]"
    )
    assert inference.tensorflow_error_message(eager) == (
        "Name: <unknown>, Feature: x (data type: float) is required but could not be found.\n"
        "\t [[{{node ParseExample/ParseExampleV2}}]]"
    )
    loaded = (
        "Graph execution error:\n\nDetected at node StatefulPartitionedCall/dense/Add defined "
        "at (most recent call last):\n<stack traces unavailable>\nIn[0] is not a matrix\n\t "
        "[[{{node StatefulPartitionedCall/dense/Add}}]] [Op:__inference_serving_default_76]"
    )
    assert inference.tensorflow_error_message(loaded) == (
        "In[0] is not a matrix\n\t [[{{node StatefulPartitionedCall/dense/Add}}]]"
    )
    assert inference.tensorflow_error_message("plain message") == "plain message"
    assert inference.tensorflow_error_message("x" * 50, limit=10) == "x" * 10
