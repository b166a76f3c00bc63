"""REST's answers to errors: a ServingError's code to an HTTP status and TF Serving's JSON body."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from tf_entrypoint.serving.codec.json_values import encode
from tf_entrypoint.serving.core.errors import Code, Refusal, ServingError, log_server_fault

#: What a request handler catches: the one error type.
ERRORS = (ServingError,)

#: A code -> its HTTP status: TF Serving's ToHTTPStatusCode (model_servers/http_server.cc).
HTTP_STATUS = {
    Code.OK: 200,
    Code.CANCELLED: 499,
    Code.UNKNOWN: 500,
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
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.UNAUTHENTICATED: 401,
}
#: This server's own answers to refusals (docs/robustness.md): the body over
#: --max-body-bytes, the body not received in time, the server at capacity
#: (503 with Retry-After, so that clients and load balancers retry), a body
#: compressed in a way the server does not decode (RFC 9110's 415).
REFUSAL_STATUS = {
    Refusal.BODY_TOO_LARGE: 413,
    Refusal.BODY_TIMEOUT: 408,
    Refusal.AT_CAPACITY: 503,
    Refusal.UNSUPPORTED_ENCODING: 415,
}


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: Mapping[str, str]
    #: The canonical code the metrics count (never derived from `status`).
    code: str = "OK"


def error_body(message: str) -> dict[str, str]:
    """TF Serving's JSON body of an error: {"error": message}."""
    return {"error": message}


def answer(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Answer:
    return Answer(status, encode(body), headers or {})


def http_status(err: ServingError) -> int:
    """The HTTP status of an error: its refusal's, else its code's in TF Serving's table."""
    if err.refusal is not None:
        return REFUSAL_STATUS[err.refusal]
    return HTTP_STATUS.get(err.code, 500)


def error_headers(err: ServingError) -> dict[str, str]:
    headers = {}
    if err.retry_after is not None:
        headers["Retry-After"] = f"{err.retry_after:g}"
    if err.refusal is Refusal.BODY_TIMEOUT:  # what is left of the body is not read
        headers["Connection"] = "close"
    return headers


def error_answer(err: ServingError) -> Answer:
    """An error as TF Serving's JSON answer, with its status, headers and code (a
    server fault logged with its traceback: core/errors.py's log_server_fault)."""
    log_server_fault(err, "REST")
    body = encode(error_body(err.message))
    return Answer(http_status(err), body, error_headers(err), err.code.name)


def respond(result: Answer) -> Response:
    return Response(
        result.body,
        status_code=result.status,
        media_type="application/json",
        headers=dict(result.headers),
    )
