"""``TensorProto`` to arrays as TensorFlow's ``Tensor::FromProto`` reads it, and
back as ``Tensor::AsProtoField`` writes it (gRPC's Predict, warm-up records).

With ``model/`` the only place NumPy is used (docs/architecture.md, rule 5):
a request's tensors become the core's :class:`Tensor` with a flat NumPy array
as its values, which the model feeds without a copy; an answer's tensors
are written into the typed value fields (float_val, int64_val, string_val,
...), so clients that read those fields directly work unchanged. No
TensorFlow Python API: the generated ``types_pb2`` / ``tensor_pb2`` only.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from typing import Any

import ml_dtypes
import numpy as np

from tf_entrypoint.serving.core import limits
from tf_entrypoint.serving.core.errors import invalid_argument
from tf_entrypoint.serving.core.types import Tensor, format_shape

#: Values converted to Python objects at a time (bounds the conversion's scratch memory).
CHUNK = 1 << 16

#: The NumPy dtype of each DataType a TensorProto may carry, as TensorFlow's
#: ``tf.dtypes.as_dtype(...).as_numpy_dtype`` has it (quantized types are
#: its structured dtypes; bfloat16, float8 and int4 are ml_dtypes').
NUMPY_DTYPES: dict[str, Any] = {
    "DT_FLOAT": np.dtype(np.float32),
    "DT_DOUBLE": np.dtype(np.float64),
    "DT_INT32": np.dtype(np.int32),
    "DT_UINT8": np.dtype(np.uint8),
    "DT_INT16": np.dtype(np.int16),
    "DT_INT8": np.dtype(np.int8),
    "DT_STRING": np.dtype(object),
    "DT_COMPLEX64": np.dtype(np.complex64),
    "DT_INT64": np.dtype(np.int64),
    "DT_BOOL": np.dtype(np.bool_),
    "DT_QINT8": np.dtype([("qint8", np.int8)]),
    "DT_QUINT8": np.dtype([("quint8", np.uint8)]),
    "DT_QINT32": np.dtype([("qint32", np.int32)]),
    "DT_BFLOAT16": np.dtype(ml_dtypes.bfloat16),
    "DT_QINT16": np.dtype([("qint16", np.int16)]),
    "DT_QUINT16": np.dtype([("quint16", np.uint16)]),
    "DT_UINT16": np.dtype(np.uint16),
    "DT_COMPLEX128": np.dtype(np.complex128),
    "DT_HALF": np.dtype(np.float16),
    "DT_UINT32": np.dtype(np.uint32),
    "DT_UINT64": np.dtype(np.uint64),
    "DT_FLOAT8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "DT_FLOAT8_E4M3FN": np.dtype(ml_dtypes.float8_e4m3fn),
    "DT_FLOAT8_E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "DT_FLOAT8_E4M3B11FNUZ": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "DT_FLOAT8_E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "DT_FLOAT4_E2M1FN": np.dtype(ml_dtypes.float4_e2m1fn),
    "DT_INT4": np.dtype(ml_dtypes.int4),
    "DT_UINT4": np.dtype(ml_dtypes.uint4),
    "DT_INT2": np.dtype(ml_dtypes.int2),
    "DT_UINT2": np.dtype(ml_dtypes.uint2),
}
#: The one-byte float types, which a TensorProto carries in float8_val (bytes).
FLOAT8_TYPES = frozenset(
    {"DT_FLOAT8_E5M2", "DT_FLOAT8_E4M3FN", "DT_FLOAT8_E4M3FNUZ", "DT_FLOAT8_E4M3B11FNUZ"}
    | {"DT_FLOAT8_E5M2FNUZ", "DT_FLOAT4_E2M1FN"}
)

#: TensorProto's typed value field for each dtype (Tensor::AsProtoField).
_VALUE_FIELDS = {
    "DT_FLOAT": "float_val",
    "DT_DOUBLE": "double_val",
    "DT_INT8": "int_val",
    "DT_INT16": "int_val",
    "DT_INT32": "int_val",
    "DT_UINT8": "int_val",
    "DT_UINT16": "int_val",
    "DT_INT64": "int64_val",
    "DT_UINT32": "uint32_val",
    "DT_UINT64": "uint64_val",
    "DT_BOOL": "bool_val",
    "DT_STRING": "string_val",
    # int_val too: the quantized types and the 4- and 2-bit integers
    **dict.fromkeys(("DT_QINT8", "DT_QUINT8", "DT_QINT16", "DT_QUINT16", "DT_QINT32"), "int_val"),
    **dict.fromkeys(("DT_INT4", "DT_UINT4", "DT_INT2", "DT_UINT2"), "int_val"),
}

#: How Tensor::FromProto reads each dtype from its typed field: the field and
#: the NumPy type one field value is read as; values are then converted to the
#: tensor's dtype as C++'s casts do (int_val 300 as uint8 is 44).
_PROTO_READS: dict[str, tuple[str, Any]] = {
    "DT_FLOAT": ("float_val", np.float32),
    "DT_DOUBLE": ("double_val", np.float64),
    "DT_INT64": ("int64_val", np.int64),
    "DT_UINT32": ("uint32_val", np.uint32),
    "DT_UINT64": ("uint64_val", np.uint64),
    "DT_BOOL": ("bool_val", np.bool_),
    "DT_HALF": ("half_val", np.int32),  # the bits, in an int32
    "DT_BFLOAT16": ("half_val", np.int32),
    "DT_COMPLEX64": ("scomplex_val", np.float32),  # (real, imaginary) pairs
    "DT_COMPLEX128": ("dcomplex_val", np.float64),
    **dict.fromkeys(FLOAT8_TYPES, ("float8_val", np.uint8)),
    "DT_STRING": ("string_val", object),
    **dict.fromkeys(
        ("DT_INT32", "DT_INT16", "DT_INT8", "DT_UINT8", "DT_UINT16", "DT_INT4", "DT_UINT4",
         "DT_INT2", "DT_UINT2", "DT_QINT8", "DT_QUINT8", "DT_QINT16", "DT_QUINT16", "DT_QINT32"),
        ("int_val", np.int32),
    ),
}  # fmt: skip


def dtype_name(enum: int) -> str:
    """A DataType's name (ValueError for a number TensorFlow does not know)."""
    from tensorflow.core.framework import types_pb2  # noqa: PLC0415

    name: str = types_pb2.DataType.Name(enum)
    return name


