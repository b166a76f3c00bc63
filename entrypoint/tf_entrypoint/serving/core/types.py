"""TensorFlow Serving's REST protocol in pure Python (no TensorFlow, no NumPy).

Parsing and validating a predict request into flat, typed tensors, shaping
model outputs into TF Serving's answers, the status and metadata bodies, and
the URL grammar. Messages follow TF Serving's (tensorflow_serving/util/
json_tensor.cc, model_servers/http_rest_api_handler.cc) so clients written
against TF Serving see the same errors. Shapes are not checked against the
signature, as in TF Serving: a tensor of any shape goes to the model, and the
graph answers or refuses it. Where TF Serving lets a value reach the model
and fail there (an integer out of range for int8), this module rejects it
first with a 400 that names the input.

Every function raises :class:`ApiError` (an HTTP status and a message) for
bad input, never anything else.
"""

from __future__ import annotations

import array
import base64
import binascii
import json
import math
import re
from collections.abc import Iterator, Mapping, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any, Literal

#: The signature used when a request names none.
DEFAULT_SIGNATURE = "serving_default"
PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
#: Deeper nesting than this is rejected before any work (TensorFlow allows 254
#: dimensions; no JSON client sends more than a handful).
MAX_RANK = 32
#: Values quoted back in error messages are cut to this many characters.
MAX_QUOTED = 200

RequestFormat = Literal["row", "columnar"]
Kind = Literal["status", "metadata", "predict", "classify", "regress", "multi_inference"]


class ApiError(Exception):
    """A request that cannot be answered: HTTP status + TF Serving-style message.

    `code` is the canonical status (gRPC's name, e.g. "FAILED_PRECONDITION") where
    the HTTP status alone does not say it; else it follows from the status
    (:func:`status_code`).
    """

    def __init__(
        self,
        status: int,
        message: str,
        headers: Mapping[str, str] | None = None,
        *,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.code = code or status_code(status)


#: HTTP status -> canonical code: the inverse of TF Serving's mapping
#: (model_servers/http_server.cc), with 413 and 429 as RESOURCE_EXHAUSTED.
_CODE_OF_STATUS = {
    200: "OK",
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "RESOURCE_EXHAUSTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


#: Canonical codes by number (TensorFlow's error codes are gRPC's).
CODE_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)  # fmt: skip


def code_name(number: int) -> str:
    """A TensorFlow/gRPC status code's name (UNKNOWN for a number out of range)."""
    return CODE_NAMES[number] if 0 <= number < len(CODE_NAMES) else "UNKNOWN"


def status_code(status: int) -> str:
    """The canonical code (gRPC's name) of an HTTP status, as TF Serving maps them."""
    return _CODE_OF_STATUS.get(status, "INTERNAL" if status >= 500 else "UNKNOWN")


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


# --------------------------------------------------------------------------
# Signatures and tensors


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a signature, as the SavedModel declares it."""

    #: TensorFlow's DataType name, e.g. "DT_FLOAT".
    dtype: str
    #: Dimensions, -1 where any size fits; None when even the rank is unknown.
    shape: tuple[int, ...] | None
    #: The graph tensor's name, e.g. "serving_default_x:0" (metadata only).
    tensor_name: str = ""


@dataclass(frozen=True)
class Signature:
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    method_name: str = PREDICT_METHOD


@dataclass(frozen=True)
class Tensor:
    """A dense tensor: dtype name, shape, values flat in row-major order.

    Values are Python ints, floats and bools, or bytes for DT_STRING. A
    request's numbers are parsed into a compact ``array.array`` (see
    :func:`new_values`); a model's outputs may be any sequence with a
    ``tolist()`` that makes the Python objects (:func:`values_list`).
    """

    dtype: str
    shape: tuple[int, ...]
    values: Sequence[Any]


@dataclass(frozen=True)
class PredictRequest:
    signature_name: str
    format: RequestFormat
    inputs: dict[str, Tensor]


# --------------------------------------------------------------------------
# URLs


@dataclass(frozen=True)
class Route:
    kind: Kind
    model: str
    version: int | None = None
    label: str | None = None


def servable_request(route: Route) -> str:
    """How TF Serving names a request in 'Servable not found' messages."""
    if route.version is not None:
        return f"Specific({route.model}, {route.version})"
    if route.label is not None:
        return f"Labeled({route.model}, {route.label})"
    return f"Latest({route.model})"


# --------------------------------------------------------------------------
# Request bodies


def quote(value: Any) -> str:
    """A value as JSON for an error message, cut to MAX_QUOTED characters."""
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= MAX_QUOTED else text[: MAX_QUOTED - 3] + "..."


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object (NaN and Infinity accepted, as TF Serving does)."""
    if not body.strip():
        raise bad_request("JSON Parse error: The document is empty")
    try:
        document = json.loads(body)
    except json.JSONDecodeError as err:
        raise bad_request(f"JSON Parse error: {err.msg} at offset: {err.pos}") from None
    except RecursionError:
        raise bad_request("JSON Parse error: the document is nested too deeply") from None
    except ValueError as err:  # bad UTF-8, an integer with thousands of digits
        raise bad_request(f"JSON Parse error: {err}") from None
    if not isinstance(document, dict):
        raise bad_request(f"JSON Value: {quote(document)} Is not object")
    return document


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _is_named_object(value: Any) -> bool:
    return isinstance(value, dict) and not _is_b64(value)


