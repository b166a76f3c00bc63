"""`/usr/bin/tensorflow_model_server` in the real image: KServe's exact command, with the
image's ENTRYPOINT replaced (as Kubernetes `command:` does), is planned, then serves.

Also: the same command through the entrypoint, a refused flag, and a derived image
whose /usr/bin/tensorflow_model_server is another program (TF Serving's real binary in
real life; a stub that prints its argv here), which gets the plan as flags, as before.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import docker
import pytest

from harness.docker import Containers
from harness.models import ModelLibrary
from harness.servers import MODEL_SERVER, ServerPool, ServerSpec, cpus_of
from tf_entrypoint.tfserving import rest_api_threads

ONE_CPU: dict[str, Any] = {"nano_cpus": 1_000_000_000}
#: KServe's TensorFlow ServingRuntime: its command and args, verbatim.
KSERVE = [
    "--model_name=flowers",
    "--port=9000",
    "--rest_api_port=8080",
    "--model_base_path=/mnt/models",
    "--rest_api_timeout_in_ms=60000",
]


@pytest.fixture(scope="module")
def model(model_library: ModelLibrary, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory as KServe mounts it: VERSION/saved_model.pb (y = x + 1: the
    library's plus/1)."""
    return model_library.copy("plus", tmp_path_factory.mktemp("kserve") / "flowers", [1])


def logs(container: Any) -> str:
    text: str = container.logs().decode(errors="replace")
    return text


def read_in(container: Any, path: str) -> bytes:
    output = container.exec_run(["cat", path]).output
    assert isinstance(output, bytes)
    return output


def test_kserves_command_plans_then_serves(servers: ServerPool, model: Path) -> None:
    spec = ServerSpec(
        args=tuple(KSERVE),
        entrypoint=(MODEL_SERVER,),
        volumes=((str(model), "/mnt/models", "ro"),),
        rest_port=8080,
    )
    # The test stops it: its own.
    with servers.private(spec) as server:
        container = server.container
        answer = server.post("/v1/models/flowers:predict", {"instances": [1.0, 2.0]})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"predictions": [2.0, 3.0]}
        assert server.states("flowers") == {1: "AVAILABLE"}
        # KServe's grpc-v1 on --port=9000, with TF Serving's own stubs.
        predict, metadata, health = server.grpc(
            {"op": "predict", "model": "flowers", "inputs": {"x": {"values": [1.0, 2.0]}}},
            {"op": "metadata", "model": "flowers"},
            {"op": "health"},
            address="127.0.0.1:9000",
        )
        assert predict["outputs"] == {"y": [2.0, 3.0]}, predict
        assert metadata["response"]["model_spec"] == {"name": "flowers", "version": "1"}
        assert health["response"] == {"status": "SERVING"}
        text = logs(container)
        # The entrypoint's plan (its start-up line) for its CPUs (1, or 2 when the harness
        # runs every server with two front-ends), then the server with it.
        cpus = int(cpus_of(spec))
        assert f"threads intra {cpus} / inter {cpus}; no GPU -> tensorflow_model_server" in text
        assert f"TensorFlow intra-op {cpus}, inter-op {cpus}" in text, text
        assert "gRPC 9000, REST 8080" in text, text
        # The hand-off is an exec: the server is the container's PID 1, with the plan.
        cmdline = read_in(container, "/proc/1/cmdline").split(b"\0")
        assert cmdline[1:3] == [b"-m", b"tf_entrypoint.serving"], cmdline
        environ = read_in(container, "/proc/1/environ").split(b"\0")
        assert f"TF_NUM_INTRAOP_THREADS={cpus}".encode() in environ
        assert any(line.startswith(b"TF_ENTRYPOINT_PLAN=") for line in environ)
        # PID 1 without tini still drains and exits 0 on SIGTERM.
        container.stop(timeout=20)
        assert container.wait(timeout=30)["StatusCode"] == 0, logs(container)


