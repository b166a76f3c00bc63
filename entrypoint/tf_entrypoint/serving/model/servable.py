"""``TensorFlowServable``: one version of a SavedModel, with one ``run()``.

Arrays to and from TensorFlow, and TensorFlow's errors mapped to codes, once
(docs/architecture.md, "One request, either protocol"): every call, predict,
classify, regress or MultiInference, either transport, warm-up included, goes
through :meth:`TensorFlowServable.run` or :meth:`~TensorFlowServable.run_many`.
The request's checks are the core's (``core/inference.py``); batching
(``model/batching.py``) and warm-up (``model/warmup.py``) sit beside it.
"""

from __future__ import annotations

import array as py_array
import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, overload

import numpy as np
import tensorflow as tf

try:
    import orjson
except ImportError:  # the serve extra without it: NumPy writes the texts
    orjson = None  # type: ignore[assignment]

from tf_entrypoint.server_flags import DEFAULT_MAX_GRAPH_BYTES
from tf_entrypoint.serving.codec.tensor_proto import CHUNK, FLOAT8_TYPES, NUMPY_DTYPES, dtype_name
from tf_entrypoint.serving.core.errors import Code, ServingError, invalid_argument
from tf_entrypoint.serving.core.inference import tensorflow_error_message
from tf_entrypoint.serving.core.servable import Call, Done, Pending
from tf_entrypoint.serving.core.types import Signature, Tensor
from tf_entrypoint.serving.model import signatures as sigs
from tf_entrypoint.serving.model.bundle import (
    LOADERS,
    Bundle,
    FunctionBundle,
    Output,
    SessionBundle,
    log,
    open_saved_model,
)

#: Characters of a TensorFlow error message passed back to the client.
MAX_ERROR_MESSAGE = 2000
#: Output dtypes written as the shortest text of their float32 value (0.1, not
#: 0.10000000149011612).
FLOATS = frozenset({"DT_FLOAT", "DT_HALF", "DT_BFLOAT16"})
#: Output dtypes whose values are made Python objects by kind: the floats (FLOATS
#: and ml_dtypes' float8 and float4) as the shortest text that reads back as the same
#: value; ml_dtypes' narrow integers as Python ints.
_VALUE_KINDS = {
    **dict.fromkeys(FLOATS | FLOAT8_TYPES, "float"),
    **dict.fromkeys(("DT_INT4", "DT_UINT4", "DT_INT2", "DT_UINT2"), "int"),
}


#: Output dtypes TensorFlow cannot hand to Python (a resource handle, a variant's C++
#: object: "Tensorflow type 21 not convertible to numpy dtype", an INTERNAL error), so
#: no protocol can carry them.
OPAQUE = frozenset({"DT_VARIANT", "DT_RESOURCE"})


def check_fetchable(signature: Signature, outputs: Sequence[str]) -> None:
    """Refuse, before the run, to fetch an output no reply can carry (INVALID_ARGUMENT
    naming it and its type, in codec/tensor_proto.py's words), where TensorFlow
    would run the graph and then fail with INTERNAL."""
    for alias in outputs:
        spec = signature.outputs.get(alias)
        if spec is not None and spec.dtype in OPAQUE:
            raise invalid_argument(
                f"Output {alias} has type {spec.dtype}, which cannot be sent in a reply"
            )


#: The errors :func:`tensorflow_errors` turns into the client's.
TENSORFLOW_ERRORS = (tf.errors.OpError, TypeError, ValueError)


@contextlib.contextmanager
def tensorflow_errors() -> Iterator[None]:
    """TensorFlow's errors as TF Serving passes them on: an op error keeps its
    code (InvalidArgument is INVALID_ARGUMENT) and its message, cleaned; arrays
    TensorFlow cannot take as arguments are INVALID_ARGUMENT."""
    try:
        yield
    except TENSORFLOW_ERRORS as err:
        raise serving_error(err) from None


def serving_error(err: BaseException) -> ServingError:
    """One of TENSORFLOW_ERRORS as :func:`tensorflow_errors` raises it."""
    if isinstance(err, tf.errors.OpError):
        message = tensorflow_error_message(str(err.message), MAX_ERROR_MESSAGE)
        return ServingError(Code.of(int(err.error_code)), message)
    return invalid_argument(str(err)[:MAX_ERROR_MESSAGE])