def parse_predict_request(
    document: Mapping[str, Any], signatures: Mapping[str, Signature]
) -> PredictRequest:
    """Turn a predict body into validated tensors for one of `signatures`."""
    signature_name = document.get("signature_name", "")
    if not isinstance(signature_name, str):
        raise bad_request(
            f"JSON Value: {quote(signature_name)} not formatted correctly. "
            "'signature_name' key must be a string value."
        )
    name = signature_name or DEFAULT_SIGNATURE
    signature = signatures.get(name)
    if signature is None:
        raise bad_request(f'Serving signature name: "{name}" not found in signature def')
    if not signature.inputs:
        raise bad_request(f"Failed to get input map for signature: {signature_name or 'DEFAULT'}")

    has_instances, has_inputs = "instances" in document, "inputs" in document
    if has_instances and has_inputs:
        raise bad_request(
            "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist"
        )
    if has_instances:
        instances = document["instances"]
        if not isinstance(instances, list):
            raise bad_request("Excepting 'instances' to be an list/array")
        if not instances:
            raise bad_request("No values in 'instances' array")
        tensors = _from_instances(instances, signature)
        request_format: RequestFormat = "row"
    elif has_inputs:
        tensors = _from_inputs(document["inputs"], signature)
        request_format = "columnar"
    else:
        raise bad_request("Missing 'inputs' or 'instances' key")
    return PredictRequest(name, request_format, tensors)


def dense_shape(value: Any) -> tuple[int, ...]:
    """The shape a nested list implies, read along its first elements."""
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        if len(shape) > MAX_RANK:
            raise bad_request(f"JSON Value nests lists deeper than {MAX_RANK} levels")
        if not value:
            break
        value = value[0]
    return tuple(shape)


def _fill(
    value: Any, shape: tuple[int, ...], convert: _Converter, out: MutableSequence[Any]
) -> None:
    """Append the leaves of `value` to `out`, checking it is dense with `shape`.

    Depth first, in order, with one iterator per level: what it holds besides
    the values is as deep as the tensor, not as large.
    """
    rank = len(shape)
    append = out.append
    levels = [iter((value,))]  # the items of levels[-1] are at level len(levels) - 1
    while levels:
        level = len(levels) - 1
        for item in levels[-1]:
            if not isinstance(item, list):
                if level != rank:
                    raise bad_request(
                        f"JSON Value: {quote(item)} found at incorrect level: {level + 1} "
                        f"in the JSON DOM. Expected at level: {rank}"
                    )
                append(convert(item))
                continue
            if level >= rank:
                raise bad_request(
                    f"Encountered list at unexpected level: {level} expected < {rank}"
                )
            if len(item) != shape[level]:
                raise bad_request(
                    f"Encountered list at unexpected size: {len(item)} at level: {level} "
                    f"expected size: {shape[level]}"
                )
            if level + 1 < rank:
                levels.append(iter(item))
                break
            for leaf in item:  # the innermost lists: their items are the values
                if isinstance(leaf, list):
                    raise bad_request(
                        f"Encountered list at unexpected level: {rank} expected < {rank}"
                    )
                append(convert(leaf))
        else:
            levels.pop()


