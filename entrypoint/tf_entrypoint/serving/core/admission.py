"""Bounded admission (--max-queue) and the inference workers, shared by every transport."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from tf_entrypoint.serving.core.deadlines import run_with_deadline
from tf_entrypoint.serving.core.drain import TIMEOUT_ERRORS
from tf_entrypoint.serving.core.errors import Code, Refusal, ServingError
from tf_entrypoint.serving.core.metrics import Metrics

T = TypeVar("T")


class Admission:
    """One request's place among those an InferencePool admits (InferencePool.admit)."""

    __slots__ = ("_held", "_pool", "handed")

    def __init__(self, pool: InferencePool) -> None:
        self._pool = pool
        self._held = True
        #: Set by InferencePool.run, which gives the place back when the work is done.
        self.handed = False

    def release(self) -> None:
        """Give the place back (the first call does; later ones do nothing)."""
        with self._pool._lock:
            held, self._held = self._held, False
        if held:
            self._pool._release(None)

    def close(self) -> None:
        """Give the place back unless InferencePool.run took it over."""
        if not self.handed:
            self.release()


class InferencePool:
    """A fixed set of worker threads with bounded admission, shared by REST and gRPC.

    At most `max_queue` predicts are admitted (running or waiting for one of
    the `workers` threads); the next gets 503 (REST) or RESOURCE_EXHAUSTED
    (gRPC) instead of queueing without bound. A request that is still waiting
    when its timeout expires is withdrawn; one already running in TensorFlow
    finishes (ops cannot be interrupted) but its client gets 504 or
    DEADLINE_EXCEEDED. `run` may be awaited from any event loop (REST's and
    gRPC's run on different threads): admission is counted under a lock.
    A caller that must hold its place before it reads the request (its body,
    its message) calls :meth:`admit` first and hands the Admission to `run`.
    """

    def __init__(self, workers: int, max_queue: int, metrics: Metrics) -> None:
        self.workers = workers
        self.max_queue = max_queue
        self.metrics = metrics
        self.admitted = 0
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="inference"
        )

    def admit(self) -> Admission:
        """A place among the `max_queue` admitted, or RESOURCE_EXHAUSTED (refused AT_CAPACITY)."""
        with self._lock:
            full = self.admitted >= self.max_queue
            if not full:
                self.admitted += 1
            in_progress = self.admitted
        if full:
            self.metrics.rejected.inc()
            raise ServingError(
                Code.RESOURCE_EXHAUSTED,
                f"Server is at capacity ({in_progress} predict requests in progress); retry later",
                refusal=Refusal.AT_CAPACITY,
                retry_after=1,
            )
        self.metrics.in_flight.inc()
        return Admission(self)

    async def run(
        self, work: Callable[[], T], timeout: float, admission: Admission | None = None
    ) -> T:
        """Run `work` on a worker; `admission`: the place admit() gave (else taken now)."""
        place = self.admit() if admission is None else admission
        place.handed = True
        # The deadline, for a request queued for a batch: withdrawn when it passes.
        deadline = time.monotonic() + timeout if timeout else None
        expired = f"Request timed out after {timeout:g} s (--request-timeout)"
        try:
            future = self._executor.submit(run_with_deadline, deadline, work, expired)
        except RuntimeError:  # shut down: the server is stopping
            place.release()
            raise ServingError(Code.UNAVAILABLE, "Server is shutting down") from None
        future.add_done_callback(lambda _: place.release())
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout or None)
        except TIMEOUT_ERRORS:
            future.cancel()
            raise ServingError(Code.DEADLINE_EXCEEDED, expired) from None

    def _release(self, _: object) -> None:
        with self._lock:
            self.admitted -= 1
        self.metrics.in_flight.dec()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
