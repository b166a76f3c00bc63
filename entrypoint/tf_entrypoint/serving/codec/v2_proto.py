"""The Open Inference Protocol's gRPC messages (package `inference`), built at run time.

The OIP's gRPC API (KServe's `grpc_predict_v2.proto`, which Triton's
`grpc_service.proto` extends with the same names and field numbers) is the
service `inference.GRPCInferenceService`. No generated `_pb2` module is
shipped for it: generated code is tied to the protobuf release that made it,
and the images carry protobuf 7 while the matrix's serve cell carries 4.25.
Instead this module writes the file's descriptor itself, from the compact
table below (message, field, number, type), as a `FileDescriptorProto`, adds
it to a pool of its own (never protobuf's default pool, where a client's
generated module of the same names may live), and asks protobuf for the
message classes. The wire format is the spec's: proto3, so repeated scalars
are packed, and `parameters` are `map<string, InferParameter>`.

Exported: one class per message (nested ones also under their own names, e.g.
:data:`InferInputTensor` is `ModelInferRequest.InferInputTensor`),
:data:`SERVICE`, :data:`METHODS` (the unary methods this server answers) and
the helpers :func:`parameter_value` and :func:`set_parameter`.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from google.protobuf import descriptor_pb2

from tf_entrypoint.serving.codec.runtime_proto import Fields, message_classes, table_file

PACKAGE = "inference"
FILE_NAME = "tf_entrypoint/serving/open_inference_grpc.proto"
SERVICE = "inference.GRPCInferenceService"

_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1

# The messages, as runtime_proto.table_file reads them (parents before their nested
# types); every field of a message named in _ONEOFS belongs to that oneof.
_MESSAGES: dict[str, Fields] = {
    "ServerLiveRequest": (),
    "ServerLiveResponse": (("live", 1, "bool"),),
    "ServerReadyRequest": (),
    "ServerReadyResponse": (("ready", 1, "bool"),),
    "ModelReadyRequest": (("name", 1, "string"), ("version", 2, "string")),
    "ModelReadyResponse": (("ready", 1, "bool"),),
    "ServerMetadataRequest": (),
    "ServerMetadataResponse": (
        ("name", 1, "string"),
        ("version", 2, "string"),
        ("extensions", 3, "string*"),
    ),
    "ModelMetadataRequest": (("name", 1, "string"), ("version", 2, "string")),
    "ModelMetadataResponse": (
        ("name", 1, "string"),
        ("versions", 2, "string*"),
        ("platform", 3, "string"),
        ("inputs", 4, "ModelMetadataResponse.TensorMetadata*"),
        ("outputs", 5, "ModelMetadataResponse.TensorMetadata*"),
    ),
    "ModelMetadataResponse.TensorMetadata": (
        ("name", 1, "string"),
        ("datatype", 2, "string"),
        ("shape", 3, "int64*"),
    ),
    "ModelInferRequest": (
        ("model_name", 1, "string"),
        ("model_version", 2, "string"),
        ("id", 3, "string"),
        ("parameters", 4, "{InferParameter}"),
        ("inputs", 5, "ModelInferRequest.InferInputTensor*"),
        ("outputs", 6, "ModelInferRequest.InferRequestedOutputTensor*"),
        ("raw_input_contents", 7, "bytes*"),
    ),
    "ModelInferRequest.InferInputTensor": (
        ("name", 1, "string"),
        ("datatype", 2, "string"),
        ("shape", 3, "int64*"),
        ("parameters", 4, "{InferParameter}"),
        ("contents", 5, "InferTensorContents"),
    ),
    "ModelInferRequest.InferRequestedOutputTensor": (
        ("name", 1, "string"),
        ("parameters", 2, "{InferParameter}"),
    ),
    "ModelInferResponse": (
        ("model_name", 1, "string"),
        ("model_version", 2, "string"),
        ("id", 3, "string"),
        ("parameters", 4, "{InferParameter}"),
        ("outputs", 5, "ModelInferResponse.InferOutputTensor*"),
        ("raw_output_contents", 6, "bytes*"),
    ),
    "ModelInferResponse.InferOutputTensor": (
        ("name", 1, "string"),
        ("datatype", 2, "string"),
        ("shape", 3, "int64*"),
        ("parameters", 4, "{InferParameter}"),
        ("contents", 5, "InferTensorContents"),
    ),
    "InferParameter": (
        ("bool_param", 1, "bool"),
        ("int64_param", 2, "int64"),
        ("string_param", 3, "string"),
        ("double_param", 4, "double"),
        ("uint64_param", 5, "uint64"),
    ),
    "InferTensorContents": (
        ("bool_contents", 1, "bool*"),
        ("int_contents", 2, "int32*"),
        ("int64_contents", 3, "int64*"),
        ("uint_contents", 4, "uint32*"),
        ("uint64_contents", 5, "uint64*"),
        ("fp32_contents", 6, "float*"),
        ("fp64_contents", 7, "double*"),
        ("bytes_contents", 8, "bytes*"),
    ),
}

_ONEOFS = {"InferParameter": "parameter_choice"}

#: The service's methods this module describes: (name, request, response) names.
_METHODS = (
    ("ServerLive", "ServerLiveRequest", "ServerLiveResponse"),
    ("ServerReady", "ServerReadyRequest", "ServerReadyResponse"),
    ("ModelReady", "ModelReadyRequest", "ModelReadyResponse"),
    ("ServerMetadata", "ServerMetadataRequest", "ServerMetadataResponse"),
    ("ModelMetadata", "ModelMetadataRequest", "ModelMetadataResponse"),
    ("ModelInfer", "ModelInferRequest", "ModelInferResponse"),
)


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The `inference` package's file, written from the table above."""
    return table_file(
        PACKAGE, FILE_NAME, _MESSAGES, oneofs=_ONEOFS, service=SERVICE, methods=_METHODS
    )


