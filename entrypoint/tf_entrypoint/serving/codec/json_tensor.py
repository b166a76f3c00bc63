"""REST predict: row and columnar JSON to tensors, tensors to JSON written in chunks.

Parsing and validating a predict body into flat, typed tensors of the
signature's dtypes, and shaping the model's outputs into TF Serving's answer.
Messages follow TF Serving's (tensorflow_serving/util/json_tensor.cc,
model_servers/http_rest_api_handler.cc). Shapes are not checked against the
signature, as in TF Serving: a tensor of any shape goes to the model, and the
graph answers or refuses it. Where TF Serving lets a value reach the model and
fail there (an integer out of range for int8), this module rejects it first
with an INVALID_ARGUMENT that names the input.

No NumPy (docs/architecture.md, rule 5): a request's numbers are parsed into
compact ``array.array``s, which the model layer uses without a copy.
"""

from __future__ import annotations

import array
import base64
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tf_entrypoint.serving.codec.json_values import (
    MAX_RANK,
    WRITTEN_DTYPES,
    Converter,
    converter,
    encode,
    encode_numbers,
    is_named_object,
    plain_key,
)
from tf_entrypoint.serving.core.errors import ServingError, invalid_argument
from tf_entrypoint.serving.core.types import (
    DEFAULT_SIGNATURE,
    Signature,
    Tensor,
    TensorSpec,
    format_shape,
    quote,
    values_list,
)

RequestFormat = Literal["row", "columnar"]


@dataclass(frozen=True)
class PredictRequest:
    signature_name: str
    format: RequestFormat
    inputs: dict[str, Tensor]


def parse_predict_request(
    document: Mapping[str, Any], signatures: Mapping[str, Signature]
) -> PredictRequest:
    """Turn a predict body into validated tensors for one of `signatures`."""
    signature_name = document.get("signature_name", "")
    if not isinstance(signature_name, str):
        raise invalid_argument(
            f"JSON Value: {quote(signature_name)} not formatted correctly. "
            "'signature_name' key must be a string value."
        )
    name = signature_name or DEFAULT_SIGNATURE
    signature = signatures.get(name)
    if signature is None:
        raise invalid_argument(f'Serving signature name: "{name}" not found in signature def')
    if not signature.inputs:
        raise invalid_argument(
            f"Failed to get input map for signature: {signature_name or 'DEFAULT'}"
        )

    has_instances, has_inputs = "instances" in document, "inputs" in document
    if has_instances and has_inputs:
        raise invalid_argument(
            "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist"
        )
    if has_instances:
        instances = document["instances"]
        if not isinstance(instances, list):
            raise invalid_argument("Excepting 'instances' to be an list/array")
        if not instances:
            raise invalid_argument("No values in 'instances' array")
        tensors = _fast_instances(instances, signature) or _from_instances(instances, signature)
        request_format: RequestFormat = "row"
    elif has_inputs:
        tensors = _from_inputs(document["inputs"], signature)
        request_format = "columnar"
    else:
        raise invalid_argument("Missing 'inputs' or 'instances' key")
    return PredictRequest(name, request_format, tensors)


def dense_shape(value: Any) -> tuple[int, ...]:
    """The shape a nested list implies, read along its first elements."""
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        if len(shape) > MAX_RANK:
            raise invalid_argument(f"JSON Value nests lists deeper than {MAX_RANK} levels")
        if not value:
            break
        value = value[0]
    return tuple(shape)


