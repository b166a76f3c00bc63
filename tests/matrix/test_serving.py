"""The model server on the lowest supported Python: the matrix's Python 3.10 cell.

The cell `tf2.12-py3.10` (Ubuntu 22.04's python3, TensorFlow 2.12 in the
system site-packages, the wheel by recipe (b)) plus the server's packages
(tests/matrix/serve.Dockerfile, requirements/matrix/serve-tf2.12-py3.10.lock).
Before Python 3.11 asyncio.TimeoutError is not the builtin TimeoutError, so
this is where a timeout can turn into a 500 or INTERNAL: REST and gRPC calls
time out here, and one is cut off at the end of the grace period. The model
(tests/container/make_gated_models.py) computes until the test creates a
file, so no CPU speed matters.

Unlike the cell's other tests, this one runs in CI (`make test`) too: see
README, "The matrix in CI".

The cell's TensorFlow 2.12 has Keras 2, which the image (Keras 3) cannot
export with: here a Keras 2 model saved its four usual ways is loaded by the
server's loader, each as a Session bundle (issue 22;
docs/tf-serving.md, "Which exports load").
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import httpx2
import pytest
from docker.models.containers import Container

from harness import web
from harness.docker import Containers, poll, remove, wait
from tests.container.keras_ways import assert_keras_ways
from tests.matrix.conftest import (
    CELLS,
    LOCKS,
    docker_build,
    repository,
    tensorflow_image,
    with_entrypoint,
)

HERE = Path(__file__).resolve().parent
CONTAINER_TESTS = HERE.parent / "container"
CELL = CELLS["tf2.12-py3.10"]
LOCK = "serve-tf2.12-py3.10.lock"
TIMED_OUT = "Request timed out after 2 s (--request-timeout)"
STOPPED = "The server stopped before the request finished"


@pytest.fixture(scope="module")
def serving_image(wheel: Path, build_dir: Path, docker_client: docker.DockerClient) -> str:
    """The Python 3.10 cell, with the server's packages."""
    tmp = build_dir / f"{CELL.name}-serve"
    tmp.mkdir()
    cell_image = with_entrypoint(CELL, tensorflow_image(CELL, tmp), wheel, tmp)
    context = tmp / "context"
    context.mkdir()
    shutil.copy(HERE / "serve.Dockerfile", context / "Dockerfile")
    shutil.copy(LOCKS / LOCK, context / "serve.lock")
    return docker_build(context, f"{repository()}:{CELL.name}-serve", CELL_IMAGE=cell_image)


@pytest.fixture(scope="module")
def containers(docker_client: docker.DockerClient, serving_image: str) -> Containers:
    return Containers(docker_client, serving_image)


