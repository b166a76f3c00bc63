"""The batch queue (on lists, without TensorFlow) and the parameters file."""

from __future__ import annotations

import contextlib
import functools
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tf_entrypoint.serving.core.batching import (
    QUEUE_FULL,
    Batcher,
    BatchHooks,
    BatchingParameters,
)
from tf_entrypoint.serving.core.deadlines import QUEUED_TOO_LONG, run_with_deadline
from tf_entrypoint.serving.core.errors import ServingError
from tf_entrypoint.serving.rest.errors import error_headers, http_status

PATH = Path("/etc/batching.txt")
Rows = list[list[float]]


class Model:
    """Doubles every value; a row holding a negative number fails the whole call.

    Inside ``with model.shut():`` every call waits until the test opens
    :attr:`gate` (or the block ends), so a call runs exactly as long as the
    test needs, never sized for a CPU; :attr:`running` counts the calls that
    have entered.
    """

    def __init__(self) -> None:
        self.calls: list[int] = []  # rows per call
        self.widths: list[set[int]] = []  # the row widths in each call
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.gate.set()
        self.running = 0

    @contextlib.contextmanager
    def shut(self) -> Iterator[None]:
        """The gate is shut for the block and opened on the way out (a failing test too)."""
        self.gate.clear()
        try:
            yield
        finally:
            self.gate.set()

    def one(self, rows: Rows) -> Rows:
        with self.lock:
            self.calls.append(len(rows))
            self.widths.append({len(row) for row in rows})
            self.running += 1
        if not self.gate.wait(30):  # bounds a failing test only: the test opens it
            raise AssertionError("the test never opened the model's gate")
        if any(value < 0 for row in rows for value in row):
            raise ValueError(f"negative input in {rows}")
        return [[2 * value for value in row] for row in rows]

    def batch(self, payloads: Sequence[Rows], padded: int) -> list[Rows]:
        merged = [row for rows in payloads for row in rows]
        merged += [merged[0]] * padded
        out = self.one(merged)
        answers, start = [], 0
        for rows in payloads:
            answers.append(out[start : start + len(rows)])
            start += len(rows)
        return answers


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Poll until `check()` (the timeout bounds a failing test only)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {timeout} s")
        time.sleep(0.002)


def queued(b: Batcher[Rows, Rows], count: int) -> bool:
    return b.queued == count


class Clock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self) -> None:
        # Far ahead of time.monotonic(): run_with_deadline's own check, on the
        # real clock, never finds a deadline set on this one passed.
        self.now = 1e12

    def __call__(self) -> float:
        return self.now


def batcher(
    model: Model,
    hooks: BatchHooks | None = None,
    *,
    max_batch_size: int,
    batch_timeout_micros: int = 0,
    max_enqueued_batches: int = 10,
    clock: Callable[[], float] = time.monotonic,
) -> Batcher[Rows, Rows]:
    parameters = BatchingParameters(
        num_batch_threads=1,
        max_batch_size=max_batch_size,
        batch_timeout_micros=batch_timeout_micros,
        max_enqueued_batches=max_enqueued_batches,
    )
    return Batcher(parameters, model.batch, model.one, hooks, clock=clock)


def submit(b: Batcher[Rows, Rows], rows: Rows, width: int = 2) -> Rows:
    return b.submit(("x", width), len(rows), rows)


def test_concurrent_requests_share_calls_and_get_their_own_rows() -> None:
    # The first request runs and holds the batch threads' share until the
    # other 199 are queued: they can only be batched, however fast the machine.
    model = Model()
    seen: list[tuple[int, int, int]] = []
    hooks = BatchHooks(batch_run=lambda rows, padded, tasks: seen.append((rows, padded, tasks)))
    b = batcher(model, hooks, max_batch_size=64, max_enqueued_batches=200)
    rng = random.Random(7)
    requests = [
        [[rng.uniform(0, 10) for _ in range(2)] for _ in range(rng.randint(1, 5))]
        for _ in range(200)
    ]
    with ThreadPoolExecutor(len(requests)) as pool, model.shut():
        futures = [pool.submit(submit, b, requests[0])]
        wait_for(lambda: model.running == 1, "the first request to run")
        futures += [pool.submit(submit, b, rows) for rows in requests[1:]]
        wait_for(lambda: b.queued == len(requests) - 1, "the other requests to queue")
        model.gate.set()
        answers = [future.result(30) for future in futures]
    assert answers == [[[2 * v for v in row] for row in rows] for rows in requests]
    assert sum(model.calls) == sum(len(rows) for rows in requests)
    assert len(model.calls) < len(requests) / 4  # batched, not one call each
    assert max(model.calls) <= 64
    assert sum(tasks for _, _, tasks in seen) == len(requests)
    b.close()
    b.join(5)


