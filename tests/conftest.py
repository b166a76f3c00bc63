"""Fixtures shared by the suites that run the images (tests/container, tests/matrix)."""

from __future__ import annotations

from collections.abc import Iterator

import docker
import pytest


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    client = docker.from_env(timeout=300)
    client.ping()  # fail loudly, never skip: these tests are the real thing
    yield client
    client.close()