def _sent(proto: Any, dtype: str) -> int:
    """The values a TensorProto's typed field carries (complex: pairs)."""
    values = len(getattr(proto, _PROTO_READS[dtype][0]))
    return values // 2 if dtype in ("DT_COMPLEX64", "DT_COMPLEX128") else values


def _decoded_size(key: str, proto: Any, dtype: str, count: int) -> int:
    """What decoding a TensorProto of `count` elements would take (limits.py)."""
    if dtype not in _PROTO_READS:  # DT_VARIANT, DT_RESOURCE: TF Serving's words, and why
        raise invalid_argument(
            f"{limits.parse_error(key).message} ({dtype} values cannot be sent to this server)"
        )
    if dtype != "DT_STRING":
        return count * int(NUMPY_DTYPES[dtype].itemsize)
    if proto.tensor_content:  # TensorFlow's string encoding: not read here
        raise limits.parse_error(key)
    values = proto.string_val
    used = min(len(values), count)
    lengths = [len(value) for value in itertools.islice(values, used)]
    return limits.string_bytes(count, len(values), sum(lengths), lengths[-1] if lengths else 0)


class ProtoInputs:
    """A request's TensorProtos (by alias), decoded only once they are checked
    (core/inference.py's :class:`~tf_entrypoint.serving.core.inference.Inputs`)."""

    __slots__ = ("_limit", "_protos")

    def __init__(self, protos: Mapping[str, Any], limit: int) -> None:
        self._protos = protos
        self._limit = limit

    def keys(self) -> Collection[str]:
        keys: Collection[str] = self._protos.keys()
        return keys

    def dtype(self, key: str) -> str:
        try:
            return dtype_name(self._protos[key].dtype)
        except ValueError:  # not a DataType TensorFlow knows
            raise limits.parse_error(key) from None

    def tensors(self) -> dict[str, Tensor]:
        return decode_tensor_protos(self._protos, self._limit)


