"""The end of the grace period: calls still running are answered, then the process exits.

On SIGTERM the server stops accepting and gives the calls in flight
--grace-period seconds. TensorFlow cannot interrupt a running op, so a call
still computing when that time ends would otherwise be cut by uvicorn (a 500
and a traceback) or by grpc (CANCELLED), and its worker thread would hold the
process's exit for as long as it computes. Instead, at the end of the grace
period, :meth:`CutOff.fire` cancels every request still being handled on
REST's and gRPC's event loops, each answered 503 (REST, JSON ``{"error":
...}``) or UNAVAILABLE (gRPC) with :data:`STOPPED`'s text by the server
itself; then the server exits without waiting for the worker threads
(tf_entrypoint.serving.main), within :data:`EXIT_MARGIN` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from typing import Any, Protocol

from tf_entrypoint.serving.core.errors import Code, ServingError

#: Seconds from the end of --grace-period to the process's exit, at most: the
#: answers to the calls cut off are written, both listeners close, and the
#: process exits (a watchdog exits at this point whatever is still going on).
EXIT_MARGIN = 1.0

#: What a call cut off at the end of the grace period is answered.
STOPPED = (
    "The server stopped before the request finished: it was still running when "
    "the grace period after SIGTERM ({grace:g} s, --grace-period) ended"
)

#: What asyncio raises when a wait_for() times out. Before Python 3.11
#: asyncio.TimeoutError is not the builtin TimeoutError (an `except
#: TimeoutError` misses it there); from 3.11 on it is an alias of it. The
#: package supports Python 3.10 (requires-python >= 3.10), so catch both;
#: written as a tuple so that ruff's UP041 never rewrites it to the builtin
#: alone when its target version is raised.
TIMEOUT_ERRORS: tuple[type[Exception], ...] = (TimeoutError, asyncio.TimeoutError)


class Refused(ServingError):
    """A request that arrives once the cut-off has fired: 503 / UNAVAILABLE at once."""


class CutOff:
    """The requests being handled, on any event loop, and the moment they are cut off.

    A handler runs inside :meth:`track`; :meth:`fire` (from any thread)
    cancels every tracked task on its own loop. A handler that sees
    CancelledError once :attr:`fired` is set answers :attr:`message` as
    503 / UNAVAILABLE instead of letting the cancellation through.
    """

    def __init__(self, message: str = STOPPED.format(grace=0)) -> None:
        self.message = message
        self._lock = threading.Lock()
        self._tasks: dict[asyncio.Task[Any], asyncio.AbstractEventLoop] = {}
        self._fired = threading.Event()
        #: Requests cut off (cancelled by :meth:`fire`).
        self.cut = 0

    @property
    def fired(self) -> bool:
        return self._fired.is_set()

    def _refused(self) -> Refused:
        return Refused(Code.UNAVAILABLE, self.message)

    def track(self) -> _Tracked:
        """Around a request's handling (on its event loop); Refused once fired."""
        return _Tracked(self)

    def fire(self) -> int:
        """Cut off every request being handled now; the number of them."""
        with self._lock:
            self._fired.set()
            tasks = list(self._tasks.items())
            self.cut += len(tasks)
        for task, loop in tasks:
            with contextlib.suppress(RuntimeError):  # that loop has closed: nothing runs there
                loop.call_soon_threadsafe(task.cancel)
        return len(tasks)

    def absorb(self) -> None:
        """In a handler that caught CancelledError after :meth:`fire`: it answers instead.

        Python 3.11's Task.uncancel() keeps the task's cancellation count
        right for the code around it (asyncio.timeout, TaskGroup).
        """
        task = asyncio.current_task()
        if task is not None and sys.version_info >= (3, 11):
            task.uncancel()


class Transport(Protocol):
    """One protocol's server over the core (REST, gRPC): built by `main` from its
    transport table, started before the core's manager thread, stopped by the drain."""

    #: For the log: "REST", "gRPC".
    name: str

    def start(self) -> None:
        """Listen and serve on its own thread; returns once listening (OSError if it cannot)."""

    def drain(self) -> None:
        """Stop accepting (any thread, idempotent): calls in flight get the grace period."""

    def join(self, timeout: float | None = None) -> None:
        """Wait until it has stopped."""

    def stopped(self) -> bool:
        """True once its thread has ended (after the drain, or on its own)."""


class _Tracked:
    """`with cutoff.track():` (a class, not a generator: once per request, on the loop)."""

    __slots__ = ("_cutoff", "_task")

    def __init__(self, cutoff: CutOff) -> None:
        self._cutoff = cutoff
        self._task: asyncio.Task[Any] | None = None

    def __enter__(self) -> None:
        task = asyncio.current_task()
        if task is None:  # not in a task: nothing to cancel
            return
        cutoff = self._cutoff
        with cutoff._lock:
            if cutoff.fired:
                raise cutoff._refused()
            cutoff._tasks[task] = task.get_loop()
        self._task = task

    def __exit__(self, *exc: object) -> None:
        task = self._task
        if task is not None:
            cutoff = self._cutoff
            with cutoff._lock:
                cutoff._tasks.pop(task, None)
