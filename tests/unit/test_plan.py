"""The plan: combining settings, CPU budget and GPUs; the child environment; explain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.plan_inputs import TWO_GPUS, plan_for
from tf_entrypoint import plan as p
from tf_entrypoint.explain import SCHEMA, render_json, render_text, summary_line, to_json
from tf_entrypoint.handoff import PLAN_VARIABLE, decode_plan
from tf_entrypoint.settings import TABLE, VARIABLES


def test_automatic_threads_follow_the_cpu_budget() -> None:
    plan = plan_for({})
    assert plan.ok
    assert plan.intra_op == p.Threads(1, "cgroup v1 quota")
    assert plan.inter_op == p.Threads(1, "cgroup v1 quota")
    assert plan.allow_growth is None
    assert plan.notices == ()


def test_zero_means_automatic() -> None:
    plan = plan_for({"TF_INTRA_OP_PARALLELISM_THREADS": "0", "TF_INTER_OP_PARALLELISM_THREADS": ""})
    assert (plan.intra_op.value, plan.inter_op.value) == (1, 1)


def test_explicit_threads_win_and_over_budget_is_warned() -> None:
    plan = plan_for({"TF_INTRA_OP_PARALLELISM_THREADS": "4", "TF_NUM_INTEROP_THREADS": "1"})
    assert plan.intra_op == p.Threads(4, "TF_INTRA_OP_PARALLELISM_THREADS")
    assert plan.inter_op == p.Threads(1, "TF_NUM_INTEROP_THREADS")
    assert [n.variable for n in plan.notices] == ["TF_INTRA_OP_PARALLELISM_THREADS"]
    assert "exceed this container's CPU budget of 1" in plan.notices[0].message


def test_library_threads_set_only_when_unset() -> None:
    plan = plan_for({"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": " "})
    assert plan.library_threads == (
        p.EnvValue("OMP_NUM_THREADS", "3", "already set"),
        p.EnvValue("OPENBLAS_NUM_THREADS", "1", "tf-entrypoint"),
        p.EnvValue("MKL_NUM_THREADS", "1", "tf-entrypoint"),
    )


def test_caps_without_gpu_warn_once_and_run() -> None:
    plan = plan_for({"TF_GPU_MEMORY_ALLOC": "0:1024, 1:2048"})
    assert plan.ok
    assert len(plan.notices) == 1
    assert plan.notices[0].variable == "TF_GPU_MEMORY_ALLOC"
    assert "no GPU is visible (no NVIDIA driver in this container)" in plan.notices[0].message
    assert plan.applied_caps == ()


def test_malformed_caps_fail_even_without_gpu() -> None:
    plan = plan_for({"TF_GPU_MEMORY_ALLOC": "0:1024,"})
    assert not plan.ok
    assert plan.problems[0].variable == "TF_GPU_MEMORY_ALLOC"


def test_cap_for_an_invisible_gpu_is_an_error() -> None:
    plan = plan_for({"TF_GPU_MEMORY_ALLOC": "0:1024, 2:512"}, gpus=TWO_GPUS)
    assert [str(x) for x in plan.problems] == [
        "TF_GPU_MEMORY_ALLOC='0:1024, 2:512' is invalid (GPU 2 is not visible): "
        "expected ids of visible GPUs (TensorFlow indexes: 0, 1)"
    ]


def test_cap_above_the_gpus_memory_is_an_error() -> None:
    plan = plan_for({"TF_GPU_MEMORY_ALLOC": "0:90000"}, gpus=TWO_GPUS)
    assert len(plan.problems) == 1
    assert "GPU 0 (NVIDIA H100) has 81559 MB" in str(plan.problems[0])


def test_cap_on_gpu_of_unknown_memory_is_applied_with_a_notice() -> None:
    plan = plan_for({"TF_GPU_MEMORY_ALLOC": "1:4096"}, gpus=TWO_GPUS)
    assert plan.ok
    assert [c.index for c in plan.applied_caps] == [1]
    assert "total memory is unknown" in plan.notices[0].message


def test_growth_with_caps_means_grow_up_to_the_cap() -> None:
    env = {"TF_GPU_MEMORY_ALLOC": "0:1024", "TF_FORCE_GPU_ALLOW_GROWTH": "True"}
    plan = plan_for(env, gpus=TWO_GPUS)
    assert plan.ok
    assert plan.allow_growth is True
    assert any("never beyond the cap (GPU 0 up to 1024 MB)" in n.message for n in plan.notices)
    child = p.child_environment(plan, env)
    assert child["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"  # TensorFlow ignores "True"
    hook = decode_plan(child[PLAN_VARIABLE])
    assert not isinstance(hook, str)
    assert hook.allow_growth is True
    assert hook.memory_limits_mb == ((0, 1024),)


def test_child_environment_carries_the_plan_natively() -> None:
    env = {"PATH": "/usr/bin", "TF_FORCE_GPU_ALLOW_GROWTH": "off"}
    child = p.child_environment(plan_for(env), env)
    assert child["PATH"] == "/usr/bin"
    assert child["TF_NUM_INTRAOP_THREADS"] == child["TF_INTRA_OP_PARALLELISM_THREADS"] == "1"
    assert child["TF_NUM_INTEROP_THREADS"] == child["TF_INTER_OP_PARALLELISM_THREADS"] == "1"
    assert child["TF_FORCE_GPU_ALLOW_GROWTH"] == "false"
    assert child["OMP_NUM_THREADS"] == "1"
    hook = decode_plan(child[PLAN_VARIABLE])
    assert not isinstance(hook, str)
    assert (hook.intra_op_threads, hook.inter_op_threads) == (1, 1)
    assert hook.memory_limits_mb == ()


def test_growth_unset_is_not_exported() -> None:
    child = p.child_environment(plan_for({}), {})
    assert "TF_FORCE_GPU_ALLOW_GROWTH" not in child


def test_json_schema_is_stable() -> None:
    env = {"TF_GPU_MEMORY_ALLOC": "0:1024"}
    doc = json.loads(render_json(plan_for(env, gpus=TWO_GPUS), env))
    assert doc["schema"] == SCHEMA
    assert set(doc) == {
        "schema",
        "tf_entrypoint_version",
        "ok",
        "problems",
        "notices",
        "cpu",
        "threads",
        "gpu",
        "environment",
    }
    assert doc["cpu"]["cpus"] == 1
    assert doc["cpu"]["exact"] == 1.5
    assert doc["cpu"]["cgroup"]["quota"]["quota_us"] == 150000
    assert doc["threads"]["intra_op"] == {"value": 1, "source": "cgroup v1 quota"}
    assert doc["gpu"]["devices"][0]["name"] == "NVIDIA H100"
    assert doc["gpu"]["memory_limits_mb"] == [
        {"index": 0, "memory_mb": 1024, "applied": True, "source": "TF_GPU_MEMORY_ALLOC"}
    ]
    assert doc["gpu"]["memory_fraction"] is None
    assert doc["environment"]["TF_NUM_INTRAOP_THREADS"] == "1"


def test_json_lists_problems_and_no_environment() -> None:
    env = {"TF_INTER_OP_PARALLELISM_THREADS": "-3"}
    doc = to_json(plan_for(env), env)
    assert doc["ok"] is False
    assert doc["problems"][0]["variable"] == "TF_INTER_OP_PARALLELISM_THREADS"
    assert doc["problems"][0]["value"] == "-3"
    assert doc["environment"] == {}


def test_text_explains_sources_and_problems() -> None:
    env = {"TF_FORCE_GPU_ALLOW_GROWTH": "perhaps"}
    text = render_text(plan_for(env), env)
    assert "PROBLEMS (the command would not start):" in text
    assert "TF_FORCE_GPU_ALLOW_GROWTH='perhaps'" in text
    assert "CPU budget       1 (cgroup v1 quota)" in text
    assert "The command receives:" not in text
    assert "Variables set:\n  TF_FORCE_GPU_ALLOW_GROWTH='perhaps'\n" in text


def test_summary_line() -> None:
    line = summary_line(plan_for({}), ("python", "train.py"))
    assert line == (
        "1 CPU (cgroup v1 quota 1.5, floor); threads intra 1 / inter 1; no GPU -> python"
    )
    caps = plan_for({"TF_GPU_MEMORY_ALLOC": "0:1024", "TF_FORCE_GPU_ALLOW_GROWTH": "1"}, TWO_GPUS)
    assert summary_line(caps, ("serve",)).endswith("2 GPUs capped 0:1024MB, memory growth -> serve")


def test_resolve_reads_a_fake_root(tmp_path: Path) -> None:
    # No /proc, no /sys under the root: no cgroup limit, affinity as given.
    plan = p.resolve({}, root=tmp_path, affinity_cpus=3)
    assert plan.cpu.cpus == 3
    assert plan.intra_op.value == 3
    assert plan.gpus.gpus == ()


GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "TF_CONFIG")


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from((*VARIABLES, *GPU_VARIABLES)),
        st.text(alphabet=st.characters(blacklist_categories=["Cs"])),
    )
)
def test_any_environment_gives_a_plan_or_documented_errors(env: dict[str, str]) -> None:
    plan = p.resolve(env, root=Path("/nonexistent-root"), affinity_cpus=4)
    assert plan.intra_op.value >= 1
    assert plan.inter_op.value >= 1
    for problem in plan.problems:
        assert problem.variable in (*VARIABLES, "TF_CONFIG")
        assert problem.value == env[problem.variable]
    json.loads(render_json(plan, env))
    render_text(plan, env)
    if plan.ok:
        p.child_environment(plan, env)


@pytest.mark.parametrize("variable", VARIABLES)
def test_every_variable_is_documented(variable: str) -> None:
    assert variable in {doc.name for doc in TABLE}


@given(
    env=st.fixed_dictionaries(
        {},
        optional={
            "TF_INTRA_OP_PARALLELISM_THREADS": st.sampled_from(["", "0", "3", "x"]),
            "TF_FORCE_GPU_ALLOW_GROWTH": st.sampled_from(["true", "off", "maybe"]),
            "TF_GPU_MEMORY_ALLOC": st.sampled_from(["0:1024", "1:512, 0:2048", "5:1"]),
        },
    )
)
def test_the_hand_off_round_trip(env: dict[str, str]) -> None:
    """What the entrypoint encodes is what the hook and the server decode."""
    plan = plan_for(env, gpus=TWO_GPUS)
    if not plan.ok:
        return
    child = p.child_environment(plan, env)
    assert decode_plan(child[PLAN_VARIABLE]) == p.hook_plan(plan)
    assert p.planned_cpus(child) == (plan.cpu.cpus, plan.cpu.source)


def test_planned_cpus_without_a_plan_computes_the_budget_only() -> None:
    cpus, source = p.planned_cpus({"TF_ENTRYPOINT_CPUS": "3.5", "TF_GPU_MEMORY_ALLOC": "bad"})
    assert (cpus, source) == (3, "TF_ENTRYPOINT_CPUS")
    # A malformed plan is no plan.
    assert p.planned_cpus({"TF_ENTRYPOINT_PLAN": "{", "TF_ENTRYPOINT_CPUS": "2"}) == (
        2,
        "TF_ENTRYPOINT_CPUS",
    )
