"""Write the Open Inference Protocol wire fixtures with Triton's own client (run by hand).

tests/unit/serving/codec/test_v2_proto.py reads what this writes: messages serialized by
`tritonclient.grpc.service_pb2` (protoc-generated from Triton's
grpc_service.proto, a superset of the OIP's messages with the same numbers),
and the field table of every message `codec/v2_proto.py` describes, as
Triton's descriptors give it. The unit tests then need no tritonclient (it
pins protobuf < 7; the dev venv has 7).

Run from the repository root, in a throwaway venv:

    UV_NATIVE_TLS=1 uv venv /tmp/v2venv
    UV_NATIVE_TLS=1 uv pip install --python /tmp/v2venv/bin/python "tritonclient[grpc]==2.73.0"
    /tmp/v2venv/bin/python tests/unit/data/v2_wire/make_fixtures.py

Messages are written with deterministic serialization (map entries sorted by
key), so the tests can compare bytes. The committed files were written with
tritonclient 2.73.0 on protobuf 6.33.6.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2
from tritonclient.grpc import service_pb2 as pb

HERE = Path(__file__).resolve().parent

#: The messages codec/v2_proto.py describes (nested ones dotted).
MESSAGES = (
    "ServerLiveRequest",
    "ServerLiveResponse",
    "ServerReadyRequest",
    "ServerReadyResponse",
    "ModelReadyRequest",
    "ModelReadyResponse",
    "ServerMetadataRequest",
    "ServerMetadataResponse",
    "ModelMetadataRequest",
    "ModelMetadataResponse",
    "ModelMetadataResponse.TensorMetadata",
    "ModelInferRequest",
    "ModelInferRequest.InferInputTensor",
    "ModelInferRequest.InferRequestedOutputTensor",
    "ModelInferResponse",
    "ModelInferResponse.InferOutputTensor",
    "InferParameter",
    "InferTensorContents",
)
METHODS = (
    "ServerLive",
    "ServerReady",
    "ModelReady",
    "ServerMetadata",
    "ModelMetadata",
    "ModelInfer",
)


def field_table() -> dict[str, Any]:
    """Each message's fields as Triton's descriptors give them, and the service's methods."""
    pool_file = pb.DESCRIPTOR
    messages: dict[str, Any] = {}
    for path in MESSAGES:
        descriptor = pool_file.pool.FindMessageTypeByName("inference." + path)
        messages[path] = {
            field.name: {
                "number": field.number,
                "type": field.type,
                "repeated": repeated(field),
                "message": field.message_type.full_name if field.message_type else "",
                "map_value": map_value(field),
                "oneof": field.containing_oneof.name if field.containing_oneof else "",
            }
            for field in descriptor.fields
        }
    service = pool_file.services_by_name["GRPCInferenceService"]
    methods = {
        name: [
            service.methods_by_name[name].input_type.full_name,
            service.methods_by_name[name].output_type.full_name,
        ]
        for name in METHODS
    }
    syntax = descriptor_pb2.FileDescriptorProto.FromString(pool_file.serialized_pb).syntax
    return {"syntax": syntax, "messages": messages, "methods": methods}


def repeated(field: Any) -> bool:
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return bool(field.label == field.LABEL_REPEATED)


def map_value(field: Any) -> str:
    """The value's message of a map<string, message> field ('' for any other field)."""
    entry = field.message_type
    if entry is None or not entry.GetOptions().map_entry:
        return ""
    key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
    assert key.type == key.TYPE_STRING, field.full_name
    return str(value.message_type.full_name)


def parameters(target: Any, values: dict[str, Any]) -> None:
    for key, (kind, value) in values.items():
        setattr(target[key], kind, value)


