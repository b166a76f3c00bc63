"""The inference pool (core/admission.py): how many calls it admits, how long, from which loops."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import pytest

from tf_entrypoint.serving.core import admission
from tf_entrypoint.serving.core.admission import InferencePool
from tf_entrypoint.serving.core.errors import ServingError
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.rest.errors import Answer, http_status


def run_pool(
    pool: InferencePool, jobs: list[Callable[[], Answer]], timeout: float
) -> list[Answer | ServingError]:
    async def one(job: Callable[[], Answer]) -> Answer | ServingError:
        try:
            return await pool.run(job, timeout)
        except ServingError as err:
            return err

    async def all_of_them() -> list[Answer | ServingError]:
        return list(await asyncio.gather(*(one(job) for job in jobs)))

    try:
        return asyncio.run(all_of_them())
    finally:
        pool.shutdown()


def test_pool_admits_at_most_max_queue() -> None:
    release = threading.Event()

    def job() -> Answer:
        release.wait(30)  # held until the test has seen the refusals
        return Answer(200, b"{}", {})

    async def status(call: Awaitable[Answer]) -> int:
        try:
            return (await call).status
        except ServingError as err:
            return http_status(err)

    async def main(pool: InferencePool) -> list[int]:
        # Admission is decided as each call starts, in order: three in, two refused.
        calls = [asyncio.create_task(status(pool.run(job, 10))) for _ in range(5)]
        while sum(call.done() for call in calls) < 2:
            await asyncio.sleep(0.001)
        release.set()
        return [await call for call in calls]

    pool = InferencePool(workers=2, max_queue=3, metrics=Metrics())
    try:
        statuses = asyncio.run(main(pool))
    finally:
        release.set()
        pool.shutdown()
    assert statuses == [200, 200, 200, 503, 503]
    assert pool.admitted == 0


def test_pool_times_out_with_504() -> None:
    release = threading.Event()

    def slow() -> Answer:
        release.wait(30)  # held until the test has both answers: it outlives the timeout
        return Answer(200, b"{}", {})

    pool = InferencePool(workers=1, max_queue=10, metrics=Metrics())
    try:
        results = run_pool(pool, [slow, slow], timeout=0.1)
    finally:
        release.set()
    assert all(isinstance(r, ServingError) and "timed out" in r.message for r in results)
    assert [http_status(r) for r in results if isinstance(r, ServingError)] == [504, 504]


def test_pool_never_blocks_the_event_loop() -> None:
    # The job holds its worker until the event loop has ticked 10 times after
    # it started. Were the job run on the loop's thread (or the loop blocked
    # until it ended), neither could go on: the job's wait would run out and
    # it would answer 500 (a bound on failure only, never waited for).
    started, release = threading.Event(), threading.Event()
    ticks: list[bool] = []  # per tick: was the job still running?

    def busy() -> Answer:
        started.set()
        if not release.wait(30):
            return Answer(500, b"the event loop never ticked while the job ran", {})
        return Answer(200, b"", {})

    async def main() -> Answer:
        pool = InferencePool(workers=1, max_queue=4, metrics=Metrics())

        async def ticker() -> None:
            while not started.is_set():
                await asyncio.sleep(0.001)
            for _ in range(10):
                ticks.append(started.is_set() and not release.is_set())
                await asyncio.sleep(0.001)
            release.set()

        answer, _ = await asyncio.gather(pool.run(busy, 60), ticker())
        pool.shutdown()
        return answer

    answer = asyncio.run(main())
    assert (answer.status, answer.body) == (200, b"")
    assert ticks == [True] * 10  # ten ticks of the loop while the job held its worker


def test_the_pool_admits_from_two_event_loops_within_one_limit() -> None:
    # REST and gRPC await the same pool from their own loops, on their own threads.
    pool = InferencePool(workers=2, max_queue=5, metrics=Metrics())
    peak: list[int] = []
    release = threading.Event()

    def work() -> Answer:
        peak.append(pool.admitted)
        release.wait(30)  # held until every request has been admitted or refused
        return Answer(200, b"", {})

    refused: list[int] = []

    def loop_thread(results: list[int]) -> None:
        async def one() -> int:
            try:
                return (await pool.run(work, 60)).status
            except ServingError as err:
                refused.append(http_status(err))
                return http_status(err)

        async def many() -> None:
            results.extend(await asyncio.gather(*(one() for _ in range(6))))

        asyncio.run(many())

    results: list[list[int]] = [[], []]
    threads = [threading.Thread(target=loop_thread, args=(r,)) for r in results]
    for thread in threads:
        thread.start()
    # Every request has arrived: five hold their slots (their work waits), seven were refused.
    deadline = time.monotonic() + 30  # bounds a failing test only
    while not (len(refused) == 7 and pool.admitted == 5) and time.monotonic() < deadline:
        time.sleep(0.002)
    release.set()
    for thread in threads:
        thread.join(10)
    statuses = sorted(results[0] + results[1])
    assert statuses.count(200) == 5
    assert statuses.count(503) == 7
    assert max(peak) <= 5
    assert pool.admitted == 0
    pool.shutdown()


def test_eviction_passes_the_place_on_and_only_after_the_wait() -> None:
    pool = InferencePool(1, 2, Metrics())
    evicted: list[str] = []
    one, two = pool.admit(), pool.admit()
    one.awaiting(lambda: evicted.append("one"))
    two.awaiting(lambda: evicted.append("two"))
    with pytest.raises(ServingError):  # neither has waited EVICTABLE_AFTER yet
        pool.admit()
    admission.EVICTABLE_AFTER, saved = 0.0, admission.EVICTABLE_AFTER
    try:
        three = pool.admit()  # takes one's place
        assert evicted == ["one"]
        assert pool.admitted == 2
        assert not one.arrived()
        one.close()  # gives nothing back: the place is three's
        assert pool.admitted == 2
        assert two.arrived()  # its message came: no longer evictable
        with pytest.raises(ServingError):
            pool.admit()
        two.close()
        three.close()
        assert pool.admitted == 0
        four = pool.admit()
        four.awaiting(lambda: evicted.append("four"))
        four.close()  # ended while awaiting: forgotten, not evicted later
        assert pool._awaiting == {}
    finally:
        admission.EVICTABLE_AFTER = saved
        pool.shutdown()
