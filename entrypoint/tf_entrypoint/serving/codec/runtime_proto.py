"""Message classes from a `FileDescriptorProto` written in code (v2_proto.py,
profiler_proto.py): the file goes into a pool of its own, never protobuf's
default pool, where a client's generated module of the same names may live."""

from __future__ import annotations

from collections.abc import Callable
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