@pytest.fixture(scope="module")
def library(containers: Containers, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("py310-library")
    root.chmod(0o777)
    ran = containers.run(
        ["python3", "/t/make_gated_models.py", "/models"],
        volumes={
            str(root): {"bind": "/models", "mode": "rw"},
            str(CONTAINER_TESTS): {"bind": "/t", "mode": "ro"},
        },
        timeout=300,
    )
    assert ran.exit_code == 0, ran.stderr
    return root


Running = tuple[Container, str, Path]


@pytest.fixture
def server(containers: Containers, library: Path, tmp_path: Path) -> Iterator[Running]:
    """(the server's container, its REST address, its gate directory)."""
    gate = tmp_path / "gate"
    gate.mkdir()
    gate.chmod(0o777)
    container = containers.start(
        ["serve", "--model_name=gated", "--model_base_path=/models/gated",
         "--request-timeout=2", "--grace-period=1", "--workers=2"],
        volumes={
            str(library): {"bind": "/models", "mode": "ro"},
            str(gate): {"bind": "/gate", "mode": "rw"},
        },
        nano_cpus=1_000_000_000,
        ports={"8501/tcp": ("127.0.0.1", None)},
    )  # fmt: skip
    try:
        container.reload()
        port = container.attrs["NetworkSettings"]["Ports"]["8501/tcp"][0]["HostPort"]
        rest = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            container.reload()
            assert container.status == "running", container.logs().decode(errors="replace")
            try:
                return web.get(rest + "/readyz", timeout=5).status_code == 200
            except httpx2.TransportError:
                return False

        assert poll(ready, 180, 0.25), container.logs().decode(errors="replace")
        yield container, rest, gate
    finally:
        remove(container)


def predict(rest: str, key: str) -> tuple[int, Any]:
    answer = web.post(
        f"{rest}/v1/models/gated:predict", json={"inputs": {"key": [key]}}, timeout=120
    )
    try:
        return answer.status_code, answer.json()
    except ValueError:
        return answer.status_code, answer.text


def grpc(containers: Containers, server: Container, *operations: dict[str, Any]) -> list[Any]:
    """TF Serving's stubs (tests/container/grpc_client.py) in a sidecar of the server."""
    ran = containers.run(
        ["python3", "/t/grpc_client.py", "127.0.0.1:8500", json.dumps(list(operations))],
        network_mode=f"container:{server.id}",
        volumes={str(CONTAINER_TESTS): {"bind": "/t", "mode": "ro"}},
        timeout=300,
    )
    assert ran.exit_code == 0, ran.stderr
    results: list[Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return results


def grpc_predict(key: str, timeout: float = 60) -> dict[str, Any]:
    return {
        "op": "predict",
        "model": "gated",
        "inputs": {"key": {"values": [key], "dtype": "S"}},
        "timeout": timeout,
    }


def in_flight(rest: str) -> float:
    for line in web.get(rest + "/metrics", timeout=10).text.splitlines():
        if line.startswith("serving_predict_in_flight "):
            return float(line.split()[1])
    raise AssertionError("serving_predict_in_flight is not on /metrics")


def test_timeouts_are_504_and_deadline_exceeded_on_python_3_10(
    containers: Containers, server: Running
) -> None:
    container, rest, gate = server
    version = containers.run(
        ["python3", "-c", "import sys; print(*sys.version_info[:2])"], timeout=120
    )
    assert version.stdout.split() == ["3", "10"], version.stderr
    # An empty key does not wait: the server serves.
    assert predict(rest, "") == (200, {"outputs": [0]})

    # Past --request-timeout (2 s), over REST and gRPC; and past a gRPC
    # client's own deadline, shorter than --request-timeout.
    assert predict(rest, "rest") == (504, {"error": TIMED_OUT})
    late, short = grpc(containers, container, grpc_predict("grpc"), grpc_predict("short", 0.5))
    assert (late["code"], late["message"]) == ("DEADLINE_EXCEEDED", TIMED_OUT), late
    assert (short["code"], short["message"]) == ("DEADLINE_EXCEEDED", "Deadline Exceeded"), short

    for key in ("rest", "grpc", "short"):
        (gate / f"open-{key}").touch()
    assert poll(lambda: in_flight(rest) == 0, 60, 0.1), container.logs().decode(errors="replace")
    logs = container.logs().decode(errors="replace")
    assert "Traceback" not in logs
    assert "Internal error" not in logs


def test_sigterm_cuts_off_a_call_on_python_3_10(containers: Containers, server: Running) -> None:
    """Python 3.10 has no Task.uncancel(): the cut-off answers all the same."""
    container, rest, gate = server
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(predict, rest, "stop")
        assert poll((gate / "ran-stop").exists, 60, 0.05)
        sent = time.monotonic()
        container.kill(signal="SIGTERM")  # --grace-period 1, shorter than the 2 s timeout
        stopped = wait(container, 60)
        took = time.monotonic() - sent
        status, body = answer.result(timeout=60)
    assert stopped.exit_code == 0, stopped.stderr
    assert took < 1 + 1 + 2, took  # the grace period, the margin, Docker's own time
    assert status == 503, body
    assert body["error"].startswith(STOPPED), body
    assert "Traceback" not in stopped.stderr
    assert "(1 call(s) cut off)" in stopped.stderr


def test_keras_2_exports_load_as_session_bundles(containers: Containers) -> None:
    """A Keras 2 Sequential with Dense and BatchNormalization layers saved with
    tf.saved_model.save, with model.save(dir) (Keras 2's SavedModel format),
    inside a tf.Module and under a MirroredStrategy: each is a Session bundle
    with no variable to set from a copy (Keras 2's graph reads the variables
    its checkpoint restores, as TF Serving expects) and answers what
    tf.saved_model.load's signature answers."""
    ran = containers.run(
        ["python3", "/t/check_loading.py", "keras", "/tmp"],
        volumes={str(CONTAINER_TESTS): {"bind": "/t", "mode": "ro"}},
        nano_cpus=1_000_000_000,
        timeout=600,
    )
    assert ran.exit_code == 0, ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["keras"] == 2, result
    assert_keras_ways(
        result["ways"],
        {
            "tf.saved_model.save(model)": False,
            "model.save(dir)": False,
            "tf.Module holding the model": False,
            "under MirroredStrategy": False,
        },
    )
