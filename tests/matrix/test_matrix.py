"""The supported range, proved: each TensorFlow of the matrix under a real --cpus limit.

Every test runs once per cell (ids `[tf2.12]`, `[tf2.15]`, `[tf2.16]`,
`[tf2.21]`, `[tf2.12-py3.10]`): the wheel installed next to that TensorFlow by
the README's recipe, on a 1-CPU CFS quota (`--cpus 1`), where the plan is
1 intra-op and 1 inter-op thread.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.docker import Containers, Ran
from tests.matrix.conftest import Cell

ONE_CPU: dict[str, Any] = {"nano_cpus": 1_000_000_000}
NO_ENTRYPOINT: dict[str, Any] = {"entrypoint": ["python3"]}
HOOK_OFF = {"TF_ENTRYPOINT_HOOK": "off"}
PROBE = "/probe/probe.py"


def run(containers: Containers, command: list[str], mount: dict[str, Any], **kwargs: Any) -> Ran:
    ran = containers.run(command, volumes=mount, timeout=300, **kwargs)
    assert ran.exit_code == 0, ran.stderr
    return ran


def answer(ran: Ran) -> list[str]:
    lines = ran.stdout.strip().splitlines()
    assert lines, f"no output; stderr:\n{ran.stderr}"
    return lines[-1].split()


def our_lines(ran: Ran) -> list[str]:
    return [line for line in ran.stderr.splitlines() if line.startswith("tf-entrypoint:")]


@pytest.fixture(scope="session")
def docker_host_cpus(cell_containers: Containers) -> int:
    """CPUs in a limit-free container's affinity mask (TensorFlow's own default)."""
    code = "import os; print(len(os.sched_getaffinity(0)))"
    ran = cell_containers.run(["-c", code], **NO_ENTRYPOINT)
    assert ran.exit_code == 0, ran.stderr
    return int(ran.stdout)


@pytest.fixture(scope="session")
def report(cell_containers: Containers, probe_mount: dict[str, Any]) -> tuple[list[str], Ran]:
    """One run through the entrypoint under --cpus 1: a Keras fit (importing keras only),
    then TensorFlow's and Python's versions, Keras, and the getters."""
    ran = run(cell_containers, ["python3", PROBE, "report"], probe_mount, **ONE_CPU)
    return answer(ran), ran


def test_cell_has_its_tensorflow_and_python(cell: Cell, report: tuple[list[str], Ran]) -> None:
    assert report[0][:2] == [cell.tensorflow, cell.python]


def test_keras_fit_gets_the_plan(cell: Cell, report: tuple[list[str], Ran]) -> None:
    assert report[0][2:] == [cell.keras, "tensorflow", "fit-ok", "1", "1"]


def test_getters_report_the_plan(report: tuple[list[str], Ran]) -> None:
    assert report[0][-2:] == ["1", "1"]
    # The one summary line, nothing else of ours: no warning from the hook.
    lines = our_lines(report[1])
    assert len(lines) == 1, report[1].stderr
    assert "1 CPU" in lines[0]
    assert "threads intra 1 / inter 1" in lines[0]


def test_explicit_variables_win(cell_containers: Containers, probe_mount: dict[str, Any]) -> None:
    env = {"TF_INTRA_OP_PARALLELISM_THREADS": "3", "TF_INTER_OP_PARALLELISM_THREADS": "2"}
    ran = run(
        cell_containers, ["python3", PROBE, "getters"], probe_mount, environment=env, **ONE_CPU
    )
    assert answer(ran) == ["3", "2"]


def test_native_variables_reach_the_command(cell_containers: Containers) -> None:
    ran = cell_containers.run(["env"], environment=HOOK_OFF, **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    env = dict(line.split("=", 1) for line in ran.stdout.splitlines() if "=" in line)
    for name in (
        "TF_NUM_INTRAOP_THREADS",
        "TF_NUM_INTEROP_THREADS",
        "TF_INTRA_OP_PARALLELISM_THREADS",
        "TF_INTER_OP_PARALLELISM_THREADS",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
    ):
        assert env.get(name) == "1", name


def test_native_variables_size_the_pools_without_the_hook(
    cell_containers: Containers, probe_mount: dict[str, Any], docker_host_cpus: int
) -> None:
    """This TensorFlow reads TF_NUM_INTRAOP/INTEROP_THREADS itself: fewer threads than default."""
    if docker_host_cpus < 2:
        pytest.fail(f"this case needs a host with at least 2 CPUs, found {docker_host_cpus}")
    command = ["python3", PROBE, "threads"]
    default = run(
        cell_containers, command[1:], probe_mount, environment=HOOK_OFF, **NO_ENTRYPOINT, **ONE_CPU
    )
    native = run(cell_containers, command, probe_mount, environment=HOOK_OFF, **ONE_CPU)
    assert int(answer(native)[0]) < int(answer(default)[0]), (answer(native), answer(default))
    # The getters stay at 0 with the hook off: only the native variables acted.
    assert answer(native)[1:] == ["0", "0"]


def test_hook_without_the_entrypoint(
    cell_containers: Containers, probe_mount: dict[str, Any]
) -> None:
    """`docker exec`, or an ENTRYPOINT someone else set: the hook computes the plan itself."""
    ran = run(cell_containers, [PROBE, "getters"], probe_mount, **NO_ENTRYPOINT, **ONE_CPU)
    assert answer(ran) == ["1", "1"]
    assert our_lines(ran) == []


def test_bad_variable_stops_the_command_with_78(cell_containers: Containers) -> None:
    env = {"TF_INTER_OP_PARALLELISM_THREADS": "two"}
    ran = cell_containers.run(["python3", "-c", "print('ran')"], environment=env, **ONE_CPU)
    assert ran.exit_code == 78, ran.stderr
    assert ran.stdout == ""
    assert "TF_INTER_OP_PARALLELISM_THREADS='two' is invalid" in ran.stderr


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param(
            {"TF_INTRA_OP_PARALLELISM_THREADS": "2", "TF_INTER_OP_PARALLELISM_THREADS": "1"},
            ["2", "1", "0"],
            id="explicit",
        ),
        # Rasa's GPU path too: it lists no GPU and warns; the entrypoint warns once.
        pytest.param({"TF_GPU_MEMORY_ALLOC": "0:1024"}, ["1", "1", "0"], id="planned"),
    ],
)
def test_a_program_that_configures_tensorflow_like_rasa(
    cell_containers: Containers,
    probe_mount: dict[str, Any],
    env: dict[str, str],
    expected: list[str],
) -> None:
    """Rasa reads the variables itself and calls tf.config: the hook and it agree, no error."""
    ran = run(
        cell_containers,
        ["python3", "/probe/rasa_like.py"],
        probe_mount,
        environment=env,
        **ONE_CPU,
    )
    assert answer(ran) == expected
    # The summary and one warning (no GPU for the caps; or 2 threads over a
    # 1-CPU budget); nothing from the hook.
    lines = our_lines(ran)
    assert len(lines) == 2, ran.stderr
    assert lines[0].startswith("tf-entrypoint: warning: "), lines
    assert "Traceback" not in ran.stderr
