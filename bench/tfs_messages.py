"""TF Serving's Predict messages for the load client, without TensorFlow.

`tensorflow-serving-api`'s modules import all of TensorFlow (its messages use
TensorFlow's own protos): about 5 CPU-seconds and 480 MB for a load client
that only needs to send one request again and again. The client
(bench/protocol_load.py) writes the few fields it sends and reads instead,
with the field numbers of tensorflow_serving/apis/predict.proto and model.proto
and tensorflow/core/framework/tensor.proto and tensor_shape.proto, in a pool
of its own (tf_entrypoint.serving.codec.runtime_proto). Only the numbers and
types reach the wire: a server sees the bytes TF Serving's own client would
send for the same tensor (tensor_content). A field left out here is kept as
an unknown field when a message is read.

`dtype` is TensorFlow's DataType enum, written as its number (an int32 on
the wire, as an enum is); DT_FLOAT is 1.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

from tf_entrypoint.serving.codec.runtime_proto import Fields, message_classes, table_file

PACKAGE = "tf_entrypoint.bench"
#: TF Serving's Predict, the full method path a raw unary call names.
PREDICT = "/tensorflow.serving.PredictionService/Predict"
DT_FLOAT = 1

_MESSAGES: dict[str, Fields] = {
    "ModelSpec": (("name", 1, "string"), ("signature_name", 3, "string")),
    "TensorShapeProto": (("dim", 2, "TensorShapeProto.Dim*"), ("unknown_rank", 3, "bool")),
    "TensorShapeProto.Dim": (("size", 1, "int64"), ("name", 2, "string")),
    "TensorProto": (
        ("dtype", 1, "int32"),
        ("tensor_shape", 2, "TensorShapeProto"),
        ("tensor_content", 4, "bytes"),
        ("float_val", 5, "float*"),
    ),
    "PredictRequest": (
        ("model_spec", 1, "ModelSpec"),
        ("inputs", 2, "{TensorProto}"),
        ("output_filter", 3, "string*"),
    ),
    "PredictResponse": (("outputs", 1, "{TensorProto}"), ("model_spec", 2, "ModelSpec")),
}

POOL, _message_class = message_classes(
    table_file(PACKAGE, "tf_entrypoint/bench/tf_serving_predict.proto", _MESSAGES)
)
TensorProto = _message_class("TensorProto")
PredictRequest = _message_class("PredictRequest")
PredictResponse = _message_class("PredictResponse")


def float_tensor(values: Sequence[float], shape: Sequence[int]) -> Any:
    """A DT_FLOAT TensorProto of `shape` holding the flat `values` in tensor_content
    (float32, little-endian: as TensorFlow's make_tensor_proto writes an array of
    more than one value)."""
    proto = TensorProto(dtype=DT_FLOAT, tensor_content=struct.pack(f"<{len(values)}f", *values))
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    return proto


def float_values(proto: Any) -> tuple[list[float], list[int]] | None:
    """A DT_FLOAT TensorProto's flat values and shape, from float_val or
    tensor_content, whichever the server wrote; None for another dtype."""
    if proto.dtype != DT_FLOAT:
        return None
    shape = [dim.size for dim in proto.tensor_shape.dim]
    if proto.tensor_content:
        content = proto.tensor_content
        return list(struct.unpack(f"<{len(content) // 4}f", content)), shape
    values = list(proto.float_val)
    if len(values) == 1:  # one value stands for every element (TensorFlow's rule)
        values *= math.prod(shape)
    return values, shape
