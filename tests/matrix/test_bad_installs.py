"""Bad installations: one clear line on stderr, and the command still runs.

- the wheel in an image without TensorFlow (the entrypoint says so at the hand-off);
- TensorFlow 2.11, older than the tested range (the hook says so, and still applies the plan);
- two copies of the hook on one Python's path: the system site-packages and the
  app user's `pip install --user` (the hook says so, and applies the plan once).

Also what `python -S` and PYTHONNOUSERSITE do to a hook in the user site.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import pytest

from harness.docker import Containers
from tests.matrix.conftest import (
    CELLS,
    HERE,
    NO_TF,
    OLD,
    docker_build,
    recipe_context,
    repository,
    tensorflow_image,
    with_entrypoint,
)

ONE_CPU: dict[str, Any] = {"nano_cpus": 1_000_000_000}
GETTERS = ["python3", "/probe/probe.py", "getters"]


@pytest.fixture(scope="module")
def tmp(build_dir: Path) -> Path:
    path = build_dir / "bad"
    path.mkdir(exist_ok=True)
    return path


def tf_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("tf-entrypoint:")]


def test_no_tensorflow(docker_client: docker.DockerClient, wheel: Path, tmp: Path) -> None:
    image = with_entrypoint(NO_TF, tensorflow_image(NO_TF, tmp), wheel, tmp)
    ran = Containers(docker_client, image).run(["python3", "-c", "print('ran')"], **ONE_CPU)
    assert (ran.exit_code, ran.stdout) == (0, "ran\n"), ran.stderr
    lines = tf_lines(ran.stderr)
    said = [line for line in lines if "TensorFlow is not installed" in line]
    assert said == [
        "tf-entrypoint: warning: TensorFlow is not installed in the Python that has "
        "tf-entrypoint (/opt/venv): the command still gets the thread variables, but the "
        "in-process hook (thread getters, GPU memory caps) works only in a Python where both "
        "are installed"
    ]
    # Besides it, only the summary line.
    assert len(lines) == 2, ran.stderr


def test_tensorflow_older_than_the_range(
    docker_client: docker.DockerClient,
    wheel: Path,
    tmp: Path,
    probe_mount: dict[str, Any],
) -> None:
    image = with_entrypoint(OLD, tensorflow_image(OLD, tmp), wheel, tmp)
    ran = Containers(docker_client, image).run(GETTERS, volumes=probe_mount, timeout=300, **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.split() == ["1", "1"]  # still applied
    lines = tf_lines(ran.stderr)
    said = [line for line in lines if "older than" in line]
    assert said == [
        "tf-entrypoint: TensorFlow 2.11.1 is older than 2.12, the oldest version tf-entrypoint "
        "is tested with; the plan is applied as far as this TensorFlow allows"
    ]
    assert len(lines) == 2, ran.stderr  # and the summary


@pytest.fixture(scope="module")
def two_copies(docker_client: docker.DockerClient, wheel: Path, tmp: Path) -> Containers:
    """tf2.12-py3.10 (system site-packages) plus the app user's `pip install --user`."""
    cell = CELLS["tf2.12-py3.10"]
    system = with_entrypoint(cell, tensorflow_image(cell, tmp), wheel, tmp)
    context = recipe_context(tmp, "user-install", wheel, HERE / "user-install.Dockerfile")
    image = docker_build(
        context, f"{repository()}:two-copies", "user-install.Dockerfile", IMAGE=system
    )
    return Containers(docker_client, image)


USER_SITE = "/home/app/.local/lib/python3.10/site-packages"
SYSTEM_SITE = "/usr/local/lib/python3.10/dist-packages"


def test_two_copies_of_the_hook(two_copies: Containers, probe_mount: dict[str, Any]) -> None:
    ran = two_copies.run(GETTERS, volumes=probe_mount, timeout=300, **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.split() == ["1", "1"]
    said = [line for line in tf_lines(ran.stderr) if "copies" in line]
    assert said == [
        "tf-entrypoint: 2 copies of the tf-entrypoint hook are on this Python's path "
        f"({USER_SITE}, {SYSTEM_SITE}); the first applies the plan, once; uninstall the others"
    ]


@pytest.mark.parametrize(
    ("command", "env"),
    [
        pytest.param(GETTERS, {"PYTHONNOUSERSITE": "1"}, id="PYTHONNOUSERSITE"),
        pytest.param(["python3", "-s", *GETTERS[1:]], {}, id="python-s"),
    ],
)
def test_without_the_user_site_one_copy_remains(
    two_copies: Containers, probe_mount: dict[str, Any], command: list[str], env: dict[str, str]
) -> None:
    ran = two_copies.run(command, volumes=probe_mount, environment=env, timeout=300, **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.split() == ["1", "1"]  # the system copy alone
    assert [line for line in tf_lines(ran.stderr) if "copies" in line] == []


def test_python_dash_capital_s_skips_every_hook(
    two_copies: Containers, probe_mount: dict[str, Any]
) -> None:
    code = (
        f"import sys; sys.path.append({SYSTEM_SITE!r}); import tensorflow as tf; "
        "tf.constant(1); print(tf.config.threading.get_intra_op_parallelism_threads(), "
        "tf.config.threading.get_inter_op_parallelism_threads())"
    )
    command = ["python3", "-S", "-c", code]
    ran = two_copies.run(command, volumes=probe_mount, timeout=300, **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    # No .pth file ran: the getters are TensorFlow's own 0; the native variables still act.
    assert ran.stdout.split() == ["0", "0"]


def test_a_venv_with_system_site_packages_gets_the_system_hook(
    two_copies: Containers, probe_mount: dict[str, Any]
) -> None:
    """TensorFlow and tf-entrypoint in the system site-packages, the command in a venv over it."""
    script = (
        "python3 -m venv --system-site-packages /tmp/venv && "
        "PYTHONNOUSERSITE=1 /tmp/venv/bin/python /probe/probe.py getters"
    )
    ran = two_copies.run(["-c", script], entrypoint=["sh"], volumes=probe_mount, **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    # No entrypoint ran: the system copy's hook computed the plan itself.
    assert ran.stdout.split()[-2:] == ["1", "1"]