POOL, _message_class = message_classes(file_descriptor())


ServerLiveRequest = _message_class("ServerLiveRequest")
ServerLiveResponse = _message_class("ServerLiveResponse")
ServerReadyRequest = _message_class("ServerReadyRequest")
ServerReadyResponse = _message_class("ServerReadyResponse")
ModelReadyRequest = _message_class("ModelReadyRequest")
ModelReadyResponse = _message_class("ModelReadyResponse")
ServerMetadataRequest = _message_class("ServerMetadataRequest")
ServerMetadataResponse = _message_class("ServerMetadataResponse")
ModelMetadataRequest = _message_class("ModelMetadataRequest")
ModelMetadataResponse = _message_class("ModelMetadataResponse")
TensorMetadata = _message_class("ModelMetadataResponse.TensorMetadata")
ModelInferRequest = _message_class("ModelInferRequest")
InferInputTensor = _message_class("ModelInferRequest.InferInputTensor")
InferRequestedOutputTensor = _message_class("ModelInferRequest.InferRequestedOutputTensor")
ModelInferResponse = _message_class("ModelInferResponse")
InferOutputTensor = _message_class("ModelInferResponse.InferOutputTensor")
InferParameter = _message_class("InferParameter")
InferTensorContents = _message_class("InferTensorContents")

#: (method name, request class, response class) for each unary method answered.
METHODS: tuple[tuple[str, type[Any], type[Any]], ...] = tuple(
    (method, _message_class(request), _message_class(response))
    for method, request, response in _METHODS
)


def parameter_value(parameter: Any) -> bool | int | str | float | None:
    """The value an `InferParameter` holds, None when none of its oneof is set."""
    which = parameter.WhichOneof("parameter_choice")
    if which is None:
        return None
    value: bool | int | str | float = getattr(parameter, which)
    return value


def set_parameter(parameters: MutableMapping[str, Any], key: str, value: object) -> None:
    """Set `parameters[key]` (a `map<string, InferParameter>`) to a Python value.

    bool -> bool_param; int -> int64_param, or uint64_param above int64's range;
    float -> double_param; str -> string_param. Anything else, or an int outside
    both ranges, is a ValueError that names the key.
    """
    field: str
    if isinstance(value, bool):
        field = "bool_param"
    elif isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            field = "int64_param"
        elif _INT64_MAX < value <= _UINT64_MAX:
            field = "uint64_param"
        else:
            raise ValueError(f"parameter {key!r}: {value} is outside int64 and uint64")
    elif isinstance(value, float):
        field = "double_param"
    elif isinstance(value, str):
        field = "string_param"
    else:
        raise ValueError(
            f"parameter {key!r}: a {type(value).__name__} is not a bool, int, float or string"
        )
    setattr(parameters[key], field, value)