def infer_request_typed() -> Any:
    request = pb.ModelInferRequest(model_name="half_plus_two", model_version="3", id="req-1")
    parameters(
        request.parameters,
        {
            "binary_data_output": ("bool_param", True),
            "priority": ("int64_param", -7),
            "signature_name": ("string_param", "serving_default"),
            "threshold": ("double_param", 0.1),
            "timeout": ("uint64_param", 2**64 - 1),
        },
    )
    typed = [
        ("b", "BOOL", [3], "bool_contents", [True, False, True]),
        ("i32", "INT32", [2, 2], "int_contents", [-1, 0, 2**31 - 1, -(2**31)]),
        ("i64", "INT64", [2], "int64_contents", [-(2**63), 2**63 - 1]),
        ("u32", "UINT32", [2], "uint_contents", [0, 2**32 - 1]),
        ("u64", "UINT64", [1], "uint64_contents", [2**64 - 1]),
        ("f32", "FP32", [1, 3], "fp32_contents", [1.5, -0.25, 3.0e38]),
        ("f64", "FP64", [2], "fp64_contents", [0.1, -1e-300]),
        ("s", "BYTES", [2], "bytes_contents", [b"caf\xc3\xa9", b"\xff\x00"]),
    ]
    for name, datatype, shape, contents, values in typed:
        tensor = request.inputs.add(name=name, datatype=datatype, shape=shape)
        getattr(tensor.contents, contents).extend(values)
    parameters(request.inputs[0].parameters, {"note": ("string_param", "first")})
    out = request.outputs.add(name="y")
    parameters(
        out.parameters, {"binary_data": ("bool_param", False), "classification": ("int64_param", 2)}
    )
    request.outputs.add(name="z")
    return request


def infer_request_raw() -> Any:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[2, 2])
    parameters(request.inputs[0].parameters, {"binary_data_size": ("int64_param", 16)})
    request.inputs.add(name="h", datatype="FP16", shape=[1])
    request.inputs.add(name="s", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(struct.pack("<4f", 1.0, 2.0, 3.0, 4.0))
    request.raw_input_contents.append(b"\x00\x3c")
    request.raw_input_contents.append(struct.pack("<I", 3) + b"abc")
    return request


def infer_response() -> Any:
    response = pb.ModelInferResponse(model_name="half_plus_two", model_version="3", id="req-1")
    parameters(
        response.parameters, {"sequence_end": ("bool_param", True), "count": ("uint64_param", 5)}
    )
    out = response.outputs.add(name="y", datatype="FP32", shape=[1, 3])
    parameters(out.parameters, {"binary_data_size": ("int64_param", 12)})
    response.outputs.add(name="label", datatype="BYTES", shape=[1])
    response.raw_output_contents.append(struct.pack("<3f", 2.5, 3.0, 3.5))
    response.raw_output_contents.append(struct.pack("<I", 2) + b"ok")
    return response


def metadata_response() -> Any:
    response = pb.ModelMetadataResponse(
        name="half_plus_two", versions=["1", "3"], platform="tensorflow_savedmodel"
    )
    response.inputs.add(name="x", datatype="FP32", shape=[-1, 3])
    response.inputs.add(name="any", datatype="BYTES", shape=[-1])
    response.outputs.add(name="y", datatype="FP32", shape=[-1, 1])
    return response


def server_metadata_response() -> Any:
    return pb.ServerMetadataResponse(
        name="tf-entrypoint", version="1.2.3", extensions=["binary_tensor_data"]
    )


def main() -> None:
    written = {
        "model_infer_request_typed.pb": infer_request_typed(),
        "model_infer_request_raw.pb": infer_request_raw(),
        "model_infer_response.pb": infer_response(),
        "model_metadata_response.pb": metadata_response(),
        "server_metadata_response.pb": server_metadata_response(),
        "model_ready_request.pb": pb.ModelReadyRequest(name="m", version="2"),
        "server_live_response.pb": pb.ServerLiveResponse(live=True),
    }
    for name, message in written.items():
        (HERE / name).write_bytes(message.SerializeToString(deterministic=True))
    table = json.dumps(field_table(), indent=1, sort_keys=True) + "\n"
    (HERE / "fields.json").write_text(table)
    print(f"wrote {len(written)} messages and fields.json to {HERE}")


if __name__ == "__main__":
    main()
