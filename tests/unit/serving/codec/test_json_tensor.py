"""TF Serving's REST predict, no TensorFlow (codec/json_tensor.py): parsing, validation, answers."""

from __future__ import annotations

import array
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tf_entrypoint.serving.codec import json_tensor, json_values
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import Code, ServingError

F32 = p.TensorSpec("DT_FLOAT", (-1,), "serving_default_x:0")
HALF_PLUS_TWO = p.Signature(inputs={"x": F32}, outputs={"y": p.TensorSpec("DT_FLOAT", (-1,))})
TWO_INPUTS = p.Signature(
    inputs={"x": F32, "scale": p.TensorSpec("DT_FLOAT", (-1,))},
    outputs={"y": F32, "scaled": F32},
)
MATRIX = p.Signature(inputs={"m": p.TensorSpec("DT_FLOAT", (-1, 2))}, outputs={})
#: One instance nested 33 lists deep: one more than MAX_RANK.
DEEP: Any = 1.0
for _ in range(json_values.MAX_RANK + 1):
    DEEP = [DEEP]
SIGNATURES = {"serving_default": HALF_PLUS_TWO, "two_inputs": TWO_INPUTS, "matrix": MATRIX}


def f32(shape: tuple[int, ...], values: list[float]) -> p.Tensor:
    """A DT_FLOAT tensor as a request's values are parsed: a compact float32 array."""
    return p.Tensor("DT_FLOAT", shape, array.array("f", values))


def parse(document: dict[str, Any]) -> json_tensor.PredictRequest:
    return json_tensor.parse_predict_request(document, SIGNATURES)


def error(document: dict[str, Any] | bytes) -> ServingError:
    def attempt() -> None:
        parse(json_values.parse_json_object(document) if isinstance(document, bytes) else document)

    with pytest.raises(ServingError) as caught:
        attempt()
    return caught.value


# -- request bodies


def test_row_format_single_input() -> None:
    request = parse({"instances": [1.0, 2.0]})
    assert request == json_tensor.PredictRequest(
        "serving_default", "row", {"x": f32((2,), [1.0, 2.0])}
    )


def test_integers_are_accepted_for_floats() -> None:
    assert list(parse({"instances": [1, 2]}).inputs["x"].values) == [1.0, 2.0]


def test_row_format_objects_for_a_single_input() -> None:
    request = parse({"instances": [{"x": 1.0}, {"x": 3.0}]})
    assert request.inputs["x"] == f32((2,), [1.0, 3.0])


def test_row_format_multiple_inputs() -> None:
    request = parse(
        {"signature_name": "two_inputs", "instances": [{"x": 1, "scale": 2}, {"x": 3, "scale": 4}]}
    )
    assert request.signature_name == "two_inputs"
    assert request.inputs == {
        "x": f32((2,), [1.0, 3.0]),
        "scale": f32((2,), [2.0, 4.0]),
    }


def test_columnar_format() -> None:
    assert parse({"inputs": [1.0, 2.0]}).format == "columnar"
    assert list(parse({"inputs": {"x": [5.0]}}).inputs["x"].values) == [5.0]
    request = parse({"signature_name": "two_inputs", "inputs": {"x": [1.0], "scale": [2.0]}})
    assert request.inputs["scale"] == f32((1,), [2.0])


def test_matrix_rows() -> None:
    request = parse({"signature_name": "matrix", "instances": [[1, 2], [3, 4], [5, 6]]})
    assert request.inputs["m"] == f32((3, 2), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])


@pytest.mark.parametrize(
    ("document", "name", "shape"),
    [
        ({"instances": [[1.0], [2.0]]}, "x", (2, 1)),
        ({"inputs": 1.0}, "x", ()),
        ({"inputs": [[[1.0]]]}, "x", (1, 1, 1)),
        ({"signature_name": "matrix", "instances": [[1, 2, 3]]}, "m", (1, 3)),
        ({"signature_name": "matrix", "inputs": [1, 2, 3]}, "m", (3,)),
    ],
)
def test_shapes_are_not_checked_against_the_signature(
    document: dict[str, Any], name: str, shape: tuple[int, ...]
) -> None:
    """As TF Serving: the tensor goes to the graph, which answers or refuses it
    (half_plus_two's [-1, 1] answers a row of three scalars)."""
    assert parse(document).inputs[name].shape == shape


