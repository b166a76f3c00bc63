"""REST's answers to errors: a ServingError's code to an HTTP status and TF Serving's JSON body."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.responses import Response

from tf_entrypoint.serving.codec.json_values import encode
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import Code, ServingError

log = logging.getLogger("tf_entrypoint.serving")

T = TypeVar("T")


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: Mapping[str, str]


def answer(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Answer:
    return Answer(status, encode(body), headers or {})


#: TF Serving's mapping of canonical codes to HTTP statuses (model_servers/http_server.cc).
HTTP_STATUS = {
    Code.OK: 200,
    Code.CANCELLED: 499,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 400,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.UNAVAILABLE: 503,
    Code.UNAUTHENTICATED: 401,
}


def error_answer(err: p.ApiError | ServingError) -> Answer:
    if isinstance(err, ServingError):
        return answer(HTTP_STATUS.get(err.code, 500), p.error_body(err.message))
    return answer(err.status, p.error_body(err.message), err.headers)


def respond(result: Answer) -> Response:
    return Response(
        result.body,
        status_code=result.status,
        media_type="application/json",
        headers=dict(result.headers),
    )
