"""Admitted body reading: a request's body, bounded in size and in time."""

from __future__ import annotations

import asyncio
import logging
from typing import TypeVar

from starlette.requests import Request

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.drain import TIMEOUT_ERRORS

log = logging.getLogger("tf_entrypoint.serving")

T = TypeVar("T")


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
    """The whole body, or ApiError(413) as soon as it is known to exceed `limit`.

    ApiError(408) when it has not all arrived within `timeout` seconds (0: no
    limit): an admitted request holds its place while it is read.
    """
    if timeout:
        try:
            return await asyncio.wait_for(read_body(request, limit), timeout)
        except TIMEOUT_ERRORS:
            raise p.ApiError(
                408,
                f"Request body not received within {timeout:g} s (--request-timeout)",
                {"Connection": "close"},
            ) from None
    too_large = f"Request body exceeds the limit of {limit} bytes (--max-body-bytes)"
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise p.bad_request(f"Invalid Content-Length: {p.quote(declared)}")
        if int(declared) > limit:
            raise p.ApiError(413, too_large)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise p.ApiError(413, too_large)
        chunks.append(chunk)
    return b"".join(chunks)
