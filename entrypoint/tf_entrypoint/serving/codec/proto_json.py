"""Protobuf messages as the JSON TF Serving's REST API writes for them.

TF Serving writes its REST metadata with protobuf's C++
`MessageToJsonString` (model_servers/http_rest_api_util.cc) and the options
`preserve_proto_field_names` and `always_print_fields_with_no_presence`.
Protobuf's C++ printer (json/internal/unparser.cc, protobuf 22 and later)
writes:

- the fields of a message in field-number order;
- a field without presence (a proto3 scalar outside a oneof, a repeated
  field, a map) always, with its default value (`""`, `0`, `false`, `[]`,
  `{}`); a field with presence (a message, a oneof member, an `optional`)
  only when it is set;
- 64-bit integers as strings, other integers as numbers, bytes in base64,
  enums by name (an unknown value by number), NaN and infinities as the
  strings "NaN", "Infinity", "-Infinity";
- the well-known types (`google.protobuf.*`: wrappers, Any, ...) in their
  special forms.

Python's `json_format` orders fields differently (those set first), so this
module walks the descriptors itself; well-known types are handed to
`json_format`. A map's entries are written sorted by key: C++ writes them in
its hash map's order, which is unspecified (TF Serving's testdata shows one
such order).
"""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

# FieldDescriptor.TYPE_* values (descriptor.proto's FieldDescriptorProto.Type).
_DOUBLE, _FLOAT, _INT64, _UINT64, _INT32, _FIXED64, _FIXED32, _BOOL = 1, 2, 3, 4, 5, 6, 7, 8
_STRING, _GROUP, _MESSAGE, _BYTES, _UINT32, _ENUM = 9, 10, 11, 12, 13, 14
_SFIXED32, _SFIXED64, _SINT32, _SINT64 = 15, 16, 17, 18
_WIDE = frozenset({_INT64, _UINT64, _FIXED64, _SFIXED64, _SINT64})
_REPEATED = 3  # FieldDescriptor.LABEL_REPEATED


def message_json(message: Any) -> dict[str, Any]:
    """`message` as TF Serving's C++ writes it (see the module's docstring)."""
    descriptor = message.DESCRIPTOR
    out: dict[str, Any] = {}
    for field in sorted(descriptor.fields, key=lambda f: f.number):
        repeated = _is_repeated(field)
        if not repeated and field.has_presence and not message.HasField(field.name):
            continue
        value = getattr(message, field.name)
        if _is_map(field):
            out[field.name] = _map_json(field, value)
        elif repeated:
            out[field.name] = [_value_json(field, item) for item in value]
        else:
            out[field.name] = _value_json(field, value)
    return out


def _is_repeated(field: Any) -> bool:
    # protobuf 5.x+ has `is_repeated`; `label` is the older spelling.
    repeated = getattr(field, "is_repeated", None)
    return bool(repeated) if repeated is not None else field.label == _REPEATED


def _is_map(field: Any) -> bool:
    entry = field.message_type
    return bool(field.type == _MESSAGE and _is_repeated(field) and entry.GetOptions().map_entry)


def _map_json(field: Any, value: Any) -> dict[str, Any]:
    entry = field.message_type
    key_field, value_field = entry.fields_by_name["key"], entry.fields_by_name["value"]
    out: dict[str, Any] = {}
    for key in sorted(value):
        text = ("true" if key else "false") if key_field.type == _BOOL else str(key)
        out[text] = _value_json(value_field, value[key])
    return out


def _value_json(field: Any, value: Any) -> Any:
    kind = field.type
    if kind in (_MESSAGE, _GROUP):
        return _message_value(field, value)
    if kind == _ENUM:
        named = field.enum_type.values_by_number.get(value)
        return value if named is None else named.name
    if kind in (_FLOAT, _DOUBLE):
        return _number(float(value), single=kind == _FLOAT)
    if kind in _WIDE:
        return str(value)
    if kind == _BYTES:
        return base64.b64encode(value).decode("ascii")
    return bool(value) if kind == _BOOL else value


def _message_value(field: Any, value: Any) -> Any:
    """A message field's value; the well-known types in their own forms."""
    if field.message_type.full_name.startswith("google.protobuf."):
        from google.protobuf import json_format  # noqa: PLC0415

        return json_format.MessageToDict(value, preserving_proto_field_name=True)
    return message_json(value)


def _number(value: float, *, single: bool) -> Any:
    """A float or double as C++'s printer gives it (SimpleFtoa / SimpleDtoa: the
    shorter of 6 and 9 digits, or 15 and 17, that reads back the same)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if not single:
        short = float(f"{value:.15g}")
        return short if short == value else value
    short = float(f"{value:.6g}")
    if struct.unpack("<f", struct.pack("<f", short))[0] == value:
        return short
    return float(f"{value:.9g}")
