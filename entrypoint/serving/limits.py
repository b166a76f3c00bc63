"""Memory per request: the bounds the request handlers apply.

`--max-body-bytes` bounds what a client sends; a request is admitted before
its body is read (app.py), and at most --workers requests at once hold a
parsed JSON document or an answer being written (RequestLimits.converting),
however many are admitted (docs/robustness.md, "Memory per request").
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestLimits:
    """The bounds the request handlers apply, from --max-body-bytes and --workers."""

    max_body_bytes: int
    #: Held while a request's JSON body is parsed or its JSON answer written,
    #: so that at most --workers requests hold a parsed JSON document (or an
    #: answer being built) at once, however many are admitted.
    converting: threading.BoundedSemaphore

    @classmethod
    def of(cls, max_body_bytes: int, workers: int) -> RequestLimits:
        return cls(max_body_bytes, threading.BoundedSemaphore(workers))
