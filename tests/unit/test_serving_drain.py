"""Deadlines on the waits of the request path: calls that run alone with batching on
wait for their turn within their deadline."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tf_entrypoint.serving import protocol as p
from tf_entrypoint.serving.batching import (
    QUEUED_TOO_LONG,
    acquire_before_deadline,
    run_with_deadline,
)


def test_a_call_waiting_for_its_turn_is_withdrawn_when_its_deadline_passes() -> None:
    turn = threading.BoundedSemaphore(1)
    turn.acquire()  # a call that runs alone is running
    ran: list[str] = []

    def alone() -> str:
        acquire_before_deadline(turn)
        ran.append("ran")
        turn.release()
        return "ran"

    started = time.monotonic()
    with pytest.raises(p.ApiError) as caught:
        run_with_deadline(started + 0.2, alone, "Request timed out after 0.2 s")
    waited = time.monotonic() - started
    assert (caught.value.status, caught.value.message) == (504, "Request timed out after 0.2 s")
    assert 0.15 <= waited < 5
    assert ran == []
    # The turn was never taken: the running call's release frees it.
    turn.release()
    assert run_with_deadline(time.monotonic() + 5, alone) == "ran"


def test_without_a_deadline_a_call_waits_for_its_turn() -> None:
    turn = threading.BoundedSemaphore(1)
    turn.acquire()

    def alone() -> str:
        acquire_before_deadline(turn)
        turn.release()
        return "ran"

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(run_with_deadline, None, alone)
        time.sleep(0.2)
        assert not waiting.done()
        turn.release()
        assert waiting.result(5) == "ran"


def test_a_call_whose_deadline_passed_before_a_worker_took_it_never_starts() -> None:
    ran: list[str] = []
    with pytest.raises(p.ApiError) as caught:
        run_with_deadline(time.monotonic() - 0.01, lambda: ran.append("ran"))
    assert (caught.value.status, caught.value.message) == (504, QUEUED_TOO_LONG)
    assert ran == []
