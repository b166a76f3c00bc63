"""Each image's TensorFlow stack matches its flavor, and the CUDA image works without a GPU.

The CUDA image must be a CUDA build of TensorFlow whose CUDA libraries (from
the nvidia-* wheels) resolve inside the image: by name through the dynamic
loader (ctypes, as any dlopen does), through `ldd`, and through TensorFlow's
own loader. The CPU image must carry no CUDA at all. No GPU exists where
these run, so they also pin down what a GPU-less start looks like: one line
saying why, TensorFlow on the CPU, output and exit code untouched. The GPU
behaviour itself is tested in tests/gpu.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

from harness.docker import Containers

#: Sonames TensorFlow and its CUDA libraries load (cuDNN's sub-libraries
#: included), except libcudnn_engines_runtime_compiled, which needs the driver.
CUDA_SONAMES = (
    "libcudart.so.12",
    "libcublas.so.12",
    "libcublasLt.so.12",
    "libcudnn.so.9",
    "libcudnn_graph.so.9",
    "libcudnn_ops.so.9",
    "libcudnn_cnn.so.9",
    "libcudnn_adv.so.9",
    "libcudnn_heuristic.so.9",
    "libcudnn_engines_precompiled.so.9",
    "libcufft.so.11",
    "libcurand.so.10",
    "libcusolver.so.11",
    "libcusparse.so.12",
    "libnccl.so.2",
    "libnvJitLink.so.12",
    "libnvrtc.so.12",
    "libcupti.so.12",
)
SITE = re.compile(r"^/opt/venv/lib/python3\.\d+/site-packages/nvidia/[a-z_]+/lib/")
NO_GPU_LINE = (
    "tf-entrypoint: no GPU is visible, so TensorFlow will run on the CPU: no NVIDIA driver in "
    "this container (no /dev/nvidiactl, no /proc/driver/nvidia): start it with `--gpus all` "
    "or the NVIDIA runtime"
)

#: Prints {soname: path it was loaded from, or null} after loading each by name.
LOAD_BY_NAME = textwrap.dedent(
    """
    import ctypes, json, sys
    found = {}
    for name in sys.argv[1:]:
        try:
            ctypes.CDLL(name)
        except OSError:
            found[name] = None
            continue
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if len(line.split()) >= 6}
        found[name] = next((p for p in sorted(paths) if p.rsplit("/", 1)[-1] == name), "?")
    print(json.dumps(found))
    """
)


def last_json(stdout: str) -> Any:
    lines = stdout.strip().splitlines()
    assert lines, "no output"
    return json.loads(lines[-1])


def test_tensorflow_build_matches_the_flavor(containers: Containers, flavor: str) -> None:
    code = (
        "import importlib.util, json, tensorflow as tf; info = tf.sysconfig.get_build_info(); "
        "print(json.dumps({'cuda': info['is_cuda_build'], 'cuda_version': "
        "info.get('cuda_version'), 'cudnn_version': info.get('cudnn_version'), "
        "'pynvml': importlib.util.find_spec('pynvml') is not None}))"
    )
    ran = containers.run(["python", "-c", code])
    assert ran.exit_code == 0, ran.stderr
    info = last_json(ran.stdout)
    if flavor == "gpu":
        assert info["cuda"] is True
        assert str(info["cuda_version"]).startswith("12.")
        assert str(info["cudnn_version"]).startswith("9")
        assert info["pynvml"] is True  # the entrypoint's GPU detection (NVML)
    else:
        assert info == {"cuda": False, "cuda_version": None, "cudnn_version": None, "pynvml": False}


def test_cuda_libraries_load_by_name(containers: Containers, flavor: str) -> None:
    ran = containers.run(["python", "-c", LOAD_BY_NAME, *CUDA_SONAMES])
    assert ran.exit_code == 0, ran.stderr
    found: dict[str, str | None] = last_json(ran.stdout)
    if flavor == "gpu":
        # Each from its nvidia-* wheel, via the loader cache (no LD_LIBRARY_PATH).
        misplaced = {n: p for n, p in found.items() if p is None or not SITE.match(p)}
        assert misplaced == {}
    else:
        assert set(found.values()) == {None}


def test_ldd_resolves_everything_but_the_driver(containers: Containers, flavor: str) -> None:
    script = (
        "site=$(echo /opt/venv/lib/python3*/site-packages); "
        'dirs=$site/tensorflow; [ -d "$site/nvidia" ] && dirs="$dirs $site/nvidia"; '
        "find $dirs -type f -name '*.so*' -exec ldd {} + 2>/dev/null | grep 'not found' | sort -u; "
        "find $dirs -type f -name '*.so*' | wc -l"
    )
    ran = containers.run(["sh", "-c", script], timeout=300)
    assert ran.exit_code == 0, ran.stderr
    *missing_lines, count = ran.stdout.strip().splitlines()
    missing = {line.split()[0] for line in missing_lines}
    assert int(count) > (100 if flavor == "gpu" else 20)
    # libcuda.so.1 is the driver: the NVIDIA container toolkit mounts it at start.
    assert missing <= {"libcuda.so.1"}, missing_lines


def test_tensorflow_loads_cuda_from_the_wheels(containers: Containers, flavor: str) -> None:
    # Listing GPUs makes TensorFlow's own loader open the CUDA runtime (and
    # then fail to find the driver): where it opened it from is its RUNPATH at work.
    code = (
        "import json, tensorflow as tf; gpus = tf.config.list_physical_devices('GPU'); "
        "maps = [l.split()[-1] for l in open('/proc/self/maps') if 'libcudart' in l]; "
        "print(json.dumps({'gpus': len(gpus), 'cudart': sorted(set(maps))}))"
    )
    ran = containers.run(["python", "-c", code])
    assert ran.exit_code == 0, ran.stderr
    seen = last_json(ran.stdout)
    assert seen["gpus"] == 0
    if flavor == "gpu":
        assert len(seen["cudart"]) == 1
        assert SITE.match(seen["cudart"][0]), seen
        assert seen["cudart"][0].endswith("/nvidia/cuda_runtime/lib/libcudart.so.12")
    else:
        assert seen["cudart"] == []


TF_ON_CPU = textwrap.dedent(
    """
    import sys
    import tensorflow as tf
    y = tf.matmul(tf.ones((4, 8)), tf.ones((8, 2)))
    print(float(tf.reduce_sum(y)), y.device.rsplit("/", 1)[-1])
    sys.exit(5)
    """
)


def entrypoint_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("tf-entrypoint:")]


def test_without_a_gpu_tensorflow_runs_on_the_cpu(containers: Containers, flavor: str) -> None:
    ran = containers.run(["python", "-c", TF_ON_CPU], nano_cpus=1_000_000_000)
    assert (ran.exit_code, ran.stdout) == (5, "64.0 device:CPU:0\n"), ran.stderr
    ours = entrypoint_lines(ran.stderr)
    if flavor == "gpu":
        assert ours[0] == NO_GPU_LINE
        ours = ours[1:]
    assert len(ours) == 1
    assert ours[0].endswith("; no GPU -> python")


def test_gpu_settings_without_a_gpu_warn_once_and_tensorflow_runs(
    containers: Containers, flavor: str
) -> None:
    env = {"TF_GPU_MEMORY_ALLOC": "0:1024", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    ran = containers.run(["python", "-c", TF_ON_CPU], environment=env)
    assert (ran.exit_code, ran.stdout) == (5, "64.0 device:CPU:0\n"), ran.stderr
    ours = entrypoint_lines(ran.stderr)
    warnings = [line for line in ours if "warning:" in line]
    assert len(warnings) == 1, ours
    assert warnings[0].startswith(
        "tf-entrypoint: warning: TF_GPU_MEMORY_ALLOC: no GPU is visible (no NVIDIA driver"
    )
    assert warnings[0].endswith("the memory caps are ignored")
    assert (NO_GPU_LINE in ours) is (flavor == "gpu")
    # The hook had nothing to apply on the GPU side and said nothing.
    assert not [line for line in ours if "could not" in line or "hook" in line], ours


def test_model_server_dependencies_in_both_images(containers: Containers) -> None:
    # requirements/serving.in is shared by cpu.in and gpu.in.
    code = "import httptools, prometheus_client, starlette, uvicorn, uvloop; print('ok')"
    ran = containers.run(["python", "-c", code])
    assert (ran.exit_code, ran.stdout) == (0, "ok\n"), ran.stderr
