"""A predict queued from its transport's event loop, answered there: no thread waits for it.

:meth:`Servable.start` queues a checked predict and calls its `done` when it
has run: for its batch (--enable_batching: the batch thread calls it), or,
in a front-end of several processes, for the engine (ipc/remote.py: the
loop's own lane to the engine calls it when the answer comes). The
transport awaits :func:`run_queued` on its loop instead of handing the
request to a worker thread that would wait (issue 24: waking those threads
cost what batching saved; issue 34: a front-end's loop that waited for the
engine served nobody meanwhile).

A request given up on (its deadline passed, its client went) is withdrawn
if it has not started; else it runs on unanswered and keeps its admission
place until it ends, as a call on a worker does (docs/robustness.md).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Mapping

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.admission import Admission
from tf_entrypoint.serving.core.deadlines import within
from tf_entrypoint.serving.core.drain import TIMEOUT_ERRORS
from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.servable import Pending, Servable


class Finished:
    """Whether a queued predict has been answered; what to do when it has."""

    __slots__ = ("_hooks", "_lock", "done")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.done = False
        self._hooks: list[Callable[[], None]] = []

    def now(self) -> None:
        with self._lock:
            self.done, hooks = True, self._hooks
        for hook in hooks:
            hook()

    def then(self, hook: Callable[[], None]) -> None:
        """`hook()` once it has finished (now if it has)."""
        with self._lock:
            if not self.done:
                self._hooks.append(hook)
                return
        hook()


def hold_while_running(queued: Pending, finished: Finished, admission: Admission) -> None:
    """A queued predict given up on (timed out, cut off): withdrawn if it has not
    started; else it runs on, unanswered, and keeps its admission place until it
    ends, as a call on a worker does."""
    if queued.cancel():
        return
    admission.handed = True  # released by the answer, not by the handler
    finished.then(admission.release)


def remaining(deadline: float | None) -> float:
    """Seconds until `deadline` for within() (0: none; at least a millisecond)."""
    return 0.0 if deadline is None else max(deadline - time.monotonic(), 0.001)


def _settle(
    answered: asyncio.Future[dict[str, p.Tensor]],
    outputs: dict[str, p.Tensor] | None,
    error: BaseException | None,
) -> None:
    if answered.done():  # withdrawn: timed out or cancelled
        return
    if error is not None:
        answered.set_exception(error)
    else:
        answered.set_result(outputs or {})


async def run_queued(
    servable: Servable,
    name: str,
    tensors: Mapping[str, p.Tensor],
    wanted: tuple[str, ...],
    *,
    deadline: float | None,
    expired: str,
    admission: Admission,
    otherwise: Callable[[], Awaitable[dict[str, p.Tensor]]],
) -> dict[str, p.Tensor]:
    """The outputs of a checked predict queued with ``servable.start``, awaited on this
    loop until `deadline` (then DEADLINE_EXCEEDED with `expired`); a servable that
    cannot queue it (not batchable, no free lane) runs it by `otherwise()`."""
    loop = asyncio.get_running_loop()
    here = threading.get_ident()
    answered: asyncio.Future[dict[str, p.Tensor]] = loop.create_future()
    finished = Finished()

    def done(outputs: dict[str, p.Tensor] | None, error: BaseException | None) -> None:
        finished.now()
        if threading.get_ident() == here:  # the loop's own lane answered: no wake-up needed
            _settle(answered, outputs, error)
        else:  # the batch thread
            loop.call_soon_threadsafe(_settle, answered, outputs, error)

    queued = servable.start(name, tensors, wanted, deadline=deadline, expired=expired, done=done)
    if queued is None:
        return await otherwise()
    try:
        return await within(answered, remaining(deadline))
    except TIMEOUT_ERRORS:
        hold_while_running(queued, finished, admission)
        raise ServingError(Code.DEADLINE_EXCEEDED, expired) from None
    except asyncio.CancelledError:
        hold_while_running(queued, finished, admission)
        raise