def test_a_failing_request_fails_alone() -> None:
    model = Model()
    b = batcher(model, max_batch_size=100)
    requests = [[[float(i), 1.0]] for i in range(40)]
    requests[17] = [[-1.0, 1.0]]

    def one(rows: Rows) -> object:
        try:
            return submit(b, rows)
        except ValueError as err:
            return err

    # The first runs; the other 39 queue behind it, so they run as one batch.
    with ThreadPoolExecutor(40) as pool, model.shut():
        futures = [pool.submit(one, requests[0])]
        wait_for(lambda: model.running == 1, "the first request to run")
        futures += [pool.submit(one, rows) for rows in requests[1:]]
        wait_for(lambda: b.queued == 39, "the other requests to queue")
        model.gate.set()
        results = [future.result(30) for future in futures]
    for index, result in enumerate(results):
        if index == 17:
            assert isinstance(result, ValueError)
            assert str(result) == "negative input in [[-1.0, 1.0]]"  # its own call's error
        else:
            assert result == [[2.0 * index, 2.0]]
    assert model.calls == [1, 39] + [1] * 39  # the batch failed: each of its requests alone
    b.close()


def test_different_keys_never_share_a_batch() -> None:
    model = Model()
    b = batcher(model, max_batch_size=100)
    widths = (1, 2, 3, 4) * 5
    with ThreadPoolExecutor(20) as pool, model.shut():
        futures = [pool.submit(submit, b, [[1.0] * widths[0]], widths[0])]
        wait_for(lambda: model.running == 1, "the first request to run")
        futures += [pool.submit(submit, b, [[1.0] * width], width) for width in widths[1:]]
        wait_for(lambda: b.queued == 19, "the other requests to queue")
        model.gate.set()
        answers = [future.result(30) for future in futures]
    assert all(len(answer[0]) in (1, 2, 3, 4) for answer in answers)
    assert [len(a[0]) for a in answers] == [1, 2, 3, 4] * 5
    assert all(len(widths) == 1 for widths in model.widths)  # no call mixed two keys
    assert sorted(model.calls) == [1, 4, 5, 5, 5]  # one batch per key for the queued 19


def test_padding_to_allowed_sizes_is_counted_and_dropped() -> None:
    model = Model()
    seen: list[tuple[int, int, int]] = []
    hooks = BatchHooks(batch_run=lambda rows, padded, tasks: seen.append((rows, padded, tasks)))
    parameters = BatchingParameters(
        num_batch_threads=1, max_batch_size=8, allowed_batch_sizes=(4, 8)
    )
    b = Batcher(parameters, model.batch, model.one, hooks)
    assert submit(b, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]) == [[2.0, 4.0], [6.0, 8.0], [10.0, 12.0]]
    assert seen == [(4, 1, 1)]
    assert model.calls == [4]


def test_a_full_queue_refuses_with_503_and_retry_after() -> None:
    model = Model()
    b = batcher(model, max_batch_size=1, max_enqueued_batches=1)
    with ThreadPoolExecutor(4) as pool, model.shut():
        first = pool.submit(submit, b, [[1.0, 1.0]])
        wait_for(lambda: model.running == 1, "the first request to run")  # the queue is empty
        second = pool.submit(submit, b, [[2.0, 2.0]])
        wait_for(lambda: b.queued == 1, "the second request to queue")  # the one batch allowed
        with pytest.raises(ServingError) as refused:
            submit(b, [[3.0, 3.0]])
        model.gate.set()
        assert first.result(30) == [[2.0, 2.0]]
        assert second.result(30) == [[4.0, 4.0]]
    assert (http_status(refused.value), refused.value.code.name) == (503, "RESOURCE_EXHAUSTED")
    assert refused.value.message == QUEUE_FULL
    assert error_headers(refused.value) == {"Retry-After": "1"}


