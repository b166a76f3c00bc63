"""The serving core's one error type: a canonical code and TF Serving's words.

Every layer raises :class:`ServingError`; each transport maps its `code` to
its own wire once (REST: ``rest/errors.py`` with TF Serving's table from
``http_server.cc``; gRPC: the code of the same name). No status is derived
from another. `refusal` marks the few answers a transport words its own way
(a body over the size limit, a body that did not arrive in time, the server
at capacity); the code is still the canonical one.
"""

from __future__ import annotations

import enum
import logging

log = logging.getLogger("tf_entrypoint.serving")


class Code(enum.IntEnum):
    """Canonical status codes: gRPC's names and numbers, as TensorFlow's `Status` carries them."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16

    @classmethod
    def of(cls, number: int) -> Code:
        """The code of a TensorFlow/gRPC status number (UNKNOWN when out of range)."""
        try:
            return cls(number)
        except ValueError:
            return cls.UNKNOWN


class Refusal(enum.Enum):
    """Refusals that a transport answers in its own words (the code stays canonical)."""

    #: The request body or message is over --max-body-bytes (REST 413).
    BODY_TOO_LARGE = "body_too_large"
    #: The request body did not arrive within the request timeout (REST 408).
    BODY_TIMEOUT = "body_timeout"
    #: Admission refused the request: the server is at capacity (REST 503 + Retry-After).
    AT_CAPACITY = "at_capacity"
    #: The request body's Content-Encoding is not one the server decodes (REST 415).
    UNSUPPORTED_ENCODING = "unsupported_encoding"


class ServingError(Exception):
    """A request that cannot be answered: a canonical code and TF Serving's message."""

    def __init__(
        self,
        code: Code,
        message: str,
        *,
        refusal: Refusal | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.refusal = refusal
        #: Seconds after which a retry may succeed (REST sends Retry-After).
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"ServingError({self.code.name}, {self.message!r})"


class ConfigError(Exception):
    """A configuration that cannot be served (a flag, a file, a ReloadConfigRequest);
    the message names where and why."""


def invalid_argument(message: str) -> ServingError:
    return ServingError(Code.INVALID_ARGUMENT, message)


def not_found(message: str) -> ServingError:
    return ServingError(Code.NOT_FOUND, message)


def unavailable(message: str) -> ServingError:
    return ServingError(Code.UNAVAILABLE, message)


#: The codes that say the server failed rather than the request (REST 500): an
#: answer with one is logged, since no user's mistake should ever cause one.
SERVER_FAULTS = frozenset({Code.UNKNOWN, Code.INTERNAL, Code.DATA_LOSS})


def log_server_fault(err: ServingError, where: str) -> None:
    """Log `err`, with the traceback of where it was raised, if its code is a
    server fault (an answer of 500 or INTERNAL is never silent); else nothing."""
    if err.code in SERVER_FAULTS:
        log.error("%s answered %s: %s", where, err.code.name, err.message, exc_info=err)
