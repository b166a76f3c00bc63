"""The engine's side of the engine call: one dispatcher thread over every lane.

The engine listens on a Unix socket in a directory only its user can enter
(its path is not in any network namespace, unlike an abstract socket, and
the peer's uid is checked too). Each lane a front-end opens starts with a
hello that carries the lane's region (``SCM_RIGHTS``); then each message
names an operation, its small arguments, where its input tensors are and
where the answer may go (ipc/lanes.py).

One dispatcher thread waits on every lane at once (epoll, each lane armed
for one message at a time), so a wake-up serves every lane that is ready and
no thread hands the GIL to another per call. It reads the inputs as views of
the region (no copy) and runs the call itself when the calls of its kind (a
model's predicts, ``short``) take under SHORT_SECONDS, 0.5 ms
(core/admission.py's CallTimes: the rule the transports' loops use for
their inline calls, with a lower bound); any other call (a longer model, a
batched predict waiting for its batch, the control operations) runs on a
thread of a pool, as many as there are lanes. Either writes the
output tensors after the inputs (or into a one-off region when they do not
fit), answers, and arms the lane again. A message that names memory outside
its region, or cannot be read, is answered INTERNAL and logged: it is a
fault of ours, not of a client. The handler's ServingErrors are answered
with their code and message; any other exception is INTERNAL, with its
traceback in the log.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from tf_entrypoint.serving.core.admission import CallTimes
from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.types import Tensor
from tf_entrypoint.serving.ipc import wire
from tf_entrypoint.serving.ipc.lanes import HANDSHAKE, MAX_MESSAGE, PROTOCOL, receive
from tf_entrypoint.serving.ipc.region import Region

log = logging.getLogger("tf_entrypoint.serving")

#: The engine's one entry: (op, args, inputs, deadline) -> (result, outputs).
#: `deadline` is time.monotonic()'s clock, which every process of the host shares.
Handler = Callable[
    [str, tuple[Any, ...], Mapping[str, Tensor], float | None],
    tuple[Any, Mapping[str, Tensor]],
]
#: Which kind of call (op, args) is, for timing it (a model's predicts); None: a call
#: that never runs on the dispatcher.
Short = Callable[[str, tuple[Any, ...]], Hashable | None]

#: A kind of call runs on the dispatcher while its calls take under this: there the
#: hand-off to a pool thread and back (about 50 µs of CPU) would cost 10% or more,
#: and every other lane waits for at most this long. A longer call (a model whose
#: TensorFlow work is more than Python's) runs on the pool, where calls run side by
#: side on as many cores as the container has.
SHORT_SECONDS = 0.0005

#: Seconds close() waits for the dispatcher to end (it ends once the lanes it holds
#: have: at once, their sockets being shut down).
CLOSE_WAIT = 2.0

_PEERCRED = struct.Struct("3i")  # pid, uid, gid
#: A lane is armed for one message (its next is read once this one is answered).
_ARMED = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLONESHOT


class _Lane:
    """One front-end's lane, as the engine holds it."""

    __slots__ = ("buffer", "busy", "conn", "fd", "pid", "region")

    def __init__(self, conn: socket.socket, region: Region, pid: int) -> None:
        #: Its call runs on the pool (the lane is not armed, and is that thread's).
        self.busy = False
        self.conn = conn
        self.fd = conn.fileno()
        self.region = region
        self.pid = pid
        self.buffer = bytearray(MAX_MESSAGE)