def _fill(
    value: Any, shape: tuple[int, ...], convert: Converter, out: MutableSequence[Any]
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
                    raise invalid_argument(
                        f"JSON Value: {quote(item)} found at incorrect level: {level + 1} "
                        f"in the JSON DOM. Expected at level: {rank}"
                    )
                append(convert(item))
                continue
            if level >= rank:
                raise invalid_argument(
                    f"Encountered list at unexpected level: {level} expected < {rank}"
                )
            if len(item) != shape[level]:
                raise invalid_argument(
                    f"Encountered list at unexpected size: {len(item)} at level: {level} "
                    f"expected size: {shape[level]}"
                )
            if level + 1 < rank:
                levels.append(iter(item))
                break
            for leaf in item:  # the innermost lists: their items are the values
                if isinstance(leaf, list):
                    raise invalid_argument(
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


def to_tensor(value: Any, spec: TensorSpec, name: str = "") -> Tensor:
    """One JSON value (scalar or nested list) as a dense tensor of spec.dtype (`name`:
    the input's, for the error of a dtype JSON has no values for)."""
    shape = dense_shape(value)
    values = new_values(spec.dtype)
    _fill(value, shape, converter(spec.dtype, name), values)
    return Tensor(spec.dtype, shape, values)


def _floats_fast(instances: list[Any], spec: TensorSpec) -> Tensor | None:
    """The common request, read at C speed: one float input, the instances JSON
    numbers or equal-length lists of them, each within the dtype's range.

    None for anything else (bools, strings, deeper or ragged lists, NaN,
    infinities, values beyond the dtype's range, which it rounds to an
    infinity), which the general reader checks one value at a time with TF
    Serving's messages: this reader only accepts what that one accepts, with
    the same values (an integer rounded as float(value) rounds it).
    """
    typecode = _FAST_FLOATS.get(spec.dtype)
    if typecode is None:
        return None
    found = _flat_numbers(instances)
    if found is None:
        return None
    flat, shape = found
    limit = _FAST_FLOATS_MAX[spec.dtype]
    # On the Python numbers, not on an array of them (which makes a float object of
    # each value it compares): an integer is compared exactly, so one that float()
    # would round into the range goes to the general reader, which stores the same.
    if not -limit <= min(flat) <= max(flat) <= limit:  # inf fails, NaN when it comes first
        return None
    try:
        if math.isnan(sum(flat)):  # a NaN after the first value, which min and max pass over
            return None
        values = array.array(typecode, flat)  # each value rounded once, as float() rounds it
    except OverflowError:  # integers whose sum is beyond a double: the general reader
        return None
    return Tensor(spec.dtype, shape, values)


def _flat_numbers(instances: list[Any]) -> tuple[list[Any], tuple[int, ...]] | None:
    """The instances' numbers in a row and their shape: numbers, or equal-length
    non-empty lists of numbers; None for anything else."""
    kinds = set(map(type, instances))
    if kinds <= _NUMBERS:
        return instances, (len(instances),)
    if kinds != {list}:
        return None
    widths = set(map(len, instances))
    if len(widths) != 1:
        return None
    (width,) = widths
    flat = list(itertools.chain.from_iterable(instances))
    if not flat or not set(map(type, flat)) <= _NUMBERS:
        return None
    return flat, (len(instances), width)


def _fast_instances(instances: list[Any], signature: Signature) -> dict[str, Tensor] | None:
    if len(signature.inputs) != 1:
        return None
    ((name, spec),) = signature.inputs.items()
    tensor = _floats_fast(instances, spec)
    return None if tensor is None else {name: tensor}


_FAST_FLOATS = {"DT_FLOAT": "f", "DT_DOUBLE": "d"}
_NUMBERS = frozenset({float, int})  # not bool: type(True) is bool
_FAST_FLOATS_MAX = {"DT_FLOAT": 3.4028234663852886e38, "DT_DOUBLE": 1.7976931348623157e308}


def _from_instances(instances: list[Any], signature: Signature) -> dict[str, Tensor]:
    names = sorted(signature.inputs)
    objects = is_named_object(instances[0])
    if not objects and len(names) > 1:
        raise invalid_argument(
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
        _fill(item, shape, converter(spec.dtype, name), values[name])
        if name not in shapes:
            shapes[name] = shape
        elif shapes[name] != shape:
            expected, got = math.prod(shapes[name]), math.prod(shape)
            if expected != got:
                raise invalid_argument(f"Expecting tensor size: {expected} but got: {got}")
            raise invalid_argument(
                f"Expecting shape {format_shape(shapes[name])} but got: {format_shape(shape)}"
            )

    for index, element in enumerate(instances):
        if objects:
            if not is_named_object(element):
                raise invalid_argument(
                    f"Expecting object but got list at item {index} of input list"
                )
            for key, item in element.items():
                if key not in signature.inputs:
                    raise invalid_argument(
                        f"Failed to process element: {index} key: {key} of 'instances' list. "
                        f"Error: JSON object: does not have named input: {key}"
                    )
                try:
                    add(item, key)
                except ServingError as err:
                    raise invalid_argument(
                        f"Failed to process element: {index} key: {key} of 'instances' list. "
                        f"Error: {err.message}"
                    ) from None
            if set(element) != set(names):
                raise invalid_argument(
                    f"Failed to process element: {index} of 'instances' list. JSON object: "
                    f"{quote(element)} keys must be equal to: {','.join(names)}"
                )
        else:
            if is_named_object(element):
                raise invalid_argument(
                    f"Expecting value/list but got object at item {index} of input list"
                )
            try:
                add(element, names[0])
            except ServingError as err:
                raise invalid_argument(
                    f"Failed to process element: {index} of 'instances' list. Error: {err.message}"
                ) from None
    return {
        name: Tensor(signature.inputs[name].dtype, (len(instances), *shapes[name]), values[name])
        for name in names
    }


def _from_inputs(value: Any, signature: Signature) -> dict[str, Tensor]:
    names = sorted(signature.inputs)
    if not is_named_object(value):
        if len(names) > 1:
            raise invalid_argument(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map"
            )
        return {names[0]: to_tensor(value, signature.inputs[names[0]], names[0])}
    tensors = {}
    for name in names:
        if name not in value:
            raise invalid_argument(f"Missing named input: {name} in 'inputs' object.")
        tensors[name] = to_tensor(value[name], signature.inputs[name], name)
    return tensors


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


def check_json_outputs(outputs: Mapping[str, Tensor]) -> None:
    """Refuse an answer JSON cannot hold, before any of it is written.

    No outputs is TF Serving's INVALID_ARGUMENT. An output's dtype must be
    one JSON writes (json_values.WRITTEN_DTYPES: the real numbers, bool and
    string); for any other (complex, quantized, variant, resource) TF
    Serving's words, naming the output: gRPC's Predict carries the ones a
    TensorProto can.
    """
    if not outputs:
        raise invalid_argument("Cannot convert empty tensor map to JSON")
    for name in sorted(outputs):
        dtype = outputs[name].dtype
        if dtype not in WRITTEN_DTYPES:
            raise invalid_argument(
                "Failed to write JSON value for tensor type: "
                f"{dtype.removeprefix('DT_').lower()} (output: {name})"
            )


def predict_response(
    request_format: RequestFormat, outputs: Mapping[str, Tensor]
) -> dict[str, Any]:
    """TF Serving's answer: `predictions` (row) or `outputs` (columnar).

    One output is written without its name (a flat list for a [batch] output),
    several as objects keyed by output name.
    """
    check_json_outputs(outputs)
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


def _json_list(pieces: Iterator[Any], write: Callable[[Any], bytes] = encode) -> bytes:
    """A JSON array of the items of the lists `pieces` yields, written one piece at a time."""
    return b"[" + b",".join(write(piece)[1:-1] for piece in pieces if piece) + b"]"


#: Output dtypes whose JSON values are numbers or bools: every one written but strings.
_NUMBER_DTYPES = WRITTEN_DTYPES - {"DT_STRING"}


def _writer(outputs: Mapping[str, Tensor]) -> Callable[[Any], bytes]:
    """How the answer's JSON is written: :func:`encode_numbers` (orjson, where it
    writes json's bytes) when every output is numbers and every name a plain key,
    else :func:`encode`."""
    if all(t.dtype in _NUMBER_DTYPES for t in outputs.values()) and all(map(plain_key, outputs)):
        return encode_numbers
    return encode


def predict_json(request_format: RequestFormat, outputs: Mapping[str, Tensor]) -> bytes:
    """``encode(predict_response(request_format, outputs))``, written in chunks.

    A chunk of rows (JSON_VALUES values) is made Python objects, written as
    JSON text and dropped before the next: what the answer holds besides the
    model's outputs is its text and one chunk's objects, not a Python object
    per value (a float and its pointer, and a list per row, a dict per row in
    the row format with several outputs). Same checks and errors as
    :func:`predict_response`; the same bytes, written by orjson where it
    writes them (:func:`_writer`).
    """
    check_json_outputs(outputs)
    write = _writer(outputs)
    if sum(len(tensor.values) for tensor in outputs.values()) <= JSON_VALUES:
        return write(predict_response(request_format, outputs))  # one chunk: no chunking
    names = sorted(outputs)
    if request_format == "columnar":

        def column(name: str) -> bytes:
            tensor = outputs[name]
            if not tensor.shape:
                return write(nest(_json_leaves(name, tensor), ()))
            return _json_list(_row_chunks(name, tensor, _step(tensor)), write)

        if len(names) == 1:
            return b'{"outputs":' + column(names[0]) + b"}"
        fields = b",".join(encode(name) + b":" + column(name) for name in names)
        return b'{"outputs":{' + fields + b"}}"
    _batch_size(names, outputs)
    if len(names) == 1:
        tensor = outputs[names[0]]
        rows = _row_chunks(names[0], tensor, _step(tensor))
        return b'{"predictions":' + _json_list(rows, write) + b"}"
    step = _step(*outputs.values())
    chunks = zip(*(_row_chunks(name, outputs[name], step) for name in names), strict=True)
    objects = (
        [{name: chunk[row] for name, chunk in zip(names, parts, strict=True)}
         for row in range(len(parts[0]))]
        for parts in chunks
    )  # fmt: skip
    return b'{"predictions":' + _json_list(objects, write) + b"}"


def _batch_size(names: Sequence[str], outputs: Mapping[str, Tensor]) -> int:
    """The row format's batch: every output's first dimension, the same for all."""
    batch = -1
    for name in names:
        shape = outputs[name].shape
        if not shape:
            raise invalid_argument(f"Tensor name: {name} has no shape information ")
        if batch >= 0 and shape[0] != batch:
            raise invalid_argument(
                f"Tensor name: {name} has inconsistent batch size: {shape[0]} expecting: {batch}"
            )
        batch = shape[0]
    return batch
