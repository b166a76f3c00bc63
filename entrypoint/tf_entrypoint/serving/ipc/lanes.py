"""A front-end's side of the engine call: lanes, each a Unix socket and a region.

A lane is one ``SOCK_SEQPACKET`` connection to the engine (one datagram a
message, so no framing) and one memfd :class:`Region` that both map. A call
writes its input tensors into the region, sends a small message that says
where they are (ipc/wire.py) and waits, within the request's deadline, for
the answer, whose output tensors the engine wrote into the same region after
the inputs; they are copied out before the lane is given back. A call whose
tensors do not fit its lane's region sends them in a region of its own (a
one-off memfd, passed with the message) and the engine answers in one of its
own the same way: the region bounds what a lane keeps, not what a request may
be (requests are bounded where they are decoded: docs/robustness.md).

A process holds at most `max_lanes` lanes, made when first needed and reused;
a call waits for a free one within its deadline. Failures become the codes a
client can act on: the engine gone (UNAVAILABLE with Retry-After: a call that
could not be sent is retried once on a new lane, one that was sent is not,
since it may have run), no answer before the deadline (DEADLINE_EXCEEDED: the
lane is closed, so a late answer is never read as another call's).
"""

from __future__ import annotations

import array
import os
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from tf_entrypoint.serving.core.deadlines import Slots, expired_text
from tf_entrypoint.serving.core.errors import Code, Refusal, ServingError
from tf_entrypoint.serving.core.types import Tensor
from tf_entrypoint.serving.ipc import wire
from tf_entrypoint.serving.ipc.region import Region

#: The protocol's version: a front-end and an engine of different builds never talk.
PROTOCOL = 1
#: The largest message (tensors travel in regions, not messages).
MAX_MESSAGE = 256 * 1024
#: A lane's region: large enough for most requests and their answers; pages are
#: committed only where written, and a call that used more than TRIM_AFTER gives
#: the rest back.
REGION_BYTES = 8 * 1024 * 1024
TRIM_AFTER = 1024 * 1024
#: Seconds a new lane waits for the engine to accept it.
HANDSHAKE = 5.0
#: What a client is told to wait before retrying while the engine restarts.
RETRY_AFTER = 1.0

ENGINE_GONE = "the model engine is not running (it is being restarted): retry shortly"
NO_ANSWER = "the model engine did not answer within the request's deadline"


_FD = array.array("i")
_ANCILLARY = socket.CMSG_SPACE(_FD.itemsize)


def receive(sock: socket.socket, buffer: bytearray) -> tuple[memoryview, list[int]]:
    """One datagram into `buffer` (reused: allocating a large buffer per message cost
    more than the rest of a call), and the descriptor it carried, if any."""
    size, ancillary, _flags, _addr = sock.recvmsg_into([buffer], _ANCILLARY)
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received = array.array("i")
            received.frombytes(data[: len(data) - len(data) % received.itemsize])
            fds.extend(received)
    return memoryview(buffer)[:size], fds


def no_answer() -> ServingError:
    """DEADLINE_EXCEEDED at the request's deadline, in the words its transport gives its
    own timeout (core/deadlines.py), so the answer is the same whichever ends first."""
    return ServingError(Code.DEADLINE_EXCEEDED, expired_text(NO_ANSWER))


def engine_gone() -> ServingError:
    return ServingError(Code.UNAVAILABLE, ENGINE_GONE, retry_after=RETRY_AFTER)


class _Unsent(Exception):
    """The message never reached the engine: the call may be retried on another lane."""


class _Broken(Exception):
    """The lane cannot be used again (the engine went, or its answer is late): `error`."""

    def __init__(self, error: ServingError) -> None:
        super().__init__(error.message)
        self.error = error


