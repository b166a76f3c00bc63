"""Several processes (--frontends N > 1): a supervisor, one engine, N front-ends.

The supervisor is the process the entrypoint execs. It imports everything
the children need (TensorFlow, the transports) and runs nothing: no
Session, no thread, no socket but a check of the ports. Then it forks:

- the **engine**: the models, their lifecycle, the batch queue and every
  TensorFlow call (the single process's core, without transports), answering
  the front-ends' calls on a Unix socket in a private directory
  (ipc/service.py, ipc/engine.py);
- **N front-ends**: REST and gRPC on the same ports, each with its own
  listening sockets (``SO_REUSEPORT``: the kernel spreads connections), its
  own event loops and request threads; they decode, check and encode, and
  make one engine call per request (ipc/remote.py, ipc/lanes.py).

Why fork from a supervisor: TensorFlow allows a fork after its import and
before any Session has run, not after (a child of a process whose Session
ran hangs), so only a process that never runs one can start, and restart,
the others; and the children share the supervisor's pages of TensorFlow
and the server (about 500 MB) copy-on-write, so each front-end costs tens
of MB, not another import (docs/serving.md, "Processes").

The supervisor restarts a child that dies (a front-end: only its
connections are lost; the engine: the front-ends answer UNAVAILABLE with
Retry-After and readiness is down until the new engine has loaded the
models), gives up when children keep dying (:data:`MAX_RESTARTS` within
:data:`RESTART_WINDOW` seconds), and on SIGTERM or SIGINT passes the signal on
and waits for every child within the grace period (then kills them). An
engine that exits 1 (a model could not load at start, or no version came
within --wait-for-model) ends the server with 1, as the single process does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from tf_entrypoint.serving.config import ServeConfig
from tf_entrypoint.serving.core.drain import EXIT_MARGIN
from tf_entrypoint.serving.ipc.board import Board

log = logging.getLogger("tf_entrypoint.serving")

#: Children that may die within RESTART_WINDOW seconds before the server gives up.
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0
#: How often the supervisor looks at its children.
POLL = 0.1

#: Runs the engine in a forked child: (config, engine socket path, the board) -> exit code.
EngineMain = Callable[[ServeConfig, str, Board], int]
#: Runs one front-end in a forked child: (config, engine socket path, index, the board)
#: -> exit code.
FrontendMain = Callable[[ServeConfig, str, int, Board], int]


@dataclass
class Child:
    role: str
    index: int
    pid: int


def frontend_config(config: ServeConfig, index: int) -> ServeConfig:
    """One front-end's settings: shared ports; the gRPC UNIX socket (one path, which
    SO_REUSEPORT cannot share) on the first front-end only. --max-queue stays the
    server's: the front-ends share its places (ipc/board.py)."""
    return replace(
        config,
        reuse_port=True,
        grpc_socket_path=config.grpc_socket_path if index == 0 else None,
    )


def check_ports(config: ServeConfig) -> None:
    """OSError when a port is taken: bound here without SO_REUSEPORT and let go, so that
    the front-ends (which share it) never join another server's sockets silently."""
    for port in (config.grpc_port, config.rest_port):
        if not port:
            continue
        family, kind, proto, _, address = socket.getaddrinfo(
            config.host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as err:
                raise OSError(f"cannot listen on {config.host}:{port}: {err.strerror}") from None


class Supervisor:
    """Forks, watches and stops the engine and the front-ends."""

    def __init__(self, config: ServeConfig, engine: EngineMain, frontend: FrontendMain) -> None:
        self.config = config
        self._engine_main = engine
        self._frontend_main = frontend
        self.runtime = tempfile.mkdtemp(prefix="tf-entrypoint-")  # 0700: ours alone
        self.path = os.path.join(self.runtime, "engine.sock")
        #: The page the engine announces on (ipc/board.py), mapped before the forks so
        #: every child, a restarted one too, shares it.
        self.board = Board.create(config.frontends)
        self.children: dict[int, Child] = {}
        self._deaths: list[float] = []
        self._signal: int | None = None

    def _fork(self, role: str, index: int) -> Child:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 1
            try:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
                if role == "engine":
                    code = self._engine_main(self.config, self.path, self.board)
                else:
                    code = self._frontend_main(
                        frontend_config(self.config, index), self.path, index, self.board
                    )
            except BaseException as err:
                log.error("%s %d failed: %s", role, index, err, exc_info=err)
            finally:
                logging.shutdown()
                os._exit(code)
        child = Child(role, index, pid)
        self.children[pid] = child
        log.info("started the %s (pid %d)", role if role == "engine" else f"front-end {index}",
                 pid)  # fmt: skip
        return child

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self._signal is None:
            self._signal = signum
        for child in list(self.children.values()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signum)

    def run(self) -> int:
        """Serve until a signal (exit 0) or a fatal error (exit 1)."""
        try:
            check_ports(self.config)
        except OSError as err:
            log.error("%s; exiting", err)
            shutil.rmtree(self.runtime, ignore_errors=True)
            self.board.region.close()
            return 1
        signals = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in signals}
        try:
            self._fork("engine", 0)
            for index in range(self.config.frontends):
                self._fork("frontend", index)
            return self._watch()
        finally:
            self._stop_all()
            shutil.rmtree(self.runtime, ignore_errors=True)
            self.board.region.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _watch(self) -> int:
        while self._signal is None:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return 1
            if pid == 0:
                time.sleep(POLL)
                continue
            child = self.children.pop(pid, None)
            if child is None or self._signal is not None:
                continue
            code = os.waitstatus_to_exitcode(status)
            name = "the engine" if child.role == "engine" else f"front-end {child.index}"
            if child.role == "engine" and code == 1:
                log.error("%s exited 1 (see its log above); exiting", name)
                return 1
            now = time.monotonic()
            self._deaths = [t for t in self._deaths if now - t < RESTART_WINDOW] + [now]
            if len(self._deaths) > MAX_RESTARTS:
                log.error("%s ended (%s), and %d processes ended within %g s: exiting", name,
                          _how(code), len(self._deaths), RESTART_WINDOW)  # fmt: skip
                return 1
            log.error("%s (pid %d) ended (%s): starting another", name, pid, _how(code))
            self._fork(child.role, child.index)
        return 0

    def _stop_all(self) -> None:
        """Every child gone: signalled (if not yet), waited for within the grace period, killed."""
        if self._signal is None:
            for child in self.children.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.config.grace_period + EXIT_MARGIN + 1
        while self.children and time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid:
                self.children.pop(pid, None)
            else:
                time.sleep(POLL)
        for child in self.children.values():
            log.error("%s (pid %d) still running at the end of the grace period: killed",
                      child.role, child.pid)  # fmt: skip
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.children.clear()


def _how(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}"


def supervise(config: ServeConfig, engine: EngineMain, frontend: FrontendMain) -> int:
    """Run the server as a supervisor, an engine and `config.frontends` front-ends."""
    log.info(
        "%d front-end processes over one engine process (--frontends); a second signal ends "
        "the grace period at once", config.frontends,
    )  # fmt: skip
    return Supervisor(config, engine, frontend).run()
