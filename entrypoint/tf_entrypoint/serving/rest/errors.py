"""REST's answers to errors: a ServingError's code to an HTTP status and TF Serving's JSON body."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.responses import Response

from tf_entrypoint.serving.core import types as p

log = logging.getLogger("tf_entrypoint.serving")

T = TypeVar("T")


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: Mapping[str, str]


def answer(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Answer:
    return Answer(status, p.encode(body), headers or {})


def error_answer(err: p.ApiError) -> Answer:
    return answer(err.status, p.error_body(err.message), err.headers)


def respond(result: Answer) -> Response:
    return Response(
        result.body,
        status_code=result.status,
        media_type="application/json",
        headers=dict(result.headers),
    )