class Lane:
    """One connection to the engine and its region."""

    __slots__ = ("buffer", "pid", "region", "sock")

    def __init__(self, path: str, region_bytes: int) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        self.region: Region | None = None
        self.buffer = bytearray(MAX_MESSAGE)
        #: This process's (a lane is made after the fork and never crosses one).
        self.pid = os.getpid()
        try:
            self.sock.settimeout(HANDSHAKE)  # an engine that does not answer is as one gone
            self.sock.connect(path)
            self.region = Region.create(region_bytes)
            socket.send_fds(
                self.sock, [wire.dumps(("hello", PROTOCOL, self.pid, self.region.size))],
                [self.region.fd],
            )  # fmt: skip
            reply = wire.loads(self.sock.recv(MAX_MESSAGE) or b"\x00")
            if reply[:1] != ("ok",):
                raise OSError(f"the engine refused a lane: {reply!r}")
            self.sock.settimeout(None)
        except BaseException:
            self.close()
            raise

    def call(
        self,
        op: str,
        args: tuple[Any, ...],
        inputs: Mapping[str, Tensor],
        deadline: float | None,
        wrap: wire.Wrap | None,
        *,
        patient: bool = False,
    ) -> tuple[Any, dict[str, Tensor]]:
        region = self.region
        assert region is not None  # noqa: S101 - open lanes have one
        layout = wire.Layout(inputs)
        oneoff = None
        if layout.end <= region.size:
            slots, reply_at, fds = layout.write(region.view), layout.end, []
        else:
            oneoff = Region.create(layout.end, "tf-entrypoint-request")
            slots, reply_at, fds = layout.write(oneoff.view), 0, [oneoff.fd]
        used = layout.end
        try:
            message = wire.dumps((op, args, slots, reply_at, deadline, self.pid))
            if len(message) > MAX_MESSAGE:
                raise ServingError(Code.INTERNAL, f"a {op} message of {len(message)} bytes")
            try:
                socket.send_fds(self.sock, [message], fds) if fds else self.sock.send(message)
            except (TimeoutError, BrokenPipeError, ConnectionError) as err:
                raise _Unsent() from err
        finally:
            if oneoff is not None:
                oneoff.close()
        reply, answer_fd = self._receive(None if patient else deadline)
        code, text, result, out_slots = reply[0], reply[1], reply[2], reply[3]
        if code != Code.OK:
            refusal = Refusal(reply[5]) if len(reply) > 5 and reply[5] else None
            raise ServingError(Code.of(code), text, retry_after=reply[4] or None, refusal=refusal)
        if answer_fd is not None:
            outputs = self._read_oneoff(answer_fd, out_slots, wrap)
        else:
            outputs = wire.read(out_slots, region.view, wrap, copy=True)
            used = max(used, max((s[4] + s[5] for s in out_slots), default=0))
        if used > TRIM_AFTER:
            region.trim(TRIM_AFTER)
        return result, outputs

    def _receive(self, deadline: float | None) -> tuple[tuple[Any, ...], int | None]:
        """The answer's message, and the descriptor of its one-off region (None: none);
        _Broken when the lane cannot be used again."""
        timeout = None if deadline is None else deadline - time.monotonic()
        if timeout is not None and timeout <= 0:
            raise _Broken(no_answer())
        self.sock.settimeout(timeout)
        try:
            data, fds = receive(self.sock, self.buffer)
        except TimeoutError:
            raise _Broken(no_answer()) from None
        except (ConnectionError, OSError) as err:
            raise _Broken(engine_gone()) from err
        finally:
            self.sock.settimeout(None)
        if not data:
            raise _Broken(engine_gone())
        return wire.loads(data), (fds[0] if fds else None)

    @staticmethod
    def _read_oneoff(
        fd: int, slots: tuple[wire.Slot, ...], wrap: wire.Wrap | None
    ) -> dict[str, Tensor]:
        size = os.fstat(fd).st_size
        answer = Region(fd, size)
        try:
            return wire.read(slots, answer.view, wrap, copy=True)
        finally:
            answer.close()

    def close(self) -> None:
        self.sock.close()
        if self.region is not None:
            self.region.close()
            self.region = None


class Lanes:
    """A process's lanes to the engine at `path`: at most `max_lanes`, reused.

    :meth:`call` is safe from any thread; it blocks (with the GIL released)
    until the answer or the deadline.
    """

    def __init__(
        self,
        path: str,
        max_lanes: int,
        *,
        region_bytes: int = REGION_BYTES,
        wrap: wire.Wrap | None = None,
    ) -> None:
        self.path = path
        self.region_bytes = region_bytes
        #: Turns an output's memory into its values (the model layer's arrays); None: memoryviews.
        self.wrap = wrap
        self._free: list[Lane] = []
        self._closed = False
        self._lock = threading.Lock()
        self._turns = Slots(max_lanes)

    def call(
        self,
        op: str,
        args: tuple[Any, ...],
        inputs: Mapping[str, Tensor],
        deadline: float | None,
        *,
        patient: bool = False,
    ) -> tuple[Any, dict[str, Tensor]]:
        """Run `op` in the engine: (its result, its output tensors); ServingError as it answered.

        The call waits for a free lane until `deadline`, which the engine gets too
        (its batch queue withdraws a request when it passes). For its answer it
        waits until `deadline` too, unless `patient`: then until the engine answers
        or goes. A model's run is patient, as a worker thread of one process is: a
        call that TensorFlow still computes keeps its worker and its admission place
        (the transport answers the client at the deadline itself), so the engine is
        never handed more work than --max-queue admits.
        """
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._turns.acquire(True, timeout):
            raise no_answer()
        try:
            for attempt in (1, 2):
                lane = self._take()
                try:
                    answer = lane.call(op, args, inputs, deadline, self.wrap, patient=patient)
                except _Unsent:
                    lane.close()
                    if attempt == 2:
                        raise engine_gone() from None
                    continue
                except _Broken as broken:
                    lane.close()  # broken, or an answer may still come: never reuse it
                    raise broken.error from None
                except ServingError:
                    self._give(lane)
                    raise
                except BaseException:
                    lane.close()
                    raise
                self._give(lane)
                return answer
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            self._turns.release()

    def _take(self) -> Lane:
        with self._lock:
            if self._closed:
                raise engine_gone()
            if self._free:
                return self._free.pop()
        try:
            return Lane(self.path, self.region_bytes)
        except (OSError, wire.WireError) as err:
            raise engine_gone() from err

    def _give(self, lane: Lane) -> None:
        with self._lock:
            if not self._closed:
                self._free.append(lane)
                return
        lane.close()

    def close(self) -> None:
        """Close the free lanes (a call still running closes its own when it ends); later
        calls are UNAVAILABLE."""
        with self._lock:
            self._closed = True
            lanes, self._free = self._free, []
        for lane in lanes:
            lane.close()