def translated(err: BaseException) -> BaseException:
    """`err` as :func:`tensorflow_errors` would raise it (for an error that came back
    from a batch thread rather than from a call made here)."""
    try:
        with tensorflow_errors():
            raise err
    except BaseException as out:  # noqa: BLE001 - returned, to be raised by its request
        return out


def to_array(tensor: Tensor) -> Any:
    """An input tensor as a NumPy array of its dtype and shape.

    Numbers parsed into a compact array.array (REST), arrays decoded from
    TensorProtos (gRPC) and the Open Inference Protocol's raw little-endian
    bytes (a memoryview, whose item format may be the bits' rather than the
    dtype's: half and bfloat16 as 16-bit words) are used on their memory (no
    copy); strings (bytes), half and bfloat16 from JSON come as Python lists.
    """
    values = tensor.values
    if isinstance(values, np.ndarray):
        return values.reshape(tensor.shape)
    if isinstance(values, (py_array.array, memoryview)):
        return np.frombuffer(values, dtype=NUMPY_DTYPES[tensor.dtype]).reshape(tensor.shape)
    if tensor.dtype == "DT_STRING":
        flat = np.empty(len(values), dtype=object)
        flat[:] = values if isinstance(values, list) else list(values)
        return flat.reshape(tensor.shape)
    return np.asarray(values, dtype=NUMPY_DTYPES[tensor.dtype]).reshape(tensor.shape)


class OutputValues(Sequence[Any]):
    """An output tensor's values, made Python objects only when read.

    The answer is written from these (:func:`core.types.values_list` calls
    tolist()) while the request holds a JSON conversion slot, so a request
    that waits for one holds the model's compact output, not a list of
    Python objects. Floats are written as the shortest text that reads back
    as the same float32 (0.1, not 0.10000000149011612), as TF Serving writes
    them; NaN and Inf pass through.
    """

    __slots__ = ("_flat", "_kind")

    def __init__(self, flat: Any, kind: str = "") -> None:
        self._flat = flat
        #: "float", "int" (_VALUE_KINDS), or "" for tolist() as it is.
        self._kind = kind

    def __len__(self) -> int:
        return int(self._flat.size)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return _python_values(self._flat[index], self._kind)
        return _python_values(self._flat[index : index + 1 or None], self._kind)[0]

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, len(self), CHUNK):
            yield from _python_values(self._flat[start : start + CHUNK], self._kind)

    def tolist(self) -> list[Any]:
        flat = self._flat
        if flat.size <= CHUNK:  # most answers: one conversion, no slicing
            return _python_values(flat, self._kind)
        values: list[Any] = []
        for start in range(0, len(self), CHUNK):
            values.extend(_python_values(self._flat[start : start + CHUNK], self._kind))
        return values

    def tobytes(self) -> bytes:
        """The values' bytes in C order, little-endian on every platform TensorFlow's
        wheels are built for (the Open Inference Protocol's raw contents)."""
        data: bytes = self._flat.tobytes()
        return data

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        """The values as the model's flat array (no copy): codec/tensor_proto.py writes from it."""
        return self._flat if dtype is None else self._flat.astype(dtype)


def _python_values(flat: Any, kind: str) -> list[Any]:
    if kind == "float":
        if flat.dtype == np.float32:
            fast = _float32_values(flat)
            if fast is not None:
                return fast
        native = flat.dtype in (np.float16, np.float32)
        texts = flat.astype(str) if native else _shortest_texts(flat)
        return [float(text) for text in texts.tolist()]
    if kind == "int":
        flat = flat.astype(np.int64)
    values: list[Any] = flat.tolist()
    return values


def _float32_values(flat: Any) -> list[float] | None:
    """``[float(text) for text in flat.astype(str).tolist()]`` for finite float32 values,
    at C speed: orjson writes each float32 as the shortest text that reads back as
    it (ryu; NumPy's astype(str) is Dragon4's shortest, the same digits), and reads
    that text as the double nearest to it, as float() does (issue 24: astype(str)
    was most of a wide answer's cost). None where the general path decides: NaN
    and the infinities (orjson writes null), no orjson, an array orjson refuses
    (not contiguous). The equality is checked value by value over every float32
    subnormal and the notation switch at 1e-4 (tests/container/test_output_values.py).
    """
    if orjson is None:
        return None
    try:
        text = orjson.dumps(flat, option=orjson.OPT_SERIALIZE_NUMPY)
    except orjson.JSONEncodeError:
        return None
    if b"n" in text:  # null: a NaN or an infinity (numbers are digits, '-', '.', 'e')
        return None
    values: list[float] = orjson.loads(text)
    return values


