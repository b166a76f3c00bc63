"""A SavedModel version as a :class:`~tf_entrypoint.serving.rest.service.Servable`.

The only module of the server that imports TensorFlow. A SavedModel is
loaded as TF Serving loads it, TF1 and TF2 exports alike: as a Session
bundle (``tf.compat.v1.saved_model.loader.load`` into a fresh graph and
Session, tag "serve", assets rewired to the export's own copies, the init
op run). Signatures are the MetaGraph's SignatureDefs (dtypes, shapes,
graph tensor names, method names: what TF Serving's metadata shows); a call
feeds its inputs and fetches its outputs by tensor name, as TF Serving's
Session::Run does, through a Session callable made once per signature and
set of outputs. Shapes are the graph's business: what it accepts is
answered, what it refuses gets TensorFlow's own error and code.

Keras 3 exports, whose graph leaves the model's variables unset once
restored in a Session, have them set from the restored copies their graph
names; an export that leaves a used variable unset with no such copy is
loaded with ``tf.saved_model.load`` instead (:func:`open_saved_model`).
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
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, overload

import numpy as np
import tensorflow as tf

from tf_entrypoint.server_flags import (
    DEFAULT_MAX_BODY_BYTES,
    ENV_SAVED_MODEL_LOADER,
    SAVED_MODEL_LOADERS,
)
from tf_entrypoint.serving.codec import examples as ex
from tf_entrypoint.serving.core import limits
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.batching import (
    Batcher,
    BatchHooks,
    BatchingParameters,
)
from tf_entrypoint.serving.core.deadlines import acquire_before_deadline
from tf_entrypoint.serving.core.errors import ServingError

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


def _to_numpy(tensor: p.Tensor) -> Any:
    """A REST input (validated) as a NumPy array of its dtype.

    Numbers parsed into a compact array.array are used on its memory (no
    copy); strings (bytes), half and bfloat16 come as Python lists.
    """
    if isinstance(tensor.values, py_array.array):
        return _compact(tensor)
    if tensor.dtype == "DT_STRING":
        flat = np.empty(len(tensor.values), dtype=object)
        flat[:] = tensor.values
        return flat.reshape(tensor.shape)
    dtype = _numpy_dtype(_dtype_enum(tensor.dtype))
    return np.asarray(tensor.values, dtype=dtype).reshape(tensor.shape)


def _strings(values: Sequence[bytes]) -> Any:
    """Serialized examples as a DT_STRING vector."""
    flat = np.empty(len(values), dtype=object)
    flat[:] = list(values)
    return flat


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


#: The outputs a MultiInference task fetches, by its method (as Classify and Regress do).
_TASK_OUTPUTS = {ex.CLASSIFY_METHOD: (ex.CLASSES, ex.SCORES), ex.REGRESS_METHOD: (ex.OUTPUTS,)}
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


#: The loaders (SERVE_SAVED_MODEL_LOADER, read and checked at start by config).
LOADER_VARIABLE = ENV_SAVED_MODEL_LOADER
LOADERS = SAVED_MODEL_LOADERS
#: Session callables kept per version: one per signature and set of outputs
#: asked for (gRPC's output_filter picks subsets); the least recently used
#: beyond this are released.
MAX_CALLABLES = 64
#: Python packages whose import registers ops TF Serving's own binary links in
#: (its model_servers/BUILD), with the recipe that adds each to an image:
#: imported only when a graph needs an op TensorFlow does not have, so that
#: other models never pay for them. The images leave them out (TF Text is
#: 194 MB installed).
OP_LIBRARIES = {"tensorflow_text": "docs/own-image/Dockerfile.tf-text"}
#: The OP_LIBRARIES that imported (None: not tried yet).
_op_libraries: list[str] | None = None
_op_libraries_lock = threading.Lock()


def _missing_op(err: BaseException) -> bool:
    """Whether a load failed on an op TensorFlow has not registered."""
    return "Op type not registered" in str(err)


def register_op_libraries() -> list[str]:
    """Import OP_LIBRARIES (once per process); the ones that imported."""
    global _op_libraries  # noqa: PLW0603 - once per process
    with _op_libraries_lock:
        if _op_libraries is None:
            _op_libraries = []
            for name, recipe in OP_LIBRARIES.items():
                try:
                    importlib.import_module(name)
                except ImportError as err:
                    log.warning(
                        "%s could not be imported (%s): graphs that use its ops do not load; "
                        "add it to the image (%s)",
                        name,
                        err,
                        recipe,
                    )
                else:
                    _op_libraries.append(name)
        return list(_op_libraries)


def _session_bundle(directory: Path) -> _SessionBundle:
    """A Session bundle; a graph that names an op TensorFlow lacks is tried once
    more after OP_LIBRARIES registered theirs (TF Text's, as TF Serving has)."""
    try:
        return _SessionBundle(directory)
    except Exception as err:
        if not _missing_op(err) or _op_libraries is not None or not register_op_libraries():
            raise
    log.info("%s needs ops TensorFlow does not have: imported %s for them",
             directory, ", ".join(_op_libraries or ()))  # fmt: skip
    return _SessionBundle(directory)


class _Output:
    """One output tensor: a NumPy array and the graph tensor's TensorFlow dtype
    (what :func:`_from_tf` and :func:`_as_proto_field` read)."""

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


def _as_array(value: Any, dtype: Any) -> Any:
    """A fetched value as an ndarray: a Session gives NumPy scalars, and bytes
    for a string scalar, where the tensor has rank 0."""
    if dtype == tf.string:
        return np.asarray(value, dtype=object)
    return np.asarray(value)


def _quiet() -> contextlib.AbstractContextManager[Any]:
    """TensorFlow's deprecation warnings off around TF1 APIs that are what TF
    Serving runs (its loader, the record reader), not code to migrate: the
    server's log would otherwise tell its user to use tf.saved_model.load."""
    from tensorflow.python.util import deprecation  # noqa: PLC0415

    silence = getattr(deprecation, "silence", None)
    return silence() if silence is not None else contextlib.nullcontext()


class _SessionBundle:
    """A SavedModel loaded as TF Serving loads it: a graph in its own Session.

    ``tf.compat.v1.saved_model.loader.load`` does what TF Serving's C++
    LoadSavedModel does: imports the "serve" MetaGraph into a fresh graph,
    restores the variables through the MetaGraph's saver, and runs the init op
    (main_op, legacy_init_op, or TF2's __saved_model_init_op) with the asset
    tensors fed the export's own asset files. The Session is made without a
    config, so TensorFlow gives it the eager context's: the thread counts and
    GPU options the entrypoint's hook set; every Session of the process shares
    TensorFlow's global pools (the inter-op pool, the intra-op pool of the CPU
    device), so a version adds no threads.
    """

    def __init__(self, directory: Path) -> None:
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph)
        try:
            with _quiet():
                self.meta_graph = tf.compat.v1.saved_model.loader.load(
                    self._session, [SERVE_TAG], str(directory)
                )
        except BaseException:
            self._session.close()
            raise
        self._lock = threading.Lock()
        #: (feed names, fetch names) -> (the Session callable, the fetches' dtypes).
        self._callables: OrderedDict[tuple[tuple[str, ...], tuple[str, ...]], Any] = OrderedDict()

    def runs(self, name: str) -> bool:
        return name in self.meta_graph.signature_def

    def run(
        self,
        name: str,
        signature: p.Signature,
        feeds: Mapping[str, Any],
        outputs: Sequence[str],
    ) -> dict[str, _Output]:
        """Feed `feeds` (alias -> array) by tensor name and fetch `outputs` (aliases)."""
        fetched = self.run_tensors(
            {signature.inputs[alias].tensor_name: array for alias, array in feeds.items()},
            [signature.outputs[alias].tensor_name for alias in outputs],
        )
        return dict(zip(outputs, fetched, strict=True))

    def run_tensors(self, feeds: Mapping[str, Any], fetches: Sequence[str]) -> list[_Output]:
        """One Session run: `feeds` (graph tensor name -> array) in, the graph
        tensors `fetches` out, in their order."""
        feed_names = tuple(sorted(feeds))
        run, dtypes = self._callable(feed_names, tuple(fetches))
        values = run(*(feeds[name] for name in feed_names))
        return [
            _Output(_as_array(value, dtype), dtype)
            for value, dtype in zip(values, dtypes, strict=True)
        ]

    def _callable(self, feeds: tuple[str, ...], fetches: tuple[str, ...]) -> Any:
        """The Session callable for these feeds and fetches, made on first use.

        A callable (Session::MakeCallable) is pruned and compiled once; a call
        is one Session::RunCallable with the arrays, with no graph lookup and
        no per-call check in Python: shapes and dtypes are checked by
        TensorFlow as they are in TF Serving's Session::Run.
        """
        key = (feeds, fetches)
        with self._lock:
            made = self._callables.get(key)
            if made is not None:
                self._callables.move_to_end(key)
                return made
        from tensorflow.core.protobuf import config_pb2  # noqa: PLC0415

        options = config_pb2.CallableOptions(feed=feeds, fetch=fetches)
        # BaseSession._make_callable_from_options: Session::MakeCallable (the public
        # make_callable with feeds runs Session.run, its lookups and checks, per call).
        run = self._session._make_callable_from_options(options)
        dtypes = [self._graph.get_tensor_by_name(fetch).dtype for fetch in fetches]
        with self._lock:
            made = self._callables.setdefault(key, (run, dtypes))
            self._callables.move_to_end(key)
            while len(self._callables) > MAX_CALLABLES:
                self._callables.popitem(last=False)
        return made

    def unset_variables(self) -> list[str]:
        """Resource variables that restoring and the init op left unset, and that
        something other than their own ops, another variable's initializer or
        the saver uses (a function call: a signature). Keras 3's model.export
        leaves the model's original variables in the graph, unset and unused:
        those do not count."""
        handles = [op for op in self._graph.get_operations() if op.type == "VarHandleOp"]
        if not handles:
            return []
        with self._graph.as_default():
            checks = [tf.raw_ops.VarIsInitializedOp(resource=op.outputs[0]) for op in handles]
        done = self._session.run(checks)
        return sorted(
            op.name for op, ok in zip(handles, done, strict=True) if not ok and self._used(op)
        )

    def _used(self, handle: Any) -> bool:
        saver = self.meta_graph.saver_def
        saver_ops = {saver.restore_op_name, saver.save_tensor_name.partition(":")[0]}
        for user in handle.outputs[0].consumers():
            if (
                user.name.startswith(handle.name + "/")
                or user.name in saver_ops
                or user.type in ("VarIsInitializedOp", "DestroyResourceOp")  # ours, here
            ):
                continue
            if user.type == "ReadVariableOp" and all(
                reader.type == "AssignVariableOp" for reader in user.outputs[0].consumers()
            ):
                continue  # read only to initialize another variable
            return True
        return False

    def set_from_restored_copies(self, unset: Sequence[str]) -> list[str]:
        """Give each of `unset` the value of the restored variable its graph copied it
        into; the variables still unset afterwards (all is well when none).

        Keras 3's exports (keras-team/keras#20095) keep the model's own
        variables V, which the signatures read, and variables C that the
        checkpoint restores, each made from one V: the graph says so, C's
        initializer is AssignVariableOp(C, ReadVariableOp(V)). So V := C
        after the restore gives V the saved value, as tf.saved_model.load's
        binding of the signatures to the restored objects does. A C that
        nothing but its own ops and the saver uses is then destroyed: V holds
        the same tensor, so the weights are not kept twice.
        """
        graph, wanted = self._graph, set(unset)
        copies: dict[str, Any] = {}
        for op in graph.get_operations():
            if op.type != "AssignVariableOp" or len(op.inputs) != 2:
                continue
            target, value = op.inputs[0].op, op.inputs[1].op
            if (
                target.type == "VarHandleOp"
                and target.name not in wanted
                and value.type == "ReadVariableOp"
                and value.inputs[0].op.type == "VarHandleOp"
                and value.inputs[0].op.name in wanted
            ):
                copies.setdefault(value.inputs[0].op.name, target)
        if set(copies) != wanted:
            return sorted(wanted - set(copies))
        with graph.as_default():
            sets = [
                tf.raw_ops.AssignVariableOp(
                    resource=graph.get_operation_by_name(name).outputs[0],
                    value=tf.raw_ops.ReadVariableOp(
                        resource=copy.outputs[0], dtype=copy.get_attr("dtype")
                    ),
                )
                for name, copy in sorted(copies.items())
            ]
            unused = [
                tf.raw_ops.DestroyResourceOp(resource=copy.outputs[0], ignore_lookup_error=True)
                for copy in copies.values()
                if not self._used(copy)
            ]
        self._session.run(sets)
        if unused:
            self._session.run(unused)
        return [name for name in self.unset_variables() if name in wanted]

    def close(self) -> None:
        """Close the Session; the graph and its memory go with the last reference."""
        with self._lock:
            self._callables.clear()
        self._session.close()


