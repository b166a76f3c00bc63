"""Where the GPU tests run, and why they skip.

Every test here is marked `gpu` and runs each check as a fresh Python process
(GPU settings only take effect before TensorFlow initialises), in one of two
places:

* host: the current interpreter can import `tensorflow` (say, a machine with a
  GPU and no Docker, after `pip install "tensorflow[and-cuda]"`). Each check
  runs as `python -m tf_entrypoint -- python -c CODE` with this repository first
  on PYTHONPATH, and CODE first installs the import hook exactly as the image's
  .pth line does (`_pth.install()`), so the plan reaches TensorFlow the same way.
* docker: otherwise, when a Docker engine can hand GPUs to containers. Each
  check runs in tf-entrypoint:gpu (built through scripts/build-image) with
  `device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])]`, i.e.
  `docker run --gpus all`, through the image's own entrypoint. These tests are
  also marked `container`.

TF_ENTRYPOINT_GPU_TESTS=host|docker forces one place (default: auto).

Skips name their reason: no NVIDIA driver on this machine; no NVIDIA runtime
in the Docker engine; TensorFlow lists no GPU. Where the entrypoint sees GPUs
in the container but TensorFlow lists none, the tests fail: that is the
"TensorFlow cannot find the CUDA libraries" trap the image must not have.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
MODE_VARIABLE = "TF_ENTRYPOINT_GPU_TESTS"
IMAGE_FLAVOR = "gpu"
#: Seconds one check may take: the first use of a GPU newer than TensorFlow's
#: built-in kernels JIT-compiles them from PTX.
RUN_TIMEOUT = 900

NO_DRIVER = "no NVIDIA driver on this machine (no /dev/nvidiactl, no /proc/driver/nvidia/gpus)"
#: What the installed hook needs before user code (what tf_entrypoint_hook.pth does).
HOOK_PRELUDE = "import tf_entrypoint._pth as _tf_pth; _tf_pth.install(); del _tf_pth\n"

#: Prints what TensorFlow sees: build info and its GPUs (name, compute capability).
TF_GPUS = """
import json, tensorflow as tf
info = tf.sysconfig.get_build_info()
gpus = tf.config.list_physical_devices("GPU")
names = [tf.config.experimental.get_device_details(g).get("device_name") for g in gpus]
print(json.dumps({"cuda": bool(info.get("is_cuda_build")), "version": tf.__version__,
                  "gpus": names}))
"""


@dataclass(frozen=True)
class Ran:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """The last stdout line as JSON, after checking the exit code."""
        assert self.exit_code == 0, self.stderr[-4000:]
        lines = self.stdout.strip().splitlines()
        assert lines, f"no output; stderr:\n{self.stderr[-4000:]}"
        return json.loads(lines[-1])


@dataclass
class GpuPlace:
    """Runs Python code and `tf-entrypoint explain` where the GPUs are."""

    where: str  # for messages: "host (python 3.x)" or "docker (tf-entrypoint:gpu)"
    docker: Any = None  # harness.docker.Containers in docker mode
    device_request: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def in_docker(self) -> bool:
        return self.docker is not None

    def python(
        self,
        code: str,
        env: dict[str, str] | None = None,
        *,
        device_ids: list[str] | None = None,
        timeout: float = RUN_TIMEOUT,
    ) -> Ran:
        """`python -c code` behind the entrypoint, with `env` added."""
        if self.in_docker:
            return self._docker(["python", "-c", code], env, device_ids, timeout)
        return self._host(["--", sys.executable, "-c", HOOK_PRELUDE + code], env, timeout)

    def explain(
        self, env: dict[str, str] | None = None, *, device_ids: list[str] | None = None
    ) -> Any:
        """`tf-entrypoint explain --json` as a dict."""
        if self.in_docker:
            ran = self._docker(["explain", "--json"], env, device_ids, 120)
        else:
            ran = self._host(["explain", "--json"], env, 120)
        assert ran.exit_code == 0, ran.stderr
        return json.loads(ran.stdout)

    def _host(self, args: list[str], env: dict[str, str] | None, timeout: float) -> Ran:
        path = os.pathsep.join(
            p for p in (str(REPO / "entrypoint"), os.environ.get("PYTHONPATH", "")) if p
        )
        done = subprocess.run(
            [sys.executable, "-m", "tf_entrypoint", *args],
            env={**os.environ, "PYTHONPATH": path, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Ran(done.returncode, done.stdout, done.stderr)

    def _docker(
        self,
        command: list[str],
        env: dict[str, str] | None,
        device_ids: list[str] | None,
        timeout: float,
    ) -> Ran:
        import docker.types  # noqa: PLC0415 - only in docker mode

        request = (
            docker.types.DeviceRequest(device_ids=device_ids, capabilities=[["gpu"]])
            if device_ids is not None
            else self.device_request
        )
        ran = self.docker.run(
            command, environment=env or {}, device_requests=[request], timeout=timeout
        )
        return Ran(ran.exit_code, ran.stdout, ran.stderr)


def has_driver() -> bool:
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/gpus").is_dir()


def chosen_mode() -> str:
    """host or docker (cheap: used at collection time to mark the tests)."""
    mode = os.environ.get(MODE_VARIABLE, "auto").strip().lower() or "auto"
    if mode not in ("auto", "host", "docker"):
        raise pytest.UsageError(f"{MODE_VARIABLE}={mode!r}: expected auto, host or docker")
    if mode == "auto":
        return "host" if importlib.util.find_spec("tensorflow") is not None else "docker"
    return mode


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    docker_mode = chosen_mode() == "docker"
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.gpu)
            if docker_mode:
                item.add_marker(pytest.mark.container)


def tensorflow_log(stderr: str) -> str:
    """The line of TensorFlow's log that says why it found no GPU, if any."""
    keys = ("Cannot dlopen", "cuInit", "Could not find cuda", "CUDA_ERROR", "driver")
    hits = [line.strip() for line in stderr.splitlines() if any(k in line for k in keys)]
    return hits[-1][-300:] if hits else "no hint in its log"


