"""REST classify and regress: JSON bodies to serialized ``tf.Example``s; their answers.

The body ``{"signature_name", "context", "examples"}`` read as TF Serving
reads it (util/json_tensor.cc ``FillClassificationRequestFromJson``), the
Example protos encoded here (no protobuf, no TensorFlow), and the answers
``{"results": ...}`` (``MakeJsonFromClassificationResult``).

Context features are merged into every example the way TF Serving does it:
the serialized context is prepended to each serialized example, so protobuf's
merge rules apply and an example's own feature wins over the context's
feature of the same name. A request's examples, with the context copied into
each, may take at most `limit` bytes (limits.EXPANSION x --max-body-bytes),
checked before any copy is made (RESOURCE_EXHAUSTED, not TF Serving's: it
copies without bound). Every other error is INVALID_ARGUMENT, as in TF Serving.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tf_entrypoint.serving.codec.json_values import (
    b64,
    encode,
    json_type,
    parse_json_object,
    utf8,
)
from tf_entrypoint.serving.core import limits
from tf_entrypoint.serving.core.errors import ServingError, invalid_argument
from tf_entrypoint.serving.core.inference import Classifications
from tf_entrypoint.serving.core.types import quote


@dataclass(frozen=True)
class ExamplesRequest:
    """A classify/regress request: the signature ("" = serving_default) and its examples."""

    signature_name: str
    examples: list[bytes]


def parse_examples_request(body: bytes, *, limit: int) -> ExamplesRequest:
    """A :classify or :regress body as TF Serving reads it (json_tensor.cc).

    RESOURCE_EXHAUSTED when its examples, with the context copied into each, would
    take more than `limit` bytes: checked before the first copy.
    """
    return examples_request(parse_json_object(body), limit=limit)


def examples_request(document: dict[str, Any], *, limit: int) -> ExamplesRequest:
    """parse_examples_request() of a body already parsed as JSON."""
    signature_name = document.get("signature_name", "")
    if not isinstance(signature_name, str):
        raise invalid_argument(
            f"JSON Value: {quote(document)} not formatted correctly. "
            "'signature_name' key must be a string value."
        )
    context = b""
    has_context = "context" in document
    if has_context:
        context = encode_example(document["context"])
    if "examples" not in document:
        # TF Serving says "classify" for :regress too.
        raise invalid_argument(
            f"JSON Value: {quote(document)} When method is classify, key 'examples' "
            "is expected and was not found"
        )
    examples = document["examples"]
    if not isinstance(examples, list):
        raise invalid_argument(
            f"JSON Value: {quote(document)} Expecting 'examples' value to be an list/array"
        )
    if not examples:
        raise invalid_argument(f"JSON Value: {quote(document)} 'examples' value is an empty array")
    encoded = [encode_example(e) for e in examples]
    limits.check_examples(len(context), [len(e) for e in encoded], limit)
    if context:
        for index, example in enumerate(encoded):  # in place: each old one freed as it goes
            encoded[index] = context + example
    return ExamplesRequest(signature_name, encoded)


def encode_example(value: Any) -> bytes:
    """One JSON object as a serialized ``tensorflow.Example``.

    Feature values (one value or a list of them): integers and booleans ->
    int64_list, other numbers -> float_list (float32), strings and
    ``{"b64": ...}`` -> bytes_list; all values of a feature must be of one kind.
    """
    if not isinstance(value, dict):
        raise invalid_argument(f"Example must be JSON object but got JSON {json_type(value)}")
    entries = bytearray()
    for name, content in value.items():
        feature = _Feature(name)
        for item in content if isinstance(content, list) else [content]:
            feature.add(item)
        entry = _field_bytes(1, name.encode("utf-8", "surrogatepass")) + _field_bytes(
            2, feature.encode()
        )
        entries += _field_bytes(1, entry)
    return _field_bytes(1, bytes(entries)) if value else b""


_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1
#: Feature's oneof field numbers (example/feature.proto) and their names in errors.
_BYTES, _FLOATS, _INT64S = 1, 2, 3
_KIND_NAMES = {_BYTES: "bytes", _FLOATS: "float", _INT64S: "int64"}


class _Feature:
    """One ``tensorflow.Feature`` being filled from JSON values (AddValueToFeature)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.kind = 0  # KIND_NOT_SET
        self.values: list[Any] = []

    def add(self, value: Any) -> None:
        if value is None or isinstance(value, list):
            raise self.unexpected(value)
        if isinstance(value, bool):
            self.put(_INT64S, int(value))
        elif isinstance(value, int):
            if _INT64_MIN <= value <= _INT64_MAX:
                self.put(_INT64S, value)
            elif _INT64_MAX < value <= _UINT64_MAX:
                raise invalid_argument(
                    f"Feature: {self.name} has uint64_t element. Only int64_t is supported."
                )
            else:  # rapidjson reads an integer beyond 64 bits as a double
                self.put(_FLOATS, float(value))
        elif isinstance(value, float):
            self.put(_FLOATS, value)
        elif isinstance(value, str):
            self.put(_BYTES, utf8(value))
        elif isinstance(value, dict):
            if not (len(value) == 1 and isinstance(value.get("b64"), str)):
                raise self.unexpected(value)
            self.put(_BYTES, b64(value["b64"]))
        else:  # pragma: no cover - json.loads makes nothing else
            raise self.unexpected(value)

    def put(self, kind: int, value: Any) -> None:
        if self.kind not in (0, kind):
            raise invalid_argument(
                f"Unexpected element type in feature: {self.name} expecting type: "
                f"{_KIND_NAMES[self.kind]}"
            )
        self.kind = kind
        self.values.append(value)

    def unexpected(self, value: Any) -> ServingError:
        return invalid_argument(
            f"Feature: {self.name} has element with unexpected JSON type: {json_type(value)}"
        )

    def encode(self) -> bytes:
        if self.kind == _BYTES:
            body = b"".join(_field_bytes(1, v) for v in self.values)
        elif self.kind == _FLOATS:
            body = _field_bytes(1, b"".join(_float32(v) for v in self.values))
        elif self.kind == _INT64S:
            body = _field_bytes(1, b"".join(_varint(v & _UINT64_MAX) for v in self.values))
        else:
            return b""
        return _field_bytes(self.kind, body)


