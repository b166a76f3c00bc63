"""Admitted body reading: a request's body, bounded in size and in time, from ASGI's receive."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.deadlines import within
from tf_entrypoint.serving.core.drain import TIMEOUT_ERRORS
from tf_entrypoint.serving.core.errors import Code, Refusal, ServingError, invalid_argument

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


class Disconnected(Exception):
    """The client went away before its body had all arrived."""


class Body:
    """A request body that its handler takes once, so that nothing else keeps it.

    The bytes are freed as soon as they are parsed, not when the request
    ends: a request that waits (for a worker, for its batch) holds its
    compact tensors, not its body and not its JSON document.
    """

    __slots__ = ("_data", "size")

    def __init__(self, data: bytes) -> None:
        self._data = data
        #: Its length, kept once it is taken.
        self.size = len(data)

    def take(self) -> bytes:
        data, self._data = self._data, b""
        return data


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of header `name` (lower case), as Latin-1 text."""
    for key, value in scope["headers"]:
        if key.lower() == name:
            text: str = value.decode("latin-1")
            return text
    return None


async def read_body(scope: Scope, receive: Receive, limit: int, timeout: float = 0.0) -> bytes:
    """The whole body, or a BODY_TOO_LARGE refusal as soon as it is known to exceed `limit`.

    A BODY_TIMEOUT refusal when it has not all arrived within `timeout` seconds (0: no
    limit): an admitted request holds its place while it is read. Disconnected when the
    client goes away first.
    """
    if timeout:
        try:
            return await within(read_body(scope, receive, limit), timeout)
        except TIMEOUT_ERRORS:
            raise ServingError(
                Code.DEADLINE_EXCEEDED,
                f"Request body not received within {timeout:g} s (--request-timeout)",
                refusal=Refusal.BODY_TIMEOUT,
            ) from None
    too_large = f"Request body exceeds the limit of {limit} bytes (--max-body-bytes)"
    declared = header(scope, b"content-length")
    if declared is not None:
        if not declared.isdigit():
            raise invalid_argument(f"Invalid Content-Length: {p.quote(declared)}")
        if int(declared) > limit:
            raise ServingError(Code.RESOURCE_EXHAUSTED, too_large, refusal=Refusal.BODY_TOO_LARGE)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise ServingError(Code.RESOURCE_EXHAUSTED, too_large, refusal=Refusal.BODY_TOO_LARGE)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
