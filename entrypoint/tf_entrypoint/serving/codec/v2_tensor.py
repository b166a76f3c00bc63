"""Open Inference Protocol (KServe v2) tensors: datatypes, raw bytes, JSON data
and gRPC typed contents to and from the core's :class:`Tensor`.

The protocol's datatypes are TensorFlow's under other names (DATATYPES); raw
data is row-major little-endian, BOOL one byte a value, BYTES each element a
4-byte little-endian length then its bytes. A request's raw values become a
``memoryview`` cast to the item format (no copy: the model wraps it with
``np.frombuffer``), its JSON numbers a compact ``array.array``, as
json_tensor.py does. Declared sizes are checked against the request's limit
(core/limits.py) before anything is built. Every error is a ServingError that
names the input and what was expected. No NumPy, no grpc, no protobuf.
"""

from __future__ import annotations

import array
import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tf_entrypoint.serving.codec.json_values import MAX_RANK, utf8
from tf_entrypoint.serving.core.errors import invalid_argument
from tf_entrypoint.serving.core.limits import STRING_ELEMENT_BYTES, too_large
from tf_entrypoint.serving.core.types import Tensor, TensorSpec, format_shape, quote, values_list


@dataclass(frozen=True)
class Datatype:
    """One of the protocol's datatypes and how its values are stored."""

    #: The protocol's name, e.g. "FP32".
    name: str
    #: TensorFlow's DataType name, e.g. "DT_FLOAT".
    dtype: str
    #: The struct/memoryview format of one raw value ("" for BYTES).
    format: str
    #: Bytes of one raw value (0 for BYTES).
    itemsize: int
    #: The gRPC InferTensorContents field, "" where there is none (FP16, BF16).
    contents: str
    #: The array.array type code a JSON value is stored in, "" for a list.
    typecode: str


DATATYPES: dict[str, Datatype] = {
    d.name: d
    for d in (
        Datatype("BOOL", "DT_BOOL", "?", 1, "bool_contents", ""),
        Datatype("UINT8", "DT_UINT8", "B", 1, "uint_contents", "B"),
        Datatype("UINT16", "DT_UINT16", "H", 2, "uint_contents", "H"),
        Datatype("UINT32", "DT_UINT32", "I", 4, "uint_contents", "I"),
        Datatype("UINT64", "DT_UINT64", "Q", 8, "uint64_contents", "Q"),
        Datatype("INT8", "DT_INT8", "b", 1, "int_contents", "b"),
        Datatype("INT16", "DT_INT16", "h", 2, "int_contents", "h"),
        Datatype("INT32", "DT_INT32", "i", 4, "int_contents", "i"),
        Datatype("INT64", "DT_INT64", "q", 8, "int64_contents", "q"),
        Datatype("FP16", "DT_HALF", "e", 2, "", ""),
        Datatype("FP32", "DT_FLOAT", "f", 4, "fp32_contents", "f"),
        Datatype("FP64", "DT_DOUBLE", "d", 8, "fp64_contents", "d"),
        Datatype("BYTES", "DT_STRING", "", 0, "bytes_contents", ""),
        Datatype("BF16", "DT_BFLOAT16", "H", 2, "", ""),
    )
}
#: The same datatypes by TensorFlow's DataType name.
BY_DTYPE: dict[str, Datatype] = {d.dtype: d for d in DATATYPES.values()}
#: The gRPC typed contents field of each datatype that has one.
CONTENTS_FIELD: dict[str, str] = {d.name: d.contents for d in DATATYPES.values() if d.contents}
#: Integer ranges, checked in JSON data and in typed contents.
INT_RANGES: dict[str, tuple[int, int]] = {
    "UINT8": (0, 2**8 - 1),
    "UINT16": (0, 2**16 - 1),
    "UINT32": (0, 2**32 - 1),
    "UINT64": (0, 2**64 - 1),
    "INT8": (-(2**7), 2**7 - 1),
    "INT16": (-(2**15), 2**15 - 1),
    "INT32": (-(2**31), 2**31 - 1),
    "INT64": (-(2**63), 2**63 - 1),
}
#: The largest finite magnitude of each float datatype (larger JSON numbers are refused).
FLOAT_MAX = {"FP16": 65504.0, "FP32": 3.4028234663852886e38, "BF16": 3.3895313892515355e38}
#: TensorFlow's most dimensions (TensorShape::MaxDimensions).
MAX_DIMS = 254
#: TensorFlow dtypes that metadata may show (their names without "DT_") and
#: that the protocol has no datatype for.
NO_EQUIVALENT = frozenset(
    {"COMPLEX64", "COMPLEX128", "QINT8", "QUINT8", "QINT16", "QUINT16", "QINT32", "RESOURCE"}
    | {"VARIANT", "INT4", "UINT4", "INT2", "UINT2", "FLOAT8_E5M2", "FLOAT8_E4M3FN"}
    | {"FLOAT8_E4M3FNUZ", "FLOAT8_E4M3B11FNUZ", "FLOAT8_E5M2FNUZ", "FLOAT4_E2M1FN"}
)
#: BYTES elements' length prefix.
_LENGTH = struct.Struct("<I")