class _FunctionBundle:
    """A SavedModel loaded with tf.saved_model.load: its signature functions
    (TF2's loader, which restores variables through the object graph)."""

    def __init__(self, directory: Path) -> None:
        loaded = tf.saved_model.load(str(directory), tags=[SERVE_TAG])
        self._loaded: Any = loaded  # keeps the functions' variables alive
        self._functions: dict[str, Any] = dict(loaded.signatures)

    def names(self) -> set[str]:
        return set(self._functions)

    def runs(self, name: str) -> bool:
        return name in self._functions

    def run(
        self,
        name: str,
        signature: p.Signature,
        feeds: Mapping[str, Any],
        outputs: Sequence[str],
    ) -> dict[str, _Output]:
        results = self._functions[name](**{k: tf.constant(v) for k, v in feeds.items()})
        if not isinstance(results, Mapping):
            results = {"output_0": results}
        return {
            alias: _Output(results[alias].numpy(), results[alias].dtype)
            for alias in outputs
            if alias in results
        }

    def close(self) -> None:
        self._functions, self._loaded = {}, None


_Bundle = _SessionBundle | _FunctionBundle


def open_saved_model(directory: Path, loader: str = LOADERS[0]) -> tuple[_Bundle, Any]:
    """Load a SavedModel as TF Serving does; (the bundle, its 'serve' MetaGraphDef).

    Keras 3 (TensorFlow 2.16 and later) writes exports whose graph a Session
    cannot restore as it stands: keras-team/keras#20095, #20096,
    tensorflow/serving#2250, any Keras 3 model with variables saved with
    tf.saved_model.save or model.export. The signatures read the model's own
    variables, the checkpoint restores copies of them, so once restored the
    former are unset, and TF Serving answers every call with
    FAILED_PRECONDITION "Could not find variable ...". Here such variables are
    set from the copies their graph made of them
    (:meth:`_SessionBundle.set_from_restored_copies`), and the export is
    served as a Session bundle; one whose unset variables have no such copy
    is loaded with tf.saved_model.load instead, which binds the signatures to
    the restored variables through the object graph, with a warning. `loader`
    "tf2" (SERVE_SAVED_MODEL_LOADER) loads every export that way.
    """
    if loader not in LOADERS:
        raise ValueError(f"{LOADER_VARIABLE}={loader!r}: expected one of {', '.join(LOADERS)}")
    if loader == "tf2":
        return _FunctionBundle(directory), _read_meta_graph(directory)
    bundle = _session_bundle(directory)
    graph = bundle.meta_graph
    if not graph.object_graph_def.nodes:  # a TF1 export: served as TF Serving serves it
        return bundle, graph
    unset = bundle.unset_variables()
    if not unset:
        return bundle, graph
    left = bundle.set_from_restored_copies(unset)
    if not left:
        log.info(
            "%s: %d variable(s) that restoring its graph leaves unset (a Keras 3 export, "
            "keras-team/keras#20095; TF Serving would answer FAILED_PRECONDITION 'Could not "
            "find variable') were set from the copies the checkpoint restores",
            directory,
            len(unset),
        )
        return bundle, graph
    bundle.close()
    shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
    log.warning(
        "%s: restoring its graph leaves variable(s) %s unset, and the graph holds no copy "
        "of them to set them from (TF Serving would answer every call FAILED_PRECONDITION "
        "'Could not find variable'): loaded with tf.saved_model.load instead",
        directory,
        shown,
    )
    return _FunctionBundle(directory), graph


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


