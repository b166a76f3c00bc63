"""A SavedModel version as a :class:`~tf_entrypoint.serving.service.Servable`.

The only module of the server that imports TensorFlow. Signatures are read
from saved_model.pb itself (dtypes, shapes, graph tensor names, method names:
what TF Serving's metadata shows); execution goes through
``tf.saved_model.load(...).signatures``.
"""

from __future__ import annotations

import array as py_array
import contextlib
import gc
import importlib
import itertools
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
import tensorflow as tf

from tf_entrypoint.serving import examples as ex
from tf_entrypoint.serving import limits
from tf_entrypoint.serving import protocol as p
from tf_entrypoint.serving.batching import (
    Batcher,
    BatchHooks,
    BatchingParameters,
    acquire_before_deadline,
)
from tf_entrypoint.serving.config import DEFAULT_MAX_BODY_BYTES

log = logging.getLogger("tf_entrypoint.serving")

# TensorFlow's ~270,000 Python objects (and the server's) live as long as the
# process: move them out of the cyclic garbage collector's sight, so that a
# collection (after a version is unloaded, or any full one) walks only the
# models' objects. Measured under --cpus 1: 4 ms instead of 0.35-0.57 s with
# every thread stalled on the GIL (README, "Model versions").
gc.freeze()

SERVE_TAG = "serve"
#: TF Serving's warm-up file, a TFRecord of PredictionLog (saved_model_warmup.md).
WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"
#: TF Serving's limit (WarmupConsts::kMaxNumRecords).
MAX_WARMUP_RECORDS = 1000
DEFAULT_SIGNATURE = "serving_default"
#: Characters of a TensorFlow error message passed back to the client.
MAX_ERROR_MESSAGE = 2000

#: TF Serving's mapping of TensorFlow status codes to HTTP (model_servers/http_server.cc).
_HTTP_STATUS = {
    1: 499,  # CANCELLED
    3: 400,  # INVALID_ARGUMENT
    4: 504,  # DEADLINE_EXCEEDED
    5: 404,  # NOT_FOUND
    6: 409,  # ALREADY_EXISTS
    7: 403,  # PERMISSION_DENIED
    8: 429,  # RESOURCE_EXHAUSTED
    9: 400,  # FAILED_PRECONDITION
    10: 409,  # ABORTED
    11: 400,  # OUT_OF_RANGE
    12: 501,  # UNIMPLEMENTED
    14: 503,  # UNAVAILABLE
    16: 401,  # UNAUTHENTICATED
}
_FLOATS = frozenset({"DT_FLOAT", "DT_HALF", "DT_BFLOAT16"})
_PLAIN = frozenset(
    {
        "DT_DOUBLE",
        "DT_INT8",
        "DT_INT16",
        "DT_INT32",
        "DT_INT64",
        "DT_UINT8",
        "DT_UINT16",
        "DT_UINT32",
        "DT_UINT64",
        "DT_BOOL",
        "DT_STRING",
    }
)


def _dtype_name(enum: int) -> str:
    from tensorflow.core.framework import types_pb2  # noqa: PLC0415

    name: str = types_pb2.DataType.Name(enum)
    return name


def _read_meta_graph(directory: Path) -> Any:
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415

    saved_model = saved_model_pb2.SavedModel()
    binary = directory / "saved_model.pb"
    if binary.is_file():
        saved_model.ParseFromString(binary.read_bytes())
    else:
        # protobuf ships no type hints; TensorFlow depends on it, so it is there.
        text_format = importlib.import_module("google.protobuf.text_format")
        text_format.Parse((directory / "saved_model.pbtxt").read_text(), saved_model)
    graphs = list(saved_model.meta_graphs)
    if not graphs:
        raise ValueError(f"{directory} holds no MetaGraph")
    for graph in graphs:
        if SERVE_TAG in graph.meta_info_def.tags:
            return graph
    return graphs[0]


def _spec(info: Any) -> p.TensorSpec:
    shape = info.tensor_shape
    dims = None if shape.unknown_rank else tuple(int(d.size) for d in shape.dim)
    return p.TensorSpec(_dtype_name(info.dtype), dims, info.name)


def read_signatures(directory: Path) -> dict[str, p.Signature]:
    """Every SignatureDef of the 'serve' MetaGraph, as the metadata shows them."""
    return _signatures(_read_meta_graph(directory))


def _signatures(graph: Any) -> dict[str, p.Signature]:
    return {
        name: p.Signature(
            inputs={key: _spec(info) for key, info in sig.inputs.items()},
            outputs={key: _spec(info) for key, info in sig.outputs.items()},
            method_name=sig.method_name,
        )
        for name, sig in graph.signature_def.items()
    }


