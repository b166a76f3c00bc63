"""The batch queue (on lists, without TensorFlow) and the parameters file."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tf_entrypoint.serving import protocol as p
from tf_entrypoint.serving.batching import (
    QUEUE_FULL,
    Batcher,
    BatchHooks,
    BatchingParameters,
    parse_batching_parameters,
    run_with_deadline,
)
from tf_entrypoint.serving.model_config import ConfigError

PATH = Path("/etc/batching.txt")
Rows = list[list[float]]


class Model:
    """Doubles every value; a row holding a negative number fails the whole call."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[int] = []  # rows per call
        self.delay = delay
        self.lock = threading.Lock()

    def one(self, rows: Rows) -> Rows:
        with self.lock:
            self.calls.append(len(rows))
        time.sleep(self.delay)
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


def batcher(
    model: Model,
    hooks: BatchHooks | None = None,
    *,
    max_batch_size: int,
    batch_timeout_micros: int = 0,
    max_enqueued_batches: int = 10,
) -> Batcher[Rows, Rows]:
    parameters = BatchingParameters(
        num_batch_threads=1,
        max_batch_size=max_batch_size,
        batch_timeout_micros=batch_timeout_micros,
        max_enqueued_batches=max_enqueued_batches,
    )
    return Batcher(parameters, model.batch, model.one, hooks)


def submit(b: Batcher[Rows, Rows], rows: Rows, width: int = 2) -> Rows:
    return b.submit(("x", width), len(rows), rows)


def test_concurrent_requests_share_calls_and_get_their_own_rows() -> None:
    model = Model(delay=0.01)
    seen: list[tuple[int, int, int]] = []
    hooks = BatchHooks(batch_run=lambda rows, padded, tasks: seen.append((rows, padded, tasks)))
    b = batcher(model, hooks, max_batch_size=64)
    rng = random.Random(7)
    requests = [
        [[rng.uniform(0, 10) for _ in range(2)] for _ in range(rng.randint(1, 5))]
        for _ in range(200)
    ]
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda rows: submit(b, rows), requests))
    assert answers == [[[2 * v for v in row] for row in rows] for rows in requests]
    assert sum(model.calls) == sum(len(rows) for rows in requests)
    assert len(model.calls) < len(requests) / 4  # batched, not one call each
    assert max(model.calls) <= 64
    assert sum(tasks for _, _, tasks in seen) == len(requests)
    b.close()
    b.join(5)


def test_a_failing_request_fails_alone() -> None:
    model = Model(delay=0.01)
    b = batcher(model, max_batch_size=100)
    requests = [[[float(i), 1.0]] for i in range(40)]
    requests[17] = [[-1.0, 1.0]]
    results: list[object] = []

    def one(rows: Rows) -> object:
        try:
            return submit(b, rows)
        except ValueError as err:
            return err

    with ThreadPoolExecutor(40) as pool:
        results = list(pool.map(one, requests))
    for index, result in enumerate(results):
        if index == 17:
            assert isinstance(result, ValueError)
            assert str(result) == "negative input in [[-1.0, 1.0]]"  # its own call's error
        else:
            assert result == [[2.0 * index, 2.0]]
    b.close()


def test_different_keys_never_share_a_batch() -> None:
    model = Model(delay=0.01)
    b = batcher(model, max_batch_size=100)
    with ThreadPoolExecutor(20) as pool:
        futures = [pool.submit(submit, b, [[1.0] * width], width) for width in (1, 2, 3, 4) * 5]
        answers = [future.result() for future in futures]
    assert all(len(answer[0]) in (1, 2, 3, 4) for answer in answers)
    assert [len(a[0]) for a in answers] == [1, 2, 3, 4] * 5


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
    model = Model(delay=0.3)
    b = batcher(model, max_batch_size=1, max_enqueued_batches=1)
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(submit, b, [[1.0, 1.0]])
        time.sleep(0.1)  # running: the queue is empty again
        second = pool.submit(submit, b, [[2.0, 2.0]])
        time.sleep(0.1)  # queued: the one batch allowed
        with pytest.raises(p.ApiError) as refused:
            submit(b, [[3.0, 3.0]])
        assert first.result() == [[2.0, 2.0]]
        assert second.result() == [[4.0, 4.0]]
    assert (refused.value.status, refused.value.code) == (503, "RESOURCE_EXHAUSTED")
    assert refused.value.message == QUEUE_FULL
    assert refused.value.headers == {"Retry-After": "1"}


