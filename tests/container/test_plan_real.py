"""The plan under real limits the Docker engine sets: quotas, CPU sets, parents."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.docker import Containers
from tf_entrypoint.problems import EXIT_CONFIG

V1_CPU = Path("/sys/fs/cgroup/cpu")


def explain(containers: Containers, **kwargs: Any) -> dict[str, Any]:
    ran = containers.run(["explain", "--json"], **kwargs)
    assert ran.exit_code == 0, ran.stderr
    doc: dict[str, Any] = json.loads(ran.stdout)
    return doc


@pytest.fixture(scope="module")
def host_cpus(containers: Containers) -> int:
    """CPUs a container sees without limits (the engine's host)."""
    return int(containers.run(["nproc"]).stdout)


@pytest.mark.parametrize(
    ("nano_cpus", "exact", "floor"),
    [(500_000_000, 0.5, 1), (1_000_000_000, 1.0, 1), (2_000_000_000, 2.0, 2)],
)
def test_cpus_quota(
    containers: Containers, host_cpus: int, nano_cpus: int, exact: float, floor: int
) -> None:
    if floor > host_cpus:
        pytest.fail(f"this case needs a host with at least {floor} CPUs, found {host_cpus}")
    doc = explain(containers, nano_cpus=nano_cpus)
    cpu = doc["cpu"]
    assert cpu["exact"] == exact
    assert cpu["source"] in {"cgroup v1 quota", "cgroup v2 quota"}
    assert cpu["cpus"] == floor
    assert cpu["cgroup"]["quota"]["period_us"] == 100_000
    assert doc["threads"]["intra_op"] == {"value": floor, "source": cpu["source"]}
    assert doc["threads"]["inter_op"]["value"] == floor
    assert doc["environment"]["TF_NUM_INTRAOP_THREADS"] == str(floor)
    assert doc["environment"]["OMP_NUM_THREADS"] == str(floor)


def test_cpuset(containers: Containers) -> None:
    doc = explain(containers, cpuset_cpus="0")
    assert doc["cpu"]["affinity_cpus"] == 1
    assert (doc["cpu"]["cpus"], doc["cpu"]["source"]) == (1, "cpu affinity")
    assert doc["threads"]["intra_op"]["value"] == 1


def test_no_limit_matches_tensorflows_own_default(containers: Containers, host_cpus: int) -> None:
    doc = explain(containers)
    assert (doc["cpu"]["cpus"], doc["cpu"]["source"]) == (host_cpus, "cpu affinity")
    assert doc["cpu"]["cgroup"]["readable"] is True
    assert doc["cpu"]["cgroup"]["quota"] is None


@pytest.mark.parametrize(("rounding", "expected"), [("floor", 1), ("ceil", 2), ("nearest", 2)])
def test_unusual_period_and_rounding(
    containers: Containers, host_cpus: int, rounding: str, expected: int
) -> None:
    if host_cpus < 2:
        pytest.fail("this case needs a host with at least 2 CPUs")
    doc = explain(
        containers,
        cpu_quota=75_000,
        cpu_period=50_000,
        environment={"TF_ENTRYPOINT_CPU_ROUNDING": rounding},
    )
    assert doc["cpu"]["cgroup"]["quota"]["quota_us"] == 75_000
    assert doc["cpu"]["cgroup"]["quota"]["period_us"] == 50_000
    assert doc["cpu"]["exact"] == 1.5
    assert doc["cpu"]["cpus"] == expected


def test_override_wins_over_the_quota(containers: Containers) -> None:
    doc = explain(containers, nano_cpus=1_000_000_000, environment={"TF_ENTRYPOINT_CPUS": "3"})
    assert (doc["cpu"]["cpus"], doc["cpu"]["source"]) == (3, "TF_ENTRYPOINT_CPUS")


def test_downward_api_hint_when_cgroup_files_are_hidden(containers: Containers) -> None:
    # A tmpfs over /sys/fs/cgroup hides every controller file, as some sandboxes do.
    env = {"TF_ENTRYPOINT_CPU_LIMIT_MILLICORES": "500"}
    doc = explain(containers, tmpfs={"/sys/fs/cgroup": ""}, environment=env)
    assert doc["cpu"]["cgroup"]["readable"] is False
    assert doc["cpu"]["source"] == "TF_ENTRYPOINT_CPU_LIMIT_MILLICORES"
    assert (doc["cpu"]["exact"], doc["cpu"]["cpus"]) == (0.5, 1)
    # With the files readable, the hint is ignored: the cgroup is the truth.
    doc = explain(containers, nano_cpus=2_000_000_000, environment=env)
    assert doc["cpu"]["source"] in {"cgroup v1 quota", "cgroup v2 quota"}


@pytest.fixture
def parent_cgroup() -> Iterator[str]:
    """A cgroup v1 cpu cgroup with a 0.5-CPU quota, for --cgroup-parent."""
    if os.geteuid() != 0 or not (V1_CPU / "cpu.cfs_quota_us").exists():
        pytest.fail("needs root and the cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu")
    name = f"tf-entrypoint-parent-{uuid.uuid4().hex[:8]}"
    path = V1_CPU / name
    path.mkdir()
    try:
        (path / "cpu.cfs_period_us").write_text("100000")
        (path / "cpu.cfs_quota_us").write_text("50000")
        yield f"/{name}"
    finally:
        for child in path.iterdir():
            if child.is_dir():
                child.rmdir()
        path.rmdir()


def test_cgroup_parent_quota_is_invisible_inside_the_container(
    containers: Containers, parent_cgroup: str, host_cpus: int
) -> None:
    # The documented limitation: Docker mounts only the container's own cgroup.
    doc = explain(containers, cgroup_parent=parent_cgroup)
    assert doc["cpu"]["source"] == "cpu affinity"
    assert doc["cpu"]["cpus"] == host_cpus


def test_cgroup_parent_quota_found_with_the_host_tree_mounted(
    containers: Containers, parent_cgroup: str
) -> None:
    # With the host's hierarchy mounted read-only, the parent walk finds it.
    doc = explain(
        containers,
        cgroup_parent=parent_cgroup,
        volumes={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "ro"}},
    )
    quota = doc["cpu"]["cgroup"]["quota"]
    assert quota["cgroup"] == parent_cgroup
    assert doc["cpu"]["exact"] == 0.5
    assert doc["cpu"]["cpus"] == 1


