"""The serving core's errors (core/errors.py): canonical codes."""

from __future__ import annotations

from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.rest.errors import error_answer


def test_canonical_codes_are_numbered_as_grpcs() -> None:
    import grpc  # noqa: PLC0415

    by_number = sorted(grpc.StatusCode, key=lambda code: code.value[0])
    assert [(code.name, code.value[0]) for code in by_number] == [(c.name, c.value) for c in Code]
    assert [Code.of(code.value[0]).name for code in by_number] == [c.name for c in Code]
    assert Code.of(99) is Code.UNKNOWN
    # Each code TF Serving maps to an HTTP status keeps that status (and the
    # code is never recovered from the status: the error carries it).
    for status, code in ((400, Code.INVALID_ARGUMENT), (404, Code.NOT_FOUND),
                         (503, Code.UNAVAILABLE), (504, Code.DEADLINE_EXCEEDED),
                         (429, Code.RESOURCE_EXHAUSTED), (501, Code.UNIMPLEMENTED),
                         (500, Code.INTERNAL)):  # fmt: skip
        answer = error_answer(ServingError(code, "m"))
        assert (answer.status, answer.code) == (status, code.name)
    answer = error_answer(ServingError(Code.FAILED_PRECONDITION, "m"))
    assert (answer.status, answer.code) == (400, "FAILED_PRECONDITION")
