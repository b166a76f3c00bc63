"""Deadlines on the waits of the request path (core/deadlines.py): a turn, a worker's start."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tf_entrypoint.serving.core.deadlines import (
    QUEUED_TOO_LONG,
    acquire_before_deadline,
    run_with_deadline,
)
from tf_entrypoint.serving.core.errors import ServingError
from tf_entrypoint.serving.rest.errors import http_status


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
    with pytest.raises(ServingError) as caught:
        run_with_deadline(started + 0.2, alone, "Request timed out after 0.2 s")
    waited = time.monotonic() - started
    assert (http_status(caught.value), caught.value.message) == (
        504,
        "Request timed out after 0.2 s",
    )
    assert 0.15 <= waited < 5
    assert ran == []
    # The turn was never taken: the running call's release frees it.
    turn.release()
    assert run_with_deadline(time.monotonic() + 5, alone) == "ran"


class Turn(threading.BoundedSemaphore):
    """A turn to run alone that says when a call waits for it, and for how long at most."""

    def __init__(self) -> None:
        super().__init__(1)
        self.waiting = threading.Event()
        self.timeouts: list[float | None] = []

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if blocking:  # a call waiting for its turn (the test's own take does not wait)
            self.timeouts.append(timeout)
            self.waiting.set()
        return super().acquire(blocking, timeout)


def test_without_a_deadline_a_call_waits_for_its_turn() -> None:
    turn = Turn()
    assert turn.acquire(blocking=False)  # a call that runs alone is running

    def alone() -> str:
        acquire_before_deadline(turn)
        turn.release()
        return "ran"

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(run_with_deadline, None, alone)
        assert turn.waiting.wait(30)  # the call waits for its turn ...
        assert turn.timeouts == [None]  # ... without a time limit
        assert not waiting.done()
        turn.release()
        assert waiting.result(5) == "ran"


def test_a_call_whose_deadline_passed_before_a_worker_took_it_never_starts() -> None:
    ran: list[str] = []
    with pytest.raises(ServingError) as caught:
        run_with_deadline(time.monotonic() - 0.01, lambda: ran.append("ran"))
    assert (http_status(caught.value), caught.value.message) == (504, QUEUED_TOO_LONG)
    assert ran == []
