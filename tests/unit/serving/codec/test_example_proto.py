"""The gRPC Input proto to serialized examples (codec/example_proto.py): lists, context, the bound.

Serialized examples are decoded by protobuf itself (tests/unit/serving/example_protos.py)."""

from __future__ import annotations

import pytest

from tests.unit.serving import example_protos as ep
from tests.unit.serving.example_helpers import serialized
from tf_entrypoint.serving.codec import example_proto
from tf_entrypoint.serving.core.errors import ServingError


def test_input_example_list() -> None:
    message = ep.Input()
    message.example_list.examples.add().CopyFrom(ep.example(x=1.0))
    message.example_list.examples.add().CopyFrom(ep.example(n=[1, 2], s=b"z"))
    assert [ep.features(e) for e in serialized(message)] == [
        {"x": ("float_list", [1.0])},
        {"n": ("int64_list", [1, 2]), "s": ("bytes_list", [b"z"])},
    ]


def test_input_with_context_merges_as_tf_serving() -> None:
    message = ep.Input()
    with_context = message.example_list_with_context
    with_context.context.CopyFrom(ep.example(y=0.5, x=9.0))
    with_context.examples.add().CopyFrom(ep.example(x=1.0))
    with_context.examples.add()  # an empty example gets the context alone
    assert [ep.features(e) for e in serialized(message)] == [
        {"x": ("float_list", [1.0]), "y": ("float_list", [0.5])},
        {"x": ("float_list", [9.0]), "y": ("float_list", [0.5])},
    ]


def test_a_grpc_context_is_measured_before_it_is_copied() -> None:
    message = ep.Input()
    with_context = message.example_list_with_context
    with_context.context.CopyFrom(ep.example(pad=b"z" * 5000))
    for _ in range(100):
        with_context.examples.add()
    context_size = with_context.context.ByteSize()
    with pytest.raises(ServingError) as caught:
        example_proto.serialized_examples(message, limit=100 * context_size - 1)
    assert caught.value.code.name == "RESOURCE_EXHAUSTED"
    assert f"100 examples with their context ({context_size} bytes)" in caught.value.message
    assert len(example_proto.serialized_examples(message, limit=100 * context_size)) == 100


def test_a_grpc_example_list_has_the_limit_too() -> None:
    message = ep.Input()
    message.example_list.examples.add().CopyFrom(ep.example(pad=b"z" * 500))
    size = message.example_list.examples[0].ByteSize()
    assert serialized(message) == [message.example_list.examples[0].SerializeToString()]
    with pytest.raises(ServingError, match=f"1 example would take {size} bytes"):
        example_proto.serialized_examples(message, limit=size - 1)
