"""--frontends N in the real image: the processes, and what happens when one of them dies.

One server per test (each kills processes): `plus/1` (y = x + 1, make_models.py)
under 2 CPUs with a supervisor, an engine and two front-ends
(docs/serving.md, "Processes"). A process is killed with SIGKILL from inside
the container (`docker exec`, the server's own user); the supervisor's log
names every process it starts, with its pid.
"""

from __future__ import annotations

import io
import re
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from harness import web
from harness.docker import poll
from harness.servers import Server, ServerPool, serve

#: The images this module tests (tests/container/conftest.py): the server is
#: the same in both; what the CUDA image changes is tested by the modules that run on both.
IMAGE_FLAVORS = ("cpu",)

SPEC = serve(
    "--model-name", "plus", "--frontends=2", models={"plus": ("plus", (1,))}, cpus=2.0,
)  # fmt: skip


def started(server: Server) -> dict[str, list[int]]:
    """Each role ('engine', 'front-end 0', ...) -> the pids the supervisor started for it."""
    found: dict[str, list[int]] = {}
    for role, pid in re.findall(r"started the (engine|front-end \d+) \(pid (\d+)\)", server.logs()):
        found.setdefault(role, []).append(int(pid))
    return found


def processes(server: Server) -> dict[int, str]:
    """pid -> command line of every process in the container."""
    listed = server.container.exec_run(
        ["python", "-c", "import os\n"
         "for p in os.listdir('/proc'):\n"
         "    if p.isdigit():\n"
         "        try: print(p, open(f'/proc/{p}/cmdline','rb').read().replace(b'\\0', b' ')"
         ".decode())\n"
         "        except OSError: pass"]
    )  # fmt: skip
    assert listed.exit_code == 0, listed.output
    assert isinstance(listed.output, bytes)
    rows = (line.partition(" ") for line in listed.output.decode().splitlines())
    # (a command line with newlines in it, as this probe's own, continues on the next lines)
    return {int(pid): command for pid, _, command in rows if pid.isdigit()}


def kill(server: Server, pid: int) -> None:
    killed = server.container.exec_run(["sh", "-c", f"kill -KILL {pid}"])
    assert killed.exit_code == 0, killed.output


def predicts(server: Server, count: int = 20) -> list[int]:
    """Statuses of `count` predicts, each on a new connection (so both front-ends answer)."""
    return [
        web.post(
            server.rest + "/v1/models/plus:predict", json={"instances": [1.0]}, timeout=30
        ).status_code
        for _ in range(count)
    ]


def open_descriptors(server: Server, pid: int) -> int:
    listed = server.container.exec_run(["ls", f"/proc/{pid}/fd"])
    assert listed.exit_code == 0, listed.output
    assert isinstance(listed.output, bytes)
    return len(listed.output.split())


def test_a_supervisor_an_engine_and_the_front_ends_serve_together(servers: ServerPool) -> None:
    with servers.private(SPEC) as server:
        roles = started(server)
        assert sorted(roles) == ["engine", "front-end 0", "front-end 1"], server.logs()
        running = processes(server)
        for (pid,) in roles.values():
            assert "tf_entrypoint.serving" in running[pid]
        assert predicts(server) == [200] * 20
        (grpc,) = server.grpc({"op": "predict", "model": "plus",
                               "inputs": {"x": {"values": [1.0], "dtype": "f"}}})  # fmt: skip
        assert grpc["outputs"]["y"] == [2.0], grpc
        # One page of metrics for all: the engine's load and the front-ends' requests.
        assert server.metric("serving_model_loads_total", model="plus", result="success") == 1

        def served() -> float:
            return server.metric(
                "serving_requests_total", api="predict", code="200", model="plus", protocol="v1"
            )

        assert poll(lambda: served() >= 20, 10, 0.2), served()


def test_a_front_end_that_dies_is_replaced_and_the_server_keeps_serving(
    servers: ServerPool,
) -> None:
    with servers.private(SPEC) as server:
        (victim,) = started(server)["front-end 1"]
        kill(server, victim)
        assert poll(lambda: len(started(server)["front-end 1"]) == 2, 60, 0.2), server.logs()
        assert f"front-end 1 (pid {victim}) ended (killed by SIGKILL): starting another" in (
            server.logs()
        )
        server.wait_ready()
        assert predicts(server) == [200] * 20
        assert server.running()


def unavailable(
    server: Server, seen: list[tuple[int, str | None]], ready: list[int]
) -> Callable[[], bool]:
    """Whether a predict has been answered 503 with Retry-After, and /readyz 503 (each try
    recorded in `seen` and `ready`)."""

    def answered() -> bool:
        answer = web.post(server.rest + "/v1/models/plus:predict",
                          json={"instances": [1.0]}, timeout=30)  # fmt: skip
        seen.append((answer.status_code, answer.headers.get("retry-after")))
        ready.append(web.get(server.rest + "/readyz", timeout=30).status_code)
        return (503, "1") in seen and 503 in ready

    return answered


#: Descriptors a front-end may hold more at one time than another: lanes are made
#: when calls need them (a socket and a memfd each), so which front-end answered
#: more of the calls holds a few more.
LANE_SLACK = 8


def test_an_engine_that_dies_makes_the_front_ends_unavailable_until_a_new_one_serves(
    servers: ServerPool,
) -> None:
    with servers.private(SPEC) as server:
        fronts = [pid for role, (pid,) in started(server).items() if role != "engine"]
        held: list[int] = []  # the front-ends' descriptors after each recovery
        for kills in (1, 2):
            engine = started(server)["engine"][-1]
            seen: list[tuple[int, str | None]] = []
            ready: list[int] = []
            kill(server, engine)

            assert poll(unavailable(server, seen, ready), 30, 0.02), (seen, ready)
            assert {status for status, _ in seen} <= {200, 503}, seen  # never a 500
            restarted = lambda: len(started(server)["engine"]) == kills + 1  # noqa: B023, E731
            assert poll(restarted, 60, 0.2), server.logs()
            server.wait_ready()
            assert predicts(server) == [200] * 20
            held.append(sum(open_descriptors(server, pid) for pid in fronts))
        # The front-ends kept running, and each restart left nothing behind in them:
        # the broken lanes were closed, new ones made as calls needed them.
        assert set(processes(server)) >= set(fronts)
        assert held[1] <= held[0] + LANE_SLACK, held


def test_nothing_is_left_behind_when_the_server_stops(servers: ServerPool, tmp_path: Path) -> None:
    with servers.private(SPEC) as server:
        listed = server.container.exec_run(["sh", "-c", "ls -d /tmp/tf-entrypoint-*"])
        assert listed.exit_code == 0, listed.output  # the engine's private directory
        sent = time.monotonic()
        server.container.kill(signal="SIGTERM")
        server.container.wait(timeout=60)
        took = time.monotonic() - sent
        server.container.reload()
        assert server.container.attrs["State"]["ExitCode"] == 0, server.logs()
        assert took < 8 + 1 + 2, took  # the default grace period, its margin, Docker
        assert "Traceback" not in server.logs()
        # The stopped container's /tmp: the engine's directory and its socket are gone.
        archive, _ = server.container.get_archive("/tmp")
        with tarfile.open(fileobj=io.BytesIO(b"".join(archive))) as tar:
            names = tar.getnames()
        assert not [name for name in names if "tf-entrypoint-" in name], names