def _memoryview_formats() -> frozenset[str]:
    """The formats this Python's memoryview casts to ('e' only from Python 3.12)."""
    usable = set()
    for d in DATATYPES.values():
        if d.format:
            try:
                memoryview(bytes(d.itemsize)).cast(d.format)  # type: ignore[call-overload]
            except ValueError:
                continue
            usable.add(d.format)
    return frozenset(usable)


_CASTS = _memoryview_formats()


def v2_datatype(tf_dtype: str) -> str:
    """The protocol's name of a TensorFlow dtype; TensorFlow's name without "DT_"
    where the protocol has none (e.g. "COMPLEX64", which requests cannot use)."""
    found = BY_DTYPE.get(tf_dtype)
    return found.name if found is not None else tf_dtype.removeprefix("DT_")


def datatype(v2_name: str, name: str | None = None) -> Datatype:
    """The :class:`Datatype` of a protocol name; INVALID_ARGUMENT for any other name
    (naming the input `name` when given)."""
    found = DATATYPES.get(v2_name) if isinstance(v2_name, str) else None
    if found is not None:
        return found
    where = "" if name is None else f"input '{name}': "
    if v2_name in NO_EQUIVALENT:
        raise invalid_argument(
            f"{where}datatype {v2_name} has no Open Inference Protocol equivalent"
        )
    raise invalid_argument(
        f"{where}unknown datatype {quote(v2_name)}; the Open Inference Protocol's datatypes are "
        + ", ".join(DATATYPES)
    )


def tf_dtype(v2_name: str) -> str:
    """TensorFlow's DataType name of a protocol datatype (INVALID_ARGUMENT for an unknown one)."""
    return datatype(v2_name).dtype


def check_datatype(name: str, v2_name: str, spec: TensorSpec) -> None:
    """Refuse an input whose datatype is not its signature's, or that the signature
    types with a dtype the protocol cannot carry."""
    expected = v2_datatype(spec.dtype)
    if spec.dtype not in BY_DTYPE:
        raise invalid_argument(
            f"input '{name}': the model's signature expects datatype {expected}, which has no "
            "Open Inference Protocol equivalent; call this signature through TF Serving's API"
        )
    if v2_name != expected:
        raise invalid_argument(
            f"input '{name}' has datatype {v2_name}; the model's signature expects {expected}"
        )


def check_shape(name: str, shape: Sequence[int], spec: TensorSpec) -> None:
    """Refuse a shape that does not fit the signature's: rank and each fixed dimension."""
    if spec.shape is None:
        return
    if len(shape) != len(spec.shape) or any(
        want not in (-1, got) for got, want in zip(shape, spec.shape, strict=False)
    ):
        raise invalid_argument(
            f"input '{name}' has shape {format_shape(shape)}; the signature expects "
            f"{format_shape(spec.shape)}"
        )


def check_input(name: str, v2_name: str, shape: Sequence[int], spec: TensorSpec | None) -> None:
    """An input's datatype and shape against its signature's (None: the signature has
    no such input, which the core reports with every unknown name)."""
    if spec is not None:
        check_datatype(name, v2_name, spec)
        check_shape(name, shape, spec)


