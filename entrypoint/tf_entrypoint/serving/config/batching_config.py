"""TF Serving's --batching_parameters_file: text BatchingParameters
(session_bundle_config.proto) to core.batching.BatchingParameters, checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tf_entrypoint.serving.config import textproto
from tf_entrypoint.serving.config.textproto import ConfigError
from tf_entrypoint.serving.core.batching import (
    DEFAULT_BATCH_TIMEOUT_MICROS,
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_ENQUEUED_BATCHES,
    BatchingParameters,
)


def _message_class() -> Any:
    """BatchingParameters' class, built from session_bundle_config.proto's definition."""
    from google.protobuf import descriptor_pb2, wrappers_pb2  # noqa: PLC0415 - only when needed

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/servables/tensorflow/session_bundle_config.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    message = proto.message_type.add(name="BatchingParameters")
    wrapped = (
        ("max_batch_size", 1, "Int64Value"),
        ("batch_timeout_micros", 2, "Int64Value"),
        ("max_enqueued_batches", 3, "Int64Value"),
        ("num_batch_threads", 4, "Int64Value"),
        ("thread_pool_name", 5, "StringValue"),
        ("enable_large_batch_splitting", 8, "BoolValue"),
        ("max_execution_batch_size", 9, "Int64Value"),
    )
    for name, number, kind in wrapped:
        message.field.add(
            name=name, number=number, type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
            type_name=f".google.protobuf.{kind}",
        )  # fmt: skip
    message.field.add(
        name="allowed_batch_sizes", number=6, type=field.TYPE_INT64, label=field.LABEL_REPEATED
    )
    message.field.add(
        name="pad_variable_length_inputs", number=7, type=field.TYPE_BOOL,
        label=field.LABEL_OPTIONAL,
    )  # fmt: skip
    return textproto.message_class(
        proto, "tensorflow.serving.BatchingParameters", [wrappers_pb2.DESCRIPTOR]
    )


#: Fields TF Serving reads that this server does not implement, and why.
_REFUSED = {
    "thread_pool_name": "shared batch thread pools are not implemented: each model version "
    "runs its batches on its own num_batch_threads threads",
    "enable_large_batch_splitting": "large batch splitting is not implemented: a request "
    "larger than max_batch_size runs alone, unbatched",
    "max_execution_batch_size": "it goes with enable_large_batch_splitting, which is not "
    "implemented",
    "pad_variable_length_inputs": "padding inputs of different lengths is not implemented: "
    "requests whose non-batch dimensions differ go into different batches",
}


def parse_batching_parameters(text: str, path: Path, workers: int) -> BatchingParameters:
    """BatchingParameters from the text of TF Serving's --batching_parameters_file.

    Raises ConfigError naming the file, line and field for a syntax error,
    an unknown field, a value out of range or a field this server does not
    implement (never silently ignored).
    """
    message = textproto.parse(text, _message_class()(), path)

    def fail(name: str, problem: str) -> ConfigError:
        line = textproto.field_line(text, name)
        return ConfigError(f"{path}:{line}: {name}: {problem}" if line else f"{path}: {name}: "
                           f"{problem}")  # fmt: skip

    refused = {
        "thread_pool_name": message.HasField("thread_pool_name"),
        "enable_large_batch_splitting": message.enable_large_batch_splitting.value,
        "max_execution_batch_size": message.HasField("max_execution_batch_size"),
        "pad_variable_length_inputs": message.pad_variable_length_inputs,
    }
    for name, present in refused.items():
        if present:
            raise fail(name, f"not supported: {_REFUSED[name]}")

    def value(name: str, default: int, least: int) -> int:
        if not message.HasField(name):
            return default
        number = int(getattr(message, name).value)
        if number < least:
            raise fail(name, f"{number} is out of range: expected a whole number from {least}")
        return number

    max_batch_size = value("max_batch_size", DEFAULT_MAX_BATCH_SIZE, 1)
    allowed = tuple(int(size) for size in message.allowed_batch_sizes)
    if allowed:
        for before, after in zip((0, *allowed), allowed, strict=False):
            if after <= before:
                raise fail(
                    "allowed_batch_sizes",
                    f"{list(allowed)}: expected positive sizes in increasing order",
                )
        if allowed[-1] != max_batch_size:  # TF Serving's check and words
            raise fail(
                "allowed_batch_sizes",
                "Last entry in allowed_batch_sizes must match max_batch_size; last entry "
                f"was {allowed[-1]}; expected {max_batch_size}",
            )
    return BatchingParameters(
        num_batch_threads=value("num_batch_threads", workers, 1),
        max_batch_size=max_batch_size,
        batch_timeout_micros=value("batch_timeout_micros", DEFAULT_BATCH_TIMEOUT_MICROS, 0),
        max_enqueued_batches=value("max_enqueued_batches", DEFAULT_MAX_ENQUEUED_BATCHES, 1),
        allowed_batch_sizes=allowed,
        source=path,
    )


def read_batching_parameters(path: Path, workers: int) -> BatchingParameters:
    """parse_batching_parameters() of the file at `path`; ConfigError if it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(f"{path}: cannot read the batching parameters file: {reason}") from None
    return parse_batching_parameters(text, path, workers)
