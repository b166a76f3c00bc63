"""TF_CONFIG in the plan: its problems stop the hand-off, its value reaches the command as is.

Needs tf_entrypoint.plan.make_plan to add check_tf_config's problems and
tf_config_notices' notices (see entrypoint/tfconfig.py).
"""

from __future__ import annotations

import json

from tests.unit.plan_inputs import CPU, NO_GPU
from tf_entrypoint import plan as p
from tf_entrypoint.explain import render_json
from tf_entrypoint.settings import parse_settings
from tf_entrypoint.tfconfig import TF_CONFIG, check_tf_config

GOOD = json.dumps(
    {"cluster": {"worker": ["w0:2222", "w1:2222"]}, "task": {"type": "worker", "index": 1}}
)
BAD = json.dumps(
    {"cluster": {"worker": ["w0:2222", "w1:2222"]}, "task": {"type": "worker", "index": 2}}
)


def plan_for(env: dict[str, str]) -> p.Plan:
    return p.make_plan(parse_settings(env), CPU, NO_GPU, env)


def test_a_valid_tf_config_passes_unchanged() -> None:
    plan = plan_for({TF_CONFIG: GOOD})
    assert plan.ok
    assert plan.notices == ()
    assert p.child_environment(plan, {TF_CONFIG: GOOD})[TF_CONFIG] == GOOD


def test_problems_join_the_other_variables() -> None:
    env = {TF_CONFIG: BAD, "TF_FORCE_GPU_ALLOW_GROWTH": "maybe"}
    plan = plan_for(env)
    assert not plan.ok
    assert [problem.variable for problem in plan.problems] == [
        "TF_FORCE_GPU_ALLOW_GROWTH",
        TF_CONFIG,
    ]
    assert plan.problems[1:] == check_tf_config(BAD)
    (listed,) = [
        x for x in json.loads(render_json(plan, env))["problems"] if x["variable"] == TF_CONFIG
    ]
    assert listed["value"] == BAD
    assert listed["reason"] == "task.index 2 is out of range: cluster.worker has 2 entries"


def test_unset_and_empty() -> None:
    assert plan_for({}).ok
    plan = plan_for({TF_CONFIG: ""})
    assert plan.ok
    assert [notice.variable for notice in plan.notices] == [TF_CONFIG]
