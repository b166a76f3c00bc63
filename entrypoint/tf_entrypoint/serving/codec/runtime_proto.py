"""Message classes from a `FileDescriptorProto` written in code (v2_proto.py,
profiler_proto.py): the file goes into a pool of its own, never protobuf's
default pool, where a client's generated module of the same names may live.

`table_file` writes such a file from a compact table: message path -> fields
(name, number, type). A scalar type is protobuf's name for it; "*" after a
type makes the field repeated (proto3 packs repeated scalars); "{T}" is
map<string, T>; any other name is a message of the same package (a dotted
path is a nested message, listed after its parent). Every field of a message
named in `oneofs` belongs to that oneof.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def message_classes(
    proto: descriptor_pb2.FileDescriptorProto,
) -> tuple[descriptor_pool.DescriptorPool, Callable[[str], type[Any]]]:
    """The pool holding `proto`, and a function from a message's path in its
    package (`ModelInferRequest.InferInputTensor`) to its class."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    # GetMessageClass caches one class per descriptor; releases before it had a
    # factory's GetPrototype (one factory, so each message gets one class).
    get: Any = (
        getattr(message_factory, "GetMessageClass", None)
        or message_factory.MessageFactory(pool).GetPrototype  # type: ignore[attr-defined,unused-ignore]
    )

    def message_class(path: str) -> type[Any]:
        cls: type[Any] = get(pool.FindMessageTypeByName(f"{proto.package}.{path}"))
        parent, _, short = path.rpartition(".")
        if parent and not hasattr(message_class(parent), short):
            # protobuf's pure-Python backend leaves nested classes off their parent.
            setattr(message_class(parent), short, cls)
        return cls

    return pool, message_class


_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "bool": _F.TYPE_BOOL,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
    "float": _F.TYPE_FLOAT,
    "double": _F.TYPE_DOUBLE,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}

Fields = tuple[tuple[str, int, str], ...]


def table_file(
    package: str,
    file_name: str,
    messages: Mapping[str, Fields],
    *,
    oneofs: Mapping[str, str] | None = None,
    service: str = "",
    methods: Iterable[tuple[str, str, str]] = (),
) -> descriptor_pb2.FileDescriptorProto:
    """A proto3 file of `package` with the table's messages, and `service` (its full
    name) with `methods` (name, request, response), when given."""
    proto = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto3")
    built: dict[str, descriptor_pb2.DescriptorProto] = {}
    for path, fields in messages.items():
        parent, _, short = path.rpartition(".")
        message = (built[parent].nested_type if parent else proto.message_type).add(name=short)
        built[path] = message
        oneof = (oneofs or {}).get(path)
        if oneof:
            message.oneof_decl.add(name=oneof)
        for name, number, kind in fields:
            field = _add_field(package, message, path, (name, number, kind))
            if oneof:
                field.oneof_index = 0
    if service:
        described = proto.service.add(name=service.rpartition(".")[2])
        for method, request, response in methods:
            described.method.add(
                name=method,
                input_type=f".{package}.{request}",
                output_type=f".{package}.{response}",
            )
    return proto


def _set_type(package: str, field: descriptor_pb2.FieldDescriptorProto, kind: str) -> None:
    if kind in _SCALARS:
        field.type = _SCALARS[kind]
    else:
        field.type = _F.TYPE_MESSAGE
        field.type_name = f".{package}.{kind}"


def _add_field(
    package: str,
    message: descriptor_pb2.DescriptorProto,
    path: str,
    spec: tuple[str, int, str],
) -> descriptor_pb2.FieldDescriptorProto:
    name, number, kind = spec
    field = message.field.add(name=name, number=number, json_name=_json_name(name))
    field.label = _F.LABEL_OPTIONAL
    if kind.startswith("{"):
        # map<string, T>: a repeated nested `<Name>Entry` marked as a map entry.
        entry_name = "".join(part.capitalize() for part in name.split("_")) + "Entry"
        entry = message.nested_type.add(name=entry_name)
        entry.options.map_entry = True
        for key, key_number, key_kind in (("key", 1, "string"), ("value", 2, kind[1:-1])):
            _add_field(package, entry, f"{path}.{entry_name}", (key, key_number, key_kind))
        field.label = _F.LABEL_REPEATED
        _set_type(package, field, f"{path}.{entry_name}")
    elif kind.endswith("*"):
        field.label = _F.LABEL_REPEATED
        _set_type(package, field, kind[:-1])
    else:
        _set_type(package, field, kind)
    return field


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
