"""Admitted body reading: a request's body, bounded in size and in time, from ASGI's receive.

A body sent with ``Content-Encoding: gzip`` (as TF Serving's HTTP server
takes it) or ``deflate`` (as Triton's clients may send it) is decompressed
as it arrives, and --max-body-bytes bounds what it decompresses to: a
gzip bomb is refused with 413 the moment it passes the limit, never
decompressed further.
"""

from __future__ import annotations

import zlib
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
    declared = encoding = None
    for key, value in scope["headers"]:  # one pass for both
        name = key.lower()
        if name == b"content-length" and declared is None:
            declared = value.decode("latin-1")
        elif name == b"content-encoding" and encoding is None:
            encoding = value.decode("latin-1")
    if declared is not None:
        if not declared.isdigit():
            raise invalid_argument(f"Invalid Content-Length: {p.quote(declared)}")
        if int(declared) > limit:
            raise ServingError(Code.RESOURCE_EXHAUSTED, too_large, refusal=Refusal.BODY_TOO_LARGE)
    coding = None if encoding is None else content_coding(encoding)
    body = _Body(limit, too_large) if coding is None else _Inflated(limit, too_large, coding)
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


#: The content codings a body may be sent in: their zlib window bits (RFC 9110 8.4.1).
CODINGS = {"gzip": 31, "x-gzip": 31, "deflate": 15}


def content_coding(header_value: str) -> str | None:
    """The coding a Content-Encoding header names: None for none (``identity``, empty),
    else one of CODINGS; a 415 refusal for any other coding, or for several."""
    codings = [c.strip().lower() for c in header_value.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) == 1 and codings[0] in CODINGS:
        return codings[0]
    raise ServingError(
        Code.INVALID_ARGUMENT,
        f"Content-Encoding {p.quote(header_value)} is not supported: send the body "
        "uncompressed or compressed once with gzip or deflate",
        refusal=Refusal.UNSUPPORTED_ENCODING,
    )


class _Inflated(_Body):
    """A compressed body, decompressed as its chunks come: `limit` bounds the bytes
    received and the bytes they decompress to. zlib is never asked for more than
    one byte past the limit, so a bomb costs at most `limit` + 1 bytes."""

    __slots__ = ("coding", "decompressor", "received")

    def __init__(self, limit: int, too_large: str, coding: str) -> None:
        super().__init__(limit, too_large)
        self.coding = coding
        self.decompressor = zlib.decompressobj(CODINGS[coding])
        self.received = 0

    def add(self, message: MutableMapping[str, Any]) -> bool:
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk: bytes = message.get("body", b"")
        self.received += len(chunk)
        if self.received > self.limit:
            raise ServingError(
                Code.RESOURCE_EXHAUSTED, self.too_large, refusal=Refusal.BODY_TOO_LARGE
            )
        try:
            self.inflate(chunk)
        except zlib.error as err:
            raise self.invalid(str(err)) from None
        if message.get("more_body", False):
            return False
        if self.received and not self.decompressor.eof:
            raise self.invalid("the body ends before the compressed data does")
        return True

    def inflate(self, data: bytes) -> None:
        while data:
            if self.decompressor.eof:  # another gzip member follows (RFC 1952)
                if self.coding == "deflate":
                    raise self.invalid("data follows the end of the compressed stream")
                self.decompressor = zlib.decompressobj(CODINGS[self.coding])
            out = self.decompressor.decompress(data, self.limit - self.size + 1)
            self.size += len(out)
            if self.size > self.limit:
                raise ServingError(
                    Code.RESOURCE_EXHAUSTED,
                    f"{self.too_large} once decompressed (Content-Encoding: {self.coding})",
                    refusal=Refusal.BODY_TOO_LARGE,
                )
            if out:
                self.chunks.append(out)
            decompressor = self.decompressor
            data = decompressor.unused_data if decompressor.eof else decompressor.unconsumed_tail

    def invalid(self, why: str) -> ServingError:
        return invalid_argument(
            f"The request body is not valid {self.coding} data "
            f"(Content-Encoding: {self.coding}): {why}"
        )

    def joined(self) -> bytes:
        if not self.chunks:
            return b""
        return super().joined()


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
