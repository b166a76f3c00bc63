"""The manifests' pods, reproduced in Docker as far as Docker can, train and serve.

Everything a container gets is read from the rendered manifests, nothing is
repeated here: the user and group (runAsUser, runAsGroup, fsGroup), the
read-only root, emptyDir mounts as tmpfs (with their sizeLimit), dropped
capabilities, allowPrivilegeEscalation: false as no-new-privileges, the CPU
and memory limits, the environment with the downward API's CPU limit in
millicores, the args, the ports, the model volume (a named volume for the
claim, read-only where the manifest says so) and the demo ConfigMap (its
rendered files, mounted read-only). Docker's default seccomp profile is the
runtime default, as RuntimeDefault asks. Not reproducible here: probes are
run by the test instead of a kubelet (as the kubelet runs them: an HTTP GET
that must answer 2xx/3xx, a gRPC health check that must answer SERVING), and
the preStop hook is not run.

The training Job trains into the volume, then the serving Deployment's pod
serves it: its probe endpoints answer, a predict gives y = 0.5 x + 2, and a
stop within terminationGracePeriodSeconds drains and exits 0.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import grpc
import httpx2
import pytest
from docker.models.containers import Container
from grpc_health.v1 import health_pb2

from harness import web
from harness.docker import Containers, remove, wait
from harness.images import build_image
from tests.deploy.kustomize import (
    DEPLOY,
    Doc,
    PodTemplate,
    environment,
    pod_templates,
    quantity,
    render,
    split_image,
)
from tf_entrypoint.settings import CPU_LIMIT_MILLICORES

#: Seconds for the trainer to finish and for the server to become ready.
TRAIN_TIMEOUT = 300
READY_TIMEOUT = 240

TRAINING = render(DEPLOY / "training")
SERVING = render(DEPLOY / "base")
(JOB,) = pod_templates(TRAINING)
(DEPLOYMENT,) = pod_templates(SERVING)


@pytest.fixture(scope="module")
def image() -> str:
    """tf-entrypoint:cpu, built now; or $TF_ENTRYPOINT_TEST_IMAGE, an image built before."""
    return os.environ.get("TF_ENTRYPOINT_TEST_IMAGE") or build_image("cpu")


@pytest.fixture(scope="module")
def containers(image: str) -> Iterator[Containers]:
    client = docker.from_env(timeout=300)
    client.ping()
    yield Containers(client, image)
    client.close()


@pytest.fixture(scope="module")
def claim(containers: Containers) -> Iterator[str]:
    """A Docker volume standing in for the PersistentVolumeClaim tf-models."""
    volume = containers.client.volumes.create(
        f"tfe-k8s-models-{os.getpid()}", labels={"tf-entrypoint.test": "1"}
    )
    yield str(volume.name)
    with contextlib.suppress(docker.errors.NotFound):
        volume.remove(force=True)


def config_map_directory(docs: list[Doc], name: str, root: Path) -> Path:
    """The ConfigMap's files, as the kubelet projects them (world-readable)."""
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    directory = root / name
    directory.mkdir(mode=0o755)
    for file, text in config_map["data"].items():
        (directory / file).write_text(text)
        (directory / file).chmod(0o644)
    directory.chmod(0o755)
    return directory