#: Significant digits that tell every float32 apart (its max_digits10), so every
#: narrower float too.
_FLOAT32_DIGITS = 9


def _shortest_texts(flat: Any) -> Any:
    """The shortest text that reads back as the same value, for a float type NumPy
    writes no text for (ml_dtypes' bfloat16, float8 and float4: ``astype(str)``
    raises TypeError), as ``astype(str)`` gives it for float16 and float32.

    Each pass, one more significant digit, formats only the values no shorter
    text has matched (a bfloat16 needs 2 to 4, a float8 1 to 3); NaN, which
    matches nothing, is written as float32 writes it.
    """
    wide = flat.astype(np.float32)
    texts = np.empty(wide.shape, dtype="<U16")
    todo = np.arange(wide.size)
    for digits in range(1, _FLOAT32_DIGITS + 1):
        trial = np.char.mod(f"%.{digits}g", wide[todo])
        same = trial.astype(np.float32).astype(flat.dtype) == flat[todo]
        texts[todo[same]] = trial[same]
        todo = todo[~same]
        if not todo.size:
            break
    texts[todo] = wide[todo].astype(str)
    return texts


#: DataType names by enum (types_pb2's lookup, once per dtype).
_DTYPE_NAMES: dict[int, str] = {}


def output_values(dtype: str, shape: tuple[int, ...], data: memoryview) -> OutputValues:
    """An output's values from its bytes as another process sent them (ipc/wire.py's
    RAW slots): what :func:`to_tensor` makes of the same array, so a front-end writes
    the answer the engine's own process would have written."""
    return OutputValues(np.frombuffer(data, dtype=NUMPY_DTYPES[dtype]), _VALUE_KINDS.get(dtype, ""))


def to_tensor(value: Output) -> Tensor:
    """An output as the core's tensor: its dtype name, shape, and its values read lazily."""
    enum = value.dtype.as_datatype_enum
    dtype = _DTYPE_NAMES.get(enum)
    if dtype is None:
        dtype = _DTYPE_NAMES.setdefault(enum, dtype_name(enum))
    array = value.numpy()
    shape = tuple(int(d) for d in array.shape)
    return Tensor(dtype, shape, OutputValues(array.reshape(-1), _VALUE_KINDS.get(dtype, "")))


class Runner(Protocol):
    """How the servable runs a signature on arrays: directly, or through the
    batch queue (model/batching.py)."""

    def run(
        self, name: str, arrays: Mapping[str, Any], outputs: tuple[str, ...], batch: bool
    ) -> dict[str, Output]: ...

    def alone(self) -> contextlib.AbstractContextManager[Any]:
        """Around a call that does not go through the batch queue."""
        ...

    def submit(
        self,
        name: str,
        arrays: Mapping[str, Any],
        outputs: tuple[str, ...],
        *,
        deadline: float | None,
        expired: str,
        on_done: Callable[[dict[str, Output] | None, BaseException | None], None],
    ) -> Pending | None:
        """A predict queued for a batch without waiting; None: not batched."""
        ...

    def close(self) -> None: ...


