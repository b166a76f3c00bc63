"""Bounded admission (--max-queue) and the inference workers, shared by every transport."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Hashable
from typing import Protocol, TypeVar

from tf_entrypoint.serving.core.deadlines import Slots, run_with_deadline, within
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
        pool = self._pool
        with pool._lock:
            held, self._held = self._held, False
            if pool._awaiting:
                pool._awaiting.pop(self, None)
        if held:
            pool._release(None)

    def awaiting(self, evict: Callable[[], None]) -> None:
        """Its request's input (a gRPC message) is awaited: until :meth:`arrived`, once
        it has waited EVICTABLE_AFTER seconds, :meth:`InferencePool.admit` may give this
        place to a newcomer when every place is taken, calling `evict()` (from
        the newcomer's thread) so that the request ends, refused as at capacity.

        So a client that opens calls and sends nothing holds places only while
        nobody else wants them (docs/robustness.md, "Deadlines and shutdown").
        """
        pool = self._pool
        with pool._lock:
            if self._held:
                pool._awaiting[self] = (time.monotonic(), evict)

    def arrived(self) -> bool:
        """The input has come: the place can no longer be taken. False when it already
        was (the request must then not run: it answers at capacity)."""
        with self._pool._lock:
            self._pool._awaiting.pop(self, None)
            return self._held

    def close(self) -> None:
        """Give the place back unless InferencePool.run took it over."""
        if not self.handed:
            self.release()


#: Seconds an admitted request may await its input (a gRPC message) before a
#: newcomer may take its place when the server is full (Admission.awaiting): a
#: message on its way has this long before it competes; a stream that sends
#: nothing never holds a place that another request wants for longer.
EVICTABLE_AFTER = 1.0
#: The refusal of a request whose place went to a newcomer.
EVICTED = (
    "Server is at capacity and the request message had not arrived {seconds:g} s after "
    "the call began: its admission place went to another request; retry later"
)

#: A call runs inline on its transport's event loop when the calls of its
#: model take less than this (see InferencePool).
INLINE_BELOW_SECONDS = 0.002
#: ... and only when its request is at most this large (body or message bytes).
INLINE_MAX_REQUEST_BYTES = 64 * 1024
#: The weight of the newest inline call in a model's average, and the most one
#: call counts for in it: a call stalled once (the CPU quota's throttling, a
#: collection) must not send a fast model to the worker.
_AVERAGE_WEIGHT = 0.05
_MOST_COUNTED = 4  # times the bound


def expired_words(timeout: float) -> str:
    """What a request is told when its `timeout` (--request-timeout, or its deadline) passed."""
    return f"Request timed out after {timeout:g} s (--request-timeout)"


class CallTimes:
    """Whether a key's calls (a model's) are short enough to run on the thread that
    receives them, instead of a hand-off to a worker thread and back.

    A key's first calls run on a worker, where the fastest of them gives its
    time (a worker's call also counts the work beside it, so the fastest, not
    the average); once under `below` seconds its calls run inline, where
    an average of their time decides, and a key found slower there goes back
    to the worker until a call there is fast again. (Two threads racing in
    :meth:`learn` lose one sample, which either rule shrugs off.)
    """

    __slots__ = ("_seconds", "below", "most")

    def __init__(self, below: float = INLINE_BELOW_SECONDS) -> None:
        #: Calls under this many seconds are short.
        self.below = below
        #: The most one call counts for in an average (a call stalled once must not
        #: send a fast key to the worker).
        self.most = below * _MOST_COUNTED
        self._seconds: dict[Hashable, float] = {}

    def short(self, key: Hashable) -> bool:
        seconds = self._seconds.get(key)
        return seconds is not None and seconds < self.below

    def learn(self, key: Hashable, seconds: float, *, inline: bool) -> None:
        """Fold one call's time into its key's: inline, into an average (started
        afresh when the key was slow); on the worker, the fastest call counts."""
        before = self._seconds.get(key)
        if not inline:
            if before is None or seconds < before:
                self._seconds[key] = seconds
            return
        counted = min(seconds, self.most)
        if before is None or before >= self.below:
            self._seconds[key] = counted
        else:
            self._seconds[key] = before + _AVERAGE_WEIGHT * (counted - before)


class Places(Protocol):
    """Admission places several processes share (ipc/board.py's SharedPlaces)."""

    def take(self, limit: int) -> int | None:
        """Take one if fewer than `limit` are held: how many are held then; else None."""
        ...

    def give(self) -> None: ...

    def held(self) -> int: ...


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

    `inline` (one worker, no batching: main decides): a call with a request
    of at most INLINE_MAX_REQUEST_BYTES runs on the calling event loop's
    thread when the worker is free, instead of being handed to the worker
    thread and back, while its model's calls take under INLINE_BELOW_SECONDS;
    the hand-off and the loop's wake-up cost more than such a call
    (docs/benchmarks.md, "CPU per predict"). It takes the one worker's turn,
    so at most `workers` calls run at once whichever thread runs them. Which
    models' calls are short: :class:`CallTimes`. A model that is
    slow from the start never runs on the loop; an inline call that hangs
    holds the loop, and its answer (a 504 if its timeout passed) comes when
    it ends: the price of the fast path, paid only by models whose calls
    have all been short.
    """

    def __init__(
        self,
        workers: int,
        max_queue: int,
        metrics: Metrics,
        *,
        inline: bool = False,
        places: Places | None = None,
    ) -> None:
        self.workers = workers
        self.max_queue = max_queue
        self.metrics = metrics
        #: Places held by this pool's requests.
        self.admitted = 0
        #: With several front-ends (--frontends), the places all of them share: `max_queue`
        #: bounds their sum (ipc/board.py); None: this pool's alone.
        self.places = places
        self.inline = inline
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="inference"
        )
        #: The workers' turns, taken by whichever thread runs a call (inline only).
        self._turns = Slots(workers)
        #: How long each model's calls take (inline only).
        self._times = CallTimes()
        self._closed = False
        #: Admissions awaiting their input, the oldest first: (since, evict).
        self._awaiting: dict[Admission, tuple[float, Callable[[], None]]] = {}

    def admit(self) -> Admission:
        """A place among the `max_queue` admitted, or RESOURCE_EXHAUSTED (refused AT_CAPACITY)."""
        evict = None
        with self._lock:
            if self.places is None:
                full = self.admitted >= self.max_queue
            else:
                full = self.places.take(self.max_queue) is None
            if not full:
                self.admitted += 1
            elif self._awaiting:  # the place of the one that has awaited its input longest
                oldest, (since, evict) = next(iter(self._awaiting.items()))
                if time.monotonic() - since >= EVICTABLE_AFTER:
                    del self._awaiting[oldest]
                    oldest._held = False  # passed on: its release gives nothing back
                    full = False
                else:
                    evict = None
            in_progress = self.admitted if self.places is None else self.places.held()
        if evict is not None:
            evict()
            return Admission(self)
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
        self,
        work: Callable[[], T],
        timeout: float,
        admission: Admission | None = None,
        *,
        model: str = "",
        size: int = 0,
    ) -> T:
        """Run `work` on a worker; `admission`: the place admit() gave (else taken now).

        `model` and `size` (the request's bytes) decide whether it may run
        inline (see the class); without a model it never does (a predict that
        could not be queued from the loop may wait for its batch: core/queued.py).
        """
        place = self.admit() if admission is None else admission
        place.handed = True
        # The deadline, for a request queued for a batch: withdrawn when it passes.
        deadline = time.monotonic() + timeout if timeout else None
        expired = expired_words(timeout)
        if self.inline and self._may_run_inline(model, size):
            try:
                return self._run_inline(work, deadline, expired, model)
            finally:
                place.release()
        try:
            future = self._executor.submit(self._on_worker, deadline, work, expired, model)
        except RuntimeError:  # shut down: the server is stopping
            place.release()
            raise ServingError(Code.UNAVAILABLE, "Server is shutting down") from None
        future.add_done_callback(lambda _: place.release())
        try:
            return await within(asyncio.wrap_future(future), timeout)
        except TIMEOUT_ERRORS:
            future.cancel()
            raise ServingError(Code.DEADLINE_EXCEEDED, expired) from None

    def _may_run_inline(self, model: str, size: int) -> bool:
        return (
            bool(model)  # a call that names no model (a batched run's) is never timed
            and self._times.short(model)
            and size <= INLINE_MAX_REQUEST_BYTES
            and not self._closed
            and self._turns.acquire(blocking=False)
        )

    def _run_inline(
        self, work: Callable[[], T], deadline: float | None, expired: str, model: str
    ) -> T:
        """`work` on this thread, holding a worker's turn (taken by _may_run_inline)."""
        started = time.perf_counter()
        try:
            result = run_with_deadline(deadline, work, expired)
        finally:
            self._turns.release()
            self._times.learn(model, time.perf_counter() - started, inline=True)
        if deadline is not None and time.monotonic() > deadline:
            # As the worker's caller would have: its answer came after the timeout.
            raise ServingError(Code.DEADLINE_EXCEEDED, expired)
        return result

    def _on_worker(
        self, deadline: float | None, work: Callable[[], T], expired: str, model: str
    ) -> T:
        if not self.inline:
            return run_with_deadline(deadline, work, expired)
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if not self._turns.acquire(timeout=remaining):  # the loop runs one inline
            raise ServingError(Code.DEADLINE_EXCEEDED, expired)
        started = time.perf_counter()
        try:
            return run_with_deadline(deadline, work, expired)
        finally:
            self._turns.release()
            self._times.learn(model, time.perf_counter() - started, inline=False)

    def _release(self, _: object) -> None:
        with self._lock:
            self.admitted -= 1
            if self.places is not None:
                self.places.give()
        self.metrics.in_flight.dec()

    def shutdown(self) -> None:
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)