def decode_tensor_protos(inputs: Mapping[str, Any], limit: int) -> dict[str, Tensor]:
    """TensorProtos as tensors on flat NumPy arrays, as TensorFlow's Tensor::FromProto reads them.

    `tensor_content` must hold exactly the shape's bytes; the typed field's
    values are used up to the shape's size (more are ignored), fewer are
    filled up with the last one, none with zeros. Checked before anything is
    decoded: a shape TensorFlow refuses (a negative dimension, too many, too
    many elements) or an unknown dtype is TF Serving's "tensor parsing error:
    KEY"; inputs that would take more than `limit` bytes decoded are refused
    with RESOURCE_EXHAUSTED (TF Serving would allocate them).
    """
    plans = []
    for key in sorted(inputs):
        proto = inputs[key]
        try:
            dtype = dtype_name(proto.dtype)
        except ValueError:  # not a DataType TensorFlow knows
            raise limits.parse_error(key) from None
        shape = tuple(int(d.size) for d in proto.tensor_shape.dim)
        count = limits.element_count(key, shape)
        plans.append((key, proto, dtype, shape, count, _decoded_size(key, proto, dtype, count)))
    total = sum(plan[-1] for plan in plans)
    if total > limit:
        largest = sorted(plans, key=lambda plan: -plan[-1])[:3]
        details = ", ".join(
            f"{key}: {format_shape(shape)} {dtype} from "
            + (f"{len(proto.tensor_content)} bytes of tensor_content" if proto.tensor_content
               else f"{_sent(proto, dtype)} value(s)")
            for key, proto, dtype, shape, _, _ in largest
        )  # fmt: skip
        raise limits.too_large(f"Decoding the inputs ({details})", total, limit,
                               "send a smaller tensor")  # fmt: skip
    return {
        key: Tensor(dtype, shape, _decode(key, proto, dtype, count))
        for key, proto, dtype, shape, count, _ in plans
    }


def _decode(key: str, proto: Any, dtype: str, count: int) -> Any:
    """A TensorProto's values as a flat array of `count` elements."""
    target = NUMPY_DTYPES[dtype]
    if count == 0:
        return np.zeros(0, dtype=target)
    content = proto.tensor_content
    if content:
        if len(content) != count * target.itemsize:
            raise limits.parse_error(key)
        return np.frombuffer(content, dtype=target)
    field, read_as = _PROTO_READS[dtype]
    values = getattr(proto, field)
    used = min(_sent(proto, dtype), count)
    if dtype == "DT_STRING":
        flat = np.empty(count, dtype=object)
        flat[:used] = list(itertools.islice(values, used))
        flat[used:] = flat[used - 1] if used else b""
        return flat
    pairs = dtype in ("DT_COMPLEX64", "DT_COMPLEX128")
    head = np.fromiter(values, dtype=read_as, count=used * 2 if pairs else used)
    if pairs or dtype in FLOAT8_TYPES:
        head = head.view(target)
    elif dtype in ("DT_HALF", "DT_BFLOAT16"):
        head = head.astype(np.uint16).view(target)
    else:
        head = head.astype(target, copy=False)
    if used == count:
        return head
    flat = np.zeros(count, dtype=target)
    if used:
        flat[:used] = head
        flat[used:] = head[used - 1]
    return flat


def as_proto_field(name: str, tensor: Tensor) -> Any:
    """A TensorProto with the values in its typed field, as Tensor::AsProtoField writes it.

    The values are read as the NumPy array they are (a model's output: no copy).
    """
    from tensorflow.core.framework import tensor_pb2, types_pb2  # noqa: PLC0415

    dtype = tensor.dtype
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DataType.Value(dtype))
    for size in tensor.shape:
        proto.tensor_shape.dim.add(size=int(size))
    flat = np.asarray(tensor.values).reshape(-1)
    field = _VALUE_FIELDS.get(dtype)
    if field is not None:
        values = getattr(proto, field)
        if flat.dtype.names:  # a quantized type: NumPy's one-field structured dtype
            flat = flat[flat.dtype.names[0]]
        elif dtype in ("DT_INT4", "DT_UINT4", "DT_INT2", "DT_UINT2"):  # ml_dtypes' types
            flat = flat.astype(np.int32)
    elif dtype in ("DT_HALF", "DT_BFLOAT16"):
        values, flat = proto.half_val, flat.view("uint16")
    elif dtype in ("DT_COMPLEX64", "DT_COMPLEX128"):
        # (real, imaginary) pairs: the same memory seen as twice as many floats
        values = proto.scomplex_val if dtype == "DT_COMPLEX64" else proto.dcomplex_val
        flat = flat.view("float32" if dtype == "DT_COMPLEX64" else "float64")
    elif dtype in FLOAT8_TYPES:  # one byte each, as Tensor::AsProtoField writes them
        proto.float8_val = flat.view(np.uint8).tobytes()
        return proto
    else:  # DT_VARIANT, DT_RESOURCE: no values a client could read
        raise invalid_argument(f"Output {name} has type {dtype}, which cannot be sent in a reply")
    for start in range(0, flat.size, CHUNK):  # Python objects for one chunk at a time
        values.extend(flat[start : start + CHUNK].tolist())
    return proto