def test_a_request_whose_deadline_passes_while_queued_is_withdrawn() -> None:
    model = Model()
    clock = Clock()  # stands still: the request is queued before its deadline, surely
    b = batcher(model, max_batch_size=1, clock=clock)
    with ThreadPoolExecutor(2) as pool, model.shut():
        running = pool.submit(submit, b, [[1.0, 1.0]])
        wait_for(lambda: model.running == 1, "the first request to run")
        with pytest.raises(ServingError) as late:
            run_with_deadline(clock.now + 0.1, lambda: submit(b, [[5.0, 5.0]]))
        # Withdrawn at its deadline, not when the call before it ended: that one is still held.
        assert not running.done()
        model.gate.set()
        assert running.result(30) == [[2.0, 2.0]]
    assert http_status(late.value) == 504
    b.close()
    b.join(30)  # the batch thread has run all it ever will
    assert model.calls == [1]  # the withdrawn request never ran


TIMED_OUT = "Request timed out after 60 s (--request-timeout)"  # the caller's 504 text


def test_a_request_whose_deadline_has_passed_is_never_started_by_a_batch_thread() -> None:
    """The race: a request's deadline passes, but its own thread has not withdrawn
    it yet when a batch thread takes its batch. Here its thread cannot: it waits
    60 s of real time for its answer, while the batcher's clock, which the test
    moves, says its deadline has passed. The batch thread answers it 504 with its
    caller's text, never runs it, and runs the rest with the padding recomputed."""
    model = Model()
    clock = Clock()
    seen: list[tuple[int, int, int]] = []
    hooks = BatchHooks(batch_run=lambda rows, padded, tasks: seen.append((rows, padded, tasks)))
    parameters = BatchingParameters(
        num_batch_threads=1, max_batch_size=8, allowed_batch_sizes=(2, 4, 8)
    )
    b = Batcher(parameters, model.batch, model.one, hooks, clock=clock)
    key = ("x", 2)

    def late() -> Rows:
        return b.submit(key, 2, [[2.0, 2.0], [3.0, 3.0]])

    with ThreadPoolExecutor(3) as pool, model.shut():
        first = pool.submit(submit, b, [[1.0, 1.0]])  # holds the batch threads' share
        wait_for(lambda: model.running == 1, "the first request to run")
        expired = pool.submit(run_with_deadline, clock.now + 60, late, TIMED_OUT)
        on_time = pool.submit(b.submit, key, 1, [[4.0, 4.0]], clock.now + 120)
        wait_for(lambda: b.queued == 2, "both requests to queue")
        clock.now += 90  # past the first one's deadline, before the second one's
        model.gate.set()
        assert first.result(30) == [[2.0, 2.0]]
        assert on_time.result(30) == [[8.0, 8.0]]
        with pytest.raises(ServingError) as caught:
            expired.result(30)
    assert (http_status(caught.value), caught.value.message) == (504, TIMED_OUT)
    assert model.calls == [2, 2]  # the expired request's rows never reached the model
    assert seen == [(2, 1, 1), (2, 1, 1)]  # 1 row padded to 2, not 3 rows padded to 4


def test_a_failed_batch_never_runs_alone_a_request_whose_deadline_has_passed() -> None:
    """A batch fails, and its requests are run again one by one: one whose
    deadline passed meanwhile is answered 504 instead of run."""
    model = Model()
    clock = Clock()
    b = batcher(model, max_batch_size=100, batch_timeout_micros=1_000_000, clock=clock)
    key = ("x", 2)

    def late() -> Rows:
        return b.submit(key, 1, [[2.0, 2.0]])

    with ThreadPoolExecutor(2) as pool, model.shut():
        bad = pool.submit(b.submit, key, 1, [[-1.0, 1.0]], clock.now + 120)
        expired = pool.submit(run_with_deadline, clock.now + 60, late, TIMED_OUT)
        wait_for(lambda: b.queued == 2, "both requests to queue")
        clock.now += 1  # the batch timeout: the batch runs, held at the gate
        wait_for(lambda: model.running == 1, "the batch to run")
        clock.now += 89  # past the second one's deadline, while its batch runs
        model.gate.set()
        with pytest.raises(ValueError, match="negative input"):
            bad.result(30)
        with pytest.raises(ServingError) as caught:
            expired.result(30)
    assert (http_status(caught.value), caught.value.message) == (504, TIMED_OUT)
    assert model.calls == [2, 1]  # the batch, then the failing request alone; not the other


