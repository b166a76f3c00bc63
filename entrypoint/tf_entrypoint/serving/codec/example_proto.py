"""gRPC's ``tensorflow.serving.Input`` to serialized examples; MultiInference's tasks.

The batch of serialized ``tensorflow.Example`` protos a Classify, Regress or
MultiInference request carries, as TF Serving's servables/tensorflow/util.cc
``InputToSerializedExampleTensor`` makes it: ``example_list`` as is,
``example_list_with_context`` with the context prepended to each example (so
protobuf's merge lets an example's own feature win). At most `limit` bytes
(limits.EXPANSION x --max-body-bytes), checked before anything is copied.
"""

from __future__ import annotations

from typing import Any

from tf_entrypoint.serving.core import limits
from tf_entrypoint.serving.core.inference import Task


def serialized_examples(input_proto: Any, *, limit: int) -> list[bytes]:
    """The serialized Examples of a ``tensorflow.serving.Input`` message.

    ``example_list``: each example as is. ``example_list_with_context``: the
    context prepended to each example (TF Serving's merge). An Input with
    neither, or with no examples, gives ``[]``: the servable answers "Input is
    empty." after it has checked the signature, as TF Serving does. RESOURCE_EXHAUSTED
    when they would take more than `limit` bytes (nothing is copied then).
    """
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        examples = input_proto.example_list.examples
        limits.check_examples(0, [example.ByteSize() for example in examples], limit)
        return [example.SerializeToString() for example in examples]
    if kind == "example_list_with_context":
        with_context = input_proto.example_list_with_context
        examples = with_context.examples
        sizes = [example.ByteSize() for example in examples]
        limits.check_examples(with_context.context.ByteSize(), sizes, limit)
        context: bytes = with_context.context.SerializeToString()
        return [context + example.SerializeToString() for example in examples]
    return []


def tasks_of(request: Any) -> list[Task]:
    """A tensorflow.serving.MultiInferenceRequest's tasks."""
    return [
        Task(task.model_spec.name, task.model_spec.signature_name, task.method_name)
        for task in request.tasks
    ]
