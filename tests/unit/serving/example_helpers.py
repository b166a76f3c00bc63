"""Helpers of the tests of examples (JSON, Input protos, Classify and Regress): a limit with room
for every example they build, serialized(), and raises() for INVALID_ARGUMENT's message."""

from __future__ import annotations

from typing import Any

import pytest

from tf_entrypoint.serving.codec import example_proto
from tf_entrypoint.serving.core.errors import Code, ServingError

#: Room for every example these tests build (the limit has tests of its own).
LIMIT = 1 << 20


def serialized(message: Any) -> list[bytes]:
    return example_proto.serialized_examples(message, limit=LIMIT)


def raises(call: Any, *args: Any) -> str:
    with pytest.raises(ServingError) as caught:
        call(*args)
    assert caught.value.code == Code.INVALID_ARGUMENT
    return caught.value.message