def _float32(value: float) -> bytes:
    """A double as float32, little-endian (C's cast: out of range -> infinity)."""
    try:
        return struct.pack("<f", value)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, value))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


#: Rows of a classification written to JSON at a time (classify_json).
JSON_ROWS = 4096


def classify_json(result: Classifications) -> bytes:
    """``{"results": [[[label, score], ...], ...]}`` as JSON bytes (json_values.encode's).

    Written JSON_ROWS examples at a time and consuming `result` as it goes
    (it is left empty), so that the answer's Python objects never all exist
    at once: a classification holds a list and a tuple per class per example,
    and the JSON structure as much again. Labels are bytes in the model; one
    that is not UTF-8 is written with the replacement character (JSON strings
    must be Unicode); each distinct label is decoded once.
    """
    if not result:
        raise invalid_argument("Cannot convert empty ClassificationResults to JSON")
    labels: dict[bytes, str] = {}

    def text(label: bytes) -> str:
        if label not in labels:
            labels[label] = label.decode("utf-8", "replace")
        return labels[label]

    chunks: list[bytes] = []
    result.reverse()  # so that pop() takes the examples in order
    while result:
        rows = [result.pop() for _ in range(min(JSON_ROWS, len(result)))]
        written = encode([[[text(label), score] for label, score in row] for row in rows])
        chunks.append(written[1:-1])  # without the list's brackets
    return b'{"results":[' + b",".join(chunks) + b"]}"


def regress_response(values: Sequence[float]) -> dict[str, Any]:
    """``{"results": [value, ...]}``."""
    if not values:
        raise invalid_argument("Cannot convert empty RegressionResults to JSON")
    return {"results": list(values)}
