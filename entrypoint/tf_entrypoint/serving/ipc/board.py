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
  now; each front-end's reporter reads it every :data:`POLL` seconds and
  reports at once when it moved (ipc/engine.py waits for them).

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

from tf_entrypoint.serving.ipc.region import Region

#: How often a front-end's reporter looks at the asked counter: a scrape waits up to
#: this long for the other front-ends' reports. 0.01 s cost an idle front-end about
#: 1.2% of a core (the container with two front-ends: 0.056 CPU idle against 0.032
#: with 0.05 s, docs/benchmarks.md), for 20 ms less per scrape.
POLL = 0.05
_GENERATION, _ASKED, _PLACES = 0, 1, 2
#: The most front-ends the page counts places for.
MAX_FRONTENDS = mmap.PAGESIZE // 8 - _PLACES


class Board:
    """The shared page, as 64-bit words."""

    def __init__(self, region: Region) -> None:
        self.region = region
        self._words = region.view.cast("Q")
        self._lock = multiprocessing.get_context("fork").Lock()

    @classmethod
    def create(cls) -> Board:
        return cls(Region.create(mmap.PAGESIZE, "tf-entrypoint-board"))

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
        """Ask every front-end for its metrics now; the number their reports will carry."""
        asked = (self.asked() + 1) & 0xFFFFFFFFFFFFFFFF
        self._words[_ASKED] = asked
        return asked


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
