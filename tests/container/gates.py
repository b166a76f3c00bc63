"""Gated models: a call that lasts exactly as long as the test wants, on any CPU.

A test that needs a call to stay in flight (running while others queue, a
deadline passing, SIGTERM arriving) must not size it in loop steps: a step
takes 6 microseconds on one CPU and 2 on the next, and a loaded machine is
slower again. A gated call waits instead on something the test controls: its
graph loops until a file matching a pattern exists in a directory the test
mounts into the server (:class:`Gate`), so it ends when the test opens the
gate, and only then. The test then waits for the state it needs (a metric, a
log line) rather than sleeping.

Two halves share this module: :func:`wait_for_file` builds the graph (run in
the image by make_grpc_models.py and make_batch_models.py, which import it as
`gates` from /t); :class:`Gate` is the test's side (on the host).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: Where the servers see a gate directory.
MOUNT = "/gates"
#: The file a gated signature with a fixed pattern (make_batch_models.py) waits for.
OPEN = "open"


def wait_for_file(pattern: Any, held: Any) -> Any:
    """Graph ops that loop, if `held` (a bool tensor), until a file matching the
    glob `pattern` (a string tensor) exists.

    `held` lets the server's warm-up through: without a warm-up file the
    server runs every signature once on zeros while it loads, and a gated
    signature that waited then would never let its version become available;
    so each gated model holds only a call whose input asks to be held (a
    non-empty gate, a non-zero x).

    Returns the number of checks made (int64 scalar): the caller makes its
    output depend on it (see :func:`after`), so the loop runs before the answer.
    MatchingFiles is not a stateful op, so grappler folds it into a constant
    when its pattern is one (the loop would then never see the file; it was
    seen to spin for ten minutes) and may hoist it out of the loop: the
    pattern is therefore made to depend on the loop variable (an empty
    suffix printed from it), which no optimizer can fold.
    """
    import tensorflow as tf  # noqa: PLC0415 - runs in the image only

    def closed(checks: Any) -> Any:
        suffix = tf.strings.substr(tf.strings.as_string(checks), 0, 0)  # always ""
        found = tf.io.matching_files(tf.strings.join([pattern, suffix]))
        return tf.logical_and(held, tf.equal(tf.size(found), 0))

    return tf.while_loop(closed, lambda checks: checks + 1, [tf.constant(0, tf.int64)])[0]


def after(checks: Any, x: Any) -> Any:
    """`x` unchanged, computed from the loop's result (0 added), so it waits for the loop.

    min(checks, 0) is 0 (checks >= 0), which no graph optimizer knows, so the
    loop cannot be pruned as it could be for `checks * 0`.
    """
    import tensorflow as tf  # noqa: PLC0415 - runs in the image only

    return x + tf.cast(tf.minimum(checks, 0), x.dtype)


class Gate:
    """A host directory mounted at /gates in a server; files in it open gated calls.

    `volume` goes into the server's volumes; `path(name)` is the pattern a
    gated call waits for; `open(name)` creates that file, `close(name)`
    removes it (only when no call waits on it: a call that has seen the file
    has already left its loop).
    """

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)  # the server's user lists it
        self.root = root

    @property
    def volume(self) -> dict[str, dict[str, str]]:
        return {str(self.root): {"bind": MOUNT, "mode": "ro"}}

    @staticmethod
    def path(name: str) -> str:
        return f"{MOUNT}/{name}"

    def open(self, name: str) -> None:
        (self.root / name).touch()

    def close(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)

    @contextmanager
    def shut(self, name: str) -> Iterator[None]:
        """Closed in the block (the test opens it there), open after it, also
        when the test fails: then no thread of the test stays waiting on it."""
        self.close(name)
        try:
            yield
        finally:
            self.open(name)