def host_place() -> GpuPlace:
    if not has_driver():
        pytest.skip(NO_DRIVER)
    place = GpuPlace(where=f"host (python {sys.version.split()[0]} at {sys.executable})")
    ran = place.python(TF_GPUS, {"TF_ENTRYPOINT_QUIET": "1"})
    seen = ran.json()
    if not seen["cuda"]:
        pytest.skip(
            f"TensorFlow lists no GPU: tensorflow {seen['version']} here is not a CUDA build "
            '(pip install "tensorflow[and-cuda]")'
        )
    if not seen["gpus"]:
        pytest.skip(f"TensorFlow lists no GPU on this host ({tensorflow_log(ran.stderr)})")
    place.extra["tf_gpus"] = seen["gpus"]
    return place


def docker_place() -> GpuPlace:
    try:
        import docker  # noqa: PLC0415
        import docker.errors  # noqa: PLC0415
        import docker.types  # noqa: PLC0415

        from harness.docker import Containers  # noqa: PLC0415
        from harness.images import build_image  # noqa: PLC0415
    except ImportError as err:
        pytest.skip(f"no importable tensorflow, and no docker SDK for the image ({err})")
    try:
        client = docker.from_env(timeout=300)
        info = client.info()
    except docker.errors.DockerException as err:
        pytest.skip(f"no importable tensorflow, and no Docker engine ({err})")
    local = os.environ.get("DOCKER_HOST", "unix://").startswith("unix://")
    if local and not has_driver():
        pytest.skip(NO_DRIVER)
    runtimes = sorted(info.get("Runtimes") or {})
    hook = shutil.which("nvidia-container-runtime-hook") if local else None
    if "nvidia" not in runtimes and not hook and local:
        pytest.skip(
            f"no nvidia runtime in the Docker engine (runtimes: {', '.join(runtimes) or 'none'}; "
            "no nvidia-container-runtime-hook): install the NVIDIA container toolkit"
        )
    image = build_image(IMAGE_FLAVOR)
    place = GpuPlace(
        where=f"docker ({image}, --gpus all)",
        docker=Containers(client, image),
        device_request=docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]]),
    )
    try:
        plan = place.explain()
    except docker.errors.APIError as err:
        if "could not select device driver" in str(err):
            pytest.skip(f"no nvidia runtime in the Docker engine ({err.explanation})")
        raise
    if not plan["gpu"]["devices"]:
        pytest.skip(f"no GPU arrived in the container: {plan['gpu']['reason']}")
    ran = place.python(TF_GPUS, {"TF_ENTRYPOINT_QUIET": "1"})
    seen = ran.json()
    if not seen["gpus"]:
        pytest.fail(
            f"the entrypoint sees {len(plan['gpu']['devices'])} GPU(s) in {image} but TensorFlow "
            f"lists none: it cannot load CUDA ({tensorflow_log(ran.stderr)})"
        )
    place.extra["tf_gpus"] = seen["gpus"]
    return place


@pytest.fixture(scope="session")
def gpu() -> GpuPlace:
    """Where the GPUs are; skips (once per session) with the reason when nowhere."""
    return host_place() if chosen_mode() == "host" else docker_place()
