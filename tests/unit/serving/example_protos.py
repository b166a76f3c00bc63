"""tensorflow.Example and tensorflow.serving.Input message classes without TensorFlow.

The host's tools venv has protobuf but no TensorFlow, so tensorflow_serving's
input_pb2 cannot be imported there (it imports tensorflow.core.example). These
classes are built by protobuf itself from descriptors written after
tensorflow/core/example/{example,feature}.proto and tensorflow_serving/apis/
input.proto (same packages, names, field numbers and types), in a private
pool: an independent decoder for what examples.py encodes, and real Input
messages for serialized_examples().
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto


def _field(  # noqa: PLR0917 - a FieldDescriptorProto's parts
    message: Any, name: str, number: int, kind: int, label: int, type_name: str = ""
) -> Any:
    field = message.field.add(name=name, number=number, type=kind, label=label)
    if type_name:
        field.type_name = type_name
    return field


def _build() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    feature = descriptor_pb2.FileDescriptorProto(
        name="tensorflow/core/example/feature.proto", package="tensorflow", syntax="proto3"
    )
    for name, kind in (
        ("BytesList", _F.TYPE_BYTES),
        ("FloatList", _F.TYPE_FLOAT),
        ("Int64List", _F.TYPE_INT64),
    ):
        message = feature.message_type.add(name=name)
        _field(message, "value", 1, kind, _F.LABEL_REPEATED)
    message = feature.message_type.add(name="Feature")
    message.oneof_decl.add(name="kind")
    for number, (name, type_name) in enumerate(
        (
            ("bytes_list", ".tensorflow.BytesList"),
            ("float_list", ".tensorflow.FloatList"),
            ("int64_list", ".tensorflow.Int64List"),
        ),
        start=1,
    ):
        field = _field(message, name, number, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, type_name)
        field.oneof_index = 0
    features = feature.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL)
    _field(entry, "value", 2, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".tensorflow.Feature")
    _field(
        features,
        "feature",
        1,
        _F.TYPE_MESSAGE,
        _F.LABEL_REPEATED,
        ".tensorflow.Features.FeatureEntry",
    )
    pool.Add(feature)

    example = descriptor_pb2.FileDescriptorProto(
        name="tensorflow/core/example/example.proto",
        package="tensorflow",
        syntax="proto3",
        dependency=["tensorflow/core/example/feature.proto"],
    )
    message = example.message_type.add(name="Example")
    _field(message, "features", 1, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".tensorflow.Features")
    pool.Add(example)

    serving = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/apis/input.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["tensorflow/core/example/example.proto"],
    )
    message = serving.message_type.add(name="ExampleList")
    _field(message, "examples", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".tensorflow.Example")
    message = serving.message_type.add(name="ExampleListWithContext")
    _field(message, "examples", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".tensorflow.Example")
    _field(message, "context", 2, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".tensorflow.Example")
    message = serving.message_type.add(name="Input")
    message.oneof_decl.add(name="kind")
    for number, (name, type_name) in enumerate(
        (
            ("example_list", ".tensorflow.serving.ExampleList"),
            ("example_list_with_context", ".tensorflow.serving.ExampleListWithContext"),
        ),
        start=1,
    ):
        field = _field(message, name, number, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, type_name)
        field.oneof_index = 0
    pool.Add(serving)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
        for name in ("tensorflow.Example", "tensorflow.serving.Input")
    }


_CLASSES = _build()
Example: Any = _CLASSES["tensorflow.Example"]
Input: Any = _CLASSES["tensorflow.serving.Input"]


def features(serialized: bytes) -> dict[str, tuple[str | None, list[Any]]]:
    """A serialized Example as {name: (kind or None, values)}."""
    example = Example.FromString(serialized)
    out: dict[str, tuple[str | None, list[Any]]] = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = (kind, list(getattr(feature, kind).value) if kind else [])
    return out


def example(**values: Any) -> Any:
    """An Example: floats -> float_list, ints -> int64_list, bytes -> bytes_list (lists too)."""
    message = Example()
    for name, value in values.items():
        items = value if isinstance(value, list) else [value]
        feature = message.features.feature[name]
        for item in items:
            if isinstance(item, float):
                feature.float_list.value.append(item)
            elif isinstance(item, int):
                feature.int64_list.value.append(item)
            else:
                feature.bytes_list.value.append(item)
    return message