def test_a_request_whose_deadline_has_passed_never_runs_inline() -> None:
    model = Model()
    clock = Clock()
    b = batcher(model, max_batch_size=100, clock=clock)  # idle: a request would run inline
    with pytest.raises(ServingError) as caught:
        b.submit(("x", 2), 1, [[1.0, 1.0]], clock.now - 1)
    assert (http_status(caught.value), caught.value.message) == (504, QUEUED_TOO_LONG)
    assert model.calls == []


def test_batch_timeout_gathers_requests_that_arrive_within_it() -> None:
    model = Model()
    clock = Clock()
    b = batcher(model, max_batch_size=100, batch_timeout_micros=300_000, clock=clock)
    first = clock.now
    with ThreadPoolExecutor(5) as pool:
        futures = []
        for index in range(5):  # one every 20 ms by the batcher's clock
            futures.append(pool.submit(submit, b, [[float(index), 0.0]]))
            wait_for(functools.partial(queued, b, index + 1), f"request {index} to queue")
            clock.now += 0.02
        assert model.calls == []  # 80 ms after the first: the batch is still open
        clock.now = first + 0.3  # 300 ms after the first: its timeout has passed
        assert [f.result(30) for f in futures] == [[[2.0 * i, 0.0]] for i in range(5)]
    assert model.calls == [5]


def test_close_runs_what_is_queued_then_refuses() -> None:
    model = Model()
    b = batcher(model, max_batch_size=1)
    with ThreadPoolExecutor(3) as pool, model.shut():
        futures = [pool.submit(submit, b, [[0.0, 0.0]])]
        wait_for(lambda: model.running == 1, "the first request to run")
        futures += [pool.submit(submit, b, [[float(i), 0.0]]) for i in (1, 2)]
        wait_for(lambda: b.queued == 2, "two requests to queue")
        b.close()
        model.gate.set()
        assert [f.result(30) for f in futures] == [[[2.0 * i, 0.0]] for i in range(3)]
    b.join(5)
    with pytest.raises(ServingError, match="shutting down"):
        submit(b, [[1.0, 1.0]])


def test_submit_async_queues_without_waiting_and_calls_back_from_the_batch_thread() -> None:
    """For a caller on an event loop: it never runs inline and never blocks."""
    model = Model()
    b = batcher(model, max_batch_size=64)
    done: list[tuple[Rows | None, BaseException | None, str]] = []
    finished = threading.Event()

    def on_done(task: Any) -> None:
        done.append((task.result, task.error, threading.current_thread().name))
        if len(done) == 3:
            finished.set()

    def queue(i: int) -> Any:
        return b.submit_async(
            ("x", 2), 1, [[float(i), 1.0]], deadline=None, expired="late", on_done=on_done
        )

    with model.shut():  # the batch thread holds the first batch until the gate opens
        tasks = [queue(0)]
        wait_for(lambda: model.running == 1, "the first batch to start")
        tasks += [queue(i) for i in range(1, 4)]  # queued behind it
        withdrawn = b.withdraw(tasks[3])  # still queued: taken back, never answered
        started = b.withdraw(tasks[0])  # running: stays
    assert finished.wait(30)
    assert (withdrawn, started) == (True, False)
    answers = sorted(result for result, _, _ in done if result is not None)
    assert answers == [[[0.0, 2.0]], [[2.0, 2.0]], [[4.0, 2.0]]]
    assert all(error is None and thread.startswith("batch") for _, error, thread in done)
    assert not tasks[3].done.is_set()
    b.close()
    b.join(5)


def test_submit_async_of_a_late_request_answers_its_deadline_error() -> None:
    clock = Clock()
    model = Model()
    b = batcher(model, max_batch_size=8, clock=clock)
    with pytest.raises(ServingError) as caught:
        b.submit_async(
            ("x", 2), 1, [[1.0, 1.0]], deadline=clock.now - 1, expired="too late",
            on_done=lambda task: None,
        )  # fmt: skip
    assert (caught.value.code.name, caught.value.message) == ("DEADLINE_EXCEEDED", "too late")
    b.close()
    b.join(5)