def check_outputs(specs: Mapping[str, TensorSpec], wanted: Sequence[str]) -> None:
    """Refuse, before the model runs, a call that would return an output the protocol
    cannot carry (a COMPLEX64 output, say): `wanted` are the requested outputs, every
    one of the signature's when empty; an unknown name is the core's to report."""
    for name in wanted or sorted(specs):
        spec = specs.get(name)
        if spec is not None and spec.dtype not in BY_DTYPE:
            raise invalid_argument(
                f"output '{name}': the model's signature gives datatype "
                f"{v2_datatype(spec.dtype)}, which has no Open Inference Protocol equivalent; "
                "leave it out of the request's outputs, or call this signature through TF "
                "Serving's API"
            )


def tensor_metadata(specs: Mapping[str, TensorSpec]) -> list[tuple[str, str, list[int]]]:
    """(name, datatype, shape) of each tensor, by name, for model metadata: an unknown
    rank is the shape [-1], as Triton writes it."""
    return [
        (key, v2_datatype(spec.dtype), [-1] if spec.shape is None else list(spec.shape))
        for key, spec in sorted(specs.items())
    ]


def element_count(name: str, shape: Any) -> int:
    """The elements of a request's shape: a list of non-negative integers."""
    if (
        not isinstance(shape, (list, tuple))
        or len(shape) > MAX_DIMS
        or any(type(d) is not int or d < 0 for d in shape)
    ):
        raise invalid_argument(
            f"input '{name}': shape {quote(shape)} is not a list of at most {MAX_DIMS} "
            "non-negative integers"
        )
    return math.prod(shape)


def _check_limit(name: str, dt: Datatype, shape: Sequence[int], size: int, limit: int) -> None:
    if size > limit:
        raise too_large(
            f"input '{name}' of shape {format_shape(shape)} ({dt.name})",
            size,
            limit,
            "send a smaller tensor",
        )


def _count_text(count: int, dt: Datatype) -> str:
    return f"{count} {dt.name} value{'' if count == 1 else 's'}"


# --------------------------------------------------------------------------
# Raw bytes (REST's binary data extension, gRPC's raw_input_contents)


def from_raw(
    name: str, datatype_name: str, shape: Sequence[int], data: bytes | memoryview, limit: int
) -> Tensor:
    """A tensor from raw little-endian bytes; numbers stay in `data` (a memoryview, no copy)."""
    dt = datatype(datatype_name, name)
    count = element_count(name, shape)
    view = memoryview(data).cast("B") if isinstance(data, memoryview) else memoryview(data)
    dims = tuple(shape)
    if dt.name == "BYTES":
        _check_limit(name, dt, dims, count * STRING_ELEMENT_BYTES + len(view), limit)
        return Tensor(dt.dtype, dims, _split_bytes(name, dims, count, view))
    expected = count * dt.itemsize
    _check_limit(name, dt, dims, expected, limit)
    if expected != len(view):
        raise invalid_argument(
            f"input '{name}': shape {format_shape(dims)} holds {_count_text(count, dt)} "
            f"({expected} bytes), the binary data has {len(view)} bytes"
        )
    cast = dt.format if dt.format in _CASTS else "H"  # FP16 before Python 3.12: its bits
    return Tensor(dt.dtype, dims, view.cast(cast))  # type: ignore[call-overload]


def _split_bytes(name: str, shape: tuple[int, ...], count: int, view: memoryview) -> list[bytes]:
    elements: list[bytes] = []
    offset, end = 0, len(view)
    while offset < end and len(elements) < count:
        if end - offset < 4:
            raise invalid_argument(
                f"input '{name}': BYTES element {len(elements)} has {end - offset} bytes left "
                "for its 4-byte length"
            )
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if length > end - offset:
            raise invalid_argument(
                f"input '{name}': BYTES element {len(elements)} has length {length}, but only "
                f"{end - offset} bytes of the binary data are left"
            )
        elements.append(bytes(view[offset : offset + length]))
        offset += length
    if offset != end:
        raise invalid_argument(
            f"input '{name}': shape {format_shape(shape)} holds {count} BYTES values, the "
            f"binary data has {end - offset} bytes after them"
        )
    if len(elements) != count:
        raise invalid_argument(
            f"input '{name}': shape {format_shape(shape)} holds {count} BYTES values, the "
            f"binary data has {len(elements)}"
        )
    return elements


