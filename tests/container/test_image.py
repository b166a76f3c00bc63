"""The image as a runtime: hand-off, streams, exit codes, user, signals, PID 1."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import docker
import pytest

from harness.docker import REPO, Containers, wait, wait_for_log
from tf_entrypoint import __version__
from tf_entrypoint.problems import EXIT_NOT_FOUND

APP_UID = 10001
HARDENED: dict[str, Any] = {
    "read_only": True,
    "tmpfs": {"/tmp": ""},
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
}
TF_SUM = (
    "import tensorflow as tf; "
    "print(float(tf.reduce_sum(tf.matmul(tf.ones((4, 8)), tf.ones((8, 2))))))"
)


def test_stdout_is_exactly_the_commands_output(containers: Containers) -> None:
    ran = containers.run(["echo", "hello"])
    assert ran.exit_code == 0
    assert ran.stdout == "hello\n"


def test_stdin_reaches_the_command(image: str) -> None:
    done = subprocess.run(
        ["docker", "run", "--rm", "-i", "--label", "tf-entrypoint.test=1", image, "cat"],
        input=b"line one\nline two\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"line one\nline two\n"


@pytest.mark.parametrize("code", [0, 1, 7, 255])
def test_exit_code_passes_through(containers: Containers, code: int) -> None:
    assert containers.run(["sh", "-c", f"exit {code}"]).exit_code == code


def test_death_by_signal_is_reported_like_a_shell(containers: Containers) -> None:
    # tini exits 128+N when its child dies of signal N, as a shell reports it.
    assert containers.run(["sh", "-c", "kill -KILL $$"]).exit_code == 128 + 9


def test_runs_as_numeric_non_root_user(
    containers: Containers, docker_client: docker.DockerClient, image: str
) -> None:
    config = docker_client.images.get(image).attrs["Config"]
    assert config["User"] == f"{APP_UID}:{APP_UID}"  # numeric: runAsNonRoot can verify it
    ran = containers.run(["sh", "-c", "id -u; id -g"])
    assert ran.stdout.split() == [str(APP_UID), str(APP_UID)]


def _pin(package: str, flavor: str) -> str:
    for line in (REPO / "requirements" / f"{flavor}.lock").read_text().splitlines():
        if line.startswith(f"{package}=="):
            return line.split("==")[1].split()[0]
    raise AssertionError(f"{package} is not pinned in requirements/{flavor}.lock")


def test_tf_serving_stubs_import_under_the_images_protobuf(
    containers: Containers, flavor: str
) -> None:
    # tensorflow-serving-api's generated modules against the protobuf and grpcio
    # the image pins (its own `tensorflow` requirement is dropped, see scripts/lock).
    script = (
        "import google.protobuf, grpc; "
        "from tensorflow_serving.apis import prediction_service_pb2_grpc as p, "
        "model_service_pb2_grpc as m, predict_pb2, classification_pb2, regression_pb2, "
        "get_model_metadata_pb2, get_model_status_pb2, model_management_pb2, "
        "prediction_log_pb2; "
        "from tensorflow_serving.config import model_server_config_pb2; "
        "from grpc_health.v1 import health_pb2_grpc; "
        "assert p.PredictionServiceServicer and m.ModelServiceServicer; "
        "print(google.protobuf.__version__, grpc.__version__)"
    )
    ran = containers.run(["python", "-W", "error", "-c", script])
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.split() == [_pin("protobuf", flavor), _pin("grpcio", flavor)]


def test_tensorflow_computes_hardened_under_an_arbitrary_uid(containers: Containers) -> None:
    """TensorFlow and Keras work in a read-only container without capabilities, as a
    random UID with GID 0 (OpenShift and some Kubernetes policies pick one).

    One container for the three cases (it was one each: a TensorFlow import costs
    seconds of CI's CPU); a failure's stderr says which part broke."""
    script = TF_SUM + "; import keras; print(keras.__version__ > '3')"
    ran = containers.run(["python", "-c", script], user="123456:0", **HARDENED)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.split() == ["64.0", "True"]


def test_no_arguments_runs_the_default_command(containers: Containers) -> None:
    # The default command is `serve`; with no model and no wait it exits 1, saying why.
    ran = containers.run(environment={"SERVE_WAIT_FOR_MODEL": "0"})
    assert ran.exit_code == 1, ran.stderr
    assert "-> serve" in ran.stderr  # the summary line names the default command
    assert "no version of model 'model' appeared in /models/model" in ran.stderr


def test_leading_dash_goes_to_the_default_command(containers: Containers) -> None:
    # docker run IMAGE --flag: the flag reaches `serve`, whose parser rejects it.
    ran = containers.run(["--no-such-flag"])
    assert ran.exit_code == 64, ran.stderr
    assert "-> serve" in ran.stderr
    assert "error: unknown flag --no-such-flag (exit 64; see --help)" in ran.stderr
    assert ran.stdout == ""


def test_version_and_help(containers: Containers) -> None:
    version = containers.run(["--version"])
    assert (version.exit_code, version.stdout) == (0, f"tf-entrypoint {__version__}\n")
    shown = containers.run(["--help"])
    assert shown.exit_code == 0
    assert shown.stdout.startswith("usage: tf-entrypoint")


def test_double_dash_runs_a_command_named_like_a_subcommand(containers: Containers) -> None:
    ran = containers.run(["--", "explain"])
    assert ran.exit_code == EXIT_NOT_FOUND
    assert "cannot run 'explain': command not found" in ran.stderr


def test_missing_command_is_a_clear_error(containers: Containers) -> None:
    ran = containers.run(["no-such-command", "arg"])
    assert ran.exit_code == EXIT_NOT_FOUND
    assert ran.stdout == ""
    assert "tf-entrypoint: cannot run 'no-such-command': command not found" in ran.stderr
    assert "Traceback" not in ran.stderr


SIGTERM_SCRIPT = """
import signal, sys, time
def on_term(signum, frame):
    print("cleaned up", flush=True)
    sys.exit(42)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_docker_stop_delivers_sigterm_to_the_command(containers: Containers) -> None:
    with containers.started(["python", "-c", SIGTERM_SCRIPT]) as container:
        wait_for_log(container, "ready", timeout=60)
        started = time.monotonic()
        container.stop(timeout=30)  # SIGKILL (exit 137) only after 30 s
        elapsed = time.monotonic() - started
        ran = wait(container, timeout=10)
    assert ran.stdout.splitlines() == ["ready", "cleaned up"]
    assert ran.exit_code == 42
    assert elapsed < 5, f"stop took {elapsed:.1f} s: SIGTERM did not reach the command"


#: Three orphans exit and the script counts the zombies left. No sleep stands in
#: for the orphans' exit or PID 1's reaping: each grandchild exits once it has
#: been re-parented (its parent has exited), and the script waits until each is
#: reaped, or is a zombie of the script itself (PID 1 without tini, which reaps
#: nobody), for up to 60 s; a PID 1 that does not reap leaves them zombies. An
#: orphan still running then fails the script: it would be no zombie yet.
ZOMBIE_SCRIPT = """
import os, time
def stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None, None                       # gone: reaped
    return fields[0], int(fields[1])            # state, parent
r, w = os.pipe()
for _ in range(3):
    child = os.fork()
    if child == 0:                              # child: leaves an orphan behind and exits
        parent = os.getpid()
        grandchild = os.fork()
        if grandchild == 0:                     # grandchild: exits once re-parented
            while os.getppid() == parent:
                time.sleep(0.01)
            os._exit(0)
        os.write(w, b"%d\\n" % grandchild)
        os._exit(0)
    os.waitpid(child, 0)
orphans = [int(line) for line in os.read(r, 4096).split()]
assert len(orphans) == 3, orphans
def settled(pid):
    state, parent = stat(pid)
    return state is None or (state == "Z" and parent == os.getpid())
deadline = time.monotonic() + 60
while not all(map(settled, orphans)) and time.monotonic() < deadline:
    time.sleep(0.01)
alive = [pid for pid in orphans if stat(pid)[0] not in (None, "Z")]
assert not alive, f"orphans still running: {alive}"  # the count below would miss them
zombies = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    state, _ = stat(pid)
    zombies += state == "Z"
print(zombies)
"""


def test_pid1_reaps_orphaned_zombies(containers: Containers) -> None:
    ran = containers.run(["python", "-c", ZOMBIE_SCRIPT])
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.strip() == "0"


def test_zombie_check_sees_zombies_without_tini(containers: Containers) -> None:
    # Control for the test above: with the command itself as PID 1 nobody reaps.
    ran = containers.run(["python", "-c", ZOMBIE_SCRIPT], entrypoint=["tf-entrypoint"])
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.strip() == "3"


def test_oci_labels(docker_client: docker.DockerClient, image: str, flavor: str) -> None:
    labels = docker_client.images.get(image).attrs["Config"]["Labels"]
    head = subprocess.run(
        ["git", "rev-parse", "--verify", "-q", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    for key in ("title", "description", "version", "revision", "created", "licenses"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.title"] == f"tf-entrypoint ({flavor})"
    assert labels["io.github.tf-entrypoint.flavor"] == flavor
    if head:
        assert labels["org.opencontainers.image.revision"].removesuffix("-dirty") == head


def test_runtime_image_is_lean(containers: Containers) -> None:
    # No compilers, no pip cache, no TensorFlow or CUDA C/C++ headers, no
    # static libraries, none of the CUDA wheel libraries nothing loads
    # (Dockerfile.cpu, deps stage), no apt lists.
    unused_cuda = (
        "cusolver/lib/libcusolverMg.so.*",
        "cuda_nvrtc/lib/libnvrtc.alt.so.*",
        "cuda_nvrtc/lib/libnvrtc-builtins.alt.so.*",
        "cublas/lib/libnvblas.so.*",
        "cufft/lib/libcufftw.so.*",
    )
    site = "/opt/venv/lib/python3*/site-packages"
    script = (
        "for x in gcc cc g++ make; do command -v $x; done; "
        "ls -d /root/.cache/pip /home/tf/.cache/pip 2>/dev/null; "
        f"ls -d {site}/tensorflow/include 2>/dev/null; "
        f"find {site}/nvidia \\( -name include -o -name '*.a' \\) 2>/dev/null; "
        f"ls -d {' '.join(f'{site}/nvidia/{lib}' for lib in unused_cuda)} 2>/dev/null; "
        "ls /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$'; true"
    )
    ran = containers.run(["sh", "-c", script])
    assert ran.exit_code == 0
    assert ran.stdout == ""


#: Uncompressed size targets: the CUDA libraries are about 4 GB of the CUDA image;
#: the object-store clients (s3fs, gcsfs and theirs) about 70 MB of each (docs/images.md).
IMAGE_SIZE_LIMIT = {"cpu": 1.6e9, "gpu": 7e9}


def test_image_size_within_target(
    docker_client: docker.DockerClient, image: str, flavor: str
) -> None:
    size = docker_client.images.get(image).attrs["Size"]
    assert size <= IMAGE_SIZE_LIMIT[flavor], f"{image} is {size / 1e9:.2f} GB"


def test_entrypoint_and_cmd(docker_client: docker.DockerClient, image: str) -> None:
    config = docker_client.images.get(image).attrs["Config"]
    assert config["Entrypoint"] == ["tini", "--", "tf-entrypoint"]
    assert not config["Cmd"]
    assert any(e.startswith("PATH=/opt/venv/bin:") for e in config["Env"])


def test_nvidia_runtime_settings(
    docker_client: docker.DockerClient, image: str, flavor: str
) -> None:
    # The CUDA image asks the NVIDIA container toolkit for CUDA and NVML only;
    # neither image asks for GPUs by itself (that is --gpus' or the device
    # plugin's job), so a node whose default runtime is nvidia hands out none.
    env = dict(e.split("=", 1) for e in docker_client.images.get(image).attrs["Config"]["Env"])
    expected = "compute,utility" if flavor == "gpu" else None
    assert env.get("NVIDIA_DRIVER_CAPABILITIES") == expected
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert "LD_LIBRARY_PATH" not in env  # the loader cache finds the CUDA wheels instead
