"""The JSON leaf rules both JSON codecs share (json_tensor.py, json_examples.py).

A JSON value checked against a TensorFlow dtype (types, integer ranges,
base64, UTF-8), as TF Serving's json_tensor.cc checks it, with its messages;
rapidjson's type names; the body as a JSON object; JSON bytes written as TF
Serving writes them. Every error is a :class:`ServingError` INVALID_ARGUMENT.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import struct
from typing import Any

try:
    import orjson
except ImportError:  # the serve extra without it: json reads every body
    orjson = None  # type: ignore[assignment]

from tf_entrypoint.serving.core.errors import ServingError, invalid_argument
from tf_entrypoint.serving.core.types import quote

#: An integer orjson may not read as json does (beyond 64 bits: read as a float)
#: has 19 digits in a row: found by a C scan of the body with its digits made
#: zeros (a regex search for them cost more than json reading the body: issue 24).
_DIGITS_AS_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19
#: Deeper nesting than this is rejected before any work (TensorFlow allows 254
#: dimensions; no JSON client sends more than a handful).
MAX_RANK = 32


def loads(body: bytes) -> Any:
    """`json.loads(body)`, by orjson where that gives the same document.

    orjson reads JSON at C speed (issue 24: the stdlib reader was the MLP's
    largest cost after the model), but reads some documents otherwise: an
    integer beyond 64 bits becomes a float (a DT_INT64 input would then be
    refused with another message, a DT_FLOAT one accepted instead of refused
    for its precision), and NaN, Infinity, numbers beyond a double and lone
    surrogates, which json takes, it refuses. So a body with 19 digits in a
    row, and whatever orjson refuses, is read by json: its documents and its
    errors are the ones clients get (tests/unit/serving/test_hot_path.py).
    Without orjson installed, json reads everything.
    """
    if orjson is not None and body.translate(_DIGITS_AS_ZEROS).find(_LONG_DIGITS) == -1:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    return json.loads(body)


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object (NaN and Infinity accepted, as TF Serving does)."""
    if not body.strip():
        raise invalid_argument("JSON Parse error: The document is empty")
    try:
        document = loads(body)
    except json.JSONDecodeError as err:
        raise invalid_argument(f"JSON Parse error: {err.msg} at offset: {err.pos}") from None
    except RecursionError:
        raise invalid_argument("JSON Parse error: the document is nested too deeply") from None
    except ValueError as err:  # bad UTF-8, an integer with thousands of digits
        raise invalid_argument(f"JSON Parse error: {err}") from None
    if not isinstance(document, dict):
        raise invalid_argument(f"JSON Value: {quote(document)} Is not object")
    return document


def utf8(text: str) -> bytes:
    """A JSON string as UTF-8 (a lone surrogate is refused)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid_argument(
            f"JSON Value: {quote(text)} is not valid Unicode (lone surrogate)"
        ) from None


def b64(text: str) -> bytes:
    """``{"b64": text}``'s bytes, read as TF Serving reads them (absl::Base64Unescape).

    The standard alphabet (``+`` and ``/``, not the URL-safe one); ASCII
    whitespace anywhere is skipped (base64 wrapped at 76 characters, a line
    break at the end); the padding may be left out, but where it is given it
    must be complete (``=`` or ``.``) and nothing may follow it but
    whitespace; a single character left over is refused.
    """
    if len(text) % 4 == 0:  # the common text: exact, padded, one line
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            pass
    try:
        data = text.encode("ascii").translate(None, _B64_SPACE)
    except UnicodeEncodeError:
        raise invalid_argument("Unable to base64 decode") from None
    digits = data.rstrip(b"=.")
    padding = len(data) - len(digits)
    left = len(digits) % 4
    complete = (4 - left) % 4  # the padding the digits call for
    if left == 1 or padding not in (0, complete):
        raise invalid_argument("Unable to base64 decode")
    try:
        return base64.b64decode(digits + b"=" * complete, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_argument("Unable to base64 decode") from None


#: absl::ascii_isspace's characters, which base64 text may hold anywhere.
_B64_SPACE = b" \t\n\v\f\r"


def is_b64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def is_named_object(value: Any) -> bool:
    return isinstance(value, dict) and not is_b64(value)


def json_type(value: Any) -> str:
    """rapidjson's name for a JSON value's type, as TF Serving's messages use it."""
    if value is None or isinstance(value, bool):
        return {None: "Null", True: "True", False: "False"}[value]
    if isinstance(value, (int, float)):
        return "Number"
    if isinstance(value, str):
        return "String"
    return "Array" if isinstance(value, list) else "Object"


