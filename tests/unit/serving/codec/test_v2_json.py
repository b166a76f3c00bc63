"""Open Inference Protocol REST bodies (codec/v2_json.py): infer requests and
answers with the binary data extension, the metadata answers."""

from __future__ import annotations

import array
import json
import struct
from typing import Any

import pytest

from tf_entrypoint.serving.codec import v2_json
from tf_entrypoint.serving.codec.v2_json import InferRequest, RequestedOutput
from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.types import Signature, Tensor, TensorSpec

LIMIT = 1 << 20
SPECS = {
    "x": TensorSpec("DT_FLOAT", (-1, 3)),
    "n": TensorSpec("DT_INT64", None),
    "s": TensorSpec("DT_STRING", (-1,)),
}


def parse(document: Any, binary: bytes = b"", header: bool | None = None) -> InferRequest:
    text = json.dumps(document).encode()
    with_header = bool(binary) if header is None else header
    return v2_json.parse_infer_request(
        text + binary, len(text) if with_header else None, SPECS, LIMIT
    )


def fails(document: Any, message: str, binary: bytes = b"") -> None:
    with pytest.raises(ServingError) as caught:
        parse(document, binary)
    assert caught.value.code is Code.INVALID_ARGUMENT
    assert message in caught.value.message, caught.value.message


def x_input(**fields: Any) -> dict[str, Any]:
    return {"name": "x", "shape": [1, 3], "datatype": "FP32", **fields}


# --------------------------------------------------------------------------
# Requests


def test_a_json_request() -> None:
    request = parse(
        {
            "id": "42",
            "parameters": {"signature_name": "serving_default"},
            "inputs": [
                x_input(data=[[1.0, 2.0, 3.0]]),
                {"name": "n", "shape": [2], "datatype": "INT64", "data": [1, -2]},
                {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["é"]},
            ],
            "outputs": [{"name": "y"}, {"name": "z", "parameters": {"binary_data": True}}],
            "extra": "ignored",
        }
    )
    assert request.id == "42"
    assert request.parameters == {"signature_name": "serving_default"}
    assert request.inputs["x"] == Tensor("DT_FLOAT", (1, 3), array.array("f", [1, 2, 3]))
    assert request.inputs["n"] == Tensor("DT_INT64", (2,), array.array("q", [1, -2]))
    assert request.inputs["s"] == Tensor("DT_STRING", (1,), ["é".encode()])
    assert request.outputs == [
        RequestedOutput("y"),
        RequestedOutput("z", True, {"binary_data": True}),
    ]
    assert request.binary_data_output is False


def test_the_minimal_request_and_inputs_the_signature_does_not_have() -> None:
    request = parse({"inputs": [{"name": "other", "shape": [], "datatype": "BOOL", "data": True}]})
    assert request.id is None
    assert request.parameters == {}
    assert request.outputs == []
    assert request.inputs["other"] == Tensor("DT_BOOL", (), [True])


def test_binary_inputs_mixed_with_json_ones_take_their_slices_in_order() -> None:
    floats = struct.pack("<3f", 1.0, 2.0, 3.0)
    strings = struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0)
    request = parse(
        {
            "inputs": [
                x_input(parameters={"binary_data_size": len(floats)}),
                {"name": "n", "shape": [1], "datatype": "INT64", "data": [7]},
                {"name": "s", "shape": [2], "datatype": "BYTES",
                 "parameters": {"binary_data_size": len(strings)}},
            ],
            "parameters": {"binary_data_output": True},
        },
        floats + strings,
    )  # fmt: skip
    assert list(request.inputs["x"].values) == [1.0, 2.0, 3.0]
    assert isinstance(request.inputs["x"].values, memoryview)
    assert list(request.inputs["n"].values) == [7]
    assert request.inputs["s"].values == [b"ab", b""]
    assert request.binary_data_output is True


def test_a_zero_size_binary_input() -> None:
    request = parse(
        {"inputs": [x_input(shape=[0, 3], parameters={"binary_data_size": 0})]}, b"", True
    )
    assert len(request.inputs["x"].values) == 0


def test_header_length_cases() -> None:
    text = json.dumps({"inputs": [x_input(data=[1, 2, 3])]}).encode()
    assert v2_json.parse_infer_request(text, len(text), SPECS, LIMIT).inputs["x"].shape == (1, 3)
    assert v2_json.parse_infer_request(text, None, SPECS, LIMIT).inputs["x"].shape == (1, 3)
    for length in (-1, len(text) + 1):
        with pytest.raises(ServingError) as caught:
            v2_json.parse_infer_request(text, length, SPECS, LIMIT)
        assert caught.value.message == (
            f"Inference-Header-Content-Length is {length}, but the body has {len(text)} bytes"
        )
    with pytest.raises(ServingError, match="JSON Parse error"):
        v2_json.parse_infer_request(text, len(text) - 1, SPECS, LIMIT)
    with pytest.raises(ServingError, match="JSON Parse error: The document is empty"):
        v2_json.parse_infer_request(text, 0, SPECS, LIMIT)