def run_options(
    template: PodTemplate, docs: list[Doc], claim: str, scratch: Path
) -> tuple[dict[str, Any], list[str] | None]:
    """docker run options for the template's first container, and its command."""
    spec = template.spec
    (container,) = spec["containers"]
    pod = spec["securityContext"]
    context = container["securityContext"]
    uid = context.get("runAsUser", pod.get("runAsUser"))
    gid = context.get("runAsGroup", pod.get("runAsGroup"))
    limits = container["resources"]["limits"]
    options: dict[str, Any] = {
        "user": f"{uid}:{gid}",
        "read_only": context["readOnlyRootFilesystem"],
        "cap_drop": context["capabilities"]["drop"],
        "nano_cpus": int(quantity(limits["cpu"]) * 10**9),
        "mem_limit": int(quantity(limits["memory"])),
        "environment": environment(template, container),
        "tmpfs": {},
        "volumes": {},
        "ports": {},
    }
    assert context.get("seccompProfile", pod.get("seccompProfile")) == {"type": "RuntimeDefault"}
    if context["allowPrivilegeEscalation"] is False:
        options["security_opt"] = ["no-new-privileges:true"]
    if "fsGroup" in pod:
        options["group_add"] = [str(pod["fsGroup"])]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume, path = volumes[mount["name"]], mount["mountPath"]
        mode = "ro" if mount.get("readOnly") else "rw"
        if "emptyDir" in volume:
            size = volume["emptyDir"].get("sizeLimit")
            options["tmpfs"][path] = f"size={int(quantity(size))}" if size else ""
        elif "persistentVolumeClaim" in volume:
            read_only = mount.get("readOnly") or volume["persistentVolumeClaim"].get("readOnly")
            options["volumes"][claim] = {"bind": path, "mode": "ro" if read_only else "rw"}
        elif "configMap" in volume:
            source = config_map_directory(docs, volume["configMap"]["name"], scratch)
            options["volumes"][str(source)] = {"bind": path, "mode": mode}
        else:
            raise AssertionError(f"{template.where}: volume {mount['name']} is not reproduced")
    for port in container.get("ports", []):
        options["ports"][f"{port['containerPort']}/{port['protocol'].lower()}"] = (
            "127.0.0.1",
            None,
        )
    if "command" in container:  # Kubernetes' command replaces the image's ENTRYPOINT
        options["entrypoint"] = container["command"]
    image_name, tag, _ = split_image(container["image"])
    assert (image_name, tag) == ("tf-entrypoint", "cpu"), "the CPU image is under test"
    return options, container.get("args")


@pytest.fixture(scope="module")
def trained(containers: Containers, claim: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Run the training Job's pod to completion; its logs."""
    options, args = run_options(JOB, TRAINING, claim, tmp_path_factory.mktemp("job"))
    ran = containers.run(args, timeout=TRAIN_TIMEOUT, **options)
    assert ran.exit_code == 0, ran.stdout + ran.stderr
    assert "exported /models/model/1" in ran.stdout, ran.stdout
    return ran.stderr


@pytest.fixture(scope="module")
def server(
    trained: str, containers: Containers, claim: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Container, str]]:
    """The serving Deployment's pod, ready; and its base URL."""
    options, args = run_options(DEPLOYMENT, SERVING, claim, tmp_path_factory.mktemp("deploy"))
    container = containers.start(args, **options)
    try:
        container.reload()
        readiness = DEPLOYMENT.container("server")["readinessProbe"]
        deadline = time.monotonic() + READY_TIMEOUT
        while not probe(container, readiness):
            container.reload()
            logs = container.logs().decode(errors="replace")
            assert container.status == "running", f"server exited:\n{logs[-4000:]}"
            assert time.monotonic() < deadline, f"not ready in {READY_TIMEOUT} s:\n{logs[-4000:]}"
            time.sleep(0.5)
        yield container, f"http://127.0.0.1:{published(container, 'http')}"
    finally:
        remove(container)


def published(container: Container, port: str | int) -> int:
    """The host port Docker published for the server's container port (by name or number)."""
    declared = DEPLOYMENT.container("server")["ports"]
    (number,) = [p["containerPort"] for p in declared if port in (p["name"], p["containerPort"])]
    found = container.ports.get(f"{number}/tcp")
    assert found, f"port {number} is not published"
    return int(found[0]["HostPort"])


