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
a call waits for a free one within its deadline. An event loop has lanes of
its own besides (:class:`LoopLanes`): a predict queued from the loop
(core/queued.py) is sent on one and answered by the loop's reader, so no
thread, and not the loop, waits for the engine. Failures become the codes a
client can act on: the engine gone (UNAVAILABLE with Retry-After: a call that
could not be sent is retried once on a new lane, one that was sent is not,
since it may have run), no answer before the deadline (DEADLINE_EXCEEDED: the
lane is closed, so a late answer is never read as another call's).
"""

from __future__ import annotations

import array
import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
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

#: A front-end's blocking lanes beyond its request threads: short calls run on the
#: two transports' loops (core/admission.py), the loops' own calls (status,
#: readiness, metadata), the metrics report, reloads.
EXTRA_LANES = 8
#: The least lanes each transport's event loop has for the predicts it sends
#: itself (core/queued.py, :class:`LoopLanes`).
LOOP_LANES = 16


def lane_counts(request_threads: int) -> tuple[int, int]:
    """A front-end's lanes: (blocking ones, a request thread's each and EXTRA_LANES; each
    of its two event loops' own, as many as the requests that may wait for the engine
    at once: with batching, --max-queue, which is then `request_threads`)."""
    return request_threads + EXTRA_LANES, max(request_threads, LOOP_LANES)


def engine_lanes(request_threads: int, frontends: int) -> int:
    """The lanes the engine accepts: every front-end's (REST's loop and gRPC's), and a few."""
    blocking, per_loop = lane_counts(request_threads)
    return (blocking + 2 * per_loop) * frontends + 8


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
        return self.answer(reply, answer_fd, wrap, used)

    def answer(
        self, reply: tuple[Any, ...], answer_fd: int | None, wrap: wire.Wrap | None, used: int
    ) -> tuple[Any, dict[str, Tensor]]:
        """An answer's (result, output tensors), copied out of the region (or out of the
        one-off region `answer_fd`); ServingError as the engine answered. `used`: the
        region's bytes the call's inputs took (more than TRIM_AFTER: the rest is given
        back)."""
        region = self.region
        assert region is not None  # noqa: S101 - open lanes have one
        code, text, result, out_slots = reply[0], reply[1], reply[2], reply[3]
        if code != Code.OK:
            if answer_fd is not None:
                os.close(answer_fd)
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
        loop_lanes: int = 0,
    ) -> None:
        self.path = path
        self.region_bytes = region_bytes
        #: Turns an output's memory into its values (the model layer's arrays); None: memoryviews.
        self.wrap = wrap
        self._free: list[Lane] = []
        self._closed = False
        self._lock = threading.Lock()
        self._turns = Slots(max_lanes)
        #: Each event loop's own lanes (:class:`LoopLanes`), at most `loop_lanes` each.
        self.loop_lanes = loop_lanes
        self._loops: dict[asyncio.AbstractEventLoop, LoopLanes] = {}

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

    def start(
        self, op: str, args: tuple[Any, ...], inputs: Mapping[str, Tensor],
        deadline: float | None, answered: Answered,
    ) -> _Sent | None:  # fmt: skip
        """Send `op` on a lane of the running event loop and return (SENT); the loop hands
        the answer to `answered`. None: not sent (no loop lanes, none free, tensors too
        large for a lane's region, the engine gone): call :meth:`call` instead."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        own = self._loops.get(loop)
        if own is None:
            with self._lock:
                if self._closed or not self.loop_lanes:
                    return None
                own = self._loops.setdefault(loop, LoopLanes(self, loop, self.loop_lanes))
        return own.start(op, args, inputs, deadline, answered)

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
            loops, self._loops = list(self._loops.values()), {}
        for lane in lanes:
            lane.close()
        for own in loops:
            try:
                own.loop.call_soon_threadsafe(own.close)
            except RuntimeError:  # its loop has closed: so have its lanes' readers
                continue


#: What a queued call's answer is handed to, on its loop: (the engine's result, the
#: output tensors, None) or (None, None, the error).
Answered = Callable[[Any, "dict[str, Tensor] | None", "ServingError | None"], None]


class _Sent:
    """A queued call's Pending (core/servable.py): once sent it cannot be withdrawn."""

    __slots__ = ()

    def cancel(self) -> bool:
        return False


SENT = _Sent()


