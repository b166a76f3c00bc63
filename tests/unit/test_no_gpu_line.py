"""The CUDA image without a GPU: one stderr line at hand-off says so, and why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.plan_inputs import NO_GPU, TWO_GPUS, plan_for
from tf_entrypoint.explain import asks_for_cuda, no_gpu_line
from tf_entrypoint.nvidia import NO_DRIVER_REASON

REPO = Path(__file__).resolve().parents[2]
CUDA_IMAGE = {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),
        ("", False),
        ("utility", False),
        ("graphics,video", False),
        ("compute,utility", True),
        ("utility, Compute", True),
        ("all", True),
        ("ALL", True),
        ("computer", False),
    ],
)
def test_asks_for_cuda(value: str | None, expected: bool) -> None:
    env = {} if value is None else {"NVIDIA_DRIVER_CAPABILITIES": value}
    assert asks_for_cuda(env) is expected


def test_cuda_image_without_gpu_says_why() -> None:
    line = no_gpu_line(plan_for({}, NO_GPU), CUDA_IMAGE)
    assert line == (
        "no GPU is visible, so TensorFlow will run on the CPU: no NVIDIA driver in this container"
    )


def test_nothing_to_say_with_gpus_or_in_the_cpu_image() -> None:
    assert no_gpu_line(plan_for({}, TWO_GPUS), CUDA_IMAGE) is None
    assert no_gpu_line(plan_for({}, NO_GPU), {}) is None


def run_entrypoint(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m tf_entrypoint -- python -c ...` in a clean environment (no GPU here)."""
    code = "import sys; print('out'); sys.exit(3)"
    return subprocess.run(
        [sys.executable, "-m", "tf_entrypoint", "--", sys.executable, "-c", code],
        cwd=REPO / "entrypoint",
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO / "entrypoint"),
            "TF_ENTRYPOINT_HOOK": "off",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(
    Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/gpus").exists(),
    reason="this host has an NVIDIA driver: the no-GPU path is not taken",
)
def test_hand_off_line_order_and_untouched_command() -> None:
    ran = run_entrypoint(CUDA_IMAGE)
    assert (ran.returncode, ran.stdout) == (3, "out\n")
    lines = ran.stderr.splitlines()
    assert len(lines) == 2, ran.stderr
    said = "tf-entrypoint: no GPU is visible, so TensorFlow will run on the CPU: "
    assert lines[0] == said + NO_DRIVER_REASON
    assert lines[1].startswith("tf-entrypoint: ")
    assert "; no GPU -> " in lines[1]
    # Quiet silences it with the summary; the CPU image never prints it.
    quiet = run_entrypoint({**CUDA_IMAGE, "TF_ENTRYPOINT_QUIET": "1"})
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (3, "out\n", "")
    cpu = run_entrypoint({})
    assert len(cpu.stderr.splitlines()) == 1, cpu.stderr
