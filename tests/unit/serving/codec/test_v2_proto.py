"""codec/v2_proto: the OIP's gRPC messages, checked against Triton's client on the wire.

The fixtures under data/v2_wire/ were written by Triton's own generated
module (`tritonclient.grpc.service_pb2`; see make_fixtures.py there, run by
hand): messages serialized deterministically, and the field table of every
message as Triton's descriptors give it. Our classes must read those bytes
field for field and write the same bytes from the same content.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tf_entrypoint.serving.codec import v2_proto as v2

REPO = Path(__file__).resolve().parents[4]
WIRE = Path(__file__).resolve().parents[2] / "data" / "v2_wire"
FIELDS = json.loads((WIRE / "fields.json").read_text())


def fixture(name: str) -> bytes:
    return (WIRE / name).read_bytes()


def wire(message: Any) -> bytes:
    data: bytes = message.SerializeToString(deterministic=True)
    return data


def params(parameters: Any) -> dict[str, object]:
    return {key: v2.parameter_value(value) for key, value in parameters.items()}


def kinds(parameters: Any) -> dict[str, str | None]:
    return {key: value.WhichOneof("parameter_choice") for key, value in parameters.items()}


# -- the descriptors ---------------------------------------------------------------------------


def our_fields(path: str) -> dict[str, dict[str, object]]:
    descriptor = v2.POOL.FindMessageTypeByName("inference." + path)
    table: dict[str, dict[str, object]] = {}
    field: Any
    for field in descriptor.fields:
        entry = field.message_type
        map_value = ""
        if entry is not None and entry.GetOptions().map_entry:
            assert entry.fields_by_name["key"].type == field.TYPE_STRING
            value: Any = entry.fields_by_name["value"].message_type
            map_value = value.full_name
        table[field.name] = {
            "number": field.number,
            "type": field.type,
            "repeated": field.is_repeated
            if hasattr(field, "is_repeated")
            else field.label == field.LABEL_REPEATED,
            "message": entry.full_name if entry is not None else "",
            "map_value": map_value,
            "oneof": field.containing_oneof.name if field.containing_oneof else "",
        }
    return table


@pytest.mark.parametrize("path", sorted(FIELDS["messages"]))
def test_fields_are_tritons(path: str) -> None:
    assert our_fields(path) == FIELDS["messages"][path]


def test_every_message_is_checked_and_exported() -> None:
    ours = {
        descriptor.full_name.removeprefix("inference.")
        for top in v2.POOL.FindFileByName(v2.FILE_NAME).message_types_by_name.values()
        for descriptor in (top, *top.nested_types)
        if not descriptor.GetOptions().map_entry
    }
    assert ours == set(FIELDS["messages"])
    for path in ours:
        cls = getattr(v2, path.rpartition(".")[2])
        assert cls.DESCRIPTOR.full_name == "inference." + path


def test_the_file_is_proto3_and_packs_repeated_scalars() -> None:
    assert v2.file_descriptor().syntax == FIELDS["syntax"] == "proto3"
    # field 2, length-delimited, 3 bytes: packed varints
    assert wire(v2.InferTensorContents(int_contents=[1, 2, 3])) == b"\x12\x03\x01\x02\x03"


def test_service_and_methods() -> None:
    assert v2.SERVICE == "inference.GRPCInferenceService"
    service = v2.POOL.FindServiceByName(v2.SERVICE)
    got = {
        name: [request.DESCRIPTOR.full_name, response.DESCRIPTOR.full_name]
        for name, request, response in v2.METHODS
    }
    assert got == FIELDS["methods"]
    assert [name for name, _, _ in v2.METHODS] == [m.name for m in service.methods]
    for name, request, response in v2.METHODS:
        method = service.methods_by_name[name]
        assert method.input_type is request.DESCRIPTOR
        assert method.output_type is response.DESCRIPTOR
        assert not method.client_streaming
        assert not method.server_streaming
        assert request is getattr(v2, request.DESCRIPTOR.name)
        assert response is getattr(v2, response.DESCRIPTOR.name)


def run_python(code: str) -> None:
    """Run code in a fresh interpreter (the default pool is process-wide); it prints ok."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO / "entrypoint",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout.strip()) == (0, "ok"), result.stderr


