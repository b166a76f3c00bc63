"""TF Serving's --rest_api_enable_cors_support: CORS headers on every answer, preflights answered.

As TF Serving's http_server.cc and http_rest_api_util.cc define it: every
answer (errors too) carries ``Access-Control-Allow-Origin: *``,
``Access-Control-Allow-Methods: POST, GET`` and
``Access-Control-Allow-Headers: Content-Type`` (here also the headers a
browser needs for what this server adds: ``Content-Encoding`` for a gzip
body, ``Inference-Header-Content-Length`` for the Open Inference Protocol's
binary data); an OPTIONS request is a
preflight, answered without reaching a handler: 200 with no body when its
``Origin`` names an http(s) origin, else 400. TF Serving does this under
/v1/ only (its other paths are not its REST API); here every path gets it
(/v2, health, metrics), so a browser can reach each of them the same way.

The choice is made when the application is built (rest/app.py): with the
flag off the application is :class:`RestApp` itself, and no request pays
for this module.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any

from tf_entrypoint.serving.codec.json_values import encode
from tf_entrypoint.serving.rest.asgi import RestApp, Send
from tf_entrypoint.serving.rest.body import Receive, Scope
from tf_entrypoint.serving.rest.errors import error_body

#: The headers TF Serving adds (AddCORSHeaders), in its order; Allow-Headers names
#: the two request headers this server reads beyond TF Serving's.
ALLOWED_REQUEST_HEADERS = b"Content-Type, Content-Encoding, Inference-Header-Content-Length"
HEADERS = (
    (b"access-control-allow-origin", b"*"),
    (b"access-control-allow-methods", b"POST, GET"),
    (b"access-control-allow-headers", ALLOWED_REQUEST_HEADERS),
)
#: TF Serving's test of a preflight's Origin: it names an http or https origin.
_ORIGIN = re.compile(rb"https?://")
MISSING_ORIGIN = "Origin header is missing in CORS preflight"


class CorsRestApp(RestApp):
    """:class:`RestApp` with CORS: what `create_app` builds when the flag is on."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            await preflight(scope, send)
            return

        async def with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":  # no handler here names CORS headers
                message["headers"] = [*message.get("headers", ()), *HEADERS]
            await send(message)

        await super().__call__(scope, receive, with_headers)


async def preflight(scope: Scope, send: Send) -> None:
    """A CORS preflight: 200 and no body for an http(s) Origin, else 400 naming what is missing."""
    origin = next((value for name, value in scope["headers"] if name == b"origin"), b"")
    if _ORIGIN.search(origin):
        status, body, headers = 200, b"", list(HEADERS)
    else:  # TF Serving's FAILED_PRECONDITION, a 400 (its body is empty; here it names why)
        status, body = 400, encode(error_body(MISSING_ORIGIN))
        headers = [*HEADERS, (b"content-type", b"application/json")]
    headers.append((b"content-length", str(len(body)).encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