def _signature_def_map(graph: Any) -> bytes:
    """The MetaGraph's SignatureDefs, every one as it is, as a serialized
    tensorflow.serving.SignatureDefMap (TF Serving's get_model_metadata_impl.cc)."""
    from tensorflow_serving.apis import get_model_metadata_pb2  # noqa: PLC0415

    message = get_model_metadata_pb2.SignatureDefMap()
    for name, definition in graph.signature_def.items():
        message.signature_def[name].CopyFrom(definition)
    serialized: bytes = message.SerializeToString()
    return serialized


def _to_tf(tensor: p.Tensor) -> Any:
    if isinstance(tensor.values, py_array.array):
        return tf.constant(_compact(tensor))
    dtype = tf.dtypes.as_dtype(_dtype_enum(tensor.dtype))
    return tf.reshape(tf.constant(tensor.values, dtype=dtype), tensor.shape)


def _compact(tensor: p.Tensor) -> Any:
    """A REST input parsed into an array.array, as a NumPy array on the same memory."""
    dtype = tf.dtypes.as_dtype(_dtype_enum(tensor.dtype)).as_numpy_dtype
    return np.frombuffer(tensor.values, dtype=dtype).reshape(tensor.shape)


def _dtype_enum(name: str) -> int:
    from tensorflow.core.framework import types_pb2  # noqa: PLC0415

    value: int = types_pb2.DataType.Value(name)
    return value


#: Values converted to Python objects at a time (bounds the conversion's scratch memory).
CHUNK = 1 << 16


class OutputValues(Sequence[Any]):
    """An output tensor's values, made Python objects only when read.

    The answer is written from these (:func:`protocol.values_list` calls
    tolist()) while the request holds a JSON conversion slot, so a request
    that waits for one holds the model's compact output, not a list of
    Python objects. Floats are written as the shortest text that reads back
    as the same float32 (0.1, not 0.10000000149011612), as TF Serving writes
    them; NaN and Inf pass through.
    """

    __slots__ = ("_flat", "_floats")

    def __init__(self, flat: Any, floats: bool) -> None:
        self._flat = flat
        self._floats = floats

    def __len__(self) -> int:
        return int(self._flat.size)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return _python_values(self._flat[index], self._floats)
        return _python_values(self._flat[index : index + 1 or None], self._floats)[0]

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, len(self), CHUNK):
            yield from _python_values(self._flat[start : start + CHUNK], self._floats)

    def tolist(self) -> list[Any]:
        values: list[Any] = []
        for start in range(0, len(self), CHUNK):
            values.extend(_python_values(self._flat[start : start + CHUNK], self._floats))
        return values


def _python_values(flat: Any, floats: bool) -> list[Any]:
    if floats:
        return [float(text) for text in flat.astype(str).tolist()]
    values: list[Any] = flat.tolist()
    return values


def _from_tf(name: str, value: Any) -> p.Tensor:
    dtype = _dtype_name(value.dtype.as_datatype_enum)
    if dtype not in _FLOATS | _PLAIN:
        raise p.ApiError(500, f"Failed to write JSON value for tensor type: {dtype} ({name})")
    array = value.numpy()
    return p.Tensor(
        dtype, tuple(int(d) for d in array.shape), OutputValues(array.reshape(-1), dtype in _FLOATS)
    )


_RUNNABLE_METHODS = (p.PREDICT_METHOD, p.CLASSIFY_METHOD, p.REGRESS_METHOD)
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
    "DT_FLOAT8_E5M2": ("float8_val", np.uint8),
    "DT_FLOAT8_E4M3FN": ("float8_val", np.uint8),
    "DT_STRING": ("string_val", object),
    **dict.fromkeys(
        ("DT_INT32", "DT_INT16", "DT_INT8", "DT_UINT8", "DT_UINT16", "DT_INT4", "DT_UINT4",
         "DT_QINT8", "DT_QUINT8", "DT_QINT16", "DT_QUINT16", "DT_QINT32"),
        ("int_val", np.int32),
    ),
}  # fmt: skip


def _numpy_dtype(enum: int) -> Any:
    return np.dtype(tf.dtypes.as_dtype(enum).as_numpy_dtype)


def _sent(proto: Any, dtype: str) -> int:
    """The values a TensorProto's typed field carries (complex: pairs)."""
    values = len(getattr(proto, _PROTO_READS[dtype][0]))
    return values // 2 if dtype in ("DT_COMPLEX64", "DT_COMPLEX128") else values