class Converter:
    """Checks one JSON leaf against a dtype and returns the value to store."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __call__(self, value: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def type_error(self, value: Any) -> ServingError:
        return invalid_argument(
            f"JSON Value: {quote(value)} Type: {json_type(value)} is not of expected type: "
            f"{self.type_name}"
        )


class _Float(Converter):
    """Any JSON number, rounded to the dtype as TF Serving's ``GetFloat()`` rounds it.

    TF Serving (since 2021) takes every number for a float input and lets
    the C cast round it: 1435774380 is 1435774336.0 as a float, a value
    beyond the dtype's range is an infinity, one below its smallest is 0.
    The value returned is a Python float; the float32 rounding happens where
    it is stored (array.array("f"), a C cast), half and bfloat16 are rounded
    here (:func:`_half`, :func:`_bfloat16`) so that NumPy gets exact values.
    """

    def __init__(self, type_name: str, narrow: Any = None) -> None:
        super().__init__(type_name)
        self.narrow = narrow

    def __call__(self, value: Any) -> Any:
        kind = type(value)
        if kind is int:
            try:
                value = float(value)
            except OverflowError:  # rapidjson: a parse error, "Number too big"
                raise invalid_argument(
                    f"JSON Value: {quote(value)} is too big to be stored in a double"
                ) from None
        elif kind is not float:
            raise self.type_error(value)
        return value if self.narrow is None else self.narrow(value)


def _float32(value: float) -> float:
    """`value` rounded to float32 (to nearest, ties to even); an infinity beyond its range."""
    try:
        rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)
    return rounded


def _half(value: float) -> float:
    """`value` rounded to IEEE half (to nearest, ties to even); an infinity beyond 65504."""
    try:
        rounded: float = struct.unpack("<e", struct.pack("<e", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)
    return rounded


def _bfloat16(value: float) -> float:
    """`value` rounded to bfloat16 as TensorFlow rounds a float32 (to nearest, ties to even)."""
    single = _float32(value)
    if not math.isfinite(single):
        return single
    (bits,) = struct.unpack("<I", struct.pack("<f", single))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    rounded: float = struct.unpack("<f", struct.pack("<I", bits))[0]
    return rounded


class _Int(Converter):
    def __init__(self, type_name: str, low: int, high: int) -> None:
        super().__init__(type_name)
        self.low = low
        self.high = high

    def __call__(self, value: Any) -> Any:
        if type(value) is not int:
            raise self.type_error(value)
        if not self.low <= value <= self.high:
            raise invalid_argument(
                f"JSON Value: {quote(value)} is out of range for type {self.type_name} "
                f"[{self.low}, {self.high}]"
            )
        return value


class _Bool(Converter):
    def __call__(self, value: Any) -> Any:
        if type(value) is not bool:
            raise self.type_error(value)
        return value


class _String(Converter):
    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return utf8(value)
        if isinstance(value, dict):
            if not is_b64(value):
                raise invalid_argument(
                    f"JSON Value: {quote(value)} not formatted correctly for base64 data"
                )
            return b64(value["b64"])
        raise self.type_error(value)


class _Unsupported(Converter):
    """A dtype JSON has no values for (complex, quantized, float8, int4, variant,
    resource): TF Serving's words, and the input's name where it is known."""

    def __init__(self, type_name: str, name: str = "") -> None:
        super().__init__(type_name)
        self.name = name

    def __call__(self, value: Any) -> Any:
        where = f" (input: {self.name})" if self.name else ""
        raise invalid_argument(
            f"Conversion of JSON Value: {quote(value)} to type: {self.type_name}{where}"
        )


_CONVERTERS: dict[str, Converter] = {
    "DT_FLOAT": _Float("float"),  # rounded where it is stored: array.array("f")
    "DT_DOUBLE": _Float("double"),
    "DT_HALF": _Float("half", _half),  # refused by TF Serving ("Conversion of ...")
    "DT_BFLOAT16": _Float("bfloat16", _bfloat16),  # the same
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


def converter(dtype: str, name: str = "") -> Converter:
    """The converter of `dtype`'s values; one that refuses every value, naming the
    input `name`, for a dtype JSON has none for."""
    found = _CONVERTERS.get(dtype)
    if found is None:
        return _Unsupported(dtype.removeprefix("DT_").lower(), name)
    return found


SUPPORTED_DTYPES = frozenset(_CONVERTERS)
#: The dtypes an answer writes as JSON: those read (numbers, half and bfloat16
#: included, bool, string) and the narrower real numbers a model may return,
#: ml_dtypes' float8 and float4 (numbers) and 4- and 2-bit integers. Not complex
#: (no JSON number), the quantized types (integers without their scale: TF Serving
#: writes none of these either), variant or resource.
WRITTEN_DTYPES = SUPPORTED_DTYPES | frozenset(
    {"DT_FLOAT8_E5M2", "DT_FLOAT8_E4M3FN", "DT_FLOAT8_E4M3FNUZ", "DT_FLOAT8_E4M3B11FNUZ"}
    | {"DT_FLOAT8_E5M2FNUZ", "DT_FLOAT4_E2M1FN", "DT_INT4", "DT_UINT4", "DT_INT2", "DT_UINT2"}
)


def encode(body: Any) -> bytes:
    """JSON bytes as TF Serving writes them (NaN and Infinity as bare words)."""
    return json.dumps(body, allow_nan=True, separators=(",", ":")).encode("ascii")


def encode_numbers(body: Any) -> bytes:
    """`encode(body)` for a body of numbers, by orjson where it writes the same bytes.

    `body` holds lists, dicts whose keys are :func:`plain_key`, ints, floats
    and bools, nothing else (an answer's numeric outputs). orjson writes
    these at C speed (issue 24: json's float repr was most of a wide answer's
    cost) and as json does, Python's repr of each float included, except
    where :func:`_orjson_writes_otherwise` finds it: NaN and the infinities
    (orjson: null), and the numbers under 1e-4 (orjson: 0.00001 for 1e-05,
    1e-7 for 1e-07). Those bodies, one whose text is not ASCII (a string
    that should not be there: json escapes it), and an integer beyond 64 bits
    (which orjson refuses) are written by json. Without orjson, json writes all.
    """
    if orjson is not None:
        try:
            text = orjson.dumps(body)
        except orjson.JSONEncodeError:
            return encode(body)
        if text.isascii() and not _orjson_writes_otherwise(text):
            return text
    return encode(body)


def plain_key(name: str) -> bool:
    """Whether json and orjson write `name` alike: printable ASCII, no quote or backslash."""
    return name.isascii() and name.isprintable() and '"' not in name and "\\" not in name


#: Where orjson's text of numbers differs from json's (each part a literal first,
#: which the regex engine finds at C speed; one pattern with a look-behind scanned
#: a wide answer 50x slower): NaN or an infinity, written null; a number under
#: 1e-5 or so with a one-digit exponent (json: 1e-07); a number in [1e-5, 1e-4)
#: in fixed notation (json: 1e-05), "0.0000" after anything but a digit.
_NULL = re.compile(rb"null")
_SHORT_EXPONENT = re.compile(rb"e-[0-9](?![0-9])")
_TINY_FIXED = re.compile(rb"0\.0000")


def _orjson_writes_otherwise(text: bytes) -> bool:
    if _NULL.search(text) or _SHORT_EXPONENT.search(text):
        return True
    return any(m.start() == 0 or not text[m.start() - 1 : m.start()].isdigit()
               for m in _TINY_FIXED.finditer(text))  # fmt: skip