#: array.array type codes for the dtypes a request's numbers are parsed into:
#: 1 to 8 bytes a value instead of a list's 8-byte pointer and, for a float
#: made from a JSON integer, a 24-byte float object.
ARRAY_TYPECODES = {
    "DT_FLOAT": "f",
    "DT_DOUBLE": "d",
    "DT_INT8": "b",
    "DT_INT16": "h",
    "DT_INT32": "i",
    "DT_INT64": "q",
    "DT_UINT8": "B",
    "DT_UINT16": "H",
    "DT_UINT32": "I",
    "DT_UINT64": "Q",
    "DT_BOOL": "B",
}


def new_values(dtype: str) -> MutableSequence[Any]:
    """An empty container for a request's values of `dtype`: a compact array
    where one holds the dtype exactly, else a list (strings, half, bfloat16)."""
    code = ARRAY_TYPECODES.get(dtype)
    return array.array(code) if code is not None else []


def values_list(values: Sequence[Any]) -> list[Any]:
    """Values as a list of Python objects: the sequence's tolist(), else list()."""
    tolist = getattr(values, "tolist", None)
    if tolist is not None:
        converted: list[Any] = tolist()
        return converted
    return values if isinstance(values, list) else list(values)


def to_tensor(value: Any, spec: TensorSpec) -> Tensor:
    """One JSON value (scalar or nested list) as a dense tensor of spec.dtype."""
    shape = dense_shape(value)
    values = new_values(spec.dtype)
    _fill(value, shape, converter(spec.dtype), values)
    return Tensor(spec.dtype, shape, values)


def _from_instances(instances: list[Any], signature: Signature) -> dict[str, Tensor]:
    names = sorted(signature.inputs)
    objects = _is_named_object(instances[0])
    if not objects and len(names) > 1:
        raise bad_request(
            "instances is a plain list, but expecting list of objects as multiple input "
            "tensors required as per tensorinfo_map"
        )
    shapes: dict[str, tuple[int, ...]] = {}
    values = {name: new_values(signature.inputs[name].dtype) for name in names}

    def add(item: Any, name: str) -> None:
        # Every instance gives each input one row of the same shape, checked as
        # TF Serving's AddInstanceItem does: filled, then its size, then its shape.
        spec = signature.inputs[name]
        shape = dense_shape(item)
        _fill(item, shape, converter(spec.dtype), values[name])
        if name not in shapes:
            shapes[name] = shape
        elif shapes[name] != shape:
            expected, got = math.prod(shapes[name]), math.prod(shape)
            if expected != got:
                raise bad_request(f"Expecting tensor size: {expected} but got: {got}")
            raise bad_request(
                f"Expecting shape {format_shape(shapes[name])} but got: {format_shape(shape)}"
            )

    for index, element in enumerate(instances):
        if objects:
            if not _is_named_object(element):
                raise bad_request(f"Expecting object but got list at item {index} of input list")
            for key, item in element.items():
                if key not in signature.inputs:
                    raise bad_request(
                        f"Failed to process element: {index} key: {key} of 'instances' list. "
                        f"Error: JSON object: does not have named input: {key}"
                    )
                try:
                    add(item, key)
                except ApiError as err:
                    raise bad_request(
                        f"Failed to process element: {index} key: {key} of 'instances' list. "
                        f"Error: {err.message}"
                    ) from None
            if set(element) != set(names):
                raise bad_request(
                    f"Failed to process element: {index} of 'instances' list. JSON object: "
                    f"{quote(element)} keys must be equal to: {','.join(names)}"
                )
        else:
            if _is_named_object(element):
                raise bad_request(
                    f"Expecting value/list but got object at item {index} of input list"
                )
            try:
                add(element, names[0])
            except ApiError as err:
                raise bad_request(
                    f"Failed to process element: {index} of 'instances' list. Error: {err.message}"
                ) from None
    return {
        name: Tensor(signature.inputs[name].dtype, (len(instances), *shapes[name]), values[name])
        for name in names
    }


def _from_inputs(value: Any, signature: Signature) -> dict[str, Tensor]:
    names = sorted(signature.inputs)
    if not _is_named_object(value):
        if len(names) > 1:
            raise bad_request(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map"
            )
        return {names[0]: to_tensor(value, signature.inputs[names[0]])}
    tensors = {}
    for name in names:
        if name not in value:
            raise bad_request(f"Missing named input: {name} in 'inputs' object.")
        tensors[name] = to_tensor(value[name], signature.inputs[name])
    return tensors