def test_binary_data_errors() -> None:
    floats = struct.pack("<3f", 1.0, 2.0, 3.0)
    fails(
        {"inputs": [x_input(parameters={"binary_data_size": 12})]},
        "the body has 16 bytes of binary data after the JSON, the inputs' binary_data_size "
        "add up to 12",
        floats + b"junk",
    )
    fails(
        {"inputs": [x_input(parameters={"binary_data_size": 16})]},
        "input 'x' has binary_data_size 16, but only 12 bytes of binary data are left",
        floats,
    )
    fails(  # the input's own slice is checked before the total
        {"inputs": [x_input(parameters={"binary_data_size": 8})]},
        "input 'x': shape [1,3] holds 3 FP32 values (12 bytes), the binary data has 8 bytes",
        floats,
    )
    fails(
        {"inputs": [x_input(shape=[1, 2], parameters={"binary_data_size": 8})]},
        "input 'x' has shape [1,2]; the signature expects [-1,3]",
        floats[:8],
    )
    fails(
        {"inputs": [x_input(parameters={"binary_data_size": 8})]},
        "input 'x': shape [1,3] holds 3 FP32 values (12 bytes), the binary data has 8 bytes",
        floats[:8],
    )
    fails({"inputs": [x_input(data=[1, 2, 3])]}, "the inputs' binary_data_size add up to 0", b"x")
    for size in (-1, 1.5, "12", True):
        fails(
            {"inputs": [x_input(parameters={"binary_data_size": size})]},
            "input 'x': parameters.binary_data_size must be a non-negative integer",
            floats,
        )


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "JSON Value: [] Is not object"),
        ({}, "the request's 'inputs' must be a list of input objects, not null"),
        ({"inputs": {}}, "the request's 'inputs' must be a list of input objects, not {}"),
        ({"inputs": [1]}, "inputs[0] must be an object, not 1"),
        ({"inputs": [{"shape": [1]}]}, "inputs[0] needs a 'name' string, not null"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "data": [1]}]},
         "input 'x': shape null is not a list of at most 254 non-negative integers"),
        ({"inputs": [{"name": "x", "shape": [1], "data": [1]}]},
         "input 'x' needs a 'datatype' string, not null"),
        ({"inputs": [x_input(datatype="FLOAT")]}, 'unknown datatype "FLOAT"'),
        ({"inputs": [x_input(datatype="COMPLEX64")]},
         "datatype COMPLEX64 has no Open Inference Protocol equivalent"),
        ({"inputs": [x_input(datatype="FP64", data=[1, 2, 3])]},
         "input 'x' has datatype FP64; the model's signature expects FP32"),
        ({"inputs": [x_input(shape=[3], data=[1, 2, 3])]},
         "input 'x' has shape [3]; the signature expects [-1,3]"),
        ({"inputs": [x_input()]}, "input 'x' has neither 'data' nor parameters.binary_data_size"),
        ({"inputs": [x_input(data=[1, 2, 3], parameters={"binary_data_size": 12})]},
         "input 'x' has both 'data' and parameters.binary_data_size; send one"),
        ({"inputs": [x_input(data=[1, 2, 3]), x_input(data=[1, 2, 3])]},
         "input 'x' is given more than once"),
        ({"inputs": [x_input(data=[1, 2, "3"])]},
         "input 'x': data element 2 is \"3\"; expected a number"),
        ({"inputs": [x_input(data=[1, 2])]},
         "input 'x': shape [1,3] holds 3 FP32 values, the data has 2"),
        ({"inputs": [x_input(data=[1, 2, 3], parameters=[])]},
         "input 'x''s 'parameters' must be an object, not []"),
        ({"id": 1, "inputs": []}, "the request's 'id' must be a string, not 1"),
        ({"parameters": "p", "inputs": []}, "the request's 'parameters' must be an object"),
        ({"parameters": {"binary_data_output": 1}, "inputs": []},
         "parameters.binary_data_output must be true or false, not 1"),
        ({"inputs": [], "outputs": {}}, "the request's 'outputs' must be a list of output objects"),
        ({"inputs": [], "outputs": [{"name": 1}]},
         "outputs[0] must be an object with a 'name' string, not {\"name\": 1}"),
        ({"inputs": [], "outputs": [{"name": "y"}, {"name": "y"}]},
         "output 'y' is requested more than once"),
        ({"inputs": [], "outputs": [{"name": "y", "parameters": {"binary_data": "yes"}}]},
         "output 'y': parameters.binary_data must be true or false, not \"yes\""),
    ],
)  # fmt: skip
def test_request_errors(document: Any, message: str) -> None:
    fails(document, message)


def test_a_huge_declared_shape_with_tiny_data_is_refused_before_allocation() -> None:
    document = {"inputs": [{"name": "n", "shape": [10**15], "datatype": "INT64", "data": [1]}]}
    with pytest.raises(ServingError) as caught:
        parse(document)
    assert caught.value.code is Code.RESOURCE_EXHAUSTED
    assert "input 'n' of shape [1000000000000000] (INT64) would take 8000000000000000" in (
        caught.value.message
    )
    binary = {"inputs": [{"name": "n", "shape": [10**15], "datatype": "INT64",
                          "parameters": {"binary_data_size": 8}}]}  # fmt: skip
    with pytest.raises(ServingError) as caught:
        parse(binary, bytes(8))
    assert caught.value.code is Code.RESOURCE_EXHAUSTED