def to_raw(tensor: Tensor) -> bytes:
    """A tensor's values as raw little-endian bytes (BYTES length-prefixed)."""
    dt = _output_datatype(tensor)
    values = tensor.values
    if dt.name == "BYTES":
        parts: list[bytes] = []
        for value in values_list(values):
            raw = value if isinstance(value, bytes) else str(value).encode()
            parts += (_LENGTH.pack(len(raw)), raw)
        return b"".join(parts)
    count = math.prod(tensor.shape)
    tobytes = getattr(values, "tobytes", None)
    if tobytes is not None:  # an array, a memoryview, a NumPy array: its bytes if sized right
        raw = tobytes()
        if len(raw) == count * dt.itemsize:
            return bytes(raw)
    items = values_list(values)
    if dt.name == "BF16":
        return struct.pack(f"<{len(items)}H", *map(_bf16_bits, items))
    if dt.name == "BOOL":
        return bytes(map(bool, items))
    return struct.pack(f"<{len(items)}{dt.format}", *items)


def _bf16_bits(value: float) -> int:
    """A float's bfloat16 bits: its float32 rounded to the nearest, ties to even."""
    if math.isnan(value):
        return 0x7FC0
    bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _bf16_float(bits: int) -> float:
    value: float = struct.unpack("<f", struct.pack("<I", bits << 16))[0]
    return value


def _output_datatype(tensor: Tensor) -> Datatype:
    found = BY_DTYPE.get(tensor.dtype)
    if found is None:
        raise invalid_argument(
            f"datatype {v2_datatype(tensor.dtype)} has no Open Inference Protocol equivalent"
        )
    return found


# --------------------------------------------------------------------------
# JSON data (REST)


def _flatten(name: str, data: Any) -> list[Any]:
    """Nested lists' leaves in row-major order (a flat list as it is)."""
    if not isinstance(data, list):
        return [data]
    if not any(isinstance(item, list) for item in data):
        return data
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                if len(stack) >= MAX_RANK:
                    raise invalid_argument(
                        f"input '{name}': data nests lists deeper than {MAX_RANK} levels"
                    )
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _value_error(name: str, index: int, value: Any, expected: str) -> Exception:
    return invalid_argument(
        f"input '{name}': data element {index} is {quote(value)}; expected {expected}"
    )


def from_json(name: str, datatype_name: str, shape: Sequence[int], data: Any, limit: int) -> Tensor:
    """A tensor from a REST input's `data`: flat or nested lists, row-major."""
    dt = datatype(datatype_name, name)
    count = element_count(name, shape)
    dims = tuple(shape)
    _check_limit(name, dt, dims, count * (dt.itemsize or STRING_ELEMENT_BYTES), limit)
    flat = _flatten(name, data)
    if len(flat) != count:
        raise invalid_argument(
            f"input '{name}': shape {format_shape(dims)} holds {_count_text(count, dt)}, "
            f"the data has {len(flat)}"
        )
    return Tensor(dt.dtype, dims, _json_values(name, dt, flat))


def _json_values(name: str, dt: Datatype, flat: list[Any]) -> Sequence[Any]:
    kinds = set(map(type, flat))
    if dt.name == "BOOL":
        if not kinds <= {bool}:
            _refuse(name, flat, lambda v: type(v) is bool, "true or false")
        return list(flat)
    if dt.name == "BYTES":
        if not kinds <= {str}:
            _refuse(name, flat, lambda v: type(v) is str, "a string")
        return [utf8(value) for value in flat]
    if dt.name in INT_RANGES:
        return _json_ints(name, dt, flat, kinds)
    return _json_floats(name, dt, flat, kinds)


def _refuse(name: str, flat: list[Any], ok: Callable[[Any], bool], expected: str) -> None:
    """Raise for the first value of `flat` that is not `ok`."""
    for index, value in enumerate(flat):
        if not ok(value):
            raise invalid_argument(
                f"input '{name}': data element {index} is {quote(value)}; expected {expected}"
            )


def _json_ints(name: str, dt: Datatype, flat: list[Any], kinds: set[type]) -> Sequence[Any]:
    if kinds <= {int}:
        try:
            return array.array(dt.typecode, flat)
        except OverflowError:
            pass
    low, high = INT_RANGES[dt.name]
    _refuse(
        name,
        flat,
        lambda v: type(v) is int and low <= v <= high,
        f"an integer in [{low}, {high}] ({dt.name})",
    )
    raise AssertionError("unreachable")  # pragma: no cover