def format_shape(shape: Sequence[int] | None) -> str:
    return "[?]" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


# --------------------------------------------------------------------------
# Values


class _Converter:
    """Checks one JSON leaf against a dtype and returns the value to store."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __call__(self, value: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def type_error(self, value: Any) -> ApiError:
        return bad_request(
            f"JSON Value: {quote(value)} Type: {_json_type(value)} is not of expected type: "
            f"{self.type_name}"
        )


def _json_type(value: Any) -> str:
    """rapidjson's name for a JSON value's type, as TF Serving's messages use it."""
    if value is None or isinstance(value, bool):
        return {None: "Null", True: "True", False: "False"}[value]
    if isinstance(value, (int, float)):
        return "Number"
    if isinstance(value, str):
        return "String"
    return "Array" if isinstance(value, list) else "Object"


class _Float(_Converter):
    def __init__(self, type_name: str, max_value: float, max_exact_int: int) -> None:
        super().__init__(type_name)
        self.max_value = max_value
        self.max_exact_int = max_exact_int

    def __call__(self, value: Any) -> Any:
        kind = type(value)
        if kind is float:
            if math.isfinite(value) and abs(value) > self.max_value:
                raise self.lossy(value)
            return value
        if kind is int:
            if abs(value) > self.max_exact_int:
                raise self.lossy(value)
            return float(value)
        raise self.type_error(value)

    def lossy(self, value: Any) -> ApiError:
        return bad_request(
            f"Cannot convert JSON value: {quote(value)} to {self.type_name} without loss of "
            "precision."
        )


class _Int(_Converter):
    def __init__(self, type_name: str, low: int, high: int) -> None:
        super().__init__(type_name)
        self.low = low
        self.high = high

    def __call__(self, value: Any) -> Any:
        if type(value) is not int:
            raise self.type_error(value)
        if not self.low <= value <= self.high:
            raise bad_request(
                f"JSON Value: {quote(value)} is out of range for type {self.type_name} "
                f"[{self.low}, {self.high}]"
            )
        return value


class _Bool(_Converter):
    def __call__(self, value: Any) -> Any:
        if type(value) is not bool:
            raise self.type_error(value)
        return value


class _String(_Converter):
    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError:
                raise bad_request(
                    f"JSON Value: {quote(value)} is not valid Unicode (lone surrogate)"
                ) from None
        if isinstance(value, dict):
            if not _is_b64(value):
                raise bad_request(
                    f"JSON Value: {quote(value)} not formatted correctly for base64 data"
                )
            try:
                return base64.b64decode(value["b64"], validate=True)
            except (binascii.Error, ValueError):
                raise bad_request("Unable to base64 decode") from None
        raise self.type_error(value)


class _Unsupported(_Converter):
    def __call__(self, value: Any) -> Any:
        raise bad_request(f"Conversion of JSON Value: {quote(value)} to type: {self.type_name}")


_FLOAT32_MAX = 3.4028234663852886e38
_CONVERTERS: dict[str, _Converter] = {
    "DT_FLOAT": _Float("float", _FLOAT32_MAX, 2**24 - 1),
    "DT_DOUBLE": _Float("double", math.inf, 2**53 - 1),
    "DT_HALF": _Float("half", 65504.0, 2**11),
    "DT_BFLOAT16": _Float("bfloat16", _FLOAT32_MAX, 2**8),
    "DT_INT8": _Int("int8", -(2**7), 2**7 - 1),
    "DT_INT16": _Int("int16", -(2**15), 2**15 - 1),
    "DT_INT32": _Int("int32", -(2**31), 2**31 - 1),
    "DT_INT64": _Int("int64", -(2**63), 2**63 - 1),
    "DT_UINT8": _Int("uint8", 0, 2**8 - 1),
    "DT_UINT16": _Int("uint16", 0, 2**16 - 1),
    "DT_UINT32": _Int("uint32", 0, 2**32 - 1),
    "DT_UINT64": _Int("uint64", 0, 2**64 - 1),
    "DT_BOOL": _Bool("bool"),
    "DT_STRING": _String("string"),
}


def converter(dtype: str) -> _Converter:
    found = _CONVERTERS.get(dtype)
    if found is None:
        return _Unsupported(dtype.removeprefix("DT_").lower())
    return found


SUPPORTED_DTYPES = frozenset(_CONVERTERS)