def test_nan_and_infinity_are_numbers() -> None:
    values = parse(
        json_values.parse_json_object(b'{"instances": [NaN, Infinity, -Infinity]}')
    ).inputs["x"]
    assert math.isnan(values.values[0])
    assert list(values.values[1:]) == [math.inf, -math.inf]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "JSON Parse error: The document is empty"),
        (b"{", "JSON Parse error: Expecting property name enclosed in double quotes at offset: 1"),
        (b"[1, 2]", "JSON Value: [1, 2] Is not object"),
        (b'{"instances": [1.0]} x', "JSON Parse error: Extra data at offset: 21"),
        (b"\xff\xfe\x00", "JSON Parse error"),
        (b"[" * 100_000, "JSON Parse error"),
        (b'{"instances": [' + b"9" * 5000 + b"]}", "JSON Parse error"),
    ],
)
def test_malformed_json(body: bytes, message: str) -> None:
    err = error(body)
    assert err.code == Code.INVALID_ARGUMENT
    assert err.message.startswith(message)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({}, "Missing 'inputs' or 'instances' key"),
        ({"instances": [1.0], "inputs": [1.0]}, "expecting only one of 'inputs' or 'instances'"),
        ({"instances": []}, "No values in 'instances' array"),
        ({"instances": 1.0}, "Excepting 'instances' to be an list/array"),
        ({"signature_name": "nope", "instances": [1.0]}, 'Serving signature name: "nope" not'),
        ({"signature_name": 3, "instances": [1.0]}, "'signature_name' key must be a string"),
        ({"instances": ["a"]}, 'JSON Value: "a" Type: String is not of expected type: float'),
        ({"instances": [True]}, "JSON Value: true Type: True is not of expected type: float"),
        ({"instances": [None]}, "JSON Value: null Type: Null is not of expected type: float"),
        ({"instances": [10**400]}, "is too big to be stored in a double"),
        ({"instances": [1.0, [2.0]]}, "Expecting shape [] but got: [1]"),
        ({"instances": [{"x": 1.0}, 2.0]}, "Expecting object but got list at item 1"),
        ({"instances": [1.0, {"x": 2.0}]}, "Expecting value/list but got object at item 1"),
        ({"instances": [{"y": 1.0}]}, "does not have named input: y"),
        ({"inputs": {"y": [1.0]}}, "Missing named input: x in 'inputs' object."),
        ({"signature_name": "two_inputs", "instances": [1.0]}, "instances is a plain list"),
        ({"signature_name": "two_inputs", "inputs": [1.0]}, "inputs is a plain value/list"),
        (
            {"signature_name": "two_inputs", "instances": [{"x": 1.0}]},
            "keys must be equal to: scale,x",
        ),
        (
            {"signature_name": "matrix", "instances": [[1, 2], [3]]},
            "Expecting tensor size: 2 but got: 1",
        ),
        (
            {"signature_name": "matrix", "instances": [[[1, 2]], [1, 2]]},
            "Expecting shape [1,2] but got: [2]",
        ),
        (
            {
                "signature_name": "two_inputs",
                "instances": [{"x": 1, "scale": 2}, {"x": [3], "scale": 4}],
            },
            "Failed to process element: 1 key: x of 'instances' list. "
            "Error: Expecting shape [] but got: [1]",
        ),
        ({"signature_name": "matrix", "inputs": [[1, 2], [3]]}, "unexpected size: 1"),
        ({"signature_name": "matrix", "instances": [[1, 2], [3, [4]]]}, "unexpected level"),
        ({"signature_name": "matrix", "inputs": [[1, 2], 3]}, "found at incorrect level"),
        ({"instances": [DEEP]}, "deeper"),
    ],
)
def test_bad_requests_are_400(document: dict[str, Any], message: str) -> None:
    err = error(document)
    assert err.code == Code.INVALID_ARGUMENT
    assert message in err.message


def test_error_messages_quote_at_most_a_few_hundred_characters() -> None:
    err = error({"instances": ["x" * 100_000]})
    assert len(err.message) < 400


