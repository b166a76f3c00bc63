"""REST's one mapping of a code to an HTTP status (rest/errors.py), with TF Serving's table."""

from __future__ import annotations

import json

from tf_entrypoint.serving.core.errors import Code, Refusal, ServingError
from tf_entrypoint.serving.rest.errors import HTTP_STATUS, error_answer


def test_every_code_has_tf_servings_status() -> None:
    assert set(HTTP_STATUS) == set(Code)
    # http_server.cc's ToHTTPStatusCode, where it differs from a guess
    assert HTTP_STATUS[Code.FAILED_PRECONDITION] == 400
    assert HTTP_STATUS[Code.OUT_OF_RANGE] == 400
    assert HTTP_STATUS[Code.CANCELLED] == 499
    assert HTTP_STATUS[Code.RESOURCE_EXHAUSTED] == 429
    assert HTTP_STATUS[Code.ABORTED] == 409
    assert HTTP_STATUS[Code.DEADLINE_EXCEEDED] == 504


def test_an_error_is_answered_with_its_codes_status_and_counted_by_its_code() -> None:
    answer = error_answer(ServingError(Code.FAILED_PRECONDITION, 'key "x" not found'))
    assert (answer.status, answer.code, dict(answer.headers)) == (400, "FAILED_PRECONDITION", {})
    assert json.loads(answer.body) == {"error": 'key "x" not found'}


def test_refusals_keep_this_servers_own_answers() -> None:
    full = error_answer(
        ServingError(Code.RESOURCE_EXHAUSTED, "full", refusal=Refusal.AT_CAPACITY, retry_after=1)
    )
    assert (full.status, full.code, dict(full.headers)) == (
        503,
        "RESOURCE_EXHAUSTED",
        {"Retry-After": "1"},
    )
    large = error_answer(
        ServingError(Code.RESOURCE_EXHAUSTED, "big", refusal=Refusal.BODY_TOO_LARGE)
    )
    assert (large.status, dict(large.headers)) == (413, {})
    slow = error_answer(ServingError(Code.DEADLINE_EXCEEDED, "slow", refusal=Refusal.BODY_TIMEOUT))
    assert (slow.status, slow.code, dict(slow.headers)) == (
        408,
        "DEADLINE_EXCEEDED",
        {"Connection": "close"},
    )
