"""A page of shared memory every process of the server maps: what the engine announces.

The supervisor makes it before it forks (serving/processes.py), so the
engine and every front-end inherit the same mapping, restarted ones too.
Two words, each written by the engine only:

- the model table's **generation** (the engine's pid and a counter it bumps
  on every change a request can see: a version available or unloading, a new
  configuration): a front-end drops the versions' descriptions it cached as
  soon as it reads another value, so a reload or a swap is seen by the very
  next request (ipc/remote.py);
- the **asked** counter: bumped when a scrape needs every front-end's metrics
  now; the engine then wakes each front-end's reporter (a POSIX semaphore per
  front-end, made before the forks), which reports at once (ipc/engine.py
  waits for them). A reporter sleeps on its semaphore between reports: an
  idle front-end does not poll.

Reading a word costs a memory access, no call.

It also holds the server's **admission** (--max-queue) across the
front-ends: each front-end counts the places it holds in a word of its own,
under one lock all the processes share (a POSIX semaphore, made before the
forks), and a place is given only while their sum is under the bound. A
front-end that starts (again) zeroes its word, so the places a dead one held
come back.
"""

from __future__ import annotations

import mmap
import multiprocessing
import time

from tf_entrypoint.serving.ipc.region import Region

#: How often the reporter of a front-end the board has no semaphore for looks at
#: the asked counter (a board made without the number of front-ends, as in tests).
POLL = 0.05
_GENERATION, _ASKED, _PLACES = 0, 1, 2
#: The most front-ends the page counts places for.
MAX_FRONTENDS = mmap.PAGESIZE // 8 - _PLACES


class Board:
    """The shared page, as 64-bit words."""

    def __init__(self, region: Region, frontends: int = 0) -> None:
        if not 0 <= frontends <= MAX_FRONTENDS:
            raise ValueError(f"{frontends} front-ends: at most {MAX_FRONTENDS}")
        self.region = region
        self._words = region.view.cast("Q")
        context = multiprocessing.get_context("fork")
        self._lock = context.Lock()
        #: One wake-up per front-end: ask() releases each, a reporter waits on its own.
        self._wakeups = [context.Semaphore(0) for _ in range(frontends)]

    @classmethod
    def create(cls, frontends: int = 0) -> Board:
        """The page, with a wake-up for each of `frontends` front-ends."""
        return cls(Region.create(mmap.PAGESIZE, "tf-entrypoint-board"), frontends)

    def places(self, index: int, frontends: int) -> SharedPlaces:
        """Front-end `index`'s view of the admission shared by `frontends` (zeroing its own
        count: a front-end starts holding none)."""
        if not 0 <= index < frontends <= MAX_FRONTENDS:
            raise ValueError(f"front-end {index} of {frontends}: at most {MAX_FRONTENDS}")
        with self._lock:
            self._words[_PLACES + index] = 0
        return SharedPlaces(self, index, frontends)

    def generation(self) -> int:
        """The engine's pid and its model table's generation, one word."""
        return int(self._words[_GENERATION])

    def publish(self, pid: int, generation: int) -> None:
        self._words[_GENERATION] = (pid & 0xFFFFFFFF) << 32 | (generation & 0xFFFFFFFF)

    def asked(self) -> int:
        """The latest request for every front-end's metrics."""
        return int(self._words[_ASKED])

    def ask(self) -> int:
        """Ask every front-end for its metrics now (each reporter is woken); the number
        their reports will carry."""
        asked = (self.asked() + 1) & 0xFFFFFFFFFFFFFFFF
        self._words[_ASKED] = asked
        for wakeup in self._wakeups:
            wakeup.release()
        return asked

    def wait_asked(self, index: int, timeout: float) -> None:
        """Front-end `index`'s reporter: sleep until the engine asks (or :meth:`wake` is
        called), at most `timeout` seconds; without a semaphore, at most POLL seconds."""
        if index < len(self._wakeups):
            self._wakeups[index].acquire(timeout=max(timeout, 0.0))
        else:
            time.sleep(min(max(timeout, 0.0), POLL))

    def wake(self, index: int) -> None:
        """End front-end `index`'s wait now (its reporter stops)."""
        if index < len(self._wakeups):
            self._wakeups[index].release()

    def forget_asks(self, index: int) -> None:
        """A front-end that starts (again): the asks made while none was waiting are moot."""
        if index < len(self._wakeups):
            while self._wakeups[index].acquire(block=False):
                pass


class SharedPlaces:
    """One front-end's side of the admission every front-end shares (core/admission.py's
    Places): a place while the front-ends together hold fewer than the bound."""

    def __init__(self, board: Board, index: int, frontends: int) -> None:
        self._board = board
        self._mine = _PLACES + index
        self._all = slice(_PLACES, _PLACES + frontends)

    def take(self, limit: int) -> int | None:
        """Take a place if fewer than `limit` are held: how many are held then; else None."""
        words = self._board._words
        with self._board._lock:
            held = sum(words[self._all])
            if held >= limit:
                return None
            words[self._mine] += 1
            return held + 1

    def give(self) -> None:
        words = self._board._words
        with self._board._lock:
            if words[self._mine]:
                words[self._mine] -= 1

    def held(self) -> int:
        """The places every front-end holds."""
        return int(sum(self._board._words[self._all]))