@pytest.mark.parametrize(
    ("dtype", "good", "bad"),
    [
        ("DT_INT8", [-128, 127], [128, 1.0, True]),
        ("DT_UINT8", [0, 255], [-1, 256]),
        ("DT_INT32", [-(2**31), 2**31 - 1], [2**31, "1"]),
        ("DT_INT64", [2**63 - 1], [2**63, 1.5]),
        ("DT_UINT64", [2**64 - 1], [-1, 2**64]),
        ("DT_BOOL", [True, False], [0, 1, "true"]),
        ("DT_DOUBLE", [1.5, 2**53 + 1, 1e308], ["1", True, 10**400]),
        ("DT_HALF", [65504.0, 65520.0, 1], ["1", None]),
        ("DT_BFLOAT16", [1.0, 1e39, 3], ["1", False]),
        ("DT_STRING", ["héllo", {"b64": "aGk="}], [1, {"b64": "!!"}, {"b64": 1}, "\ud800"]),
        ("DT_COMPLEX64", [], [1.0]),
    ],
)
def test_dtypes(dtype: str, good: list[Any], bad: list[Any]) -> None:
    spec = p.TensorSpec(dtype, None)
    for value in good:
        json_tensor.to_tensor(value, spec)
    for value in bad:
        with pytest.raises(ServingError) as caught:
            json_tensor.to_tensor(value, spec)
        assert caught.value.code == Code.INVALID_ARGUMENT, value


def test_strings_become_bytes() -> None:
    spec = p.TensorSpec("DT_STRING", (-1,))
    assert json_tensor.to_tensor(["héllo", {"b64": "aGk="}], spec).values == [
        b"h\xc3\xa9llo",
        b"hi",
    ]


# -- answers


def test_single_output_row_format_is_a_flat_list() -> None:
    outputs = {"y": f32((2,), [2.5, 3.0])}
    assert json_tensor.predict_response("row", outputs) == {"predictions": [2.5, 3.0]}
    assert json_tensor.predict_response("columnar", outputs) == {"outputs": [2.5, 3.0]}


def test_multiple_outputs() -> None:
    outputs = {
        "y": f32((2,), [2.5, 3.0]),
        "scaled": f32((2,), [5.0, 12.0]),
    }
    assert json_tensor.predict_response("row", outputs) == {
        "predictions": [{"scaled": 5.0, "y": 2.5}, {"scaled": 12.0, "y": 3.0}]
    }
    assert json_tensor.predict_response("columnar", outputs) == {
        "outputs": {"scaled": [5.0, 12.0], "y": [2.5, 3.0]}
    }


def test_row_format_needs_a_common_batch_size() -> None:
    outputs = {"a": f32((2,), [1.0, 2.0]), "b": f32((1,), [1.0])}
    with pytest.raises(ServingError, match="inconsistent batch size"):
        json_tensor.predict_response("row", outputs)
    with pytest.raises(ServingError, match="no shape information"):
        json_tensor.predict_response("row", {"a": f32((), [1.0])})
    assert json_tensor.predict_response("columnar", {"a": f32((), [1.0])}) == {"outputs": 1.0}


def test_string_outputs() -> None:
    outputs = {
        "text": p.Tensor("DT_STRING", (2,), [b"caf\xc3\xa9", b"\xff"]),
        "raw_bytes": p.Tensor("DT_STRING", (1,), [b"hi"]),
    }
    assert json_tensor.predict_response("columnar", outputs) == {
        "outputs": {"raw_bytes": [{"b64": "aGk="}], "text": ["café", {"b64": "/w=="}]}
    }


@pytest.mark.parametrize("big", [False, True])
def test_every_dtype_the_rest_api_reads_is_written_and_any_other_is_a_400(big: bool) -> None:
    """Half and bfloat16 too (numbers, as they are read), float8, float4, int4 and int2;
    complex, quantized, variant and resource: INVALID_ARGUMENT in TF Serving's words,
    naming the output, before anything is written (also where the answer is written in
    chunks)."""
    rows = json_tensor.JSON_VALUES + 1 if big else 2
    assert json_values.SUPPORTED_DTYPES < json_values.WRITTEN_DTYPES
    for dtype in sorted(json_values.WRITTEN_DTYPES):
        value: Any = {"DT_STRING": b"a", "DT_BOOL": True}.get(dtype, 1.5)
        if dtype.startswith(("DT_INT", "DT_UINT")):
            value = 3
        outputs = {"y": p.Tensor(dtype, (rows,), [value] * rows)}
        for request_format in ("row", "columnar"):
            body = json_tensor.predict_json(request_format, outputs)
            written = {"DT_STRING": "a"}.get(dtype, value)
            key = "predictions" if request_format == "row" else "outputs"
            assert json_values.loads(body) == {key: [written] * rows}, dtype
    for dtype in ("DT_COMPLEX64", "DT_COMPLEX128", "DT_QINT8", "DT_QUINT16", "DT_VARIANT",
                  "DT_RESOURCE"):  # fmt: skip
        outputs = {"fine": f32((rows,), [1.0] * rows), "z": p.Tensor(dtype, (rows,), [1j] * rows)}
        for request_format in ("row", "columnar"):
            with pytest.raises(ServingError) as caught:
                json_tensor.predict_json(request_format, outputs)  # type: ignore[arg-type]
            assert caught.value.code == Code.INVALID_ARGUMENT
            kind = dtype.removeprefix("DT_").lower()
            assert caught.value.message == (
                f"Failed to write JSON value for tensor type: {kind} (output: z)"
            )