class LoopLane:
    """A lane watched by an event loop: one call at a time, answered by the loop's reader."""

    __slots__ = ("answered", "fd", "lane", "lanes", "used")

    def __init__(self, lanes: LoopLanes, lane: Lane) -> None:
        self.lanes = lanes
        self.lane = lane
        self.answered: Answered | None = None
        #: The bytes of the region the call in flight uses (its inputs).
        self.used = 0
        lane.sock.setblocking(False)
        self.fd = lane.sock.fileno()
        lanes.loop.add_reader(self.fd, self._readable)

    def send(
        self, op: str, args: tuple[Any, ...], layout: wire.Layout, deadline: float | None,
        answered: Answered,
    ) -> bool:  # fmt: skip
        """Write the inputs and send the call; False when it could not be sent (the lane
        is then gone: the caller goes the blocking way, which retries or says why)."""
        region = self.lane.region
        assert region is not None  # noqa: S101 - open lanes have one
        slots = layout.write(region.view)
        message = wire.dumps((op, args, slots, layout.end, deadline, self.lane.pid))
        if len(message) > MAX_MESSAGE:
            self.lanes.give(self)
            return False
        try:
            self.lane.sock.send(message)
        except OSError:
            self.drop()
            return False
        self.used, self.answered = layout.end, answered
        return True

    def _readable(self) -> None:
        """The engine's answer (or the lane's end), on the loop."""
        lane = self.lane
        try:
            data, fds = receive(lane.sock, lane.buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, fds = memoryview(b""), []
        answered, self.answered = self.answered, None
        if not data or answered is None:  # the engine went (or spoke out of turn)
            for fd in fds:
                os.close(fd)
            self.drop()
            if answered is not None:
                answered(None, None, engine_gone())
            return
        for fd in fds[1:]:
            os.close(fd)
        try:
            try:
                reply = wire.loads(data)
            except wire.WireError:
                if fds:
                    os.close(fds[0])
                raise
            result, outputs = lane.answer(
                reply, fds[0] if fds else None, self.lanes.owner.wrap, self.used
            )
        except ServingError as error:  # the engine's answer: the lane goes on
            self.lanes.give(self)
            answered(None, None, error)
            return
        except (wire.WireError, ValueError, TypeError, IndexError) as err:
            self.drop()
            answered(None, None, ServingError(Code.INTERNAL, f"engine answer: {err}"))
            return
        self.lanes.give(self)
        answered(result, outputs, None)

    def drop(self) -> None:
        """Close the lane for good (on its loop)."""
        self.lanes.lost(self)


class LoopLanes:
    """One event loop's lanes to the engine: at most `max_lanes`, each one call at a time.

    :meth:`start` sends a call and returns at once; the loop's reader hands the
    answer to the call's `answered`. With no free lane, a new one is made on a
    thread (a lane's handshake waits for the engine, which the loop must not)
    and the call goes the blocking way meanwhile (None), as a call too large
    for a lane's region does.
    """

    def __init__(self, owner: Lanes, loop: asyncio.AbstractEventLoop, max_lanes: int) -> None:
        self.owner = owner
        self.loop = loop
        self.max_lanes = max_lanes
        self._free: list[LoopLane] = []
        #: Lanes open, being made, or in use.
        self._count = 0
        self._making = False
        self._closed = False

    def start(
        self, op: str, args: tuple[Any, ...], inputs: Mapping[str, Tensor],
        deadline: float | None, answered: Answered,
    ) -> _Sent | None:  # fmt: skip
        layout = wire.Layout(inputs)
        if layout.end > self.owner.region_bytes:
            return None
        lane = self._take()
        if lane is None or not lane.send(op, args, layout, deadline, answered):
            return None
        return SENT

    def _take(self) -> LoopLane | None:
        if self._free:
            return self._free.pop()
        if not (self._making or self._closed) and self._count < self.max_lanes:
            self._making = True
            self._count += 1
            threading.Thread(target=self._make, name="loop-lane", daemon=True).start()
        return None

    def _make(self) -> None:
        """On a thread of its own (never the loop's executor, whose shutdown would wait
        for a handshake): a lane, handed to the loop."""
        try:
            lane: Lane | None = Lane(self.owner.path, self.owner.region_bytes)
        except (OSError, wire.WireError):  # refused, or the engine is gone: made later
            lane = None
        try:
            self.loop.call_soon_threadsafe(self._made, lane)
        except RuntimeError:  # the loop has closed
            if lane is not None:
                lane.close()

    def _made(self, lane: Lane | None) -> None:
        self._making = False
        if lane is None:
            self._count -= 1  # the next call that finds no free lane tries again
            return
        if self._closed:
            lane.close()
            self._count -= 1
            return
        self._free.append(LoopLane(self, lane))

    def give(self, lane: LoopLane) -> None:
        if self._closed:
            self.lost(lane)
        else:
            self._free.append(lane)

    def lost(self, lane: LoopLane) -> None:
        if lane.lane.region is None:
            return  # closed already
        self.loop.remove_reader(lane.fd)
        lane.lane.close()
        self._count -= 1
        if lane in self._free:
            self._free.remove(lane)

    def close(self) -> None:
        """Close the free lanes; a busy one closes when its answer comes (on the loop)."""
        self._closed = True
        free, self._free = self._free, []
        for lane in free:
            self.lost(lane)