def test_importing_leaves_the_default_pool_alone() -> None:
    run_python(
        "from google.protobuf import descriptor_pool\n"
        "from tf_entrypoint.serving.codec import v2_proto\n"
        "pool = descriptor_pool.Default()\n"
        "for find, name in ((pool.FindFileByName, v2_proto.FILE_NAME),\n"
        "                   (pool.FindMessageTypeByName, 'inference.ModelInferRequest'),\n"
        "                   (pool.FindServiceByName, v2_proto.SERVICE)):\n"
        "    try:\n"
        "        find(name)\n"
        "    except KeyError:\n"
        "        continue\n"
        "    raise SystemExit(f'{name} is in the default pool')\n"
        "assert v2_proto.ModelInferRequest.DESCRIPTOR.file.pool is v2_proto.POOL\n"
        "assert v2_proto.POOL is not pool\n"
        "print('ok')\n"
    )


def test_a_client_module_of_the_same_names_can_live_beside_it() -> None:
    """A generated `inference` module (a client's) sits in the default pool first."""
    run_python(
        "from google.protobuf import descriptor_pool\n"
        "from tf_entrypoint.serving.codec.v2_proto import file_descriptor\n"
        "proto = file_descriptor()\n"
        "proto.name = 'grpc_service.proto'\n"
        "theirs = descriptor_pool.Default().Add(proto)\n"
        "from tf_entrypoint.serving.codec import v2_proto\n"
        "assert v2_proto.ModelInferRequest.DESCRIPTOR.file is not theirs\n"
        "request = v2_proto.ModelInferRequest(id='x')\n"
        "assert v2_proto.ModelInferRequest.FromString(request.SerializeToString()).id == 'x'\n"
        "print('ok')\n"
    )


# -- the messages, read and written --------------------------------------------------------------


def typed_request() -> Any:
    """What make_fixtures.infer_request_typed writes, built with our classes and helpers."""
    request = v2.ModelInferRequest(model_name="half_plus_two", model_version="3", id="req-1")
    v2.set_parameter(request.parameters, "binary_data_output", True)
    v2.set_parameter(request.parameters, "priority", -7)
    v2.set_parameter(request.parameters, "signature_name", "serving_default")
    v2.set_parameter(request.parameters, "threshold", 0.1)
    v2.set_parameter(request.parameters, "timeout", 2**64 - 1)
    for name, datatype, shape, contents, values in TYPED:
        tensor = request.inputs.add(name=name, datatype=datatype, shape=shape)
        getattr(tensor.contents, contents).extend(values)
    v2.set_parameter(request.inputs[0].parameters, "note", "first")
    out = request.outputs.add(name="y")
    v2.set_parameter(out.parameters, "binary_data", False)
    v2.set_parameter(out.parameters, "classification", 2)
    request.outputs.add(name="z")
    return request


TYPED: list[tuple[str, str, list[int], str, list[Any]]] = [
    ("b", "BOOL", [3], "bool_contents", [True, False, True]),
    ("i32", "INT32", [2, 2], "int_contents", [-1, 0, 2**31 - 1, -(2**31)]),
    ("i64", "INT64", [2], "int64_contents", [-(2**63), 2**63 - 1]),
    ("u32", "UINT32", [2], "uint_contents", [0, 2**32 - 1]),
    ("u64", "UINT64", [1], "uint64_contents", [2**64 - 1]),
    (
        "f32",
        "FP32",
        [1, 3],
        "fp32_contents",
        [1.5, -0.25, struct.unpack("<f", struct.pack("<f", 3.0e38))[0]],
    ),
    ("f64", "FP64", [2], "fp64_contents", [0.1, -1e-300]),
    ("s", "BYTES", [2], "bytes_contents", [b"caf\xc3\xa9", b"\xff\x00"]),
]
CONTENTS = list(FIELDS["messages"]["InferTensorContents"])