class _Request(NamedTuple):
    """What the batch queue carries for one predict: its inputs and the outputs it asks for."""

    arrays: Mapping[str, Any]
    outputs: tuple[str, ...]


#: Runs a signature: (inputs by alias, output aliases) -> outputs by alias.
_Run = Callable[[Mapping[str, Any], Sequence[str]], dict[str, _Output]]


class _Unsplittable(Exception):
    """A batch's output has not one row per input row: run the requests alone."""


def _run_batch(run: _Run, payloads: Sequence[_Request], padded: int) -> list[dict[str, _Output]]:
    """One call for every request: inputs concatenated, outputs split back by row count.

    The requests of a batch share their key: the same inputs, trailing
    dimensions, dtypes and outputs asked for.
    """
    counts = [len(next(iter(payload.arrays.values()))) for payload in payloads]
    merged = {}
    for key in payloads[0].arrays:
        parts = [payload.arrays[key] for payload in payloads]
        if padded:  # as TensorFlow's batching: copies of the first row
            parts.append(np.repeat(parts[0][:1], padded, axis=0))
        merged[key] = np.concatenate(parts, axis=0)
    outputs = run(merged, payloads[0].outputs)
    total = sum(counts) + padded
    answers: list[dict[str, _Output]] = [{} for _ in payloads]
    for alias, value in outputs.items():
        if len(value.shape) == 0 or int(value.shape[0]) != total:
            raise _Unsplittable(alias)
        array, dtype = value.numpy(), value.dtype
        start = 0
        for answer, count in zip(answers, counts, strict=True):
            answer[alias] = _Output(array[start : start + count], dtype)
            start += count
    return answers