def test_thread_flags_become_the_plan(containers: Containers) -> None:
    ran = containers.run(
        ["--tensorflow_intra_op_parallelism=2", "--tensorflow_session_parallelism=3", "--version"],
        entrypoint=[MODEL_SERVER],
        **ONE_CPU,
    )
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.startswith("TensorFlow ModelServer: tf-entrypoint "), ran.stdout
    # session parallelism is ignored once a pool flag is given (TF Serving's rule);
    # 2 intra-op threads over a budget of 1 is said, as for the variable.
    assert "--tensorflow_session_parallelism=3 is ignored" in ran.stderr
    assert "threads intra 2 / inter 1" in ran.stderr, ran.stderr
    assert "2 intra-op threads exceed this container's CPU budget of 1" in ran.stderr


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (
            ["--enable_per_model_batching_parameters"],
            "--enable_per_model_batching_parameters is not supported: per-model batching",
        ),
        (
            ["--per_process_gpu_memory_fraction=1.5"],
            "--per_process_gpu_memory_fraction='1.5' is invalid (above 1",
        ),
        (["--tensorflow_intra_op_parallelism=many"], "--tensorflow_intra_op_parallelism='many'"),
        (["--no_such_flag=1"], "unknown flag --no_such_flag"),
    ],
)
def test_a_refused_flag_exits_64_naming_it(
    containers: Containers, extra: list[str], named: str
) -> None:
    ran = containers.run([*KSERVE, *extra], entrypoint=[MODEL_SERVER], **ONE_CPU)
    assert ran.exit_code == 64, ran.stderr
    assert named in ran.stderr
    assert "Traceback" not in ran.stderr


def test_gpu_memory_fraction_without_a_gpu(containers: Containers) -> None:
    # The plan reads it (floor(share x each GPU's MB)); with no GPU in this
    # container it is ignored with one warning, as TF Serving ignores it.
    flag = "--per_process_gpu_memory_fraction"
    ran = containers.run([f"{flag}=0.5", "--version"], entrypoint=[MODEL_SERVER], **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.startswith("TensorFlow ModelServer: tf-entrypoint "), ran.stdout
    warnings = [line for line in ran.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 1, ran.stderr
    assert f"warning: {flag}: no GPU is visible (no NVIDIA driver" in warnings[0]
    # Together with TF_GPU_MEMORY_ALLOC: a configuration error naming both, GPU or not.
    ran = containers.run(
        [f"{flag}=0.5", "--version"],
        entrypoint=[MODEL_SERVER],
        environment={"TF_GPU_MEMORY_ALLOC": "0:1024"},
        **ONE_CPU,
    )
    assert ran.exit_code == 78, ran.stderr
    assert f"{flag}='0.5' is invalid (TF_GPU_MEMORY_ALLOC='0:1024' caps GPU memory too)" in (
        ran.stderr
    )
    assert "Traceback" not in ran.stderr


def test_through_the_entrypoint_it_is_serve(containers: Containers) -> None:
    ran = containers.run(
        ["tensorflow_model_server", "--tensorflow_inter_op_parallelism", "2", "--version"],
        **ONE_CPU,
    )
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.startswith("TensorFlow ModelServer: tf-entrypoint "), ran.stdout
    assert "threads intra 1 / inter 2; no GPU -> tensorflow_model_server" in ran.stderr
    # Once: the entrypoint runs the server itself, it does not plan twice.
    assert ran.stderr.count("-> tensorflow_model_server") == 1, ran.stderr


STUB = """\
#!/usr/bin/env python3
import json
import sys

print(json.dumps(sys.argv[1:]))
"""


@pytest.fixture
def derived(containers: Containers) -> Iterator[str]:
    """Our image with /usr/bin/tensorflow_model_server replaced by a stub (mode 755 from
    the build context's tar)."""
    dockerfile = f"FROM {containers.image}\nCOPY stub /usr/bin/tensorflow_model_server\n"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, text in (("Dockerfile", dockerfile), ("stub", STUB)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    tag = f"{containers.image.split(':')[0]}-derived-stub:test"
    containers.client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    try:
        yield tag
    finally:
        with suppress(docker.errors.ImageNotFound):
            containers.client.images.remove(tag, force=True)


def test_a_derived_images_real_binary_gets_the_plan_as_flags(
    containers: Containers, derived: str
) -> None:
    model = ["--model_name=m", "--model_base_path=/models/m"]
    ran = containers.run(["tensorflow_model_server", *model], image=derived, **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    assert json.loads(ran.stdout) == [
        *model,
        "--tensorflow_intra_op_parallelism=1",
        "--tensorflow_inter_op_parallelism=1",
        f"--rest_api_num_threads={rest_api_threads(1)}",
    ]
    # The image's default command is still our server.
    ran = containers.run(["serve", "--version"], image=derived, **ONE_CPU)
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout.startswith("TensorFlow ModelServer: tf-entrypoint ")
