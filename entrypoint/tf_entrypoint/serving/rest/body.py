"""Admitted body reading: a request's body, bounded in size and in time."""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.drain import TIMEOUT_ERRORS
from tf_entrypoint.serving.core.errors import Code, Refusal, ServingError, invalid_argument


class Body:
    """A request body that its handler takes once, so that nothing else keeps it.

    The bytes are freed as soon as they are parsed, not when the request
    ends: a request that waits (for a worker, for its batch) holds its
    compact tensors, not its body and not its JSON document.
    """

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def take(self) -> bytes:
        data, self._data = self._data, b""
        return data


async def read_body(request: Request, limit: int, timeout: float = 0.0) -> bytes:
    """The whole body, or a BODY_TOO_LARGE refusal as soon as it is known to exceed `limit`.

    A BODY_TIMEOUT refusal when it has not all arrived within `timeout` seconds (0: no
    limit): an admitted request holds its place while it is read.
    """
    if timeout:
        try:
            return await asyncio.wait_for(read_body(request, limit), timeout)
        except TIMEOUT_ERRORS:
            raise ServingError(
                Code.DEADLINE_EXCEEDED,
                f"Request body not received within {timeout:g} s (--request-timeout)",
                refusal=Refusal.BODY_TIMEOUT,
            ) from None
    too_large = f"Request body exceeds the limit of {limit} bytes (--max-body-bytes)"
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise invalid_argument(f"Invalid Content-Length: {p.quote(declared)}")
        if int(declared) > limit:
            raise ServingError(Code.RESOURCE_EXHAUSTED, too_large, refusal=Refusal.BODY_TOO_LARGE)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ServingError(Code.RESOURCE_EXHAUSTED, too_large, refusal=Refusal.BODY_TOO_LARGE)
        chunks.append(chunk)
    return b"".join(chunks)