@contextlib.contextmanager
def _tensorflow_errors() -> Iterator[None]:
    """TensorFlow's errors as TF Serving passes them on: an op error keeps its
    code (InvalidArgument is 400 / INVALID_ARGUMENT) and its message, cleaned;
    arrays TensorFlow cannot take as arguments are 400."""
    try:
        yield
    except tf.errors.OpError as err:
        code = int(err.error_code)
        message = p.tensorflow_error_message(str(err.message), MAX_ERROR_MESSAGE)
        raise p.ApiError(_HTTP_STATUS.get(code, 500), message, code=p.code_name(code)) from None
    except (TypeError, ValueError) as err:
        raise p.bad_request(str(err)[:MAX_ERROR_MESSAGE]) from None


class TensorFlowServable:
    """One version of a SavedModel, loaded and ready to run."""

    def __init__(
        self,
        directory: Path,
        version: int,
        *,
        method_name_check: bool = False,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        loader: str = LOADERS[0],
    ) -> None:
        self._directory = directory
        self._version = version
        #: What a gRPC request or warm-up record may decode to (limits.py).
        self._expansion = limits.expansion_limit(max_body_bytes)
        self._warmup_records = 0
        #: Seconds spent replaying the warm-up file; None when there is none.
        self.warmup_seconds: float | None = None
        self._method_name_check = method_name_check
        self._bundle, graph = open_saved_model(directory, loader)
        self._signatures = _signatures(graph)
        #: GetModelMetadata's answer: the SignatureDefs as the MetaGraphDef holds them.
        self.signature_def_map = _signature_def_map(graph)
        #: Each SignatureDef's text (C++ DebugString), quoted by TF Serving's errors.
        self._signature_texts = {name: str(sig) for name, sig in graph.signature_def.items()}
        if isinstance(self._bundle, _FunctionBundle):
            missing = sorted(self._bundle.names() - set(self._signatures))
            if missing:
                log.warning("signatures without a SignatureDef are not served: %s", missing)
        self._batching: BatchingParameters | None = None
        self._batch_hooks: BatchHooks | None = None
        self._batchers: dict[str, Batcher[_Request, dict[str, _Output]]] = {}
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
        """Stop the batch threads and close the Session (the version is unloading;
        nothing is in flight: every request holds the version until it is answered)."""
        with self._batchers_lock:
            batchers, self._batchers, self._batching = list(self._batchers.values()), {}, None
        for batcher in batchers:
            batcher.close()
        self._bundle.close()

    def _runner(self, name: str) -> _Run:
        signature, bundle = self._signatures[name], self._bundle
        return lambda arrays, outputs: bundle.run(name, signature, arrays, outputs)

    def _execute(
        self, name: str, arrays: Mapping[str, Any], outputs: tuple[str, ...]
    ) -> dict[str, _Output]:
        """Run signature `name` on validated inputs (NumPy arrays), batched when it can be.

        A request runs alone when batching is off, when the signature has no
        free batch dimension, when its inputs disagree on the row count (or
        one is a scalar), or when it has more rows than max_batch_size.
        Requests are batched only with requests whose inputs agree in every
        dimension but the first and that ask for the same outputs.
        """
        with _tensorflow_errors():
            parameters = self._batching
            rows = _rows(arrays)
            batcher = None
            if parameters is not None and rows is not None and rows <= parameters.max_batch_size:
                batcher = self._batcher(name, parameters)
            if batcher is None:
                with self._unbatched():
                    return self._bundle.run(name, self._signatures[name], arrays, outputs)
            key = (outputs, tuple(sorted((k, v.dtype.str, v.shape[1:]) for k, v in arrays.items())))
            return batcher.submit(key, rows or 0, _Request(arrays, outputs))

    def _batched(self, name: str) -> bool:
        """Whether predicts of signature `name` go through the batch queue."""
        signature = self._signatures.get(name)
        return self._batching is not None and signature is not None and _batchable(signature)

    def _batcher(
        self, name: str, parameters: BatchingParameters
    ) -> Batcher[_Request, dict[str, _Output]] | None:
        if not self._batched(name):
            return None
        with self._batchers_lock:
            batcher = self._batchers.get(name)
            if batcher is None and self._batching is not None:
                run = self._runner(name)
                batcher = Batcher(
                    parameters,
                    lambda payloads, padded: _run_batch(run, payloads, padded),
                    lambda payload: run(payload.arrays, payload.outputs),
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
        """REST's predict: validated inputs in, every output of the signature out.

        Shapes are not checked against the signature (TF Serving does not):
        the graph takes what it can, and refuses the rest with its own error.
        """
        signature = self._signatures.get(signature_name)
        if signature is None or not self._bundle.runs(signature_name):
            raise p.bad_request(
                f'Serving signature name: "{signature_name}" not found in signature def'
            )
        with _tensorflow_errors():
            arrays = {name: _to_numpy(tensor) for name, tensor in inputs.items()}
        results = self._execute(signature_name, arrays, tuple(sorted(signature.outputs)))
        return {name: _from_tf(name, value) for name, value in results.items()}

    def predict_protos(
        self, signature_name: str, inputs: Mapping[str, Any], output_filter: Sequence[str]
    ) -> tuple[str, dict[str, Any]]:
        """gRPC's Predict: TensorProtos in, (signature name, TensorProtos out).

        The checks and messages are TF Serving's (servables/tensorflow/
        predict_util.cc): the signature and its method, the input names, the
        output filter, each input's dtype; not its shape, which the graph
        checks. Inputs are read as TensorFlow's Tensor::FromProto reads them
        (tensor_content or the typed value fields, the last value filling the
        shape), after their decoded size is checked
        (:func:`decode_tensor_protos`); only the outputs asked for are
        computed (all without a filter), and written into the typed value
        fields (float_val, int64_val, string_val, ...) as TF Serving's
        Tensor::AsProtoField writes them, so clients that read those fields
        directly work unchanged.
        """
        name = signature_name or DEFAULT_SIGNATURE
        signature = self._signatures.get(name)
        if signature is None or not self._bundle.runs(name):
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
        arguments = decode_tensor_protos(inputs, self._expansion)
        wanted = tuple(output_filter) or tuple(sorted(signature.outputs))
        results = self._execute(name, arguments, wanted)
        return name, {alias: _as_proto_field(alias, results[alias]) for alias in results}

    def classify(self, signature_name: str, examples: Sequence[bytes]) -> ex.Classifications:
        name = ex.find_signature(signature_name, self._signatures)
        ex.check_classification_signature(
            self._signatures[name],
            self._signature_texts[name],
            method_name_check=self._method_name_check,
        )
        outputs = self._run_examples(name, examples, (ex.CLASSES, ex.SCORES))
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
        outputs = self._run_examples(name, examples, (ex.OUTPUTS,))
        output = _output(outputs, ex.OUTPUTS)
        if output is None:  # the function lost an output its SignatureDef declares
            raise p.bad_request(f"Could not find output tensor '{ex.OUTPUTS}'")
        return ex.regression_result(len(examples), output)

    def multi_inference(
        self, tasks: Sequence[ex.Task], examples: Sequence[bytes]
    ) -> list[ex.TaskResult]:
        """MultiInference (TF Serving's multi_inference.cc): every task checked, then
        the tasks' signatures run on the shared examples, then each result checked.

        As in TF Serving, the tasks run in one Session run: the examples fed to
        each signature's input tensor, every task's outputs fetched together, so
        the examples are parsed once and a node the signatures share runs once.
        """
        names = ex.check_tasks(
            tasks,
            self._signatures,
            self._signature_texts,
            method_name_check=self._method_name_check,
        )
        ex.check_examples(examples)
        outputs = self._run_tasks(
            names, [_TASK_OUTPUTS[task.method_name] for task in tasks], examples
        )
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

    def _run_tasks(
        self, names: Sequence[str], wanted: Sequence[Sequence[str]], examples: Sequence[bytes]
    ) -> list[Mapping[str, Any]]:
        """Each signature of `names` on the examples, fetching its outputs of
        `wanted`: one Session run for all (each graph tensor fed and fetched
        once); an export loaded with tf.saved_model.load runs them one by one."""
        bundle = self._bundle
        if not isinstance(bundle, _SessionBundle):
            return [self._run_examples(n, examples, w) for n, w in zip(names, wanted, strict=True)]
        for name in names:
            if not bundle.runs(name):
                raise p.bad_request(f"No signature was found with the name: {name}")
        signatures = [self._signatures[name] for name in names]
        per_task = [
            {alias: sig.outputs[alias].tensor_name for alias in aliases if alias in sig.outputs}
            for sig, aliases in zip(signatures, wanted, strict=True)
        ]
        fetches = sorted({tensor for fetched in per_task for tensor in fetched.values()})
        serialized = _strings(examples)
        feeds = {sig.inputs[ex.INPUTS].tensor_name: serialized for sig in signatures}
        try:
            with _tensorflow_errors(), self._unbatched():
                values = dict(zip(fetches, bundle.run_tensors(feeds, fetches), strict=True))
        except UnicodeDecodeError:
            raise p.bad_request(_unparsable(examples)) from None
        return [
            {alias: values[tensor] for alias, tensor in fetched.items()} for fetched in per_task
        ]

    def _run_examples(
        self, name: str, examples: Sequence[bytes], wanted: Sequence[str]
    ) -> Mapping[str, Any]:
        """Feed the serialized examples to the signature's one DT_STRING input;
        fetch the outputs of `wanted` the signature has (as TF Serving's
        classifier and regressor fetch only those)."""
        ex.check_examples(examples)
        signature = self._signatures[name]
        if not self._bundle.runs(name):
            raise p.bad_request(f"No signature was found with the name: {name}")
        outputs = [alias for alias in wanted if alias in signature.outputs]
        try:
            with _tensorflow_errors(), self._unbatched():
                return self._bundle.run(name, signature, {ex.INPUTS: _strings(examples)}, outputs)
        except UnicodeDecodeError:
            # TensorFlow quotes an unparsable example in its message, and its
            # bytes are not UTF-8 text: say which example, as TF Serving's text would.
            raise p.bad_request(_unparsable(examples)) from None

    def warm_up(self) -> None:
        """Replay the export's warm-up records, as TF Serving does; else run zeros once.

        Either way the first client request does not pay for TensorFlow's
        first run (its Session callable made, memory allocated). A record
        that fails fails the load (the version never becomes available), as
        in TF Serving.
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
        with _quiet():
            records = tf.compat.v1.io.tf_record_iterator(str(path))
        for index, record in enumerate(records):
            if index >= MAX_WARMUP_RECORDS:
                raise ValueError(
                    f"Number of warmup records exceeds the maximum ({MAX_WARMUP_RECORDS}) at {path}"
                )
            log_entry = prediction_log_pb2.PredictionLog()
            try:
                log_entry.ParseFromString(record)
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
            if name not in self._signatures or not self._bundle.runs(name):
                raise ValueError(
                    f"warm-up record {index} of {path}: serving signature name: "
                    f'"{name}" not found in signature def'
                )
            try:
                self.predict_protos(name, request.inputs, request.output_filter)
            except (p.ApiError, ServingError) as err:
                raise ValueError(f"warm-up record {index} of {path}: {err.message}") from None
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
        except (p.ApiError, ServingError) as err:
            raise ValueError(f"warm-up record {index} of {path} failed: {err.message}") from None

    def _replay_multi_inference(self, index: int, path: Path, log_entry: Any) -> None:
        """One multi_inference_log warm-up record (TF Serving runs it as a request,
        whatever model its tasks name, as long as they name one)."""
        request = log_entry.multi_inference_log.request
        try:
            examples = ex.serialized_examples(request.input, limit=self._expansion)
            self.multi_inference(ex.tasks_of(request), examples)
        except (p.ApiError, ServingError) as err:
            raise ValueError(f"warm-up record {index} of {path} failed: {err.message}") from None

    def _warm_up_with_zeros(self) -> None:
        """Run each signature with inputs once on zeros: a free dimension is 1,
        a signature whose input has an unknown rank or dtype is skipped, and one
        the graph refuses zeros for is logged and skipped."""
        for name, signature in self._signatures.items():
            if not self._bundle.runs(name) or not signature.inputs:
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
                except (p.ApiError, ServingError) as err:
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
    loader: str = LOADERS[0],
) -> TensorFlowServable:
    """Load a version; warm it up unless `warmup` is False (--enable_model_warmup=false).

    `method_name_check`: TF Serving's --enable_signature_method_name_check
    (classify/regress then need the signature's method_name to say so).
    `batching`: --enable_batching's parameters (warm-up runs unbatched).
    `max_body_bytes`: --max-body-bytes, which bounds what a gRPC request or a
    warm-up record may decode to (limits.py; default: the flag's default).
    `loader`: SERVE_SAVED_MODEL_LOADER, "session" or "tf2" (open_saved_model).
    A version whose warm-up fails is closed before the error is raised.
    """
    servable = TensorFlowServable(
        directory,
        version,
        method_name_check=method_name_check,
        max_body_bytes=DEFAULT_MAX_BODY_BYTES if max_body_bytes is None else max_body_bytes,
        loader=loader,
    )
    try:
        if warmup:
            servable.warm_up()
    except BaseException:
        servable.close()
        raise
    if batching is not None:
        servable.enable_batching(batching, batch_hooks or BatchHooks())
    return servable