def _decoded_size(key: str, proto: Any, dtype: str, count: int) -> int:
    """What decoding a TensorProto of `count` elements would take (limits.py)."""
    if dtype not in _PROTO_READS:
        raise limits.parse_error(key)
    if dtype != "DT_STRING":
        return count * int(_numpy_dtype(proto.dtype).itemsize)
    if proto.tensor_content:  # TensorFlow's string encoding: not read here
        raise limits.parse_error(key)
    values = proto.string_val
    used = min(len(values), count)
    lengths = [len(value) for value in itertools.islice(values, used)]
    return limits.string_bytes(count, len(values), sum(lengths), lengths[-1] if lengths else 0)


def decode_tensor_protos(inputs: Mapping[str, Any], limit: int) -> dict[str, Any]:
    """TensorProtos as NumPy arrays, as TensorFlow's Tensor::FromProto reads them.

    `tensor_content` must hold exactly the shape's bytes; the typed field's
    values are used up to the shape's size (more are ignored), fewer are
    filled up with the last one, none with zeros. Checked before anything is
    decoded: a shape TensorFlow refuses (a negative dimension, too many, too
    many elements) or an unknown dtype is TF Serving's "tensor parsing error:
    KEY"; inputs that would take more than `limit` bytes decoded are refused
    with 413 / RESOURCE_EXHAUSTED (TF Serving would allocate them).
    """
    plans = []
    for key in sorted(inputs):
        proto = inputs[key]
        try:
            dtype = _dtype_name(proto.dtype)
        except ValueError:  # not a DataType TensorFlow knows
            raise limits.parse_error(key) from None
        shape = tuple(int(d.size) for d in proto.tensor_shape.dim)
        count = limits.element_count(key, shape)
        plans.append((key, proto, dtype, shape, count, _decoded_size(key, proto, dtype, count)))
    total = sum(plan[-1] for plan in plans)
    if total > limit:
        largest = sorted(plans, key=lambda plan: -plan[-1])[:3]
        details = ", ".join(
            f"{key}: {p.format_shape(shape)} {dtype} from "
            + (f"{len(proto.tensor_content)} bytes of tensor_content" if proto.tensor_content
               else f"{_sent(proto, dtype)} value(s)")
            for key, proto, dtype, shape, _, _ in largest
        )  # fmt: skip
        raise limits.too_large(f"Decoding the inputs ({details})", total, limit,
                               "send a smaller tensor")  # fmt: skip
    return {
        key: _decode(key, proto, dtype, shape, count)
        for key, proto, dtype, shape, count, _ in plans
    }


def _decode(key: str, proto: Any, dtype: str, shape: tuple[int, ...], count: int) -> Any:
    target = _numpy_dtype(proto.dtype)
    if count == 0:
        return np.zeros(shape, dtype=target)
    content = proto.tensor_content
    if content:
        if len(content) != count * target.itemsize:
            raise limits.parse_error(key)
        return np.frombuffer(content, dtype=target).reshape(shape)
    field, read_as = _PROTO_READS[dtype]
    values = getattr(proto, field)
    used = min(_sent(proto, dtype), count)
    if dtype == "DT_STRING":
        flat = np.empty(count, dtype=object)
        flat[:used] = list(itertools.islice(values, used))
        flat[used:] = flat[used - 1] if used else b""
        return flat.reshape(shape)
    pairs = dtype in ("DT_COMPLEX64", "DT_COMPLEX128")
    head = np.fromiter(values, dtype=read_as, count=used * 2 if pairs else used)
    if pairs or dtype.startswith("DT_FLOAT8"):
        head = head.view(target)
    elif dtype in ("DT_HALF", "DT_BFLOAT16"):
        head = head.astype(np.uint16).view(target)
    else:
        head = head.astype(target, copy=False)
    if used == count:
        return head.reshape(shape)
    flat = np.zeros(count, dtype=target)
    if used:
        flat[:used] = head
        flat[used:] = head[used - 1]
    return flat.reshape(shape)


def _tf_type(dtype: str) -> str:
    """TensorFlow's DataTypeString: DT_FLOAT -> float."""
    return dtype.removeprefix("DT_").lower()


def _check_input_names(inputs: Mapping[str, Any], signature: p.Signature) -> None:
    """TF Serving's VerifyRequestInputsSize, message and all."""
    given, wanted = set(inputs), set(signature.inputs)
    if given == wanted:
        return
    raise p.bad_request(
        f"input size does not match signature: {len(given)}!={len(wanted)} "
        f"len({{{','.join(sorted(given))}}}) != len({{{','.join(sorted(wanted))}}}). "
        f"Sent extra: {{{','.join(sorted(given - wanted))}}}. "
        f"Missing but required: {{{','.join(sorted(wanted - given))}}}."
    )


