"""Admitted body reading: a request's body, bounded in size and in time, from ASGI's receive."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, MutableMapping
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

    The timer is set only if the body is not all there: uvicorn has usually
    read a small body with the request's head, and its receive() then returns
    at once (issue 24: a timer per request cost more than reading the body).
    """
    too_large = f"Request body exceeds the limit of {limit} bytes (--max-body-bytes)"
    declared = header(scope, b"content-length")
    if declared is not None:
        if not declared.isdigit():
            raise invalid_argument(f"Invalid Content-Length: {p.quote(declared)}")
        if int(declared) > limit:
            raise ServingError(Code.RESOURCE_EXHAUSTED, too_large, refusal=Refusal.BODY_TOO_LARGE)
    body = _Body(limit, too_large)
    first = receive()
    try:
        waiting = first.send(None)  # type: ignore[attr-defined] # receive() is a coroutine
    except StopIteration as done:  # it had the message: no wait, no timer
        if body.add(done.value):
            return body.joined()
        rest = body.read(receive)
    else:  # it waits for the client: the rest of it is read within the timeout
        rest = body.read(receive, _Resumed(first, waiting))
    if not timeout:
        return await rest
    try:
        return await within(rest, timeout)
    except TIMEOUT_ERRORS:
        raise ServingError(
            Code.DEADLINE_EXCEEDED,
            f"Request body not received within {timeout:g} s (--request-timeout)",
            refusal=Refusal.BODY_TIMEOUT,
        ) from None


class _Body:
    """A body's chunks as they come, refused once they pass `limit` bytes."""

    __slots__ = ("chunks", "limit", "size", "too_large")

    def __init__(self, limit: int, too_large: str) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.limit = limit
        self.too_large = too_large

    def add(self, message: MutableMapping[str, Any]) -> bool:
        """Take one ASGI message; True once the body is complete."""
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk: bytes = message.get("body", b"")
        self.size += len(chunk)
        if self.size > self.limit:
            raise ServingError(
                Code.RESOURCE_EXHAUSTED, self.too_large, refusal=Refusal.BODY_TOO_LARGE
            )
        self.chunks.append(chunk)
        return not message.get("more_body", False)

    async def read(self, receive: Receive, first: _Resumed | None = None) -> bytes:
        if first is not None and self.add(await first):
            return self.joined()
        while not self.add(await receive()):
            pass
        return self.joined()

    def joined(self) -> bytes:
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)


class _Resumed:
    """Awaits a coroutine that was started by hand and is waiting on `waiting`:
    what `yield from` does, for a coroutine whose first step has been taken."""

    __slots__ = ("_coroutine", "_waiting")

    def __init__(self, coroutine: Any, waiting: Any) -> None:
        self._coroutine = coroutine
        self._waiting = waiting

    def __await__(self) -> Generator[Any, Any, MutableMapping[str, Any]]:
        coroutine, value = self._coroutine, self._waiting
        while True:
            try:
                sent = yield value
            except BaseException as err:  # noqa: BLE001 - handed on (a cancellation, the timeout)
                try:
                    value = coroutine.throw(err)
                except StopIteration as done:
                    message: MutableMapping[str, Any] = done.value
                    return message
            else:
                try:
                    value = coroutine.send(sent)
                except StopIteration as done:
                    message = done.value
                    return message
