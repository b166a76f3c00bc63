"""pytest-docker fixtures for compose.yaml: the train-then-serve demo, for real.

Every test here is marked `container`. The session builds tf-entrypoint:cpu
once (scripts/build-image, as `make image-cpu` does), brings the compose
project up under a unique name with the server published on an ephemeral
port of 127.0.0.1 only, waits for /readyz, and always removes the project
with its volume (`down -v`), also when `up` fails.

Compose v2 (`docker compose`) is used where the machine has it, else v1
(`docker-compose`). v1 has no `up --wait`, so both run `up -d` and readiness
is polled with `docker_services.wait_until_responsive`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from pytest_docker.plugin import DockerComposeExecutor, Services, get_docker_services

from harness import web
from harness.docker import REPO
from harness.images import build_image

#: Seconds for the project to train and the server to answer /readyz.
READY_TIMEOUT = 240


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.container)


def compose_command() -> str:
    """`docker compose` (v2) when the docker CLI has it, else `docker-compose` (v1)."""
    v2 = subprocess.run(
        ["docker", "compose", "version"], capture_output=True, check=False, timeout=30
    )
    if v2.returncode == 0:
        return "docker compose"
    if shutil.which("docker-compose"):
        return "docker-compose"
    pytest.fail("neither `docker compose` (v2) nor `docker-compose` (v1) is installed")


@pytest.fixture(scope="session")
def cpu_image() -> str:
    """tf-entrypoint:cpu, built now; or $TF_ENTRYPOINT_TEST_IMAGE, an image built before."""
    image = os.environ.get("TF_ENTRYPOINT_TEST_IMAGE") or build_image("cpu")
    # The demo's named volume is created from the image's /models, so its
    # owner must be the image's user or the trainer cannot write the model.
    owner = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "stat", image, "-c", "%u", "/models"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if owner.stdout.strip() != "10001":
        pytest.fail(
            f"{image} has no /models owned by uid 10001 (stat: {owner.stdout}{owner.stderr}); "
            "the Dockerfile must create it for the compose demo's volume"
        )
    return image


@pytest.fixture(scope="session")
def docker_compose_command(cpu_image: str) -> str:
    # Shell-style assignments: pytest-docker runs the command through a shell.
    # SERVE_PUBLISH "127.0.0.1:" publishes on an ephemeral port of loopback only
    # (SERVE_GRPC_PUBLISH likewise, so two servers never want the same host port).
    return (
        f"SERVE_PUBLISH=127.0.0.1: SERVE_GRPC_PUBLISH=127.0.0.1: "
        f"TF_ENTRYPOINT_IMAGE={cpu_image} {compose_command()}"
    )


@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    return str(REPO / "compose.yaml")


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    return f"tfe-serving-test-{os.getpid()}"


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    return ["up -d"]


@pytest.fixture(scope="session")
def docker_cleanup() -> list[str]:
    return ["down -v --remove-orphans -t 30"]


@pytest.fixture(scope="session")
def compose(
    docker_compose_command: str, docker_compose_file: str, docker_compose_project_name: str
) -> DockerComposeExecutor:
    """Run compose subcommands against the test project: compose.execute("ps -q serve")."""
    return DockerComposeExecutor(
        docker_compose_command, docker_compose_file, docker_compose_project_name
    )


@pytest.fixture(scope="session")
def docker_services(  # noqa: PLR0917 - pytest passes fixtures by name
    compose: DockerComposeExecutor,
    docker_compose_command: str,
    docker_compose_file: str,
    docker_compose_project_name: str,
    docker_setup: list[str],
    docker_cleanup: list[str],
) -> Iterator[Services]:
    """pytest-docker's fixture, plus `down -v` when `up` itself fails."""
    started = False
    try:
        with get_docker_services(
            docker_compose_command,
            docker_compose_file,
            docker_compose_project_name,
            docker_setup,
            docker_cleanup,
        ) as services:
            started = True
            yield services
    finally:
        if not started:
            for command in docker_cleanup:
                compose.execute(command, success_codes=range(256))


def is_ready(url: str) -> bool:
    try:
        return web.get(f"{url}/readyz", timeout=2, trust_env=False).status_code == 200
    except httpx2.TransportError:
        return False


def wait_ready(services: Services, compose: DockerComposeExecutor, url: str) -> None:
    try:
        services.wait_until_responsive(lambda: is_ready(url), timeout=READY_TIMEOUT, pause=0.5)
    except Exception as err:
        logs = compose.execute("logs --no-color", success_codes=range(256)).decode(errors="replace")
        raise AssertionError(f"{url} not ready within {READY_TIMEOUT} s:\n{logs[-6000:]}") from err


@pytest.fixture(scope="session")
def server_url(docker_services: Services, compose: DockerComposeExecutor, docker_ip: str) -> str:
    """Base URL of the `serve` service once it answers /readyz (127.0.0.1 only)."""
    assert docker_ip == "127.0.0.1", "tests talk to a local engine only"
    url = f"http://{docker_ip}:{docker_services.port_for('serve', 8501)}"
    wait_ready(docker_services, compose, url)
    return url


@pytest.fixture
def client(server_url: str) -> Iterator[httpx2.Client]:
    with web.client(base_url=server_url, timeout=30, trust_env=False) as http:
        yield http