def probe(container: Container, spec: Doc) -> bool:
    """One run of a probe from the manifest, judged as the kubelet judges it."""
    if "httpGet" in spec:
        port = published(container, spec["httpGet"]["port"])
        code = status(f"http://127.0.0.1:{port}", spec["httpGet"]["path"])
        return code is not None and 200 <= code < 400
    if "grpc" in spec:
        port = published(container, spec["grpc"]["port"])
        return health(port, spec["grpc"].get("service", "")) == "SERVING"
    raise AssertionError(f"probe {sorted(spec)} is not reproduced")


def health(port: int, service: str) -> str | None:
    """grpc.health.v1.Health/Check's status name, or None when it does not answer."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
        try:
            reply = check(health_pb2.HealthCheckRequest(service=service), timeout=3)
        except grpc.RpcError:
            return None
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def status(url: str, path: str) -> int | None:
    try:
        return web.get(f"{url}{path}", timeout=3, trust_env=False).status_code
    except httpx2.TransportError:
        return None


def test_trainer_got_the_cpu_limit(trained: str) -> None:
    cpus = math.floor(quantity(JOB.container("trainer")["resources"]["limits"]["cpu"]))
    assert f"threads intra {cpus} / inter {cpus}" in trained, trained


def test_probes_pass(server: tuple[Container, str]) -> None:
    container, _ = server
    spec = DEPLOYMENT.container("server")
    for name in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert probe(container, spec[name]), name


def test_grpc_health_of_the_model(server: tuple[Container, str]) -> None:
    """Each model is a health service of its own; an unknown one is not SERVING."""
    container, _ = server
    port = published(container, "grpc")
    model = environment(DEPLOYMENT, DEPLOYMENT.container("server"))["MODEL_NAME"]
    assert health(port, model) == "SERVING"
    assert health(port, "no-such-model") != "SERVING"


def test_predict(server: tuple[Container, str]) -> None:
    _, url = server
    response = web.post(
        f"{url}/v1/models/model:predict",
        json={"instances": [1.0, 2.0]},
        timeout=30,
        trust_env=False,
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"predictions": [2.5, 3.0]}


def test_server_is_sized_to_the_manifest_limit(server: tuple[Container, str]) -> None:
    container, _ = server
    limit = quantity(DEPLOYMENT.container("server")["resources"]["limits"]["cpu"])
    cpus = math.floor(limit)
    attrs = container.attrs
    assert attrs["HostConfig"]["NanoCpus"] == int(limit * 10**9)
    assert f"{CPU_LIMIT_MILLICORES}={int(limit * 1000)}" in attrs["Config"]["Env"]
    stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
    assert f"threads intra {cpus} / inter {cpus}" in stderr, stderr
    assert "-> serve" in stderr


def test_explain_under_the_manifest(
    containers: Containers, claim: str, tmp_path: Path, trained: str
) -> None:
    """The plan in the server's pod: the quota is read, the hint arrives, nothing is wrong."""
    options, _ = run_options(DEPLOYMENT, SERVING, claim, tmp_path)
    options.pop("ports")
    ran = containers.run(["explain", "--json"], timeout=60, **options)
    assert ran.exit_code == 0, ran.stderr
    plan = json.loads(ran.stdout)
    limit = quantity(DEPLOYMENT.container("server")["resources"]["limits"]["cpu"])
    assert plan["ok"] is True
    assert plan["cpu"]["exact"] == float(limit)
    assert plan["cpu"]["cpus"] == math.floor(limit)
    assert f"{CPU_LIMIT_MILLICORES}={int(limit * 1000)}" in plan["cpu"]["detail"]


def test_stop_drains_within_the_grace_period(server: tuple[Container, str]) -> None:
    """Last: SIGTERM, as the kubelet sends it, ends the server cleanly in time."""
    container, url = server
    grace = DEPLOYMENT.spec["terminationGracePeriodSeconds"]
    started = time.monotonic()
    container.stop(timeout=grace)
    result = wait(container, timeout=grace)
    assert result.exit_code == 0, result.stderr[-4000:]
    assert time.monotonic() - started < grace
    assert status(url, "/healthz") is None
