"""Memory per request: what a request may ask the server to build, checked first.

`--max-body-bytes` (B) bounds what a client sends; this module bounds what a
small request can make the server build from it, before anything is built
(docs/robustness.md, "Memory per request"):

- the tensors a gRPC TensorProto (or a warm-up record) decodes to, whose
  shape may be far larger than the values it carries (TensorFlow fills the
  rest with the last value);
- the serialized examples of a Classify or Regress request, into each of
  which the request's context is copied.

Both may take at most EXPANSION x B. Eight is the most a value grows from its
wire form (an int64 of 0 is one byte in a TensorProto and eight decoded; a
string counts its length plus STRING_ELEMENT_BYTES and takes at least its
length plus two bytes on the wire), so a request within --max-body-bytes that
spells out its values never meets the limit: only a shape larger than its
values, or a context multiplied by many examples, can. Pure arithmetic: no
TensorFlow, no NumPy.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from tf_entrypoint.serving.core.deadlines import Semaphore, Slots, acquire_before_deadline
from tf_entrypoint.serving.core.errors import Code, Refusal, ServingError, invalid_argument

#: Decoded tensors, or examples with their context, may take this many times --max-body-bytes.
EXPANSION = 8
#: What one string element counts for besides its bytes.
STRING_ELEMENT_BYTES = 16
#: TensorFlow's most dimensions (TensorShape::MaxDimensions).
MAX_DIMS = 254
_INT64_MAX = 2**63 - 1


def expansion_limit(max_body_bytes: int) -> int:
    """Bytes a request may make the server build: EXPANSION x --max-body-bytes."""
    return EXPANSION * max_body_bytes


def parse_error(key: str) -> ServingError:
    """TF Serving's answer to a TensorProto that Tensor::FromProto refuses."""
    return invalid_argument(f"tensor parsing error: {key}")


def element_count(key: str, dims: Sequence[int]) -> int:
    """The elements of a TensorProto's shape, as TensorShape::IsValid accepts it.

    A negative dimension, more than MAX_DIMS dimensions or more elements than
    an int64 holds is TF Serving's "tensor parsing error: KEY".
    """
    if len(dims) > MAX_DIMS:
        raise parse_error(key)
    count = 1
    for size in dims:
        if size < 0:
            raise parse_error(key)
        count *= size
        if count > _INT64_MAX:
            raise parse_error(key)
    return count


def string_bytes(count: int, sent: int, sent_bytes: int, last_bytes: int) -> int:
    """What a DT_STRING tensor of `count` elements counts for once decoded.

    `sent`: the strings the TensorProto carries (the first `count` are used;
    fewer are filled up with the last one, none with empty strings, as
    TensorFlow's Tensor::FromProto does); `sent_bytes`: the length of those
    used, `last_bytes`: the last one's. Each element counts
    STRING_ELEMENT_BYTES besides its bytes.
    """
    filled = max(count - sent, 0) if sent else 0
    return count * STRING_ELEMENT_BYTES + sent_bytes + filled * last_bytes


def too_large(what: str, size: int, limit: int, advice: str) -> ServingError:
    """413 / RESOURCE_EXHAUSTED: a request that would make the server build too much."""
    return ServingError(
        Code.RESOURCE_EXHAUSTED,
        f"{what} would take {size} bytes, more than the limit of {limit} bytes "
        f"({EXPANSION} x --max-body-bytes); {advice}, or raise --max-body-bytes",
        refusal=Refusal.BODY_TOO_LARGE,
    )


def check_examples(context_bytes: int, example_bytes: Sequence[int], limit: int) -> None:
    """Refuse examples that, with the context copied into each, would pass `limit`."""
    count = len(example_bytes)
    total = context_bytes * count + sum(example_bytes)
    if total <= limit:
        return
    examples = f"{count} example{'' if count == 1 else 's'}"
    if context_bytes:
        what = f"{examples} with their context ({context_bytes} bytes) copied into each"
        advice = "send fewer examples per request or a smaller context"
    else:
        what, advice = examples, "send fewer examples per request"
    raise too_large(what, total, limit, advice)


@dataclass(frozen=True)
class RequestLimits:
    """The bounds the request handlers apply, from --max-body-bytes and --workers."""

    max_body_bytes: int
    #: Held while a request's JSON body is parsed or its JSON answer written,
    #: so that at most --workers requests hold a parsed JSON document (or an
    #: answer being built) at once, however many are admitted.
    converting: Semaphore

    @classmethod
    def of(cls, max_body_bytes: int, workers: int) -> RequestLimits:
        return cls(max_body_bytes, Slots(workers))

    def slot(self) -> _Slot:
        """One of the `converting` slots, taken before the calling request's
        deadline: a request still waiting for one then gets its 504, as in
        every other wait on the request path (docs/robustness.md)."""
        return _Slot(self.converting)

    @property
    def expansion(self) -> int:
        """Bytes a request may make the server build (expansion_limit)."""
        return expansion_limit(self.max_body_bytes)


class _Slot:
    """`with limits.slot():` (a class, not a generator: twice per predict)."""

    __slots__ = ("_semaphore",)

    def __init__(self, semaphore: Semaphore) -> None:
        self._semaphore = semaphore

    def __enter__(self) -> None:
        acquire_before_deadline(self._semaphore)

    def __exit__(self, *exc: object) -> None:
        self._semaphore.release()


#: glibc's mallopt() parameter for the most malloc arenas (malloc.h).
_M_ARENA_MAX = -8


def limit_malloc_arenas(workers: int) -> int | None:
    """At most 2 x `workers` glibc malloc arenas for the server (mallopt M_ARENA_MAX).

    glibc gives threads that allocate at the same time arenas of their own,
    up to 8 per core the machine has (not the container's budget), and an
    arena keeps what its threads freed for its own later use. With batching
    every admitted request has a thread, so the memory a burst of large
    requests used stayed spread over dozens of arenas: 24 requests of 4 MB at
    once peaked at 1.26 GB, and kept it, where 2 arenas peaked at 0.65 GB.
    Call before any other thread starts. MALLOC_ARENA_MAX in the environment
    wins (glibc reads it itself). Returns the number set, or None (not glibc,
    or set by the environment).
    """
    if os.environ.get("MALLOC_ARENA_MAX"):
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return None
    arenas = max(2, 2 * workers)
    if mallopt(_M_ARENA_MAX, arenas) != 1:
        return None
    logging.getLogger("tf_entrypoint.serving").debug(
        "malloc arenas limited to %d (MALLOC_ARENA_MAX overrides)", arenas
    )
    return arenas