# --------------------------------------------------------------------------
# Responses


def nest(values: Sequence[Any], shape: Sequence[int]) -> Any:
    """Flat row-major values as nested lists of `shape` (a scalar for shape ())."""
    items = values_list(values)
    if not shape:
        return items[0]
    for level in range(len(shape) - 1, 0, -1):
        size, groups = shape[level], math.prod(shape[:level])
        items = [items[i * size : (i + 1) * size] for i in range(groups)]
    return items


def _json_leaves(name: str, tensor: Tensor) -> list[Any]:
    return _leaves(name, tensor.dtype, tensor.values)


def _leaves(name: str, dtype: str, values: Sequence[Any]) -> list[Any]:
    if dtype != "DT_STRING":
        return values_list(values)
    as_bytes = name.endswith("_bytes")
    leaves: list[Any] = []
    for value in values_list(values):
        raw = value if isinstance(value, bytes) else str(value).encode()
        if not as_bytes:
            try:
                leaves.append(raw.decode("utf-8"))
                continue
            except UnicodeDecodeError:
                pass  # not text: send it as base64 rather than corrupt it
        leaves.append({"b64": base64.b64encode(raw).decode("ascii")})
    return leaves


def predict_response(
    request_format: RequestFormat, outputs: Mapping[str, Tensor]
) -> dict[str, Any]:
    """TF Serving's answer: `predictions` (row) or `outputs` (columnar).

    One output is written without its name (a flat list for a [batch] output),
    several as objects keyed by output name.
    """
    if not outputs:
        raise ApiError(500, "Cannot convert empty tensor map to JSON")
    names = sorted(outputs)
    if request_format == "columnar":
        columns = {
            name: nest(_json_leaves(name, outputs[name]), outputs[name].shape) for name in names
        }
        return {"outputs": columns[names[0]] if len(names) == 1 else columns}
    batch = _batch_size(names, outputs)
    nested = {name: nest(_json_leaves(name, outputs[name]), outputs[name].shape) for name in names}
    if len(names) == 1:
        return {"predictions": nested[names[0]]}
    return {"predictions": [{name: nested[name][row] for name in names} for row in range(batch)]}


#: Values of an answer made Python objects at a time (predict_json).
JSON_VALUES = 1 << 16


def _row_chunks(name: str, tensor: Tensor, step: int) -> Iterator[list[Any]]:
    """A tensor's rows (its first dimension) as nested lists, `step` rows at a time."""
    rows, inner = tensor.shape[0], tensor.shape[1:]
    size = math.prod(inner)
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        values = tensor.values[start * size : stop * size]
        yield nest(_leaves(name, tensor.dtype, values), (stop - start, *inner))


def _step(*tensors: Tensor) -> int:
    """Rows a chunk holds: JSON_VALUES values' worth of all `tensors` (at least one)."""
    return max(1, JSON_VALUES // max(1, sum(math.prod(t.shape[1:]) for t in tensors)))


def _json_list(pieces: Iterator[Any]) -> bytes:
    """A JSON array of the items of the lists `pieces` yields, written one piece at a time."""
    return b"[" + b",".join(encode(piece)[1:-1] for piece in pieces if piece) + b"]"


def predict_json(request_format: RequestFormat, outputs: Mapping[str, Tensor]) -> bytes:
    """``encode(predict_response(request_format, outputs))``, written in chunks.

    A chunk of rows (JSON_VALUES values) is made Python objects, written as
    JSON text and dropped before the next: what the answer holds besides the
    model's outputs is its text and one chunk's objects, not a Python object
    per value (a float and its pointer, and a list per row, a dict per row in
    the row format with several outputs). Same checks and errors as
    :func:`predict_response`.
    """
    if not outputs:
        raise ApiError(500, "Cannot convert empty tensor map to JSON")
    names = sorted(outputs)
    if request_format == "columnar":

        def column(name: str) -> bytes:
            tensor = outputs[name]
            if not tensor.shape:
                return encode(nest(_json_leaves(name, tensor), ()))
            return _json_list(_row_chunks(name, tensor, _step(tensor)))

        if len(names) == 1:
            return b'{"outputs":' + column(names[0]) + b"}"
        fields = b",".join(encode(name) + b":" + column(name) for name in names)
        return b'{"outputs":{' + fields + b"}}"
    _batch_size(names, outputs)
    if len(names) == 1:
        tensor = outputs[names[0]]
        return b'{"predictions":' + _json_list(_row_chunks(names[0], tensor, _step(tensor))) + b"}"
    step = _step(*outputs.values())
    chunks = zip(*(_row_chunks(name, outputs[name], step) for name in names), strict=True)
    rows = (
        [{name: chunk[row] for name, chunk in zip(names, parts, strict=True)}
         for row in range(len(parts[0]))]
        for parts in chunks
    )  # fmt: skip
    return b'{"predictions":' + _json_list(rows) + b"}"


def _batch_size(names: Sequence[str], outputs: Mapping[str, Tensor]) -> int:
    """The row format's batch: every output's first dimension, the same for all."""
    batch = -1
    for name in names:
        shape = outputs[name].shape
        if not shape:
            raise bad_request(f"Tensor name: {name} has no shape information ")
        if batch >= 0 and shape[0] != batch:
            raise bad_request(
                f"Tensor name: {name} has inconsistent batch size: {shape[0]} expecting: {batch}"
            )
        batch = shape[0]
    return batch


_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\]\s*$")


