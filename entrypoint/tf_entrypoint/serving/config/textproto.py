"""TF Serving's text-format configuration files, read as TF Serving reads them.

The model config file, the monitoring config file and the batching
parameters file are protobuf text format. Each is parsed with protobuf's
own `text_format` into TF Serving's message, so what TF Serving accepts is
accepted and a misspelt field is refused the same way; this module turns
protobuf's errors into :class:`ConfigError` naming the file and line, and
builds the message classes `tensorflow-serving-api` does not ship.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tf_entrypoint.serving.core.errors import ConfigError as ConfigError  # noqa: PLC0414 - re-exported


def parse(text: str, message: Any, path: Path) -> Any:
    """Fill `message` from `text`, or ConfigError in TF Serving's words, then where:
    'Error parsing text-format tensorflow.serving.ModelServerConfig: PATH:LINE:COLUMN:
    what protobuf says' (protobuf's C++ parser logs 'Error parsing text-format
    FULL_NAME: LINE:COLUMN: ...' when TF Serving's ParseProtoTextFile fails)."""
    from google.protobuf import text_format  # noqa: PLC0415 - only when a file is given

    try:
        text_format.Parse(text, message)
    except text_format.ParseError as err:
        line, column = err.GetLine(), err.GetColumn()
        detail = str(err)
        prefix = f"Error parsing text-format {message.DESCRIPTOR.full_name}"
        if line is not None:
            detail = re.sub(r"^\d+:\d+ : ", "", detail)
            raise ConfigError(f"{prefix}: {path}:{line}:{column}: {detail}") from None
        raise ConfigError(f"{prefix}: {path}: {detail}") from None
    return message


def field_line(text: str, name: str) -> int | None:
    """The 1-based line where field `name` is set (`name: v` or `name { ... }`;
    comments and strings skipped), for errors found after parsing."""
    for number, line in enumerate(text.split("\n"), start=1):
        code = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|#.*', "", line)
        if re.search(rf"\b{re.escape(name)}\s*[:{{<]", code):
            return number
    return None


def message_class(file: Any, full_name: str, dependencies: Iterable[Any] = ()) -> Any:
    """The class of message `full_name` in FileDescriptorProto `file`.

    Built in a pool of its own (it never clashes with a generated _pb2 of the
    same file); `dependencies` are the imported files' module DESCRIPTORs
    (e.g. wrappers_pb2.DESCRIPTOR).
    """
    from google.protobuf import descriptor_pool, message_factory  # noqa: PLC0415

    pool = descriptor_pool.DescriptorPool()
    for dependency in dependencies:
        pool.AddSerializedFile(dependency.serialized_pb)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))
