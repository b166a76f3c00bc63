"""serving/processes.py: the supervisor forks, restarts and stops its children (real
fork()s of stand-in mains that do nothing but wait), and checks its ports first."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.unit.serving.helpers import config
from tf_entrypoint.serving import processes
from tf_entrypoint.serving.config import ServeConfig


def settings(tmp_path: Path, *args: str) -> ServeConfig:
    return config(tmp_path, "--frontends", "2", "--grace-period", "1", *args)


def waiting(config: ServeConfig, *rest: object) -> int:
    """A child that waits for its signal (the default action ends it)."""
    while True:
        time.sleep(0.05)


def test_the_front_ends_share_the_ports_and_only_the_first_has_the_unix_socket(
    tmp_path: Path,
) -> None:
    given = settings(tmp_path, "--max-queue", "9", "--grpc_socket_path", "/tmp/x.sock")
    first, second = (processes.frontend_config(given, index) for index in (0, 1))
    assert (first.max_queue, second.max_queue) == (9, 9)  # shared, not split (ipc/board.py)
    assert (first.grpc_socket_path, second.grpc_socket_path) == ("/tmp/x.sock", None)
    assert first.reuse_port
    assert second.reuse_port
    assert not given.reuse_port


def test_a_taken_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - where the server would listen
        port = taken.getsockname()[1]
        taken.listen()
        given = settings(tmp_path, "--rest_api_port", str(port), "--port", "0")
        with pytest.raises(OSError, match=f"cannot listen on 0.0.0.0:{port}"):
            processes.check_ports(given)
        marker = tmp_path / "forked"

        def engine(*args: object) -> int:
            marker.touch()
            return 0

        supervisor = processes.Supervisor(given, engine, waiting)
        assert supervisor.run() == 1
        time.sleep(0.2)
        assert not marker.exists()  # nothing was forked
        assert not Path(supervisor.runtime).exists()  # and nothing left behind


def free_ports(tmp_path: Path) -> ServeConfig:
    """REST on a port nobody holds, no gRPC (the stand-in children listen on nothing)."""
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))  # noqa: S104 - where the server would listen
        port = probe.getsockname()[1]
    return settings(tmp_path, "--rest_api_port", str(port), "--port", "0")


def test_a_child_that_dies_is_replaced_and_sigterm_ends_them_all(tmp_path: Path) -> None:
    supervisor = processes.Supervisor(free_ports(tmp_path), waiting, waiting)
    first: dict[int, processes.Child] = {}

    def kill_a_front_end_then_stop() -> None:
        time.sleep(0.3)
        first.update(supervisor.children)
        (victim,) = [c.pid for c in supervisor.children.values() if c.index == 1 and
                     c.role == "frontend"]  # fmt: skip
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while victim in supervisor.children or len(supervisor.children) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=kill_a_front_end_then_stop).start()
    assert supervisor.run() == 0
    assert len(first) == 3  # an engine and two front-ends
    assert supervisor.children == {}
    for pid in first:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reaped: none left running or as a zombie
    assert not Path(supervisor.runtime).exists()


def test_an_engine_that_exits_1_ends_the_server_with_1(tmp_path: Path) -> None:
    supervisor = processes.Supervisor(free_ports(tmp_path), lambda *a: 1, waiting)
    assert supervisor.run() == 1
    assert supervisor.children == {}


def test_children_that_keep_dying_end_the_server(tmp_path: Path) -> None:
    supervisor = processes.Supervisor(free_ports(tmp_path), waiting, lambda *a: 3)
    assert supervisor.run() == 1
    assert supervisor.children == {}
