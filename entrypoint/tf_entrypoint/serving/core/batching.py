"""Server-side batching: TF Serving's `--enable_batching`, without TensorFlow.

Concurrent predicts for the same model version and signature whose inputs
agree in every dimension but the first are queued and run as one call. This
module holds the queue (:class:`Batcher`) and its parameters (TF Serving's
file is read by config/batching_config.py); how tensors are concatenated and split is
the caller's (:mod:`tf_entrypoint.serving.model`), so the batcher can be
tested on plain lists.

The queue follows TensorFlow's shared batch scheduler: a batch stays open
while it has room (`max_batch_size` rows) and is closed when it is full, when
a request with other shapes arrives, or when `batch_timeout_micros` has passed
since its first request; `num_batch_threads` threads take batches in order.
With the default timeout 0 a free thread takes the open batch at once, so a
lone request waits for nothing, and requests arriving while the threads are
busy gather into the next batch. At most `max_enqueued_batches` batches
(open or waiting) exist; a request that would need another gets
:data:`QUEUE_FULL`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from tf_entrypoint.serving.core.deadlines import current_deadline, expired_text
from tf_entrypoint.serving.core.errors import Code, Refusal, ServingError

P = TypeVar("P")
R = TypeVar("R")

#: TF Serving's defaults (TensorFlow's BasicBatchScheduler / SharedBatchScheduler
#: QueueOptions); num_batch_threads defaults to --workers (the CPU budget).
DEFAULT_MAX_BATCH_SIZE = 1000
DEFAULT_BATCH_TIMEOUT_MICROS = 0
DEFAULT_MAX_ENQUEUED_BATCHES = 10
#: TensorFlow's text when a batch queue is full (shared_batch_scheduler.h).
QUEUE_FULL = "The batch scheduling queue to which this task was submitted is full"


@dataclass(frozen=True)
class BatchingParameters:
    """TF Serving's BatchingParameters (session_bundle_config.proto), as served here."""

    num_batch_threads: int
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    batch_timeout_micros: int = DEFAULT_BATCH_TIMEOUT_MICROS
    max_enqueued_batches: int = DEFAULT_MAX_ENQUEUED_BATCHES
    allowed_batch_sizes: tuple[int, ...] = ()
    #: The file they were read from, or None for the defaults.
    source: Path | None = None

    def padded_size(self, rows: int) -> int:
        """The rows a batch of `rows` runs with: the next allowed size, or `rows`."""
        for size in self.allowed_batch_sizes:
            if size >= rows:
                return size
        return rows

    def describe(self) -> str:
        allowed = ",".join(map(str, self.allowed_batch_sizes)) or "any"
        return (
            f"batching on ({self.source or 'defaults'}): max_batch_size {self.max_batch_size}, "
            f"batch_timeout_micros {self.batch_timeout_micros}, max_enqueued_batches "
            f"{self.max_enqueued_batches}, num_batch_threads {self.num_batch_threads}, "
            f"allowed_batch_sizes {allowed}"
        )


# -- the queue