class Direct:
    """Every call run at once, on the request's thread."""

    def __init__(self, bundle: Bundle, signatures: Mapping[str, Signature]) -> None:
        self._bundle = bundle
        self._signatures = signatures

    def run(
        self, name: str, arrays: Mapping[str, Any], outputs: tuple[str, ...], batch: bool
    ) -> dict[str, Output]:
        return self._bundle.run(name, self._signatures[name], arrays, outputs)

    def alone(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def submit(
        self,
        name: str,
        arrays: Mapping[str, Any],
        outputs: tuple[str, ...],
        *,
        deadline: float | None,
        expired: str,
        on_done: Callable[[dict[str, Output] | None, BaseException | None], None],
    ) -> Pending | None:
        return None  # no batch queue

    def close(self) -> None:
        pass


class TensorFlowServable:
    """One version of a SavedModel, loaded and ready to run (core/servable.py's Servable)."""

    def __init__(
        self,
        directory: Path,
        version: int,
        *,
        method_name_check: bool = False,
        loader: str = LOADERS[0],
        max_graph_bytes: int = DEFAULT_MAX_GRAPH_BYTES,
    ) -> None:

        self.directory = directory
        self._version = version
        self._method_name_check = method_name_check
        #: Warm-up records replayed (model/warmup.py); seconds spent, None when none.
        self.warmup_records = 0
        self.warmup_seconds: float | None = None
        self._bundle, graph = open_saved_model(directory, loader, max_graph_bytes)
        self._signatures = sigs.signatures(graph)
        #: GetModelMetadata's answer: the SignatureDefs as the MetaGraphDef holds them.
        self.signature_def_map = sigs.signature_def_map(graph)
        self._signature_texts = sigs.signature_texts(graph)
        if isinstance(self._bundle, FunctionBundle):
            missing = sorted(self._bundle.names() - set(self._signatures))
            if missing:
                log.warning("signatures without a SignatureDef are not served: %s", missing)
        #: Runs the calls (model/batching.py puts a batch queue in front of it).
        self.direct: Runner = Direct(self._bundle, self._signatures)
        self.runner: Runner = self.direct

    @property
    def version(self) -> int:
        return self._version

    @property
    def signatures(self) -> Mapping[str, Signature]:
        return self._signatures

    @property
    def signature_texts(self) -> Mapping[str, str]:
        return self._signature_texts

    @property
    def method_name_check(self) -> bool:
        return self._method_name_check

    def runs(self, name: str) -> bool:
        return self._bundle.runs(name)

    def run(
        self,
        name: str,
        inputs: Mapping[str, Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, Tensor]:
        """Run signature `name` on checked inputs (core/inference.py); its outputs of `outputs`.

        `batch`: a predict, which goes through the batch queue when batching is
        on and the signature can be batched (model/batching.py).
        """
        runner = self.runner
        check_fetchable(self._signatures[name], outputs)
        try:  # tensorflow_errors(), without a context manager's cost on every call
            arrays = {key: to_array(tensor) for key, tensor in inputs.items()}
            if batch:
                results = runner.run(name, arrays, tuple(outputs), True)
            else:
                with runner.alone():
                    results = runner.run(name, arrays, tuple(outputs), False)
        except TENSORFLOW_ERRORS as err:
            raise serving_error(err) from None
        return {alias: to_tensor(value) for alias, value in results.items()}

    def start(
        self,
        name: str,
        inputs: Mapping[str, Tensor],
        outputs: Sequence[str],
        *,
        deadline: float | None,
        expired: str,
        done: Done,
    ) -> Pending | None:
        """A predict queued for a batch without waiting (core/servable.py); None when
        batching is off or the call cannot be batched."""
        check_fetchable(self._signatures[name], outputs)
        with tensorflow_errors():
            arrays = {key: to_array(tensor) for key, tensor in inputs.items()}

        def finished(results: dict[str, Output] | None, error: BaseException | None) -> None:
            if error is not None:
                done(None, translated(error))
            elif results is not None:
                done({alias: to_tensor(value) for alias, value in results.items()}, None)

        return self.runner.submit(
            name, arrays, tuple(outputs), deadline=deadline, expired=expired, on_done=finished
        )

    def run_many(self, calls: Sequence[Call]) -> list[dict[str, Tensor]]:
        """Several signatures in one Session run (MultiInference): each graph tensor
        fed and fetched once; an export loaded with tf.saved_model.load runs them
        one by one. Calls whose inputs are the same object are fed once."""
        bundle = self._bundle
        if not isinstance(bundle, SessionBundle):
            return [self.run(name, inputs, outputs) for name, inputs, outputs in calls]
        per_call = []
        feeds: dict[str, Any] = {}
        arrays: dict[int, Any] = {}
        with tensorflow_errors():
            for name, inputs, outputs in calls:
                signature = self._signatures[name]
                check_fetchable(signature, outputs)
                for key, tensor in inputs.items():
                    if id(tensor) not in arrays:
                        arrays[id(tensor)] = to_array(tensor)
                    feeds[signature.inputs[key].tensor_name] = arrays[id(tensor)]
                per_call.append({alias: signature.outputs[alias].tensor_name for alias in outputs})
            fetches = sorted({tensor for fetched in per_call for tensor in fetched.values()})
            with self.runner.alone():
                values = dict(zip(fetches, bundle.run_tensors(feeds, fetches), strict=True))
        return [
            {alias: to_tensor(values[tensor]) for alias, tensor in fetched.items()}
            for fetched in per_call
        ]

    def close(self) -> None:
        """Stop the batch threads and close the Session (the version is unloading;
        nothing is in flight: every request holds the version until it is answered)."""
        runner, self.runner = self.runner, self.direct
        runner.close()
        self._bundle.close()