def test_summary_line_on_stderr_only(containers: Containers, flavor: str) -> None:
    ran = containers.run(["echo", "hello"], nano_cpus=1_000_000_000)
    assert ran.stdout == "hello\n"
    lines = ran.stderr.splitlines()
    if flavor == "gpu":
        # The CUDA image started without a GPU says so first, with the reason.
        assert lines[0] == (
            "tf-entrypoint: no GPU is visible, so TensorFlow will run on the CPU: no NVIDIA "
            "driver in this container (no /dev/nvidiactl, no /proc/driver/nvidia): start it "
            "with `--gpus all` or the NVIDIA runtime"
        )
        lines = lines[1:]
    assert len(lines) == 1
    assert lines[0].startswith("tf-entrypoint: 1 CPU (cgroup v")
    assert lines[0].endswith("threads intra 1 / inter 1; no GPU -> echo")


def test_quiet_silences_the_summary(containers: Containers) -> None:
    ran = containers.run(["echo", "hello"], environment={"TF_ENTRYPOINT_QUIET": "yes"})
    assert (ran.stdout, ran.stderr) == ("hello\n", "")


def test_configuration_errors_stop_before_the_command(containers: Containers) -> None:
    env = {
        "TF_INTRA_OP_PARALLELISM_THREADS": "two",
        "TF_GPU_MEMORY_ALLOC": "0:1024,",
        "TF_NUM_INTEROP_THREADS": "2",
        "TF_INTER_OP_PARALLELISM_THREADS": "3",
    }
    ran = containers.run(["sh", "-c", "echo started; exit 0"], environment=env)
    assert ran.exit_code == EXIT_CONFIG
    assert ran.stdout == ""
    errors = [line for line in ran.stderr.splitlines() if "error:" in line]
    assert len(errors) == 3
    assert any("TF_INTRA_OP_PARALLELISM_THREADS='two'" in e for e in errors)
    assert any("TF_GPU_MEMORY_ALLOC='0:1024,'" in e for e in errors)
    both = ("TF_NUM_INTEROP_THREADS", "TF_INTER_OP_PARALLELISM_THREADS")
    assert any(all(name in e for name in both) for e in errors)
    assert "not starting 'sh' (exit 78" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_gpu_caps_without_gpu_warn_and_run(containers: Containers) -> None:
    ran = containers.run(["echo", "ok"], environment={"TF_GPU_MEMORY_ALLOC": "0:1024, 1:2048"})
    assert (ran.exit_code, ran.stdout) == (0, "ok\n")
    warnings = [line for line in ran.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 1
    assert "TF_GPU_MEMORY_ALLOC: no GPU is visible (no NVIDIA driver" in warnings[0]


def test_growth_reaches_the_command_lowercase(containers: Containers) -> None:
    ran = containers.run(
        ["sh", "-c", 'echo "$TF_FORCE_GPU_ALLOW_GROWTH"'],
        environment={"TF_FORCE_GPU_ALLOW_GROWTH": "True"},
    )
    assert ran.stdout == "true\n"


def test_explain_reports_no_gpu_with_its_reason(containers: Containers) -> None:
    doc = explain(containers)
    assert doc["gpu"]["devices"] == []
    assert doc["gpu"]["reason"].startswith("no NVIDIA driver in this container")


def test_explain_exits_78_on_problems(containers: Containers) -> None:
    ran = containers.run(["explain", "--json"], environment={"TF_ENTRYPOINT_CPUS": "0"})
    assert ran.exit_code == EXIT_CONFIG
    doc = json.loads(ran.stdout)
    assert doc["ok"] is False
    assert doc["problems"][0]["variable"] == "TF_ENTRYPOINT_CPUS"
