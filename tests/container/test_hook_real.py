"""The in-process hook with the real TensorFlow, under the limits the engine sets.

What the user sees is TensorFlow's own getters and its real thread count, in
every way a Python process can come to import TensorFlow: a script, `python
-m`, Keras 3, multiprocessing workers, and `docker exec` (no entrypoint).
Expected values follow the plan's rule: intra = inter = the CPU budget
rounded down, at least 1; explicit variables win.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from harness.docker import Containers

ONE_CPU: dict[str, Any] = {"nano_cpus": 1_000_000_000}
#: Bypasses tini and tf-entrypoint: what `docker exec` gets (no TF_ENTRYPOINT_PLAN).
NO_ENTRYPOINT: dict[str, Any] = {"entrypoint": ["python"]}
HOOK_OFF = {"TF_ENTRYPOINT_HOOK": "off"}
#: The CPU image, and the CUDA image for what its TensorFlow build decides: the getters
#: under each kind of limit, the threads it starts, `docker exec` (tests/container/conftest.py).
IMAGE_FLAVORS = ("cpu",)

GETTERS = (
    "import tensorflow as tf; tf.constant(1); "
    "print(tf.config.threading.get_intra_op_parallelism_threads(), "
    "tf.config.threading.get_inter_op_parallelism_threads())"
)
THREAD_COUNT = textwrap.dedent(
    """
    import os
    import tensorflow as tf
    x = tf.random.uniform((256, 256))
    for _ in range(8):
        x = tf.matmul(x, x) / 256.0
    x.numpy()
    print(len(os.listdir("/proc/self/task")))
    """
)

#: Mounted read-only at /probe: a package for `python -m` and a multiprocessing script.
PROBE_FILES = {
    "tfprobe/__init__.py": """
        def threads():
            import tensorflow as tf
            tf.constant(1)
            return (
                tf.config.threading.get_intra_op_parallelism_threads(),
                tf.config.threading.get_inter_op_parallelism_threads(),
            )
        """,
    "tfprobe/__main__.py": """
        from tfprobe import threads
        print(*threads())
        """,
    "pool.py": """
        import multiprocessing
        import sys

        from tfprobe import threads

        if __name__ == "__main__":
            with multiprocessing.get_context(sys.argv[1]).Pool(1) as pool:
                intra, inter = pool.apply(threads)
            assert "tensorflow" not in sys.modules  # only the worker imported it
            print(intra, inter)
        """,
}


def last_line(stdout: str) -> str:
    lines = stdout.strip().splitlines()
    assert lines, "no output"
    return lines[-1]


def getters(containers: Containers, command: list[str], **kwargs: Any) -> tuple[int, int]:
    ran = containers.run(command, **kwargs)
    assert ran.exit_code == 0, ran.stderr
    intra, inter = last_line(ran.stdout).split()
    return int(intra), int(inter)


def python_getters(containers: Containers, **kwargs: Any) -> tuple[int, int]:
    return getters(containers, ["python", "-c", GETTERS], **kwargs)


@pytest.fixture(scope="module")
def host_cpus(containers: Containers) -> int:
    """CPUs in a limit-free container's affinity mask (TensorFlow's own default).

    Asked of Python with the entrypoint bypassed: `nproc` honours
    OMP_NUM_THREADS, which the entrypoint sets.
    """
    code = "import os; print(len(os.sched_getaffinity(0)))"
    ran = containers.run(["-c", code], **NO_ENTRYPOINT)
    assert ran.exit_code == 0, ran.stderr
    return int(ran.stdout)


@pytest.fixture
def probe(tmp_path: Path) -> dict[str, Any]:
    """run() arguments that mount PROBE_FILES at /probe and put it on PYTHONPATH."""
    root = tmp_path / "probe"
    for name, text in PROBE_FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        path.chmod(0o644)
    for directory in (root, root / "tfprobe"):
        directory.chmod(0o755)  # the image runs as uid 10001
    return {
        "volumes": {str(root): {"bind": "/probe", "mode": "ro"}},
        "environment": {"PYTHONPATH": "/probe"},
    }


def with_env(kwargs: dict[str, Any], **env: str) -> dict[str, Any]:
    return {**kwargs, "environment": {**kwargs.get("environment", {}), **env}}


@pytest.mark.flavors("cpu", "gpu")
@pytest.mark.parametrize(
    "limits",
    [
        # --cpus 1 is ONE_CPU, which the other cases run under (the CPU image's)
        pytest.param({"nano_cpus": 500_000_000}, id="cpus=0.5"),
        pytest.param({"cpuset_cpus": "0"}, id="cpuset=0"),
    ],
)
def test_getters_report_the_budget(containers: Containers, limits: dict[str, Any]) -> None:
    assert python_getters(containers, **limits) == (1, 1)


def test_getters_without_a_limit_report_the_machines_cpus(
    containers: Containers, host_cpus: int
) -> None:
    assert python_getters(containers) == (host_cpus, host_cpus)


def test_explicit_variables_win(containers: Containers) -> None:
    env = {"TF_INTRA_OP_PARALLELISM_THREADS": "3", "TF_INTER_OP_PARALLELISM_THREADS": "2"}
    assert python_getters(containers, environment=env, **ONE_CPU) == (3, 2)


def test_hook_off_leaves_the_getters_alone(containers: Containers) -> None:
    # The native variables still size the pools; only the getters stay at 0.
    assert python_getters(containers, environment=HOOK_OFF, **ONE_CPU) == (0, 0)


def test_stdout_is_untouched_and_quiet_on_success(containers: Containers) -> None:
    # TF_ENTRYPOINT_QUIET silences the entrypoint's summary, never a warning.
    env = {"TF_ENTRYPOINT_QUIET": "1", "TF_ENTRYPOINT_HOOK_VERBOSE": "1"}
    ran = containers.run(["python", "-c", GETTERS], environment=env, **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout == "1 1\n"
    assert [line for line in ran.stderr.splitlines() if line.startswith("tf-entrypoint:")] == []


def test_verbose_says_what_the_hook_applied(containers: Containers) -> None:
    env = {"TF_ENTRYPOINT_HOOK_VERBOSE": "1"}
    ran = containers.run(["python", "-c", GETTERS], environment=env, **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout == "1 1\n"
    applied = [line for line in ran.stderr.splitlines() if "hook applied" in line]
    assert applied == [
        "tf-entrypoint: hook applied the plan from TF_ENTRYPOINT_PLAN after import tensorflow: "
        "intra_op_threads=1, inter_op_threads=1"
    ]


def thread_count(containers: Containers, *, entrypoint: bool, **kwargs: Any) -> int:
    """Threads in a process after a few matmuls, with or without the entrypoint."""
    if entrypoint:
        ran = containers.run(["python", "-c", THREAD_COUNT], **kwargs)
    else:
        ran = containers.run(["-c", THREAD_COUNT], **NO_ENTRYPOINT, **kwargs)
    assert ran.exit_code == 0, ran.stderr
    return int(last_line(ran.stdout))


@pytest.mark.flavors("cpu", "gpu")
def test_thread_count_follows_the_plan(containers: Containers, host_cpus: int) -> None:
    if host_cpus < 2:
        pytest.fail(f"this case needs a host with at least 2 CPUs, found {host_cpus}")
    default = thread_count(containers, entrypoint=False, environment=HOOK_OFF, **ONE_CPU)
    planned = thread_count(containers, entrypoint=True, **ONE_CPU)
    exec_like = thread_count(containers, entrypoint=False, **ONE_CPU)
    # TensorFlow's defaults start one intra-op and one inter-op thread per
    # host CPU; under --cpus=1 the plan starts one of each.
    assert planned < default, (planned, default)
    # Without the entrypoint the hook alone sizes TensorFlow's pools.
    assert exec_like < default, (exec_like, default)


def test_keras_3_gets_the_plan(containers: Containers) -> None:
    code = (
        "import keras; print(keras.__version__.split('.')[0], keras.backend.backend()); "
        "import tensorflow as tf; keras.ops.ones((2, 2)); "
        "print(tf.config.threading.get_intra_op_parallelism_threads(), "
        "tf.config.threading.get_inter_op_parallelism_threads())"
    )
    ran = containers.run(["python", "-c", code], **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.splitlines()[-2:] == ["3 tensorflow", "1 1"]


@pytest.mark.parametrize(
    "statement",
    ["from tensorflow import keras", "import tensorflow.compat.v1", "import tensorflow.python"],
)
def test_other_ways_to_import_tensorflow(containers: Containers, statement: str) -> None:
    code = f"{statement}; {GETTERS}"
    assert getters(containers, ["python", "-c", code], **ONE_CPU) == (1, 1)


def test_python_dash_m(containers: Containers, probe: dict[str, Any]) -> None:
    assert getters(containers, ["python", "-m", "tfprobe"], **probe, **ONE_CPU) == (1, 1)


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_multiprocessing_workers(
    containers: Containers, probe: dict[str, Any], method: str
) -> None:
    command = ["python", "/probe/pool.py", method]
    assert getters(containers, command, **probe, **ONE_CPU) == (1, 1)


def test_subprocess_of_the_command(containers: Containers) -> None:
    code = (
        "import subprocess, sys; "
        f"sys.exit(subprocess.run([sys.executable, '-c', {GETTERS!r}]).returncode)"
    )
    assert getters(containers, ["python", "-c", code], **ONE_CPU) == (1, 1)


def test_without_the_entrypoint_the_hook_computes_the_plan(containers: Containers) -> None:
    code = GETTERS + "; import os; print(os.environ.get('TF_ENTRYPOINT_PLAN'))"
    ran = containers.run(["-c", code], **ONE_CPU, **NO_ENTRYPOINT)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.splitlines() == ["1 1", "None"]


def test_without_the_entrypoint_the_hook_can_be_turned_off(containers: Containers) -> None:
    env = with_env(NO_ENTRYPOINT, **HOOK_OFF)
    assert getters(containers, ["-c", GETTERS], **env, **ONE_CPU) == (0, 0)


def exec_getters(container: Any, **kwargs: Any) -> str:
    """`docker exec CONTAINER python -c GETTERS`: stdout, after checking the exit code."""
    # docker-py's exec has no read timeout: `timeout` bounds it.
    result: Any = container.exec_run(
        ["timeout", "120", "python", "-c", GETTERS], demux=True, **kwargs
    )
    out, err = result.output
    assert result.exit_code == 0, (err or b"").decode(errors="replace")
    return str((out or b"").decode())


@pytest.mark.flavors("cpu", "gpu")
def test_docker_exec_gets_the_plan(containers: Containers) -> None:
    with containers.started(["sleep", "300"], **ONE_CPU) as container:
        assert exec_getters(container) == "1 1\n"
        assert exec_getters(container, environment=HOOK_OFF) == "0 0\n"


def test_hook_survives_a_read_only_root_and_an_arbitrary_uid(containers: Containers) -> None:
    hardened: dict[str, Any] = {
        "read_only": True,
        "tmpfs": {"/tmp": ""},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "user": "123456:0",
    }
    assert python_getters(containers, **hardened, **ONE_CPU) == (1, 1)


def startup_imports(containers: Containers, code: str, **kwargs: Any) -> tuple[str, dict[str, int]]:
    """stdout and {module: cumulative us} of `python -X importtime -c code`, no entrypoint."""
    ran = containers.run(["-X", "importtime", "-c", code], **NO_ENTRYPOINT, **kwargs)
    assert ran.exit_code == 0, ran.stderr
    imported = re.findall(r"^import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)$", ran.stderr, re.M)
    return ran.stdout, {name: int(total) for total, name in imported}


def test_startup_cost_in_the_image(containers: Containers) -> None:
    # The .pth runs at every interpreter start. The image sets
    # PYTHONDONTWRITEBYTECODE, so the module must have been byte-compiled at
    # install (pip does; without it, compiling costs ~5 ms per start). How long
    # the import takes is a benchmark's question (bench/overhead.py,
    # hook_added_ms), never a test's: tests do not assume a CPU's speed.
    code = (
        "import os, sys; m = sys.modules['_tf_entrypoint_pth']; "
        "print(os.path.exists(m.__cached__), "
        "any(getattr(f, 'tf_entrypoint_hook', False) for f in sys.meta_path))"
    )
    stdout, on = startup_imports(containers, code)
    assert stdout == "True True\n"
    assert "_tf_entrypoint_pth" in on
    _, off = startup_imports(containers, "pass", environment=HOOK_OFF)
    assert set(on) - set(off) == {"_tf_entrypoint_pth"}
