"""compose.yaml's `distributed` profile for real: two workers train, the chief's model is served.

    docker compose --profile distributed up -d serve-distributed

brings up worker-1 and worker-0 (each with its own TF_CONFIG and `cpus:`
limit), which train together with MultiWorkerMirroredStrategy over the
project's network; once worker-0 has exported the model, serve-distributed
serves it. A project of its own (not the demo's), bounded in time, always
removed with its volume (`down -v`), also when `up` fails.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator

import pytest

from harness import web
from harness.docker import REPO, poll
from tests.compose.conftest import compose_command, is_ready

#: Seconds for both workers to train and the server to load the model.
UP_TIMEOUT = 420
READY_TIMEOUT = 240
WORKERS = ("worker-0", "worker-1")


class Project:
    """`docker compose --profile distributed` for one test project."""

    def __init__(self, image: str) -> None:
        self.name = f"tfe-distributed-test-{os.getpid()}"
        self.env = {
            **os.environ,
            "TF_ENTRYPOINT_IMAGE": image,
            "SERVE_DISTRIBUTED_PUBLISH": "127.0.0.1:",  # an ephemeral port of loopback only
        }
        self.base = [
            *shlex.split(compose_command()),
            "-f",
            str(REPO / "compose.yaml"),
            "-p",
            self.name,
            "--profile",
            "distributed",
        ]

    def run(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        try:
            result = subprocess.run(
                [*self.base, *args],
                env=self.env,
                capture_output=True,
                text=True,
                check=False,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as err:
            raise AssertionError(
                f"compose {' '.join(args)} did not finish in {timeout} s:\n{self.logs()}"
            ) from err
        if check and result.returncode != 0:
            raise AssertionError(
                f"compose {' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}"
                f"\n{self.logs()}"
            )
        return result.stdout

    def logs(self) -> str:
        result = subprocess.run(
            [*self.base, "logs", "--no-color"],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        return result.stdout[-8000:]

    def container(self, service: str) -> str:
        ids = self.run("ps", "-a", "-q", service).split()
        assert len(ids) == 1, f"{service}: containers {ids}"
        return ids[0]

    def exit_code(self, service: str) -> int:
        state = subprocess.run(
            ["docker", "inspect", "-f", "{{json .State}}", self.container(service)],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        parsed = json.loads(state.stdout)
        assert parsed["Status"] == "exited", f"{service} is {parsed['Status']}"
        return int(parsed["ExitCode"])

    def exited(self, service: str) -> bool:
        state = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Status}}", self.container(service)],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        return state.stdout.strip() == "exited"

    def service_logs(self, service: str) -> str:
        result = subprocess.run(
            ["docker", "logs", self.container(service)],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        return result.stdout + result.stderr


@pytest.fixture(scope="module")
def project(cpu_image: str) -> Iterator[Project]:
    """The profile up (both workers done, the server started), then down -v."""
    project = Project(cpu_image)
    try:
        # Waits for worker-0 to complete (serve-distributed depends on that).
        project.run("up", "-d", "serve-distributed", timeout=UP_TIMEOUT)
        # worker-1 finishes with worker-0 (the last collective), give it a moment.
        assert poll(lambda: project.exited("worker-1"), timeout=60, pause=0.5), project.logs()
        yield project
    finally:
        project.run("down", "-v", "--remove-orphans", "-t", "30", timeout=180, check=False)


@pytest.fixture(scope="module")
def server_url(project: Project) -> str:
    port = project.run("port", "serve-distributed", "8501").strip().splitlines()[-1]
    url = f"http://127.0.0.1:{port.rsplit(':', 1)[-1]}"
    if not poll(lambda: is_ready(url), timeout=READY_TIMEOUT, pause=0.5):
        raise AssertionError(f"{url} not ready within {READY_TIMEOUT} s:\n{project.logs()}")
    return url


@pytest.mark.parametrize("worker", WORKERS)
def test_both_workers_trained_together_and_finished(project: Project, worker: str) -> None:
    assert project.exit_code(worker) == 0, project.service_logs(worker)[-4000:]
    logs = project.service_logs(worker)
    index = worker.rsplit("-", 1)[1]
    assert f"train: worker {index} of 2 workers" in logs, logs[-4000:]
    assert "learnt y = 0.5 x + " in logs, logs[-4000:]


def test_the_chief_exported_the_model(project: Project) -> None:
    assert "train: worker 0 exported /models/model/1" in project.service_logs("worker-0")
    assert "the chief exports" in project.service_logs("worker-1")


def test_each_worker_ran_under_its_own_cpu_limit(project: Project) -> None:
    for worker in WORKERS:
        inspected = subprocess.run(
            ["docker", "inspect", "-f", "{{.HostConfig.NanoCpus}}", project.container(worker)],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        assert int(inspected.stdout) == 1_000_000_000, worker
        assert "threads intra 1 / inter 1" in project.service_logs(worker), worker


def test_the_served_model_is_the_trained_line(server_url: str) -> None:
    with web.client(base_url=server_url, timeout=30, trust_env=False) as client:
        response = client.post("/v1/models/model:predict", json={"instances": [1.0, 2.0]})
        assert response.status_code == 200, response.text
        assert response.json() == {"predictions": [2.5, 3.0]}
        two = client.post(
            "/v1/models/model:predict",
            json={"signature_name": "two_inputs", "inputs": {"x": [1, 2], "scale": [2, 3]}},
        )
        assert two.json() == {"outputs": {"scaled": [5.0, 9.0], "y": [2.5, 3.0]}}