# --------------------------------------------------------------------------
# Answers


OUTPUTS = {
    "y": Tensor("DT_FLOAT", (2,), array.array("f", [0.5, 1.5])),
    "b": Tensor("DT_BOOL", (1, 1), [True]),
    "s": Tensor("DT_STRING", (1,), [b"\xff"]),
}


def answer(body: bytes, json_length: int | None) -> tuple[dict[str, Any], bytes]:
    if json_length is None:
        return json.loads(body), b""
    return json.loads(body[:json_length]), body[json_length:]


def test_a_json_answer_sorted_by_name() -> None:
    outputs = {k: OUTPUTS[k] for k in ("y", "b")}
    body, length = v2_json.infer_response("m", "3", "id-1", outputs)
    assert length is None
    assert body.startswith(b'{"model_name":"m","model_version":"3","id":"id-1","outputs":[')
    assert json.loads(body) == {
        "model_name": "m",
        "model_version": "3",
        "id": "id-1",
        "outputs": [
            {"name": "b", "datatype": "BOOL", "shape": [1, 1], "data": [True]},
            {"name": "y", "datatype": "FP32", "shape": [2], "data": [0.5, 1.5]},
        ],
    }


def test_requested_outputs_choose_order_and_binary() -> None:
    body, length = v2_json.infer_response(
        "m",
        "1",
        None,
        OUTPUTS,
        requested=[RequestedOutput("y"), RequestedOutput("s", True)],
        parameters={"p": 1},
    )
    document, binary = answer(body, length)
    assert "id" not in document
    assert document["parameters"] == {"p": 1}
    assert document["outputs"] == [
        {"name": "y", "datatype": "FP32", "shape": [2], "data": [0.5, 1.5]},
        {"name": "s", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 5}},
    ]
    assert binary == b"\x01\x00\x00\x00\xff"


def test_binary_data_output_makes_every_output_binary_unless_requested_otherwise() -> None:
    body, length = v2_json.infer_response("m", "1", None, OUTPUTS, binary_data_output=True)
    document, binary = answer(body, length)
    assert [o["parameters"]["binary_data_size"] for o in document["outputs"]] == [1, 5, 8]
    assert binary == b"\x01" + b"\x01\x00\x00\x00\xff" + struct.pack("<2f", 0.5, 1.5)
    body, length = v2_json.infer_response(
        "m",
        "1",
        None,
        OUTPUTS,
        requested=[RequestedOutput("y", False), RequestedOutput("b")],
        binary_data_output=True,
    )
    document, binary = answer(body, length)
    assert document["outputs"][0]["data"] == [0.5, 1.5]
    assert document["outputs"][1]["parameters"] == {"binary_data_size": 1}
    assert binary == b"\x01"


def test_answer_errors() -> None:
    with pytest.raises(ServingError) as caught:
        v2_json.infer_response("m", "1", None, OUTPUTS)
    assert caught.value.message.startswith(
        "output 's': output element 0 is not valid UTF-8 and cannot be written as JSON"
    )
    with pytest.raises(ServingError) as caught:
        v2_json.infer_response("m", "1", None, OUTPUTS, requested=[RequestedOutput("q")])
    assert caught.value.message == "output 'q' is not one of the model's outputs: b, s, y"


def test_a_binary_request_round_trips_through_a_binary_answer() -> None:
    raw = struct.pack("<6f", *range(6))
    request = parse(
        {"inputs": [x_input(shape=[2, 3], parameters={"binary_data_size": 24})],
         "parameters": {"binary_data_output": True}},
        raw,
    )  # fmt: skip
    body, length = v2_json.infer_response(
        "m", "1", None, request.inputs, binary_data_output=request.binary_data_output
    )
    document, binary = answer(body, length)
    assert document["outputs"][0]["shape"] == [2, 3]
    assert binary == raw


def test_metadata_answers() -> None:
    signature = Signature(
        inputs={"x": TensorSpec("DT_FLOAT", (-1, 3)), "c": TensorSpec("DT_COMPLEX64", None)},
        outputs={"y": TensorSpec("DT_BFLOAT16", (-1,))},
    )
    assert json.loads(v2_json.model_metadata("m", [3, 1], signature)) == {
        "name": "m",
        "versions": ["1", "3"],
        "platform": "tensorflow_savedmodel",
        "inputs": [
            {"name": "c", "datatype": "COMPLEX64", "shape": [-1]},
            {"name": "x", "datatype": "FP32", "shape": [-1, 3]},
        ],
        "outputs": [{"name": "y", "datatype": "BF16", "shape": [-1]}],
    }
    assert json.loads(v2_json.server_metadata("0.1.0")) == {
        "name": "tf-entrypoint",
        "version": "0.1.0",
        "extensions": ["binary_tensor_data"],
    }
    assert v2_json.error_body('bad "x"') == b'{"error":"bad \\"x\\""}'
