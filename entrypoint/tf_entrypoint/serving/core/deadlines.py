"""A request's deadline as seen on a worker: the request timeout counts time queued.

The transports give a request its deadline (--request-timeout or the
client's, whichever is sooner); :func:`run_with_deadline` makes it visible to
the code the worker runs, so that a request still waiting (for a batch, for
a turn alone, for a JSON conversion slot) when it passes is withdrawn with
its 504 / DEADLINE_EXCEEDED instead of running late.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from tf_entrypoint.serving.core.errors import Code, ServingError

R = TypeVar("R")

_local = threading.local()


#: The 504's text for a request withdrawn from the queue, unless the caller set one.
QUEUED_TOO_LONG = "Request timed out while queued for a batch"


def run_with_deadline(deadline: float | None, work: Callable[[], R], expired: str = "") -> R:
    """Run `work` with `deadline` (time.monotonic()) visible to :meth:`Batcher.submit`.

    `expired`: the 504's text when the deadline passes while queued (the
    same as the caller's own timeout answer, whichever comes first).
    """
    _local.deadline, _local.expired = deadline, expired
    try:
        if deadline is not None and time.monotonic() >= deadline:
            raise expired_error()  # waited for a worker until too late: never starts
        return work()
    finally:
        _local.deadline, _local.expired = None, ""


def current_deadline() -> float | None:
    deadline: float | None = getattr(_local, "deadline", None)
    return deadline


def expired_error() -> ServingError:
    """The 504 for the calling request, withdrawn because its deadline passed while waiting."""
    return ServingError(Code.DEADLINE_EXCEEDED, expired_text())


def expired_text(default: str = QUEUED_TOO_LONG) -> str:
    """The calling request's words for its timeout (run_with_deadline's `expired`), else
    `default`."""
    expired: str = getattr(_local, "expired", "") or default
    return expired


class Slots:
    """A counting semaphore on a C-level queue of tokens.

    threading.Semaphore is Python code around a Condition: taking and giving
    back one of its slots costs microseconds, twice per request on the
    predict path (issue 24's profile). queue.SimpleQueue's get and put are C.
    Same interface: acquire(blocking, timeout), release() (which refuses to
    give back more than it holds, as BoundedSemaphore does).
    """

    __slots__ = ("_tokens", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._tokens: queue.SimpleQueue[None] = queue.SimpleQueue()
        for _ in range(size):
            self._tokens.put(None)

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        try:
            self._tokens.get(blocking, timeout)
        except queue.Empty:
            return False
        return True

    def release(self) -> None:
        if self._tokens.qsize() >= self.size:
            raise ValueError("Slots released too many times")
        self._tokens.put(None)


class Semaphore(Protocol):
    """What :func:`acquire_before_deadline` takes: a Slots or a threading semaphore."""

    def acquire(self, blocking: bool = ..., timeout: float | None = ...) -> bool: ...

    def release(self) -> None: ...


def acquire_before_deadline(semaphore: Semaphore) -> None:
    """Take `semaphore` before the calling request's deadline, or raise its 504.

    For calls that run alone with batching on: a request that is still
    waiting for its turn when its deadline passes is withdrawn (it never
    runs, and its worker thread and admission slot are freed at once).
    """
    deadline = current_deadline()
    remaining = None if deadline is None else deadline - time.monotonic()
    if remaining is not None and remaining <= 0:
        raise expired_error()
    if not semaphore.acquire(timeout=remaining):
        raise expired_error()


async def within(awaitable: Awaitable[R], seconds: float) -> R:
    """`awaitable`'s result, or TimeoutError after `seconds` (0: no limit).

    On Python 3.11+ this is asyncio.timeout: a timer on the running task,
    no task of its own. asyncio.wait_for on 3.11 wraps the awaitable in a new
    task, which costs a loop turn and a task step per request (issue 24's
    profile); Python 3.10 has no asyncio.timeout, so it keeps wait_for.
    """
    if not seconds:
        return await awaitable
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)  # pragma: no cover - Python 3.10