def _check_output_filter(output_filter: Sequence[str], signature: p.Signature) -> None:
    seen: set[str] = set()
    for alias in output_filter:
        if alias not in signature.outputs:
            raise p.bad_request(
                f"output tensor alias not found in signature: {alias} Outputs expected to be "
                f"in the set {{{','.join(sorted(signature.outputs))}}}."
            )
        if alias in seen:
            raise p.bad_request(f"duplicate output tensor alias: {alias}")
        seen.add(alias)


def _as_proto_field(name: str, value: Any) -> Any:
    """A TensorProto with the values in its typed field, as Tensor::AsProtoField writes it."""
    from tensorflow.core.framework import tensor_pb2  # noqa: PLC0415

    dtype = _dtype_name(value.dtype.as_datatype_enum)
    array = value.numpy()
    proto = tensor_pb2.TensorProto(dtype=value.dtype.as_datatype_enum)
    for size in array.shape:
        proto.tensor_shape.dim.add(size=int(size))
    flat = array.reshape(-1)
    field = _VALUE_FIELDS.get(dtype)
    if field is not None:
        values = getattr(proto, field)
    elif dtype in ("DT_HALF", "DT_BFLOAT16"):
        values, flat = proto.half_val, flat.view("uint16")
    elif dtype in ("DT_COMPLEX64", "DT_COMPLEX128"):
        # (real, imaginary) pairs: the same memory seen as twice as many floats
        values = proto.scomplex_val if dtype == "DT_COMPLEX64" else proto.dcomplex_val
        flat = flat.view("float32" if dtype == "DT_COMPLEX64" else "float64")
    else:
        raise p.ApiError(500, f"Output {name} has type {dtype}, which cannot be sent in a reply")
    for start in range(0, flat.size, CHUNK):  # Python objects for one chunk at a time
        values.extend(flat[start : start + CHUNK].tolist())
    return proto


def _output(outputs: Mapping[str, Any], key: str) -> p.Tensor | None:
    """A classify/regress output; an unexpected dtype keeps only dtype and shape for the check."""
    value = outputs.get(key)
    if value is None:
        return None
    dtype = _dtype_name(value.dtype.as_datatype_enum)
    if dtype not in _FLOATS | _PLAIN:
        return p.Tensor(dtype, tuple(int(d) for d in value.shape), [])
    return _from_tf(key, value)


_ZEROS: dict[str, Any] = {"DT_STRING": b"", "DT_BOOL": False, **dict.fromkeys(_FLOATS, 0.0)}


def _unparsable(examples: Sequence[bytes]) -> str:
    from tensorflow.core.example import example_pb2  # noqa: PLC0415

    for index, serialized in enumerate(examples):
        try:
            example_pb2.Example.FromString(serialized)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError, or worse
            return (
                f"Could not parse example input, value: {repr(serialized)[: p.MAX_QUOTED]} "
                f"(example {index})"
            )
    return "Could not parse example input"