def test_an_input_dtype_json_cannot_carry_is_refused_naming_it() -> None:
    complex_input = p.Signature({"z": p.TensorSpec("DT_COMPLEX64", (-1,))}, {"y": F32})
    signatures = {"serving_default": complex_input}
    for document, message in (
        ({"inputs": [1.0]}, "Conversion of JSON Value: 1.0 to type: complex64 (input: z)"),
        (
            {"instances": [1.0]},
            "Failed to process element: 0 of 'instances' list. Error: Conversion of JSON "
            "Value: 1.0 to type: complex64 (input: z)",
        ),
    ):
        with pytest.raises(ServingError) as caught:
            json_tensor.parse_predict_request(document, signatures)
        assert (caught.value.code, caught.value.message) == (Code.INVALID_ARGUMENT, message)


def test_no_outputs_is_tf_serving_s_invalid_argument() -> None:
    for request_format in ("row", "columnar"):
        with pytest.raises(ServingError) as caught:
            json_tensor.predict_json(request_format, {})
        assert caught.value.code == Code.INVALID_ARGUMENT
        assert caught.value.message == "Cannot convert empty tensor map to JSON"


def test_nan_is_written_as_tf_serving_does() -> None:
    body = json_values.encode(
        json_tensor.predict_response("row", {"y": f32((2,), [math.nan, 1.0])})
    )
    assert body == b'{"predictions":[NaN,1.0]}'


@given(st.lists(st.integers(min_value=1, max_value=3), max_size=4))
def test_nest_and_flatten_round_trip(shape: list[int]) -> None:
    values = list(range(math.prod(shape)))
    tensor = json_tensor.to_tensor(json_tensor.nest(values, shape), p.TensorSpec("DT_INT64", None))
    assert tensor.shape == tuple(shape)
    assert tensor.values == array.array("q", values)


def test_nest_with_empty_dimensions() -> None:
    assert json_tensor.nest([], (2, 0)) == [[], []]
    assert json_tensor.nest([], (0, 3)) == []
    assert json_tensor.nest([5], ()) == 5


_DIMS = st.lists(st.integers(min_value=0, max_value=3), max_size=3)


@st.composite
def _outputs(draw: st.DrawFn) -> dict[str, p.Tensor]:
    """1-3 outputs: floats, ints, text and bytes, sharing a first dimension (or not)."""
    batch = draw(st.integers(min_value=0, max_value=4))
    names = draw(st.lists(st.sampled_from(["y", "b_bytes", "s", "n"]), min_size=1,
                          max_size=3, unique=True))  # fmt: skip
    outputs = {}
    for name in names:
        shape = tuple(draw(_DIMS)) if draw(st.booleans()) else (batch, *draw(_DIMS))
        count = math.prod(shape)
        if name in ("s", "b_bytes"):
            values: list[Any] = [b"\xff" if i % 2 else f"v{i}".encode() for i in range(count)]
            outputs[name] = p.Tensor("DT_STRING", shape, values)
        elif name == "n":
            outputs[name] = p.Tensor("DT_INT64", shape, list(range(count)))
        else:
            outputs[name] = f32(shape, [i / 4 for i in range(count)])
    return outputs


@given(_outputs(), st.sampled_from(["row", "columnar"]), st.integers(min_value=1, max_value=5))
def test_an_answer_written_in_chunks_is_the_whole_answer(
    outputs: dict[str, p.Tensor], request_format: json_tensor.RequestFormat, chunk: int
) -> None:
    def outcome(write: Callable[[], bytes]) -> bytes | tuple[int, str]:
        try:
            return write()
        except ServingError as err:  # the same checks, the same errors
            return err.code, err.message

    saved = json_tensor.JSON_VALUES
    json_tensor.JSON_VALUES = chunk  # rows of a few values at a time
    try:
        expected = outcome(
            lambda: json_values.encode(json_tensor.predict_response(request_format, outputs))
        )
        assert outcome(lambda: json_tensor.predict_json(request_format, outputs)) == expected
    finally:
        json_tensor.JSON_VALUES = saved
