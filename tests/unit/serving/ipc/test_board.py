"""ipc/board.py's wake-ups, and the front-end reporter that sleeps on them (ipc/remote.py).

A front-end's metrics reporter used to look at the board every 10 ms; it now
sleeps on a semaphore of its own that the engine releases when a scrape asks.
Every wait below is bounded far above what it needs, so no CPU is assumed fast:
a wake-up that did not work would wait the whole (long) timeout and fail.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.types import Tensor
from tf_entrypoint.serving.ipc import remote
from tf_entrypoint.serving.ipc.board import MAX_FRONTENDS, Board

#: Far longer than any wake-up takes: a wait that lasts this long means none came.
LONG = 30.0


def test_an_ask_wakes_a_waiting_front_end_in_another_process() -> None:
    board = Board.create(2)
    pid = os.fork()
    if pid == 0:  # the front-end: exits 0 when woken, 1 when its wait ran out
        started = time.monotonic()
        board.wait_asked(1, LONG)
        os._exit(0 if time.monotonic() - started < LONG / 2 else 1)
    time.sleep(0.2)
    board.ask()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_start_forgets_the_asks_made_while_nobody_waited_and_wake_ends_a_wait() -> None:
    board = Board.create(1)
    for _ in range(3):
        board.ask()
    board.forget_asks(0)
    started = time.monotonic()
    board.wait_asked(0, 0.2)  # nothing left to take: waits its timeout
    assert time.monotonic() - started >= 0.15
    waiter = threading.Thread(target=board.wait_asked, args=(0, LONG))
    waiter.start()
    board.wake(0)
    waiter.join(LONG / 2)
    assert not waiter.is_alive()


def test_a_board_counts_at_most_the_front_ends_its_page_holds() -> None:
    with pytest.raises(ValueError, match="at most"):
        Board.create(MAX_FRONTENDS + 1)


class Lanes:
    """Records the reports a front-end sends (ipc/lanes.py's call, in the test's process)."""

    def __init__(self) -> None:
        self.reports: list[int] = []
        self.arrived = threading.Condition()

    def call(
        self, op: str, args: tuple[Any, ...], inputs: Mapping[str, Tensor], deadline: Any
    ) -> tuple[None, dict[str, Tensor]]:
        assert op == "report"
        with self.arrived:
            self.reports.append(int(args[1]))
            self.arrived.notify_all()
        return None, {}

    def wait_for(self, count: int) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.reports) >= count, LONG / 2)


def test_the_reporter_reports_at_start_then_at_once_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(remote, "REPORT_EVERY", LONG * 10)  # no periodic report in the test
    board, lanes = Board.create(1), Lanes()
    reporter = remote.SharedMetrics(lanes, Metrics(), 0, board)  # type: ignore[arg-type]
    reporter.start()
    try:
        assert lanes.wait_for(1)  # at once: the engine learns to wait for this front-end
        asked = board.ask()
        assert lanes.wait_for(2)  # woken: long before its next periodic report
        assert lanes.reports == [0, asked]
    finally:
        reporter.stop()
