"""TF Serving gets the plan as flags: a stub tensorflow_model_server prints its argv.

The image has no TF Serving; a stub of that name, first on PATH, shows the
command line the entrypoint hands off to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.docker import Containers
from tf_entrypoint.tfserving import rest_api_threads

STUB = """\
#!/usr/bin/env python3
import json
import sys

print(json.dumps(sys.argv[1:]))
"""
ONE_CPU: dict[str, Any] = {"nano_cpus": 1_000_000_000}
MODEL = ["--model_name=m", "--model_base_path=/models/m"]


@pytest.fixture
def stub(tmp_path: Path) -> dict[str, Any]:
    """run() arguments that put the stub first on PATH."""
    root = tmp_path / "stub"
    root.mkdir()
    root.chmod(0o755)  # the image runs as uid 10001
    server = root / "tensorflow_model_server"
    server.write_text(STUB)
    server.chmod(0o755)
    return {
        "volumes": {str(root): {"bind": "/stub", "mode": "ro"}},
        "environment": {"PATH": "/stub:/opt/venv/bin:/usr/bin:/bin"},
    }


def served_argv(containers: Containers, command: list[str], **kwargs: Any) -> list[str]:
    ran = containers.run(command, **kwargs)
    assert ran.exit_code == 0, ran.stderr
    args: list[str] = json.loads(ran.stdout)
    return args


def test_flags_follow_the_budget(containers: Containers, stub: dict[str, Any]) -> None:
    args = served_argv(containers, ["tensorflow_model_server", *MODEL], **stub, **ONE_CPU)
    assert args == [
        *MODEL,
        "--tensorflow_intra_op_parallelism=1",
        "--tensorflow_inter_op_parallelism=1",
        f"--rest_api_num_threads={rest_api_threads(1)}",
    ]


def test_absolute_path_to_the_server(containers: Containers, stub: dict[str, Any]) -> None:
    args = served_argv(containers, ["/stub/tensorflow_model_server"], **stub, **ONE_CPU)
    assert "--tensorflow_intra_op_parallelism=1" in args


def test_user_flags_are_kept_and_not_duplicated(
    containers: Containers, stub: dict[str, Any]
) -> None:
    user = [
        *MODEL,
        "--rest_api_num_threads=16",
        "--tensorflow_intra_op_parallelism",
        "3",
    ]
    args = served_argv(containers, ["tensorflow_model_server", *user], **stub, **ONE_CPU)
    assert args[: len(user)] == user
    assert args[len(user) :] == ["--tensorflow_inter_op_parallelism=1"]


def test_session_parallelism_excludes_the_pool_flags(
    containers: Containers, stub: dict[str, Any]
) -> None:
    # TF Serving refuses to start with all three set.
    command = ["tensorflow_model_server", "--tensorflow_session_parallelism=2"]
    args = served_argv(containers, command, **stub, **ONE_CPU)
    assert args == [
        "--tensorflow_session_parallelism=2",
        f"--rest_api_num_threads={rest_api_threads(1)}",
    ]


def test_other_commands_are_untouched(containers: Containers, stub: dict[str, Any]) -> None:
    ran = containers.run(["echo", "--model_name=m"], **stub, **ONE_CPU)
    assert ran.stdout == "--model_name=m\n"