def tensorflow_error_message(text: str, limit: int = 2000) -> str:
    """A TensorFlow op error as TF Serving would pass it on, cut to `limit` characters.

    Eager TensorFlow puts "Graph execution error:" and the Python frames that
    built the failing node before the kernel's message, and "[Op:...]" after
    it; TF Serving's clients see only the kernel's message (e.g. "Name:
    <unknown>, Feature: x (data type: float) is required but could not be
    found.").
    """
    kept = []
    for part in text.split("\n\n"):
        if part.startswith("Detected at node "):
            # A function loaded from a SavedModel has no Python frames: the
            # kernel's message follows this line in the same paragraph.
            _, unavailable, rest = part.partition("<stack traces unavailable>\n")
            if unavailable and rest:
                kept.append(rest)
        elif part != "Graph execution error:" and not part.startswith("  File "):
            kept.append(part)
    message = _OP_SUFFIX.sub("", "\n\n".join(kept)).strip() or text
    return message[:limit]


def error_body(message: str) -> dict[str, str]:
    return {"error": message}


def encode(body: Any) -> bytes:
    """JSON bytes as TF Serving writes them (NaN and Infinity as bare words)."""
    return json.dumps(body, allow_nan=True, separators=(",", ":")).encode("ascii")


# --------------------------------------------------------------------------
# Status and metadata


#: The lifecycle states of a model version: TF Serving's ModelVersionStatus.State
#: by name, as REST's status answer writes them (gRPC's answer takes their numbers
#: from the enum of the same names).
START = "START"
LOADING = "LOADING"
AVAILABLE = "AVAILABLE"
UNLOADING = "UNLOADING"
END = "END"


@dataclass(frozen=True)
class VersionStatus:
    version: int
    #: One of the lifecycle states: START, LOADING, AVAILABLE, UNLOADING, END.
    state: str
    error_code: str = "OK"
    error_message: str = ""


def status_body(versions: Sequence[VersionStatus]) -> dict[str, Any]:
    return {
        "model_version_status": [
            {
                "version": str(v.version),
                "state": v.state,
                "status": {"error_code": v.error_code, "error_message": v.error_message},
            }
            for v in versions
        ]
    }


def tensor_info(spec: TensorSpec) -> dict[str, Any]:
    """A TensorInfo as TF Serving's REST metadata writes it: fields in field order."""
    dims = [] if spec.shape is None else [{"size": str(d), "name": ""} for d in spec.shape]
    return {
        "name": spec.tensor_name,
        "dtype": spec.dtype,
        "tensor_shape": {"dim": dims, "unknown_rank": spec.shape is None},
    }


def signature_def_map_json(signatures: Mapping[str, Signature]) -> dict[str, Any]:
    """A SignatureDefMap as TF Serving's REST metadata writes it, from what `signatures`
    hold (metadata.py writes a servable's own SignatureDefs, when it has them)."""
    defs = {
        name: {
            "inputs": {key: tensor_info(spec) for key, spec in sorted(sig.inputs.items())},
            "outputs": {key: tensor_info(spec) for key, spec in sorted(sig.outputs.items())},
            "method_name": sig.method_name,
            "defaults": {},
        }
        for name, sig in sorted(signatures.items())
    }
    return {"signature_def": defs}
