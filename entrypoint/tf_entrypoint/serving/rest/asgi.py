"""The REST application as uvicorn sees it: the inference path in raw ASGI, the rest in Starlette.

A POST to /v1/ (TF Serving's :predict, :classify and :regress) is answered
here without Starlette: no router, request object, middleware chain or
Response, only the cut-off's tracking, :meth:`Endpoints.post` and two
`send` calls. It is the request a server takes thousands of times a
second, and each layer of a framework is an await and a loop turn on it
(docs/benchmarks.md, "Cost per request"). Everything else (status,
metadata, health, metrics, errors for unknown paths) goes to the Starlette
application of rest/app.py, whose answers are the same as before. A request
under /v2 is the Open Inference Protocol's (rest/v2.py), in the same frame.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import State

from tf_entrypoint.serving.core.drain import Refused
from tf_entrypoint.serving.core.errors import Code
from tf_entrypoint.serving.core.serving_core import ServingCore
from tf_entrypoint.serving.rest.body import Receive, Scope
from tf_entrypoint.serving.rest.cutoff import send_error
from tf_entrypoint.serving.rest.errors import HTTP_STATUS, Answer, answer, error_body, http_status
from tf_entrypoint.serving.rest.handlers import Endpoints
from tf_entrypoint.serving.rest.v2 import PROTOCOL as V2
from tf_entrypoint.serving.rest.v2 import V2Endpoints

log = logging.getLogger("tf_entrypoint.serving")

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_JSON = (b"content-type", b"application/json")


class RestApp:
    """The ASGI application uvicorn runs (`create_app` builds it)."""

    def __init__(
        self, core: ServingCore, endpoints: Endpoints, other: Starlette, v2: V2Endpoints
    ) -> None:
        self.core = core
        self.endpoints = endpoints
        #: The Open Inference Protocol's handlers (every path under /v2).
        self.v2 = v2
        #: Everything but a POST to /v1/ (and the lifespan).
        self.other = other
        #: A POST to this path is Starlette's (a --monitoring_config_file page under /v1/).
        self._page = (endpoints.config.monitoring.prometheus_path or "").lower()

    @property
    def state(self) -> State:
        """The Starlette application's state: `state.serving` is the core."""
        return self.other.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["method"] == "POST":
                path = scope["path"].lower()
                if path.startswith("/v1/") and path != self._page:
                    await self._answer(self.endpoints.post, "v1", scope, receive, send)
                    return
            path = scope["path"]
            if path.startswith("/v2/") or path == "/v2":
                await self._answer(self.v2.handle, V2, scope, receive, send)
                return
        await self.other(scope, receive, send)

    async def _answer(
        self,
        handler: Callable[[Scope, Receive], Awaitable[Answer]],
        protocol: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        cutoff = self.core.cutoff
        try:
            with cutoff.track():
                result = await handler(scope, receive)
        except Refused as err:  # arrived after the cut-off
            await send_error(send, http_status(err), err.message)
            return
        except asyncio.CancelledError:
            if not cutoff.fired:
                raise
            cutoff.absorb()  # still running when the grace period ended
            await send_error(send, HTTP_STATUS[Code.UNAVAILABLE], cutoff.message)
            return
        except Exception as err:  # a bug of ours: logged, answered 500, never hidden
            log.error("internal error on %s %s", scope["method"], scope["path"], exc_info=err)
            result = answer(500, error_body(f"Internal error: {type(err).__name__}"))
            self.endpoints.metrics.observe("other", 500, 0.0, "", protocol)
        await respond(send, result, head=scope["method"] == "HEAD")


async def respond(send: Send, result: Answer, *, head: bool = False) -> None:
    """`result` as Starlette's Response would send it (same headers, same order).

    `result.headers` may name its Content-Type (else JSON); `head`: the
    headers of the answer a GET would get, without its body.
    """
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in result.headers.items()
    ]
    headers.append((b"content-length", str(len(result.body)).encode("latin-1")))
    if "Content-Type" not in result.headers:
        headers.append(_JSON)
    await send({"type": "http.response.start", "status": result.status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else result.body})