def _invoke(function: Any, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    """Run a signature function; its outputs by alias."""
    results = function(**arguments)
    if not isinstance(results, Mapping):
        return {"output_0": results}
    outputs: Mapping[str, Any] = results
    return outputs


def _batchable(signature: p.Signature) -> bool:
    """Whether every input and output has a free leading (batch) dimension."""
    specs = (*signature.inputs.values(), *signature.outputs.values())
    return bool(signature.inputs) and all(
        spec.shape is not None and len(spec.shape) >= 1 and spec.shape[0] == -1 for spec in specs
    )


def _rows(arguments: Mapping[str, Any]) -> int | None:
    """The rows every input has (its first dimension), or None when they disagree."""
    counts = {int(value.shape[0]) if len(value.shape) else -1 for value in arguments.values()}
    if len(counts) != 1:
        return None
    (rows,) = counts
    return rows if rows >= 1 else None


def _to_numpy(tensor: p.Tensor) -> Any:
    """A validated REST input as a NumPy array, for the batch queue.

    Numbers on the memory of their compact array (no copy); strings, half
    and bfloat16 through _to_tf, so that any error is the one the request
    gets without batching.
    """
    if isinstance(tensor.values, py_array.array):
        return _compact(tensor)
    return _to_tf(tensor).numpy()


class _Rows:
    """Some rows of a batched output: what _from_tf and _as_proto_field read of a tensor."""

    __slots__ = ("_array", "dtype")

    def __init__(self, array: Any, dtype: Any) -> None:
        self._array = array
        self.dtype = dtype

    @property
    def shape(self) -> tuple[int, ...]:
        shape: tuple[int, ...] = self._array.shape
        return shape

    def numpy(self) -> Any:
        return self._array


class _Unsplittable(Exception):
    """A batch's output has not one row per input row: run the requests alone."""


def _run_alone(function: Any, arrays: Mapping[str, Any]) -> Mapping[str, Any]:
    return _invoke(function, {key: tf.constant(array) for key, array in arrays.items()})


def _run_batch(
    function: Any, payloads: Sequence[Mapping[str, Any]], padded: int
) -> list[dict[str, Any]]:
    """One call for every request: inputs concatenated, outputs split back by row count."""
    counts = [len(next(iter(payload.values()))) for payload in payloads]
    merged = {}
    for key in payloads[0]:
        parts = [payload[key] for payload in payloads]
        if padded:  # as TensorFlow's batching: copies of the first row
            parts.append(np.repeat(parts[0][:1], padded, axis=0))
        merged[key] = np.concatenate(parts, axis=0)
    outputs = _run_alone(function, merged)
    total = sum(counts) + padded
    answers: list[dict[str, Any]] = [{} for _ in payloads]
    for alias, value in outputs.items():
        if value.shape.rank == 0 or int(value.shape[0]) != total:
            raise _Unsplittable(alias)
        array, dtype = value.numpy(), value.dtype
        start = 0
        for answer, count in zip(answers, counts, strict=True):
            answer[alias] = _Rows(array[start : start + count], dtype)
            start += count
    return answers


class TensorFlowServable:
    """One version of a SavedModel, loaded and ready to run."""

    def __init__(
        self,
        directory: Path,
        version: int,
        *,
        method_name_check: bool = False,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._directory = directory
        self._version = version
        #: What a gRPC request or warm-up record may decode to (limits.py).
        self._expansion = limits.expansion_limit(max_body_bytes)
        self._warmup_records = 0
        #: Seconds spent replaying the warm-up file; None when there is none.
        self.warmup_seconds: float | None = None
        self._method_name_check = method_name_check
        graph = _read_meta_graph(directory)
        self._signatures = _signatures(graph)
        #: GetModelMetadata's answer: the SignatureDefs as the MetaGraphDef holds them.
        self.signature_def_map = _signature_def_map(graph)
        #: Each SignatureDef's text (C++ DebugString), quoted by TF Serving's errors.
        self._signature_texts = {name: str(sig) for name, sig in graph.signature_def.items()}
        loaded = tf.saved_model.load(str(directory), tags=[SERVE_TAG])
        self._loaded = loaded  # keeps the functions' variables alive
        self._functions: dict[str, Any] = dict(loaded.signatures)
        missing = sorted(set(self._functions) - set(self._signatures))
        if missing:
            log.warning("signatures without a SignatureDef are not served: %s", missing)
        self._batching: BatchingParameters | None = None
        self._batch_hooks: BatchHooks | None = None
        self._batchers: dict[str, Batcher[Mapping[str, Any], Mapping[str, Any]]] = {}
        self._batchers_lock = threading.Lock()
        self._alone = threading.BoundedSemaphore(1)

    def enable_batching(self, parameters: BatchingParameters, hooks: BatchHooks) -> None:
        """From now on, predicts of batchable signatures are batched (--enable_batching)."""
        self._alone = threading.BoundedSemaphore(parameters.num_batch_threads)
        self._batching, self._batch_hooks = parameters, hooks

    @contextlib.contextmanager
    def _unbatched(self) -> Iterator[None]:
        """Around a call that runs alone: with batching on, request threads are
        many (--max-queue), so at most num_batch_threads such calls run at once;
        one whose deadline passes while it waits for its turn is withdrawn (504)."""
        if self._batching is None:
            yield
            return
        alone = self._alone
        acquire_before_deadline(alone)
        try:
            yield
        finally:
            alone.release()

    def close(self) -> None:
        """Stop the batch threads (the version is unloading; nothing is in flight)."""
        with self._batchers_lock:
            batchers, self._batchers, self._batching = list(self._batchers.values()), {}, None
        for batcher in batchers:
            batcher.close()

    def _call(self, name: str, function: Any, arrays: Mapping[str, Any]) -> Mapping[str, Any]:
        """Run signature `name` on validated inputs (NumPy arrays), batched when it can be.

        A request runs alone when the signature has no free batch dimension,
        when its inputs disagree on the row count, or when it has more rows
        than max_batch_size.
        """
        parameters = self._batching
        rows = _rows(arrays)
        batcher = None
        if parameters is not None and rows is not None and rows <= parameters.max_batch_size:
            batcher = self._batcher(name, function, parameters)
        if batcher is None:
            with self._unbatched():
                return _run_alone(function, arrays)
        key = tuple(sorted((k, v.dtype.str, v.shape[1:]) for k, v in arrays.items()))
        return batcher.submit(key, rows or 0, arrays)

    def _batched(self, name: str) -> bool:
        """Whether predicts of signature `name` go through the batch queue."""
        signature = self._signatures.get(name)
        return self._batching is not None and signature is not None and _batchable(signature)

    def _batcher(
        self, name: str, function: Any, parameters: BatchingParameters
    ) -> Batcher[Mapping[str, Any], Mapping[str, Any]] | None:
        signature = self._signatures.get(name)
        if signature is None or not _batchable(signature):
            return None
        with self._batchers_lock:
            batcher = self._batchers.get(name)
            if batcher is None and self._batching is not None:
                batcher = Batcher(
                    parameters,
                    lambda payloads, padded: _run_batch(function, payloads, padded),
                    lambda payload: _run_alone(function, payload),
                    self._batch_hooks,
                    name=f"batch-v{self._version}",
                )
                self._batchers[name] = batcher
            return batcher

    @property
    def version(self) -> int:
        return self._version

    @property
    def signatures(self) -> Mapping[str, p.Signature]:
        return self._signatures

    @property
    def warmup_records(self) -> int:
        return self._warmup_records

    def predict(self, signature_name: str, inputs: Mapping[str, p.Tensor]) -> dict[str, p.Tensor]:
        function = self._functions.get(signature_name)
        if function is None:
            raise p.bad_request(
                f'Serving signature name: "{signature_name}" not found in signature def'
            )
        try:
            if self._batched(signature_name):
                arrays = {name: _to_numpy(tensor) for name, tensor in inputs.items()}
                results = self._call(signature_name, function, arrays)
            else:
                arguments = {name: _to_tf(tensor) for name, tensor in inputs.items()}
                with self._unbatched():
                    results = _invoke(function, arguments)
        except tf.errors.OpError as err:
            status = _HTTP_STATUS.get(int(err.error_code), 500)
            message = p.tensorflow_error_message(str(err.message), MAX_ERROR_MESSAGE)
            raise p.ApiError(status, message) from None
        except (TypeError, ValueError) as err:  # arguments the function cannot bind
            raise p.bad_request(str(err)[:MAX_ERROR_MESSAGE]) from None
        return {name: _from_tf(name, value) for name, value in results.items()}

    def predict_protos(
        self, signature_name: str, inputs: Mapping[str, Any], output_filter: Sequence[str]
    ) -> tuple[str, dict[str, Any]]:
        """gRPC's Predict: TensorProtos in, (signature name, TensorProtos out).

        The checks and messages are TF Serving's (servables/tensorflow/
        predict_util.cc); inputs are read as TensorFlow's Tensor::FromProto
        reads them (tensor_content or the typed value fields, the last value
        filling the shape), after their decoded size is checked
        (:func:`decode_tensor_protos`), outputs written into the typed value
        fields (float_val, int64_val, string_val, ...) as TF Serving's
        Tensor::AsProtoField writes them, so clients that read those fields
        directly work unchanged.
        """
        name = signature_name or DEFAULT_SIGNATURE
        signature = self._signatures.get(name)
        function = self._functions.get(name)
        if signature is None or function is None:
            raise p.ApiError(
                400, f'Serving signature key "{name}" not found.', code="FAILED_PRECONDITION"
            )
        if signature.method_name not in _RUNNABLE_METHODS:
            raise p.ApiError(
                500,
                "Expected prediction signature method_name to be one of {"
                + ", ".join(_RUNNABLE_METHODS)
                + "}. Was: "
                + signature.method_name,
                code="INTERNAL",
            )
        _check_input_names(inputs, signature)
        _check_output_filter(output_filter, signature)
        for index, key in enumerate(sorted(inputs)):
            proto, spec = inputs[key], signature.inputs[key]
            try:
                given = _dtype_name(proto.dtype)
            except ValueError:  # not a DataType TensorFlow knows
                raise limits.parse_error(key) from None
            if given != spec.dtype:
                raise p.bad_request(
                    f"Expects arg[{index}] to be {_tf_type(spec.dtype)} but "
                    f"{_tf_type(given)} is provided"
                )
            shape = tuple(int(d.size) for d in proto.tensor_shape.dim)
            limits.element_count(key, shape)
            p.check_shape(key, shape, spec, name)
        arguments = decode_tensor_protos(inputs, self._expansion)
        try:
            if self._batched(name):
                results = self._call(name, function, arguments)
            else:
                tensors = {
                    key: tf.constant(array, dtype=tf.dtypes.as_dtype(inputs[key].dtype))
                    for key, array in arguments.items()
                }
                with self._unbatched():
                    results = _invoke(function, tensors)
        except tf.errors.OpError as err:  # the model's own error: its code, as TF Serving
            status = _HTTP_STATUS.get(int(err.error_code), 500)
            message = p.tensorflow_error_message(str(err.message), MAX_ERROR_MESSAGE)
            raise p.ApiError(status, message, code=p.code_name(int(err.error_code))) from None
        except (TypeError, ValueError) as err:  # arguments the function cannot bind
            raise p.bad_request(str(err)[:MAX_ERROR_MESSAGE]) from None
        wanted = list(output_filter) or sorted(results)
        return name, {alias: _as_proto_field(alias, results[alias]) for alias in wanted}

    def classify(self, signature_name: str, examples: Sequence[bytes]) -> ex.Classifications:
        name = ex.find_signature(signature_name, self._signatures)
        ex.check_classification_signature(
            self._signatures[name],
            self._signature_texts[name],
            method_name_check=self._method_name_check,
        )
        outputs = self._run_examples(name, examples)
        return ex.classification_result(
            len(examples), _output(outputs, ex.CLASSES), _output(outputs, ex.SCORES)
        )

    def regress(self, signature_name: str, examples: Sequence[bytes]) -> list[float]:
        name = ex.find_signature(signature_name, self._signatures)
        ex.check_regression_signature(
            self._signatures[name],
            self._signature_texts[name],
            method_name_check=self._method_name_check,
        )
        outputs = self._run_examples(name, examples)
        output = _output(outputs, ex.OUTPUTS)
        if output is None:  # the function lost an output its SignatureDef declares
            raise p.bad_request(f"Could not find output tensor '{ex.OUTPUTS}'")
        return ex.regression_result(len(examples), output)

    def multi_inference(
        self, tasks: Sequence[ex.Task], examples: Sequence[bytes]
    ) -> list[ex.TaskResult]:
        """MultiInference (TF Serving's multi_inference.cc): every task checked, then
        each task's signature run on the shared examples, then each result checked.

        The signatures run one after the other here (each a function of the
        SavedModel; a signature appears once, duplicates are refused); TF Serving
        runs them in one Session::Run.
        """
        names = ex.check_tasks(
            tasks,
            self._signatures,
            self._signature_texts,
            method_name_check=self._method_name_check,
        )
        ex.check_examples(examples)
        outputs = [self._run_examples(name, examples) for name in names]
        results: list[ex.TaskResult] = []
        for task, out in zip(tasks, outputs, strict=True):
            if task.method_name == ex.CLASSIFY_METHOD:
                classes, scores = _output(out, ex.CLASSES), _output(out, ex.SCORES)
                results.append(ex.classification_result(len(examples), classes, scores))
                continue
            output = _output(out, ex.OUTPUTS)
            if output is None:  # the function lost an output its SignatureDef declares
                raise p.bad_request(f"Could not find output tensor '{ex.OUTPUTS}'")
            results.append(ex.regression_result(len(examples), output))
        return results

    def _run_examples(self, name: str, examples: Sequence[bytes]) -> Mapping[str, Any]:
        """Feed the serialized examples to the signature's one DT_STRING input."""
        ex.check_examples(examples)
        function = self._functions.get(name)
        if function is None:
            raise p.bad_request(f"No signature was found with the name: {name}")
        try:
            serialized = tf.constant(list(examples), dtype=tf.string)
            with self._unbatched():
                results = function(**{ex.INPUTS: serialized})
        except UnicodeDecodeError:
            # TensorFlow quotes an unparsable example in its message, and its
            # bytes are not UTF-8 text: say which example, as TF Serving's text would.
            raise p.bad_request(_unparsable(examples)) from None
        except tf.errors.OpError as err:
            status = _HTTP_STATUS.get(int(err.error_code), 500)
            message = p.tensorflow_error_message(str(err.message), MAX_ERROR_MESSAGE)
            raise p.ApiError(status, message) from None
        except (TypeError, ValueError) as err:
            raise p.bad_request(str(err)[:MAX_ERROR_MESSAGE]) from None
        if not isinstance(results, Mapping):
            return {"output_0": results}
        outputs: Mapping[str, Any] = results
        return outputs

    def warm_up(self) -> None:
        """Replay the export's warm-up records, as TF Serving does; else run zeros once.

        Either way the first client request does not pay for TensorFlow's
        tracing and allocation. A record that fails fails the load (the
        version never becomes available), as in TF Serving.
        """
        path = self._directory / WARMUP_FILE
        if path.is_file():
            started = time.perf_counter()
            self._warmup_records = self._replay(path)
            self.warmup_seconds = time.perf_counter() - started
            return
        self._warm_up_with_zeros()

    def _replay(self, path: Path) -> int:
        from tensorflow_serving.apis import prediction_log_pb2  # noqa: PLC0415

        replayed = 0
        for index, record in enumerate(tf.data.TFRecordDataset(str(path))):
            if index >= MAX_WARMUP_RECORDS:
                raise ValueError(
                    f"Number of warmup records exceeds the maximum ({MAX_WARMUP_RECORDS}) at {path}"
                )
            log_entry = prediction_log_pb2.PredictionLog()
            try:
                log_entry.ParseFromString(record.numpy())
            except Exception as err:
                raise ValueError(f"Failed to parse warmup record {index} from {path}") from err
            kind = log_entry.WhichOneof("log_type")
            if kind in ("classify_log", "regress_log"):
                self._replay_examples(index, path, log_entry)
                replayed += 1
                continue
            if kind == "multi_inference_log":
                self._replay_multi_inference(index, path, log_entry)
                replayed += 1
                continue
            if kind in ("session_run_log", "predict_streamed_log"):  # as TF Serving
                number = log_entry.DESCRIPTOR.fields_by_name[kind].number
                raise ValueError(
                    f"warm-up record {index} of {path}: Unsupported log_type for warmup: {number}"
                )
            if kind != "predict_log":  # none set: nothing to run, as in TF Serving
                continue
            request = log_entry.predict_log.request
            name = request.model_spec.signature_name or DEFAULT_SIGNATURE
            function = self._functions.get(name)
            if function is None:
                raise ValueError(
                    f"warm-up record {index} of {path}: serving signature name: "
                    f'"{name}" not found in signature def'
                )
            try:
                function(**decode_tensor_protos(request.inputs, self._expansion))
            except p.ApiError as err:
                raise ValueError(f"warm-up record {index} of {path}: {err.message}") from None
            except (tf.errors.OpError, TypeError, ValueError) as err:
                raise ValueError(
                    f"warm-up record {index} of {path} failed: {str(err)[:MAX_ERROR_MESSAGE]}"
                ) from None
            replayed += 1
        return replayed

    def _replay_examples(self, index: int, path: Path, log_entry: Any) -> None:
        """One classify_log or regress_log warm-up record."""
        try:
            if log_entry.HasField("classify_log"):
                request = log_entry.classify_log.request
                examples = ex.serialized_examples(request.input, limit=self._expansion)
                self.classify(request.model_spec.signature_name, examples)
            else:
                request = log_entry.regress_log.request
                examples = ex.serialized_examples(request.input, limit=self._expansion)
                self.regress(request.model_spec.signature_name, examples)
        except p.ApiError as err:
            raise ValueError(f"warm-up record {index} of {path} failed: {err.message}") from None

    def _replay_multi_inference(self, index: int, path: Path, log_entry: Any) -> None:
        """One multi_inference_log warm-up record (TF Serving runs it as a request,
        whatever model its tasks name, as long as they name one)."""
        request = log_entry.multi_inference_log.request
        try:
            examples = ex.serialized_examples(request.input, limit=self._expansion)
            self.multi_inference(ex.tasks_of(request), examples)
        except p.ApiError as err:
            raise ValueError(f"warm-up record {index} of {path} failed: {err.message}") from None

    def _warm_up_with_zeros(self) -> None:
        """Run each predict signature once on zeros."""
        for name, signature in self._signatures.items():
            if name not in self._functions or not signature.inputs:
                continue
            inputs = {}
            for key, spec in signature.inputs.items():
                if spec.shape is None or spec.dtype not in _FLOATS | _PLAIN:
                    break
                shape = tuple(1 if d < 0 else d for d in spec.shape)
                count = 1
                for d in shape:
                    count *= d
                zero = _ZEROS.get(spec.dtype, 0)
                inputs[key] = p.Tensor(spec.dtype, shape, [zero] * count)
            else:
                try:
                    self.predict(name, inputs)
                except p.ApiError as err:
                    log.info("warm-up of signature %r skipped: %s", name, err.message)


def load(
    directory: Path,
    version: int,
    *,
    warmup: bool = True,
    method_name_check: bool = False,
    batching: BatchingParameters | None = None,
    batch_hooks: BatchHooks | None = None,
    max_body_bytes: int | None = None,
) -> TensorFlowServable:
    """Load a version; warm it up unless `warmup` is False (--enable_model_warmup=false).

    `method_name_check`: TF Serving's --enable_signature_method_name_check
    (classify/regress then need the signature's method_name to say so).
    `batching`: --enable_batching's parameters (warm-up runs unbatched).
    `max_body_bytes`: --max-body-bytes, which bounds what a gRPC request or a
    warm-up record may decode to (limits.py; default: the flag's default).
    """
    servable = TensorFlowServable(
        directory,
        version,
        method_name_check=method_name_check,
        max_body_bytes=DEFAULT_MAX_BODY_BYTES if max_body_bytes is None else max_body_bytes,
    )
    if warmup:
        servable.warm_up()
    if batching is not None:
        servable.enable_batching(batching, batch_hooks or BatchHooks())
    return servable
