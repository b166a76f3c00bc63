"""Fixtures for tests that build the images and run them in a real Docker engine.

Every test in this directory is marked `container`. The `flavor` fixture is
parametrised over FLAVORS and `image` builds that flavor's image, so each test
runs against every image (ids `[cpu]`, `[gpu]`); each image is built once per
session through scripts/build-image, exactly as `make image-FLAVOR` does (the
layer cache makes a rebuild of an unchanged tree fast). pytest runs all of one
flavor's tests before building the next.

TF_ENTRYPOINT_TEST_FLAVORS=cpu (a comma-separated subset of FLAVORS) limits a
run to some images, e.g. to skip the 3 GB CUDA download on a quick local run.
"""

from __future__ import annotations

import os
from pathlib import Path

import docker
import pytest

from tests.container.dockerkit import Containers, build_image

ALL_FLAVORS = ["cpu", "gpu"]


def _flavors() -> list[str]:
    raw = os.environ.get("TF_ENTRYPOINT_TEST_FLAVORS", "").strip()
    if not raw:
        return ALL_FLAVORS
    chosen = [f.strip() for f in raw.split(",") if f.strip()]
    unknown = sorted(set(chosen) - set(ALL_FLAVORS))
    if unknown or not chosen:
        raise pytest.UsageError(
            f"TF_ENTRYPOINT_TEST_FLAVORS={raw!r}: expected a comma-separated subset of "
            f"{', '.join(ALL_FLAVORS)}"
        )
    return [f for f in ALL_FLAVORS if f in chosen]


FLAVORS = _flavors()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.container)


@pytest.fixture(scope="session", params=FLAVORS)
def flavor(request: pytest.FixtureRequest) -> str:
    """cpu or gpu: the image under test."""
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def image(flavor: str, docker_client: docker.DockerClient) -> str:
    return build_image(flavor)


@pytest.fixture(scope="session")
def containers(docker_client: docker.DockerClient, image: str) -> Containers:
    return Containers(docker_client, image)
