"""Run containers from tests: wait with a timeout, split the streams, always clean up."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

REPO = Path(__file__).resolve().parents[1]
#: Label on every container the tests start, so `make prune` can find leftovers.
TEST_LABEL = "tf-entrypoint.test"


@dataclass(frozen=True)
class Ran:
    exit_code: int
    stdout: str
    stderr: str


class Containers:
    """Starts containers from one image and guarantees their removal."""

    def __init__(self, client: docker.DockerClient, image: str) -> None:
        self.client = client
        self.image = image

    def start(self, command: str | Sequence[str] | None = None, **kwargs: Any) -> Container:
        labels: dict[str, str] = {TEST_LABEL: "1", **kwargs.pop("labels", {})}
        image: str = kwargs.pop("image", self.image)
        argv = command if command is None or isinstance(command, str) else list(command)
        container: Container = self.client.containers.run(
            image, argv, detach=True, labels=labels, **kwargs
        )
        return container

    @contextmanager
    def started(
        self, command: str | Sequence[str] | None = None, **kwargs: Any
    ) -> Iterator[Container]:
        container = self.start(command, **kwargs)
        try:
            yield container
        finally:
            remove(container)

    def run(
        self, command: str | Sequence[str] | None = None, *, timeout: float = 120, **kwargs: Any
    ) -> Ran:
        """Run to completion (or fail the test after `timeout` seconds)."""
        with self.started(command, **kwargs) as container:
            return wait(container, timeout)

    def export_models(self, root: Path, *scripts: str, timeout: float = 300) -> Path:
        """Run each of tests/container's export `scripts` (``python SCRIPT /models``) in
        the image, with `root` mounted at /models and writable by the image's user."""
        root.chmod(0o777)
        volumes = {
            str(root): {"bind": "/models", "mode": "rw"},
            str(REPO / "tests" / "container"): {"bind": "/t", "mode": "ro"},
        }
        for script in scripts:
            ran = self.run(["python", f"/t/{script}", "/models"], volumes=volumes, timeout=timeout)
            assert ran.exit_code == 0, f"{script}: {ran.stderr}"
        return root


def wait(container: Container, timeout: float) -> Ran:
    try:
        status = container.wait(timeout=timeout)
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as err:
        logs = container.logs().decode(errors="replace")
        raise AssertionError(f"container did not finish within {timeout} s; logs:\n{logs}") from err
    return Ran(
        exit_code=int(status["StatusCode"]),
        stdout=container.logs(stdout=True, stderr=False).decode(errors="replace"),
        stderr=container.logs(stdout=False, stderr=True).decode(errors="replace"),
    )


def remove(container: Container) -> None:
    with suppress(docker.errors.NotFound):
        container.remove(force=True)


def wait_for_log(container: Container, needle: str, timeout: float) -> None:
    """Poll the container's stdout until it contains `needle`: every 0.1 s at first, then
    less often, up to every 0.5 s (each poll is two calls to the engine, and what is
    waited for is mostly a TensorFlow import: py-spy found these polls in 75 of the
    container tier's pytest-worker CPU-seconds at a fixed 0.1 s)."""
    deadline = time.monotonic() + timeout
    pause = 0.1
    while time.monotonic() < deadline:
        if needle in container.logs(stdout=True, stderr=False).decode(errors="replace"):
            return
        container.reload()
        if container.status == "exited":
            break
        time.sleep(pause)
        pause = min(pause * 1.5, 0.5)
    logs = container.logs().decode(errors="replace")
    raise AssertionError(f"{needle!r} not seen within {timeout} s; logs:\n{logs}")


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sample `name` with exactly `labels` in a Prometheus text page (0 when absent)."""
    wanted = sorted(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        match = re.fullmatch(r"([^{ ]+)(?:\{([^}]*)\})? (\S+)", line)
        if match and match.group(1) == name:
            found = sorted(filter(None, (match.group(2) or "").split(",")))
            if found == wanted:
                return float(match.group(3))
    return 0.0


def poll(check: Callable[[], bool], timeout: float, pause: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(pause)
    return False