def _json_floats(name: str, dt: Datatype, flat: list[Any], kinds: set[type]) -> Sequence[Any]:
    """FP16, FP32, FP64, BF16: any JSON number within the datatype's range."""
    largest = FLOAT_MAX.get(dt.name, math.inf)
    doubles: array.array[float] | None = None
    if kinds <= {float, int}:
        try:
            doubles = array.array("d", flat)
        except OverflowError:  # an integer beyond a double
            doubles = None
    if doubles is None or (doubles and not -largest <= min(doubles) <= max(doubles) <= largest):
        _refuse(name, flat, lambda v: _in_range(v, largest), f"a number within ±{largest:g}")
    assert doubles is not None  # noqa: S101 - _refuse raised otherwise (NaN and inf pass)
    if dt.typecode == "d":
        return doubles
    return array.array(dt.typecode, doubles) if dt.typecode else doubles.tolist()


def _in_range(value: Any, largest: float) -> bool:
    if type(value) not in (int, float):
        return False
    try:
        number = float(value)
    except OverflowError:
        return False
    return not math.isfinite(number) or abs(number) <= largest


def to_json_data(tensor: Tensor) -> list[Any]:
    """A tensor's values for a REST answer's `data`: flat; BYTES as UTF-8 text."""
    dt = _output_datatype(tensor)
    values = tensor.values
    if isinstance(values, memoryview) and dt.name in ("FP16", "BF16") and values.format != "e":
        bits = values.tolist()
        if dt.name == "BF16":
            return [_bf16_float(b) for b in bits]
        return list(struct.unpack(f"<{len(bits)}e", values.tobytes()))
    items = values_list(values)
    if dt.name == "BOOL":
        return [bool(v) for v in items]
    if dt.name != "BYTES":
        return items
    texts: list[Any] = []
    for index, value in enumerate(items):
        raw = value if isinstance(value, bytes) else str(value).encode()
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise invalid_argument(
                f"output element {index} is not valid UTF-8 and cannot be written as JSON; "
                "ask for the output as binary data (parameters.binary_data: true)"
            ) from None
    return texts


# --------------------------------------------------------------------------
# gRPC typed contents


def from_contents(
    name: str, datatype_name: str, shape: Sequence[int], values: Sequence[Any], limit: int
) -> Tensor:
    """A tensor from a gRPC input's typed contents (the field CONTENTS_FIELD names)."""
    dt = datatype(datatype_name, name)
    if not dt.contents:
        raise invalid_argument(
            f"input '{name}': datatype {dt.name} has no typed contents field; send it in "
            "raw_input_contents"
        )
    count = element_count(name, shape)
    dims = tuple(shape)
    _check_limit(name, dt, dims, count * (dt.itemsize or STRING_ELEMENT_BYTES), limit)
    if len(values) != count:
        raise invalid_argument(
            f"input '{name}': shape {format_shape(dims)} holds {_count_text(count, dt)}, "
            f"{dt.contents} has {len(values)}"
        )
    if dt.name == "BOOL":
        return Tensor(dt.dtype, dims, [bool(v) for v in values])
    if dt.name == "BYTES":
        return Tensor(dt.dtype, dims, [bytes(v) for v in values])
    try:
        return Tensor(dt.dtype, dims, array.array(dt.typecode, values))
    except OverflowError:
        low, high = INT_RANGES[dt.name]
        for index, value in enumerate(values):
            if not low <= value <= high:
                raise invalid_argument(
                    f"input '{name}': {dt.contents} element {index} is {value}; expected an "
                    f"integer in [{low}, {high}] ({dt.name})"
                ) from None
        raise


def to_contents(tensor: Tensor) -> tuple[str, list[Any]]:
    """A tensor's typed contents: (field name, values); FP16 and BF16 have none."""
    dt = _output_datatype(tensor)
    if not dt.contents:
        raise invalid_argument(
            f"datatype {dt.name} has no typed contents field; it is sent as raw contents"
        )
    items = values_list(tensor.values)
    if dt.name == "BOOL":
        items = [bool(v) for v in items]
    elif dt.name == "BYTES":
        items = [v if isinstance(v, bytes) else str(v).encode() for v in items]
    return dt.contents, items