class _Task(Generic[P]):
    __slots__ = (
        "deadline", "done", "enqueued", "error", "expired", "on_done", "payload", "result",
        "rows", "started",
    )  # fmt: skip

    def __init__(
        self,
        payload: P,
        rows: int,
        enqueued: float,
        deadline: float | None,
        expired: str,
        *,
        on_done: Callable[[_Task[P]], None] | None = None,
    ) -> None:
        self.payload = payload
        self.rows = rows
        self.enqueued = enqueued
        #: When it must have started, on the batcher's clock, and the 504's text after that.
        self.deadline = deadline
        self.expired = expired
        self.started = False
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        #: Called (on the batch thread) once it has its result or error: submit_async.
        self.on_done = on_done

    def finish(self) -> None:
        """Its result or error is set: wake whoever waits for it."""
        self.done.set()
        if self.on_done is not None:
            self.on_done(self)

    def late(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def expired_error(self) -> ServingError:
        return ServingError(Code.DEADLINE_EXCEEDED, self.expired)

    def expire(self) -> None:
        """Answer its 504 without running it: its deadline passed before it could start."""
        self.error = self.expired_error()
        self.finish()


class _Batch(Generic[P]):
    __slots__ = ("created", "key", "rows", "tasks")

    def __init__(self, key: Hashable, created: float) -> None:
        self.key = key
        self.tasks: list[_Task[P]] = []
        self.rows = 0
        self.created = created


@dataclass(frozen=True)
class BatchHooks:
    """Where a batcher reports: rows run (with padding), padded rows, queueing delay."""

    batch_run: Callable[[int, int, int], None] = lambda rows, padded, tasks: None
    queued: Callable[[float], None] = lambda seconds: None


class Batcher(Generic[P, R]):
    """One queue and its threads, for one model version and signature.

    `run_batch(payloads, padded_rows)` runs a batch and returns one result per
    payload (padding: `padded_rows` extra rows, which the caller adds and
    drops); if it raises, each payload is run again alone with
    `run_one(payload)`, so that only the request that fails gets an error.

    `clock` is the monotonic clock that `batch_timeout_micros` and deadlines
    are measured on (time.monotonic; a test gives its own, so that no
    outcome depends on how fast the machine is).
    """

    def __init__(
        self,
        parameters: BatchingParameters,
        run_batch: Callable[[Sequence[P], int], Sequence[R]],
        run_one: Callable[[P], R],
        hooks: BatchHooks | None = None,
        *,
        name: str = "batch",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.parameters = parameters
        self._clock = clock
        self._run_batch = run_batch
        self._run_one = run_one
        self._hooks = hooks or BatchHooks()
        self._lock = threading.Condition()
        self._open: dict[Hashable, _Batch[P]] = {}
        self._ready: deque[_Batch[P]] = deque()
        self._stopping = False
        #: Batches running now (on the batch threads or inline), at most num_batch_threads.
        self._busy = 0
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-{index}", daemon=True)
            for index in range(parameters.num_batch_threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, key: Hashable, rows: int, payload: P, deadline: float | None = None) -> R:
        """Queue `payload` (`rows` rows) with others of the same `key`; its result.

        Blocks until its batch has run. Raises ServingError RESOURCE_EXHAUSTED
        (refused AT_CAPACITY) when the queue is full, UNAVAILABLE when the
        batcher is closed, DEADLINE_EXCEEDED when `deadline` (default: the
        calling request's) passes before it starts (it never runs, whether
        its own thread withdraws it or a batch thread finds it late; the
        text is its caller's, see :func:`run_with_deadline`), and whatever
        its run raised.
        """
        if deadline is None:
            deadline = current_deadline()
        task = _Task(payload, rows, self._clock(), deadline, expired_text())
        with self._lock:
            if self._stopping:
                raise ServingError(Code.UNAVAILABLE, "Server is shutting down")
            if task.late(self._clock()):  # never queued nor run inline once too late
                raise task.expired_error()
            # Nothing queued, a batch thread's share free, no timeout to wait
            # for: run here and now, saving two thread switches.
            inline = (
                self.parameters.batch_timeout_micros == 0
                and not self._open
                and not self._ready
                and self._busy < self.parameters.num_batch_threads
            )
            if inline:
                self._busy += 1
                task.started = True
        if inline:
            try:
                self._execute([task], rows)
            finally:
                with self._lock:
                    self._busy -= 1
                    self._lock.notify()
            return self._outcome(task)
        self._enqueue(key, task)
        remaining = None if deadline is None else max(0.0, deadline - self._clock())
        if not task.done.wait(remaining):
            with self._lock:
                if not task.started:
                    self._withdraw(task)  # a batch thread may have found it late already
                    raise task.expired_error()
            task.done.wait()  # running: TensorFlow cannot be interrupted
        return self._outcome(task)

    def submit_async(
        self,
        key: Hashable,
        rows: int,
        payload: P,
        *,
        deadline: float | None,
        expired: str,
        on_done: Callable[[_Task[P]], None],
    ) -> _Task[P]:
        """Queue `payload` and return at once; `on_done(task)` is called on a batch
        thread once `task.result` or `task.error` is set (DEADLINE_EXCEEDED with
        `expired` when a batch thread finds it late). For a caller on an event
        loop, which must not wait here: it never runs inline. Raises as
        :meth:`submit` does before queueing; :meth:`withdraw` takes it back.
        """
        task = _Task(payload, rows, self._clock(), deadline, expired, on_done=on_done)
        with self._lock:
            if self._stopping:
                raise ServingError(Code.UNAVAILABLE, "Server is shutting down")
            if task.late(self._clock()):
                raise task.expired_error()
        self._enqueue(key, task)
        return task

    def withdraw(self, task: _Task[P]) -> bool:
        """Take `task` out of the queue unless a batch thread has started it; whether it was."""
        with self._lock:
            if task.started:
                return False
            self._withdraw(task)
            return True

    def _enqueue(self, key: Hashable, task: _Task[P]) -> None:
        """Add `task` to the open batch of `key` (a new one if needed); 503 when full."""
        limit = self.parameters.max_batch_size
        with self._lock:
            if self._stopping:
                raise ServingError(Code.UNAVAILABLE, "Server is shutting down")
            batch = self._open.get(key)
            if batch is not None and batch.rows + task.rows > limit:
                self._close(batch)
                batch = None
            if batch is None:
                if len(self._open) + len(self._ready) >= self.parameters.max_enqueued_batches:
                    raise ServingError(
                        Code.RESOURCE_EXHAUSTED,
                        QUEUE_FULL,
                        refusal=Refusal.AT_CAPACITY,
                        retry_after=1,
                    )
                batch = _Batch(key, self._clock())
                self._open[key] = batch
            batch.tasks.append(task)
            batch.rows += task.rows
            if batch.rows >= limit:
                self._close(batch)
            self._lock.notify()

    @property
    def queued(self) -> int:
        """Requests waiting in the queue now (not yet taken by a batch thread)."""
        with self._lock:
            return sum(len(batch.tasks) for batch in (*self._open.values(), *self._ready))

    @staticmethod
    def _outcome(task: _Task[P]) -> R:
        if task.error is not None:
            raise task.error
        result: R = task.result
        return result

    def _close(self, batch: _Batch[P]) -> None:
        if self._open.get(batch.key) is batch:
            del self._open[batch.key]
            self._ready.append(batch)

    def _withdraw(self, task: _Task[P]) -> None:
        for batch in (*self._open.values(), *self._ready):
            if task in batch.tasks:
                batch.tasks.remove(task)
                batch.rows -= task.rows
                if not batch.tasks:
                    if self._open.get(batch.key) is batch:
                        del self._open[batch.key]
                    else:
                        self._ready.remove(batch)
                return

    def _take(self) -> _Batch[P] | None:
        """The next batch to run (waiting for one); None once closed and empty."""
        timeout = self.parameters.batch_timeout_micros / 1e6
        with self._lock:
            while True:
                if self._busy >= self.parameters.num_batch_threads and not self._stopping:
                    self._lock.wait()  # requests running inline hold the share
                    continue
                if self._ready:
                    batch = self._ready.popleft()
                elif self._open:
                    oldest = min(self._open.values(), key=lambda b: b.created)
                    wait = oldest.created + timeout - self._clock()
                    if wait > 0 and not self._stopping:
                        self._lock.wait(wait)
                        continue
                    batch = oldest
                    del self._open[oldest.key]
                elif self._stopping:
                    return None
                else:
                    self._lock.wait()
                    continue
                self._drop_late(batch)
                if not batch.tasks:
                    continue
                for task in batch.tasks:
                    task.started = True
                self._busy += 1
                return batch

    def _drop_late(self, batch: _Batch[P]) -> None:
        """Answer 504 the tasks of `batch` whose deadline has passed, and take out their rows.

        A task's own thread withdraws it when its deadline passes, but only
        once it has woken and taken the lock; a batch thread that takes the
        batch first must not start it (its client has its 504 already).
        """
        now = self._clock()
        late = [task for task in batch.tasks if task.late(now)]
        for task in late:
            task.expire()
            batch.tasks.remove(task)
            batch.rows -= task.rows

    def _loop(self) -> None:
        while (batch := self._take()) is not None:
            try:
                self._execute(batch.tasks, batch.rows)
            finally:
                with self._lock:
                    self._busy -= 1
                    self._lock.notify_all()

    def _execute(self, tasks: list[_Task[P]], rows: int) -> None:
        now = self._clock()
        for task in tasks:
            self._hooks.queued(now - task.enqueued)
        padded = self.parameters.padded_size(rows) - rows
        self._hooks.batch_run(rows + padded, padded, len(tasks))
        if len(tasks) == 1 and not padded:
            self._run_alone(tasks[0])
            return
        try:
            results = self._run_batch([task.payload for task in tasks], padded)
        except BaseException:  # noqa: BLE001 - run each alone: only the culprit fails
            for task in tasks:
                if task.late(self._clock()):  # its deadline passed while the batch ran
                    task.expire()
                else:
                    self._run_alone(task)
            return
        for task, result in zip(tasks, results, strict=True):
            task.result = result
            task.finish()

    def _run_alone(self, task: _Task[P]) -> None:
        try:
            task.result = self._run_one(task.payload)
        except BaseException as err:  # noqa: BLE001 - the request's own error, re-raised there
            task.error = err
        task.finish()

    def close(self) -> None:
        """Run what is queued, then stop the threads (the version is unloading)."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()

    def join(self, timeout: float | None = None) -> None:
        for thread in self._threads:
            thread.join(timeout)