def test_typed_request_reads_every_field() -> None:
    request = v2.ModelInferRequest.FromString(fixture("model_infer_request_typed.pb"))
    assert (request.model_name, request.model_version, request.id) == (
        "half_plus_two",
        "3",
        "req-1",
    )
    assert params(request.parameters) == {
        "binary_data_output": True,
        "priority": -7,
        "signature_name": "serving_default",
        "threshold": 0.1,
        "timeout": 2**64 - 1,
    }
    assert kinds(request.parameters) == {
        "binary_data_output": "bool_param",
        "priority": "int64_param",
        "signature_name": "string_param",
        "threshold": "double_param",
        "timeout": "uint64_param",
    }
    assert len(request.inputs) == len(TYPED)
    for tensor, (name, datatype, shape, contents, values) in zip(
        request.inputs, TYPED, strict=True
    ):
        assert (tensor.name, tensor.datatype, list(tensor.shape)) == (name, datatype, shape)
        assert tensor.HasField("contents")
        for field in CONTENTS:
            assert list(getattr(tensor.contents, field)) == (values if field == contents else [])
    assert params(request.inputs[0].parameters) == {"note": "first"}
    assert all(not tensor.parameters for tensor in request.inputs[1:])
    assert [out.name for out in request.outputs] == ["y", "z"]
    assert params(request.outputs[0].parameters) == {"binary_data": False, "classification": 2}
    assert kinds(request.outputs[0].parameters)["binary_data"] == "bool_param"
    assert not request.outputs[1].parameters
    assert list(request.raw_input_contents) == []


def test_typed_request_writes_tritons_bytes() -> None:
    data = fixture("model_infer_request_typed.pb")
    assert wire(v2.ModelInferRequest.FromString(data)) == data
    assert wire(typed_request()) == data
    assert v2.ModelInferRequest.FromString(data) == typed_request()


def test_raw_request() -> None:
    data = fixture("model_infer_request_raw.pb")
    request = v2.ModelInferRequest.FromString(data)
    assert (request.model_name, request.model_version, request.id) == ("m", "", "")
    assert not request.parameters
    assert not request.outputs
    got = [(t.name, t.datatype, list(t.shape), t.HasField("contents")) for t in request.inputs]
    assert got == [
        ("x", "FP32", [2, 2], False),
        ("h", "FP16", [1], False),
        ("s", "BYTES", [1], False),
    ]
    assert params(request.inputs[0].parameters) == {"binary_data_size": 16}
    raw = [struct.pack("<4f", 1.0, 2.0, 3.0, 4.0), b"\x00\x3c", struct.pack("<I", 3) + b"abc"]
    assert list(request.raw_input_contents) == raw

    ours = v2.ModelInferRequest(model_name="m")
    ours.inputs.add(name="x", datatype="FP32", shape=[2, 2])
    v2.set_parameter(ours.inputs[0].parameters, "binary_data_size", 16)
    ours.inputs.add(name="h", datatype="FP16", shape=[1])
    ours.inputs.add(name="s", datatype="BYTES", shape=[1])
    ours.raw_input_contents.extend(raw)
    assert wire(ours) == wire(request) == data


def test_infer_response() -> None:
    data = fixture("model_infer_response.pb")
    response = v2.ModelInferResponse.FromString(data)
    assert (response.model_name, response.model_version, response.id) == (
        "half_plus_two",
        "3",
        "req-1",
    )
    assert params(response.parameters) == {"sequence_end": True, "count": 5}
    assert kinds(response.parameters)["count"] == "uint64_param"
    got = [(t.name, t.datatype, list(t.shape), t.HasField("contents")) for t in response.outputs]
    assert got == [("y", "FP32", [1, 3], False), ("label", "BYTES", [1], False)]
    assert params(response.outputs[0].parameters) == {"binary_data_size": 12}
    assert not response.outputs[1].parameters
    raw = [struct.pack("<3f", 2.5, 3.0, 3.5), struct.pack("<I", 2) + b"ok"]
    assert list(response.raw_output_contents) == raw

    ours = v2.ModelInferResponse(model_name="half_plus_two", model_version="3", id="req-1")
    v2.set_parameter(ours.parameters, "sequence_end", True)
    ours.parameters["count"].uint64_param = 5  # set_parameter picks int64 for small ints
    out = ours.outputs.add(name="y", datatype="FP32", shape=[1, 3])
    v2.set_parameter(out.parameters, "binary_data_size", 12)
    ours.outputs.add(name="label", datatype="BYTES", shape=[1])
    ours.raw_output_contents.extend(raw)
    assert wire(ours) == wire(response) == data