class EngineService:
    """Answers lanes on the Unix socket at `path` with `handler`, at most `max_lanes` at once."""

    def __init__(
        self, path: str, handler: Handler, max_lanes: int, *, short: Short | None = None
    ) -> None:
        self.path = path
        self.handler = handler
        self.max_lanes = max_lanes
        self.short = short
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a socket left by an engine that died
        self._listener.bind(path)
        os.chmod(path, 0o600)
        self._listener.listen(128)
        #: fd -> lane, for every lane open.
        self._lanes: dict[int, _Lane] = {}
        self._lock = threading.Lock()
        self._closed = False
        #: close() was called: the dispatcher ends once only busy lanes are left.
        self._closing = False
        #: The dispatcher has ended and closed its epoll and its wake-up descriptor.
        self._stopped = False
        self._epoll = select.epoll()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll.register(self._wake, select.EPOLLIN)
        self._times = CallTimes(below=SHORT_SECONDS)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_lanes, thread_name_prefix="engine-call"
        )
        self._thread = threading.Thread(target=self._accept, name="engine-accept", daemon=True)
        self._dispatcher = threading.Thread(
            target=self._dispatch, name="engine-dispatch", daemon=True
        )

    def start(self) -> None:
        self._dispatcher.start()
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            pid, uid, _gid = _PEERCRED.unpack(
                conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
            )
            with self._lock:
                refuse = (
                    "closed" if self._closed
                    else "too many lanes" if len(self._lanes) >= self.max_lanes
                    else "another user" if uid != os.getuid()
                    else ""
                )  # fmt: skip
            if refuse:
                log.warning("engine: refused a lane from pid %d: %s", pid, refuse)
                with contextlib.suppress(OSError):
                    conn.send(wire.dumps(("refused", refuse)))
                conn.close()
                continue
            lane = self._hello(conn, pid)
            if lane is None:
                conn.close()
                continue
            with self._lock:
                if self._closed:
                    lane.region.close()
                    conn.close()
                    continue
                self._lanes[lane.fd] = lane
            self._epoll.register(lane.fd, _ARMED)

    @staticmethod
    def _hello(conn: socket.socket, pid: int) -> _Lane | None:
        """The lane's hello and its region (None: not a lane of this protocol)."""
        buffer = bytearray(MAX_MESSAGE)
        try:
            conn.settimeout(HANDSHAKE)  # a front-end that says nothing is not waited for
            data, fds = receive(conn, buffer)
            hello = wire.loads(data) if data else ()
            if len(fds) != 1 or len(hello) != 4 or hello[:2] != ("hello", PROTOCOL):
                for fd in fds:
                    os.close(fd)
                conn.send(wire.dumps(("refused", f"not a lane of protocol {PROTOCOL}")))
                return None
            try:
                region = Region(fds[0], hello[3])
            except (OSError, ValueError, TypeError):
                os.close(fds[0])
                raise
            conn.send(wire.dumps(("ok", os.getpid())))
            conn.settimeout(None)
        except (OSError, wire.WireError, ValueError, TypeError) as err:
            log.debug("engine: a lane's hello failed: %s", err)
            return None
        return _Lane(conn, region, pid)

    def _dispatch(self) -> None:
        """Wait on every armed lane; read each ready one's message and run it (here when
        its kind is short, else on the pool)."""
        poll = self._epoll.poll
        while True:
            try:
                events = poll(0.1 if self._closed else -1)
            except InterruptedError:
                continue
            except (OSError, ValueError):
                return
            for fd, _mask in events:
                if fd == self._wake:
                    with contextlib.suppress(BlockingIOError):
                        os.eventfd_read(self._wake)
                    continue
                lane = self._lanes.get(fd)
                if lane is not None:
                    self._readable(lane)
            if (self._closed and not self._lanes) or (
                self._closing and all(lane.busy for lane in list(self._lanes.values()))
            ):
                with self._lock:
                    self._stopped = True
                self._epoll.close()
                os.close(self._wake)
                return

    def _readable(self, lane: _Lane) -> None:
        try:
            data, fds = receive(lane.conn, lane.buffer)
        except BlockingIOError:
            self._arm(lane)
            return
        except OSError as err:
            if not self._closed:
                log.debug("engine: a lane ended: %s", err)
            self._end(lane)
            return
        if not data:
            self._end(lane)  # the front-end closed the lane
            return
        try:
            message: tuple[Any, ...] | None = wire.loads(data)
        except wire.WireError:
            message = None  # answered INTERNAL, and logged, by _answer
        kind = None
        if message is not None and self.short is not None and len(message) == 6:
            kind = self.short(str(message[0]), message[1])
        if kind is not None and self._times.short(kind):
            started = time.perf_counter()
            self._reply(lane, *self._answer(message, fds, lane.region))
            self._times.learn(kind, time.perf_counter() - started, inline=True)
            return
        lane.busy = True
        try:
            self._pool.submit(self._pooled, lane, message, fds, kind)
        except RuntimeError:  # shut down: the engine is stopping
            for fd in fds:
                os.close(fd)
            self._end(lane)

    def _pooled(
        self, lane: _Lane, message: tuple[Any, ...] | None, fds: list[int], kind: Hashable | None
    ) -> None:
        started = time.perf_counter()
        reply = self._answer(message, fds, lane.region)
        if kind is not None:
            self._times.learn(kind, time.perf_counter() - started, inline=False)
        self._reply(lane, *reply)

    def _reply(self, lane: _Lane, reply: bytes, answer: Region | None) -> None:
        """Send the answer and arm the lane for its next message."""
        try:
            if answer is None:
                lane.conn.send(reply)
            else:
                socket.send_fds(lane.conn, [reply], [answer.fd])
        except OSError as err:
            if not self._closed:
                log.debug("engine: a lane ended: %s", err)
            self._end(lane)
            return
        finally:
            if answer is not None:
                answer.close()
        self._arm(lane)

    def _arm(self, lane: _Lane) -> None:
        lane.busy = False
        try:
            self._epoll.modify(lane.fd, _ARMED)
        except (OSError, ValueError):  # the engine is closing
            self._end(lane)

    def _end(self, lane: _Lane) -> None:
        """Close a lane (once, from whichever thread holds it: an armed lane is the
        dispatcher's, a lane whose call runs is its pool thread's)."""
        with self._lock:
            if self._lanes.pop(lane.fd, None) is None:
                return
        with contextlib.suppress(OSError, ValueError):
            self._epoll.unregister(lane.fd)
        lane.conn.close()
        lane.region.close()

    def _answer(
        self, message: tuple[Any, ...] | None, fds: list[int], region: Region
    ) -> tuple[bytes, Region | None]:
        """A call's reply datagram, and the one-off region that carries its outputs, if any
        (`message`: None when it could not be read)."""
        oneoff: Region | None = None
        op = "a call"
        try:
            if fds:
                oneoff = Region(fds[0], os.fstat(fds[0]).st_size)
                fds = fds[1:]
            for fd in fds:
                os.close(fd)
            try:
                if message is None:
                    raise wire.WireError("a message that cannot be read")
                op, args, slots, reply_at, deadline, _pid = message
                op = str(op)
                inputs = wire.read(slots, (oneoff or region).view)
            except (wire.WireError, ValueError, TypeError) as err:
                log.error("engine: a message it cannot read: %s", err, exc_info=err)
                return wire.dumps((int(Code.INTERNAL), f"engine call: {err}", None, (), None)), None
            if deadline is not None and time.monotonic() >= deadline:
                raise ServingError(Code.DEADLINE_EXCEEDED, "the request's deadline passed")
            result, outputs = self.handler(op, args, inputs, deadline)
            del inputs
            layout = wire.Layout(outputs, reply_at)
            if layout.end <= region.size:
                return wire.dumps((int(Code.OK), "", result, layout.write(region.view), 0.0)), None
            layout = wire.Layout(outputs)
            answer = Region.create(layout.end, "tf-entrypoint-answer")
            slots = layout.write(answer.view)
            return wire.dumps((int(Code.OK), "", result, slots, 0.0)), answer
        except ServingError as err:
            refusal = "" if err.refusal is None else err.refusal.value
            plain = (int(err.code), err.message, None, (), err.retry_after, refusal)
            return wire.dumps(plain), None
        except Exception as err:
            log.error("engine: %s failed", op, exc_info=err)
            return wire.dumps((int(Code.INTERNAL), f"{type(err).__name__}: {err}", None, (),
                               None)), None  # fmt: skip
        finally:
            if oneoff is not None:
                oneoff.close()

    # core/drain.py's Transport: the engine is drained like a transport, but its lanes
    # stay open until the front-ends, which drain at the same time, close them.
    name = "engine"

    def drain(self) -> None:
        """Stop accepting lanes; the open ones keep answering their front-ends' calls."""
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def join(self, timeout: float | None = None) -> None:
        """Wait until every front-end has closed its lanes (or `timeout`): a lane whose
        thread still computes a call counts as closed once its front-end has gone (it
        answered its client at the end of the grace period, and exited)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._open() and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.05)

    def _open(self) -> bool:
        """Whether a lane's front-end is still connected."""
        with self._lock:
            lanes = [lane.conn for lane in self._lanes.values()]
        for conn in lanes:
            try:
                peer = select.poll()
                peer.register(conn, select.POLLRDHUP)
                if not peer.poll(0):
                    return True
            except (OSError, ValueError):  # closed meanwhile
                continue
        return False

    def stopped(self) -> bool:
        return self._closed and not self._open()

    def close(self) -> None:
        """Stop accepting, close every lane (their calls in flight end), remove the socket."""
        with self._lock:
            self._closed = self._closing = True
            lanes = [lane.conn for lane in self._lanes.values()]
        self._listener.close()
        for conn in lanes:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)  # the dispatcher (or the call's thread) ends it
        with self._lock, contextlib.suppress(OSError):
            if not self._stopped:  # else its descriptor is closed (and may be another's now)
                os.eventfd_write(self._wake, 1)  # to notice it is closed
        self._pool.shutdown(wait=False)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        if self._dispatcher.is_alive() and threading.current_thread() is not self._dispatcher:
            self._dispatcher.join(CLOSE_WAIT)  # its descriptors are closed when this returns
