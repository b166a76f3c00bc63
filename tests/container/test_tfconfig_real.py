"""TF_CONFIG in the image: checked before the hand-off, then passed on byte for byte.

Needs tf_entrypoint.plan to add tf_entrypoint.tfconfig's problems and notices to the plan.
"""

from __future__ import annotations

import json

from harness.docker import Containers
from tf_entrypoint.problems import EXIT_CONFIG

PRINT_TF_CONFIG = ["python", "-c", "import os; print(os.environ['TF_CONFIG'], end='')"]


def test_a_valid_tf_config_reaches_the_command_unchanged(containers: Containers) -> None:
    # Odd spacing and key order on purpose: nothing may be re-serialised.
    raw = '{"task": {"index": 1, "type": "worker"},  "cluster": {"worker": ["w0:2222", "w1:2222"]}}'
    ran = containers.run(PRINT_TF_CONFIG, environment={"TF_CONFIG": raw})
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout == raw


def test_every_problem_is_listed_and_nothing_starts(containers: Containers) -> None:
    raw = json.dumps(
        {"cluster": {"worker": ["w0:2222", "w1"]}, "task": {"type": "worker", "index": 2}}
    )
    ran = containers.run(
        ["echo", "started"],
        environment={"TF_CONFIG": raw, "TF_FORCE_GPU_ALLOW_GROWTH": "maybe"},
    )
    assert ran.exit_code == EXIT_CONFIG
    assert ran.stdout == ""
    assert "TF_FORCE_GPU_ALLOW_GROWTH='maybe' is invalid" in ran.stderr
    assert f"TF_CONFIG={raw!r} is invalid (cluster.worker[1] 'w1' has no ':port')" in ran.stderr
    assert "(task.index 2 is out of range: cluster.worker has 2 entries)" in ran.stderr
    assert "3 configuration problems" in ran.stderr


def test_an_empty_tf_config_is_a_warning(containers: Containers) -> None:
    ran = containers.run(PRINT_TF_CONFIG, environment={"TF_CONFIG": ""})
    assert ran.exit_code == 0, ran.stderr
    assert "warning: TF_CONFIG: the value is empty" in ran.stderr