def test_model_metadata_response() -> None:
    data = fixture("model_metadata_response.pb")
    response = v2.ModelMetadataResponse.FromString(data)
    assert (response.name, list(response.versions), response.platform) == (
        "half_plus_two",
        ["1", "3"],
        "tensorflow_savedmodel",
    )
    tensors = [(t.name, t.datatype, list(t.shape)) for t in response.inputs]
    assert tensors == [("x", "FP32", [-1, 3]), ("any", "BYTES", [-1])]
    assert [(t.name, t.datatype, list(t.shape)) for t in response.outputs] == [
        ("y", "FP32", [-1, 1])
    ]

    ours = v2.ModelMetadataResponse(
        name="half_plus_two",
        versions=["1", "3"],
        platform="tensorflow_savedmodel",
        inputs=[
            v2.TensorMetadata(name="x", datatype="FP32", shape=[-1, 3]),
            v2.TensorMetadata(name="any", datatype="BYTES", shape=[-1]),
        ],
        outputs=[v2.TensorMetadata(name="y", datatype="FP32", shape=[-1, 1])],
    )
    assert wire(ours) == wire(response) == data


def test_small_messages() -> None:
    server = v2.ServerMetadataResponse(
        name="tf-entrypoint", version="1.2.3", extensions=["binary_tensor_data"]
    )
    assert wire(server) == fixture("server_metadata_response.pb")
    parsed = v2.ServerMetadataResponse.FromString(fixture("server_metadata_response.pb"))
    assert (parsed.name, parsed.version, list(parsed.extensions)) == (
        "tf-entrypoint",
        "1.2.3",
        ["binary_tensor_data"],
    )
    ready = v2.ModelReadyRequest.FromString(fixture("model_ready_request.pb"))
    assert (ready.name, ready.version) == ("m", "2")
    assert wire(v2.ModelReadyRequest(name="m", version="2")) == fixture("model_ready_request.pb")
    assert v2.ServerLiveResponse.FromString(fixture("server_live_response.pb")).live is True
    assert wire(v2.ServerLiveResponse(live=True)) == fixture("server_live_response.pb")
    for empty in (v2.ServerLiveRequest, v2.ServerReadyRequest, v2.ServerMetadataRequest):
        assert wire(empty()) == b""
    assert wire(v2.ServerReadyResponse(ready=True)) == wire(v2.ModelReadyResponse(ready=True))


# -- the helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (True, "bool_param"),
        (False, "bool_param"),
        (0, "int64_param"),
        (-(2**63), "int64_param"),
        (2**63 - 1, "int64_param"),
        (2**63, "uint64_param"),
        (2**64 - 1, "uint64_param"),
        (0.5, "double_param"),
        ("", "string_param"),
        ("text", "string_param"),
    ],
)
def test_set_parameter_and_parameter_value(value: object, kind: str) -> None:
    request = v2.ModelInferRequest()
    v2.set_parameter(request.parameters, "k", value)
    assert request.parameters["k"].WhichOneof("parameter_choice") == kind
    got = v2.parameter_value(request.parameters["k"])
    assert got == value
    assert type(got) is type(value)
    again = v2.ModelInferRequest.FromString(wire(request))
    assert v2.parameter_value(again.parameters["k"]) == value


def test_set_parameter_replaces_the_kind() -> None:
    request = v2.ModelInferRequest()
    v2.set_parameter(request.parameters, "k", "text")
    v2.set_parameter(request.parameters, "k", 3)
    assert kinds(request.parameters) == {"k": "int64_param"}
    assert params(request.parameters) == {"k": 3}


def test_parameter_value_of_an_empty_parameter_is_none() -> None:
    assert v2.parameter_value(v2.InferParameter()) is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (2**64, "parameter 'k': 18446744073709551616 is outside int64 and uint64"),
        (-(2**63) - 1, "parameter 'k': -9223372036854775809 is outside int64 and uint64"),
        (b"x", "parameter 'k': a bytes is not a bool, int, float or string"),
        (None, "parameter 'k': a NoneType is not a bool, int, float or string"),
    ],
)
def test_set_parameter_refuses_and_keeps_what_was_there(value: object, words: str) -> None:
    request = v2.ModelInferRequest()
    v2.set_parameter(request.parameters, "k", "kept")
    with pytest.raises(ValueError, match=f"^{re.escape(words)}$"):
        v2.set_parameter(request.parameters, "k", value)
    assert params(request.parameters) == {"k": "kept"}
    empty = v2.ModelInferRequest()
    with pytest.raises(ValueError, match=f"^{re.escape(words)}$"):
        v2.set_parameter(empty.parameters, "k", value)
    assert "k" not in empty.parameters
