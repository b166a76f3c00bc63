"""Fixtures for tests that build the images and run them in a real Docker engine.

Every test in this directory is marked `container`. The `flavor` fixture is
parametrised over FLAVORS and `image` builds that flavor's image, so each test
runs against every image (ids `[cpu]`, `[gpu]`); each image is built once per
session through scripts/build-image, exactly as `make image-FLAVOR` does (the
layer cache makes a rebuild of an unchanged tree fast). pytest runs all of one
flavor's tests before building the next.

TF_ENTRYPOINT_TEST_FLAVORS=cpu (a comma-separated subset of FLAVORS) limits a
run to some images, e.g. to skip the 3 GB CUDA download on a quick local run.

A module that sets `IMAGE_FLAVORS` (a tuple of flavors) runs against those
images only; its tests of the others are deselected, not skipped; a test
marked `@pytest.mark.flavors("cpu", "gpu")` runs against those instead of its
module's. The serving modules test the CPU image alone: the server is the same
Python package over the same TensorFlow release in both images, and what the
CUDA image changes (its TensorFlow build and CUDA libraries, NVML, the plan
for GPUs, its size) is what runs on both: test_image, test_cuda_stack,
test_plan_real, test_model_server_command (which serves models in the CUDA
image too), test_tfserving_stub and test_tfconfig_real whole, and in
test_hook_real, test_saved_model_loading and test_memory the tests that
touch the TensorFlow build itself (its thread pools and getters, a Session's
pools, one bounded request under a memory limit). Running every serving test
twice took CI from 24 to 57 minutes; running those three modules whole on
both images cost about 800 of the container tier's 6,000 test-seconds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from harness.docker import Containers
from harness.images import build_image
from harness.models import ModelLibrary, library
from harness.servers import ServerPool

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    kept, other_images = [], []
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.container)
            if not _tests_its_flavor(item):
                other_images.append(item)
                continue
        kept.append(item)
    if other_images:
        config.hook.pytest_deselected(items=other_images)
        items[:] = kept


def _tests_its_flavor(item: pytest.Item) -> bool:
    """False for a test of an image it leaves out: its `flavors` marker, else its
    module's IMAGE_FLAVORS."""
    marker = item.get_closest_marker("flavors")
    wanted: tuple[str, ...] | None = (
        marker.args
        if marker is not None
        else getattr(getattr(item, "module", None), "IMAGE_FLAVORS", None)
    )
    callspec = getattr(item, "callspec", None)
    if wanted is None or callspec is None or "flavor" not in callspec.params:
        return True
    return callspec.params["flavor"] in wanted


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


@pytest.fixture(scope="session")
def model_library(docker_client: docker.DockerClient) -> ModelLibrary:
    """Every test model, exported once (by the CPU image, whose TensorFlow the CUDA image
    shares) and cached across runs: harness/models.py."""
    return library(build_image("cpu" if "cpu" in FLAVORS else FLAVORS[0]))


@pytest.fixture(scope="session")
def servers(
    containers: Containers, model_library: ModelLibrary, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerPool]:
    """The session's servers of this flavor's image, shared by spec (harness/servers.py)."""
    pool = ServerPool(containers, model_library, tmp_path_factory.mktemp("servers"))
    yield pool
    pool.close()