def test_a_request_whose_deadline_passes_while_queued_is_withdrawn() -> None:
    model = Model(delay=0.4)
    b = batcher(model, max_batch_size=1)
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(submit, b, [[1.0, 1.0]])
        time.sleep(0.1)
        started = time.monotonic()
        with pytest.raises(p.ApiError) as late:
            run_with_deadline(time.monotonic() + 0.1, lambda: submit(b, [[5.0, 5.0]]))
        assert time.monotonic() - started < 0.3
        assert running.result() == [[2.0, 2.0]]
    assert late.value.status == 504
    time.sleep(0.1)
    assert model.calls == [1]  # the withdrawn request never ran


def test_batch_timeout_gathers_requests_that_arrive_within_it() -> None:
    model = Model()
    b = batcher(model, max_batch_size=100, batch_timeout_micros=300_000)
    with ThreadPoolExecutor(5) as pool:
        futures = []
        for index in range(5):
            futures.append(pool.submit(submit, b, [[float(index), 0.0]]))
            time.sleep(0.02)
        assert [f.result() for f in futures] == [[[2.0 * i, 0.0]] for i in range(5)]
    assert model.calls == [5]


def test_close_runs_what_is_queued_then_refuses() -> None:
    model = Model(delay=0.1)
    b = batcher(model, max_batch_size=1)
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(submit, b, [[float(i), 0.0]]) for i in range(3)]
        time.sleep(0.05)
        b.close()
        assert [f.result() for f in futures] == [[[2.0 * i, 0.0]] for i in range(3)]
    b.join(5)
    with pytest.raises(p.ApiError, match="shutting down"):
        submit(b, [[1.0, 1.0]])


def parse(text: str, workers: int = 2) -> BatchingParameters:
    return parse_batching_parameters(text, PATH, workers)


def test_the_parameters_file_is_tf_servings_text_format() -> None:
    text = """
    # as in TF Serving's documentation
    max_batch_size { value: 128 }
    batch_timeout_micros { value: 2000 }
    max_enqueued_batches { value: 100 }
    num_batch_threads { value: 4 }
    allowed_batch_sizes: 32
    allowed_batch_sizes: 128
    """
    assert parse(text) == BatchingParameters(
        num_batch_threads=4,
        max_batch_size=128,
        batch_timeout_micros=2000,
        max_enqueued_batches=100,
        allowed_batch_sizes=(32, 128),
        source=PATH,
    )
    assert parse("") == BatchingParameters(num_batch_threads=2, source=PATH)
    assert parse("enable_large_batch_splitting { value: false }").max_batch_size == 1000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "max_batch_size: 8",
            """/etc/batching.txt:1:17: 'max_batch_size: 8': Expected "{".""",
        ),
        (
            "\nmax_batch { value: 8 }",
            "/etc/batching.txt:2:1: Message type "
            '"tensorflow.serving.BatchingParameters" has no field named "max_batch".',
        ),
        (
            "max_batch_size { value: 0 }",
            "/etc/batching.txt:1: max_batch_size: 0 is out of range: expected a whole number "
            "from 1",
        ),
        (
            "\n\nnum_batch_threads { value: -1 }",
            "/etc/batching.txt:3: num_batch_threads: -1 is out of range",
        ),
        (
            "max_batch_size { value: 64 }\nallowed_batch_sizes: 32",
            "/etc/batching.txt:2: allowed_batch_sizes: Last entry in allowed_batch_sizes must "
            "match max_batch_size; last entry was 32; expected 64",
        ),
        (
            "allowed_batch_sizes: [8, 4, 1000]",
            "/etc/batching.txt:1: allowed_batch_sizes: [8, 4, 1000]: expected positive sizes "
            "in increasing order",
        ),
        (
            'thread_pool_name { value: "x" }',
            "/etc/batching.txt:1: thread_pool_name: not supported: shared batch thread pools",
        ),
        (
            "enable_large_batch_splitting { value: true }",
            "/etc/batching.txt:1: enable_large_batch_splitting: not supported",
        ),
        (
            "max_execution_batch_size { value: 8 }",
            "/etc/batching.txt:1: max_execution_batch_size: not supported",
        ),
        (
            "pad_variable_length_inputs: true",
            "/etc/batching.txt:1: pad_variable_length_inputs: not supported",
        ),
    ],
)
def test_parameters_file_errors_name_file_line_and_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(text)
    assert str(err.value).startswith(message)
