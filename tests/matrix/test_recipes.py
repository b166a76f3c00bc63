"""docs/own-image.md's recipes ("Use it in your own image"): shown verbatim, built and run here.

(b) Dockerfile.add-entrypoint is what every matrix cell is built with; these
tests add (a) Dockerfile.app on our own image, (b) Dockerfile.keep-entrypoint
in front of an image whose ENTRYPOINT stays (a stand-in of Rasa's image), and
that tini is PID 1 in (b).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import docker
import pytest

from harness.docker import Containers
from harness.images import build_image
from tests.matrix.conftest import (
    CELLS,
    HERE,
    RECIPES,
    docker_build,
    recipe_context,
    repository,
    tensorflow_image,
)

#: The page that shows the recipes (they were in the README).
OWN_IMAGE = (HERE.parents[1] / "docs" / "own-image.md").read_text()
ONE_CPU: dict[str, Any] = {"nano_cpus": 1_000_000_000}


def indented(text: str) -> str:
    return "\n".join(f"    {line}" if line else "" for line in text.splitlines())


@pytest.mark.parametrize(
    "name",
    [
        "Dockerfile.app",
        "requirements.txt",
        "app/train.py",
        "Dockerfile.add-entrypoint",
        "Dockerfile.keep-entrypoint",
    ],
)
def test_the_docs_show_the_recipe_verbatim(name: str) -> None:
    shown = indented((RECIPES / name).read_text())
    assert shown in OWN_IMAGE, f"docs/own-image.md differs from {name}"


def test_app_on_our_image(docker_client: docker.DockerClient, build_dir: Path) -> None:
    base = build_image("cpu")
    context = build_dir / "app"
    shutil.copytree(RECIPES, context)
    for wheel in context.glob("*.whl"):  # a user's local `make wheel` copy is not the recipe's
        wheel.unlink()
    image = docker_build(context, f"{repository()}:app", "Dockerfile.app", IMAGE=base)
    containers = Containers(docker_client, image)
    ran = containers.run(None, timeout=300, **ONE_CPU)  # the image's CMD
    assert ran.exit_code == 0, ran.stderr
    rows = {" ".join(line.split()[:-1]): line.split()[-1] for line in ran.stdout.splitlines()[1:-1]}
    assert rows == {"intra-op threads": "1", "inter-op threads": "1", "epochs": "3"}
    who = containers.run(["id", "-u"])
    assert who.stdout.strip() == "10001"


@pytest.fixture(scope="module")
def rasa_like(docker_client: docker.DockerClient, wheel: Path, build_dir: Path) -> Containers:
    """A stand-in of a Rasa image, then Dockerfile.keep-entrypoint on top of it."""
    tmp = build_dir / "rasa"
    tmp.mkdir()
    tf_image = tensorflow_image(CELLS["tf2.12-py3.10"], tmp)
    app = tmp / "app"
    app.mkdir()
    for name in ("rasa-like.Dockerfile", "rasa_like.py"):
        shutil.copy(HERE / name, app / name)
    app_image = docker_build(
        app, f"{repository()}:rasa-like-app", "rasa-like.Dockerfile", TF_IMAGE=tf_image
    )
    context = recipe_context(tmp, "recipe", wheel, RECIPES / "Dockerfile.keep-entrypoint")
    image = docker_build(
        context,
        f"{repository()}:rasa-like",
        "Dockerfile.keep-entrypoint",
        APP_IMAGE=app_image,
    )
    return Containers(docker_client, image)


def test_entrypoint_in_front_of_an_entrypoint_that_stays(rasa_like: Containers) -> None:
    ran = rasa_like.run(["train"], timeout=300, **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.split()[-3:] == ["1", "1", "0"]
    summary = [line for line in ran.stderr.splitlines() if line.startswith("tf-entrypoint:")]
    assert len(summary) == 1, ran.stderr
    assert summary[0].endswith("-> rasa")
    assert rasa_like.run(["-c", "id -u"], entrypoint=["sh"]).stdout.strip() == "1001"


def test_a_bad_variable_stops_rasa_before_it_starts(rasa_like: Containers) -> None:
    ran = rasa_like.run(["train"], environment={"TF_GPU_MEMORY_ALLOC": "0:1024,"}, **ONE_CPU)
    assert ran.exit_code == 78, ran.stderr
    assert ran.stdout == ""
    assert "not starting 'rasa'" in ran.stderr


def test_tini_is_pid_1_in_the_added_image(cell_containers: Containers) -> None:
    ran = cell_containers.run(["cat", "/proc/1/cmdline"])
    assert ran.exit_code == 0, ran.stderr
    argv = ran.stdout.split("\0")
    assert argv[0].endswith("tini"), argv
    assert argv[1:3] == ["--", "tf-entrypoint"], argv
