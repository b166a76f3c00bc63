"""The answers to HTTP requests cut off at the end of the grace period (core/drain.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from tf_entrypoint.serving.core.drain import CutOff, Refused
from tf_entrypoint.serving.core.errors import Code
from tf_entrypoint.serving.rest.errors import HTTP_STATUS, error_body, http_status

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class CutOffMiddleware:
    """ASGI: every HTTP request is tracked; one cut off is answered 503 with JSON.

    Covers whatever the request was doing when the grace period ended:
    waiting for an inference worker, reading a slow client's body, or
    anything else on the loop.
    """

    def __init__(self, app: App, cutoff: CutOff) -> None:
        self.app = app
        self.cutoff = cutoff

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            with self.cutoff.track():
                await self.app(scope, receive, sending)
        except Refused as err:  # arrived after the cut-off
            await send_error(send, http_status(err), err.message)
        except asyncio.CancelledError:
            if not self.cutoff.fired:
                raise
            self.cutoff.absorb()
            if not started:  # else the connection closes mid-answer, as it must
                await send_error(send, HTTP_STATUS[Code.UNAVAILABLE], self.cutoff.message)


async def send_error(send: Send, status: int, message: str) -> None:
    body = json.dumps(error_body(message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
