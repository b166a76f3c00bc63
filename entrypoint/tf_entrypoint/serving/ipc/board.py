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
"""

from __future__ import annotations

import mmap

from tf_entrypoint.serving.ipc.region import Region

#: How often a front-end's reporter looks at the asked counter.
POLL = 0.01
_GENERATION, _ASKED = 0, 1


class Board:
    """The shared page, as 64-bit words."""

    def __init__(self, region: Region) -> None:
        self.region = region
        self._words = region.view.cast("Q")

    @classmethod
    def create(cls) -> Board:
        return cls(Region.create(mmap.PAGESIZE, "tf-entrypoint-board"))

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
