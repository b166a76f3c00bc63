"""A predict queued from its transport's event loop, answered there: no thread waits for it.

:meth:`Servable.start` queues a checked predict and calls its `done` when it
has run: for its batch (--enable_batching: the batch thread calls it), or,
in a front-end of several processes, for the engine (ipc/remote.py: the
loop's own lane to the engine calls it when the answer comes). The
transport awaits :func:`queued_start`'s run on its loop instead of handing the
request to a worker thread that would wait (issue 24: waking those threads
cost what batching saved; issue 34: a front-end's loop that waited for the
engine served nobody meanwhile).

A request given up on (its deadline passed, its client went) is withdrawn
if it has not started; else it runs on unanswered and keeps its admission
place until it ends, as a call on a worker does (docs/robustness.md).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Mapping

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.admission import Admission, InferencePool, expired_words
from tf_entrypoint.serving.core.calls import Start
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


def queued_start(pool: InferencePool, timeout: float, admission: Admission) -> Start:
    """The `start` of :meth:`CoreCalls.predict_started` for a predict queued from this
    loop, within `timeout` (--request-timeout or the client's; 0: none), holding
    `admission`'s place: queued with ``servable.start`` and awaited here (then
    DEADLINE_EXCEEDED in `expired_words`); a servable that cannot queue it (not
    batchable, no free lane) runs it on one of `pool`'s workers."""
    deadline = time.monotonic() + timeout if timeout else None
    expired = expired_words(timeout)

    async def start(
        servable: Servable, name: str, tensors: Mapping[str, p.Tensor], wanted: tuple[str, ...]
    ) -> dict[str, p.Tensor]:
        loop = asyncio.get_running_loop()
        here = threading.get_ident()
        answered: asyncio.Future[dict[str, p.Tensor]] = loop.create_future()
        finished = Finished()

        def done(outputs: dict[str, p.Tensor] | None, error: BaseException | None) -> None:
            finished.now()
            if threading.get_ident() == here:  # the loop's own lane answered: no wake-up
                _settle(answered, outputs, error)
            else:  # the batch thread
                loop.call_soon_threadsafe(_settle, answered, outputs, error)

        queued = servable.start(
            name, tensors, wanted, deadline=deadline, expired=expired, done=done
        )
        if queued is None:  # not queued: run alone, on a worker
            run = functools.partial(servable.run, name, tensors, wanted, batch=True)
            return await pool.run(run, timeout, admission)
        try:
            return await within(answered, remaining(deadline))
        except TIMEOUT_ERRORS:
            hold_while_running(queued, finished, admission)
            raise ServingError(Code.DEADLINE_EXCEEDED, expired) from None
        except asyncio.CancelledError:
            hold_while_running(queued, finished, admission)
            raise

    return start
