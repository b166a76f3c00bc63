"""The engine's side of the engine call: one thread per lane, answering its front-end.

The engine listens on a Unix socket in a directory only its user can enter
(its path is not in any network namespace, unlike an abstract socket, and
the peer's uid is checked too). Each lane a front-end opens starts with a
hello that carries the lane's region (``SCM_RIGHTS``); then each message
names an operation, its small arguments, where its input tensors are and
where the answer may go (ipc/lanes.py). The thread reads the inputs as views
of the region (no copy), calls the engine's one handler, and writes the
output tensors after the inputs (or into a one-off region when they do not
fit), then answers. A message that names memory outside its region, or
cannot be read, is answered INTERNAL and logged: it is a fault of ours, not
of a client. The handler's ServingErrors are answered with their code and
message; any other exception is INTERNAL, with its traceback in the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.types import Tensor
from tf_entrypoint.serving.ipc import wire
from tf_entrypoint.serving.ipc.lanes import MAX_MESSAGE, PROTOCOL, receive
from tf_entrypoint.serving.ipc.region import Region

log = logging.getLogger("tf_entrypoint.serving")

#: The engine's one entry: (op, args, inputs, deadline) -> (result, outputs).
#: `deadline` is time.monotonic()'s clock, which every process of the host shares.
Handler = Callable[
    [str, tuple[Any, ...], Mapping[str, Tensor], float | None],
    tuple[Any, Mapping[str, Tensor]],
]

_PEERCRED = struct.Struct("3i")  # pid, uid, gid


class EngineService:
    """Answers lanes on the Unix socket at `path` with `handler`, at most `max_lanes` at once."""

    def __init__(self, path: str, handler: Handler, max_lanes: int) -> None:
        self.path = path
        self.handler = handler
        self.max_lanes = max_lanes
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a socket left by an engine that died
        self._listener.bind(path)
        os.chmod(path, 0o600)
        self._listener.listen(128)
        self._lanes: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="engine-accept", daemon=True)

    def start(self) -> None:
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
                if not refuse:
                    self._lanes.add(conn)
            if refuse:
                log.warning("engine: refused a lane from pid %d: %s", pid, refuse)
                with contextlib.suppress(OSError):
                    conn.send(wire.dumps(("refused", refuse)))
                conn.close()
                continue
            threading.Thread(
                target=self._serve, args=(conn,), name=f"engine-lane-{pid}", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        region: Region | None = None
        buffer = bytearray(MAX_MESSAGE)
        try:
            data, fds = receive(conn, buffer)
            hello = wire.loads(data) if data else ()
            if len(fds) != 1 or len(hello) != 4 or hello[:2] != ("hello", PROTOCOL):
                for fd in fds:
                    os.close(fd)
                conn.send(wire.dumps(("refused", f"not a lane of protocol {PROTOCOL}")))
                return
            region = Region(fds[0], hello[3])
            conn.send(wire.dumps(("ok", os.getpid())))
            while True:
                data, fds = receive(conn, buffer)
                if not data:
                    return  # the front-end closed the lane
                reply, answer = self._answer(data, fds, region)
                try:
                    if answer is None:
                        conn.send(reply)
                    else:
                        socket.send_fds(conn, [reply], [answer.fd])
                finally:
                    if answer is not None:
                        answer.close()
        except (OSError, wire.WireError, ValueError) as err:
            if not self._closed:
                log.debug("engine: a lane ended: %s", err)
        finally:
            with self._lock:
                self._lanes.discard(conn)
            conn.close()
            if region is not None:
                region.close()

    def _answer(
        self, data: bytes | memoryview, fds: list[int], region: Region
    ) -> tuple[bytes, Region | None]:
        """A call's reply datagram, and the one-off region that carries its outputs, if any."""
        oneoff: Region | None = None
        op = "a call"
        try:
            if fds:
                oneoff = Region(fds[0], os.fstat(fds[0]).st_size)
                fds = fds[1:]
            for fd in fds:
                os.close(fd)
            try:
                op, args, slots, reply_at, deadline, _pid = wire.loads(data)
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
            lanes = list(self._lanes)
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
            self._closed = True
            lanes = list(self._lanes)
        self._listener.close()
        for conn in lanes:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
