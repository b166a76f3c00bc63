"""deploy/kubernetes: valid against the Kubernetes schemas, restricted, and true to the image.

No cluster and no network: every kustomization is rendered by tests/deploy/kustomize.py
(and compared with `kubectl kustomize` where kubectl is installed), and every
object is validated offline with kubernetes-validate against the pinned
Kubernetes versions below. The TFJob is a custom resource the Kubernetes
schemas do not describe: its pod templates are validated as core
PodTemplates, and its own fields against Kubeflow's TFJob v1 rules.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.deploy.kustomize import (
    DEPLOY,
    KUSTOMIZATIONS,
    REPO,
    Doc,
    PodTemplate,
    all_pod_templates,
    environment,
    pod_templates,
    quantity,
    render,
    render_all,
    split_image,
)
from tf_entrypoint.serving.config import PlannedCpus, ServeConfig, parse_config
from tf_entrypoint.settings import CPU_LIMIT_MILLICORES
from tf_entrypoint.tfconfig import check_tf_config

#: The Kubernetes versions every manifest must be valid for: the oldest this
#: project supports and the newest kubernetes-validate knows (pinned in
#: requirements/dev.lock). Strict: unknown fields are errors.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")

RENDERED = render_all()
TEMPLATES = all_pod_templates()
TEMPLATE_IDS = [t.where for t in TEMPLATES]


def image_uid() -> int:
    """The image's numeric user, from the Dockerfile that builds it."""
    match = re.search(r"^ARG APP_UID=(\d+)$", (REPO / "Dockerfile.cpu").read_text(), re.MULTILINE)
    assert match, "Dockerfile.cpu no longer declares ARG APP_UID"
    return int(match.group(1))


def objects() -> list[tuple[str, Doc]]:
    return [(name, doc) for name, docs in RENDERED.items() for doc in docs]


OBJECT_IDS = [f"{name}:{doc['kind']}/{doc['metadata']['name']}" for name, doc in objects()]


# --- rendering -----------------------------------------------------------------------


def key(doc: Doc) -> tuple[str, str, str]:
    return doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_rendering_matches_kubectl_kustomize(name: str) -> None:
    result = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / name)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    theirs = sorted(yaml.safe_load_all(result.stdout), key=key)
    ours = sorted(render(DEPLOY / name), key=key)
    assert ours == theirs


def test_every_kustomization_is_listed() -> None:
    found = {str(path.parent.relative_to(DEPLOY)) for path in DEPLOY.rglob("kustomization.yaml")}
    assert found == set(KUSTOMIZATIONS)


def test_every_yaml_file_is_used() -> None:
    """No manifest sits beside the kustomizations without being applied."""
    used = {"kustomization.yaml", "checkov.yaml"}
    for directory in KUSTOMIZATIONS:
        spec = yaml.safe_load((DEPLOY / directory / "kustomization.yaml").read_text())
        used |= {(DEPLOY / directory / r).name for r in spec.get("resources", [])}
        used |= {(DEPLOY / directory / p["path"]).name for p in spec.get("patches", [])}
    assert {p.name for p in DEPLOY.rglob("*.yaml")} <= used


# --- the Kubernetes schemas ------------------------------------------------------------


def as_pod_template(template: PodTemplate) -> Doc:
    """A custom resource's pod template as a core v1 PodTemplate, which the schemas know."""
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": template.where.replace("/", "-").lower()},
        "template": template.template,
    }


def schema_objects() -> list[tuple[str, Doc]]:
    found = []
    for name, doc in objects():
        if doc["kind"] == "TFJob":
            found += [(name, as_pod_template(t)) for t in pod_templates([doc])]
        else:
            found.append((name, doc))
    return found


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    ("name", "doc"),
    schema_objects(),
    ids=[f"{n}:{d['kind']}/{d['metadata']['name']}" for n, d in schema_objects()],
)
def test_valid_for_kubernetes(name: str, doc: Doc, version: str) -> None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        path = "/".join(str(p) for p in err.path)
        pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']} at {path}: {err.message}")


#: Kubeflow training operator, TFJob kubeflow.org/v1 (pkg/apis/kubeflow.org/v1/tensorflow_types.go).
TFJOB_REPLICA_TYPES = {"Chief", "Master", "PS", "Worker", "Evaluator"}
RESTART_POLICIES = {"Always", "OnFailure", "Never", "ExitCode"}
CLEAN_POD_POLICIES = {"All", "Running", "None"}


def tfjobs() -> list[Doc]:
    return [doc for _, doc in objects() if doc["kind"] == "TFJob"]


@pytest.mark.parametrize("tfjob", tfjobs(), ids=lambda d: d["metadata"]["name"])
def test_tfjob_follows_kubeflow_v1(tfjob: Doc) -> None:
    assert tfjob["apiVersion"] == "kubeflow.org/v1"
    spec = tfjob["spec"]
    assert set(spec) <= {"runPolicy", "tfReplicaSpecs", "successPolicy", "enableDynamicWorker"}
    run_policy = spec.get("runPolicy", {})
    assert run_policy.get("cleanPodPolicy", "None") in CLEAN_POD_POLICIES
    for field in ("backoffLimit", "activeDeadlineSeconds"):
        assert isinstance(run_policy.get(field, 0), int)
    replicas = spec["tfReplicaSpecs"]
    assert set(replicas) <= TFJOB_REPLICA_TYPES
    assert replicas.get("Chief", {}).get("replicas", 1) <= 1, "TensorFlow allows one chief"
    for replica_type, replica in replicas.items():
        assert set(replica) <= {"replicas", "restartPolicy", "template"}, replica_type
        assert isinstance(replica.get("replicas", 1), int)
        assert replica.get("replicas", 1) >= 0
        assert replica.get("restartPolicy", "Never") in RESTART_POLICIES
        # The operator finds TensorFlow's container and its port by these names.
        (container,) = [
            c for c in replica["template"]["spec"]["containers"] if c["name"] == "tensorflow"
        ]
        assert {"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"} in container[
            "ports"
        ]


def test_the_chief_writes_the_model_volume_on_the_servers_node() -> None:
    """The TFJob's chief shares the ReadWriteOnce volume with the running server
    (same node), so version 2 is swapped in live: no scaling the server to 0."""
    servers = [
        doc
        for _, doc in objects()
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "tf-serving"
    ]
    assert len(servers) == 2  # base/ and overlays/gpu/

    def claims(pod: Doc) -> set[str]:
        volumes = pod["volumes"]
        return {
            v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v
        }

    for tfjob in tfjobs():
        chief = tfjob["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
        affinity = chief["affinity"]["podAffinity"]
        (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        for server in servers:
            labels = server["spec"]["template"]["metadata"]["labels"]
            assert term["labelSelector"]["matchLabels"].items() <= labels.items()
            assert claims(chief) == claims(server["spec"]["template"]["spec"]) == {"tf-models"}


@pytest.mark.parametrize("tfjob", tfjobs(), ids=lambda d: d["metadata"]["name"])
def test_tf_config_the_operator_writes_passes_the_entrypoint(tfjob: Doc) -> None:
    """The TF_CONFIG Kubeflow gives each replica of this TFJob is accepted."""
    name, namespace = tfjob["metadata"]["name"], tfjob["metadata"]["namespace"]
    replicas = tfjob["spec"]["tfReplicaSpecs"]
    cluster = {
        kind.lower(): [
            f"{name}-{kind.lower()}-{i}.{namespace}.svc:2222" for i in range(spec["replicas"])
        ]
        for kind, spec in replicas.items()
    }
    for kind, spec in replicas.items():
        for index in range(spec["replicas"]):
            task = {"type": kind.lower(), "index": index}
            tf_config = json.dumps({"cluster": cluster, "task": task, "environment": "cloud"})
            assert check_tf_config(tf_config) == ()


# --- the restricted Pod Security Standard, checked here too ---------------------------

#: https://kubernetes.io/docs/concepts/security/pod-security-standards/ (restricted).
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(spec: Doc) -> list[str]:
    """What the restricted Pod Security Standard (and its baseline) refuses in a pod spec."""
    bad = []
    pod = spec.get("securityContext", {})
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            bad.append(f"{field} is set")
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            bad.append(f"volume {volume['name']} is {', '.join(sorted(kinds))}")
    if pod.get("runAsUser") == 0:
        bad.append("pod runAsUser is 0")
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        bad += [f"{container['name']}: {v}" for v in _container_violations(container, pod)]
    return bad


def _container_violations(container: Doc, pod: Doc) -> list[str]:
    """The restricted profile's container rules; `pod` is the pod's securityContext."""
    bad = []
    context = container.get("securityContext", {})
    if context.get("privileged"):
        bad.append("privileged")
    if context.get("allowPrivilegeEscalation") is not False:
        bad.append("allowPrivilegeEscalation is not false")
    if not context.get("runAsNonRoot", pod.get("runAsNonRoot")):
        bad.append("runAsNonRoot is not true")
    if context.get("runAsUser", pod.get("runAsUser")) == 0:
        bad.append("runAsUser is 0")
    seccomp = context.get("seccompProfile", pod.get("seccompProfile", {})).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        bad.append(f"seccompProfile is {seccomp!r}")
    capabilities = context.get("capabilities", {})
    if "ALL" not in capabilities.get("drop", []):
        bad.append("capabilities.drop lacks ALL")
    if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
        bad.append(f"adds capabilities {capabilities['add']}")
    if any("hostPort" in port for port in container.get("ports", [])):
        bad.append("hostPort")
    return bad


@pytest.mark.parametrize("template", TEMPLATES, ids=TEMPLATE_IDS)
def test_restricted_pod_security_standard(template: PodTemplate) -> None:
    assert restricted_violations(template.spec) == []


def test_the_restricted_check_catches_violations() -> None:
    spec = {
        "hostNetwork": True,
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
        "containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}],
    }
    assert restricted_violations(spec) == [
        "hostNetwork is set",
        "volume h is hostPath",
        "c: allowPrivilegeEscalation is not false",
        "c: runAsNonRoot is not true",
        "c: seccompProfile is None",
        "c: capabilities.drop lacks ALL",
        "c: adds capabilities ['SYS_ADMIN']",
    ]


def test_namespace_enforces_restricted() -> None:
    (namespace,) = [d for d in RENDERED["namespace"] if d["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    for name, docs in RENDERED.items():
        for doc in docs:
            if doc["kind"] != "Namespace":
                assert doc["metadata"]["namespace"] == namespace["metadata"]["name"], name


# --- every pod: the image, as it is meant to run --------------------------------------


@pytest.mark.parametrize("template", TEMPLATES, ids=TEMPLATE_IDS)
def test_pod_runs_as_the_image_user_hardened(template: PodTemplate) -> None:
    uid = image_uid()
    pod = template.spec["securityContext"]
    assert (pod["runAsNonRoot"], pod["runAsUser"], pod["runAsGroup"]) == (True, uid, uid)
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert template.spec["automountServiceAccountToken"] is False
    for container in template.spec["containers"]:
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == uid
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize("template", TEMPLATES, ids=TEMPLATE_IDS)
def test_tmp_is_an_empty_dir(template: PodTemplate) -> None:
    """Read-only root: TensorFlow, Keras and Python's tempfile write to /tmp."""
    volumes = {v["name"]: v for v in template.spec["volumes"]}
    for container in template.spec["containers"]:
        (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
        assert "emptyDir" in volumes[tmp["name"]]


@pytest.mark.parametrize("template", TEMPLATES, ids=TEMPLATE_IDS)
def test_entrypoint_runs_with_the_cpu_limit_hint(template: PodTemplate) -> None:
    for container in template.spec["containers"]:
        image_name, tag, _ = split_image(container["image"])
        assert image_name == "tf-entrypoint"
        assert tag in ("cpu", "gpu")
        # `command` would replace the image's ENTRYPOINT (tini -> tf-entrypoint).
        assert "command" not in container, "use args: the entrypoint must run"
        resources = container["resources"]
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources[kind]), kind
        assert quantity(resources["requests"]["cpu"]) <= quantity(resources["limits"]["cpu"])
        (hint,) = [v for v in container["env"] if v["name"] == CPU_LIMIT_MILLICORES]
        assert hint["valueFrom"]["resourceFieldRef"] == {
            "containerName": container["name"],
            "resource": "limits.cpu",
            "divisor": "1m",
        }
        millicores = environment(template, container)[CPU_LIMIT_MILLICORES]
        assert int(millicores) == quantity(resources["limits"]["cpu"]) * 1000


# --- the servers -----------------------------------------------------------------------


def servers() -> list[tuple[str, PodTemplate]]:
    return [
        (name, template)
        for name in ("base", "overlays/gpu")
        for template in pod_templates(RENDERED[name])
    ]


def server_env(template: PodTemplate) -> dict[str, str]:
    return environment(template, template.container("server"))


def server_config(template: PodTemplate) -> ServeConfig:
    """What the server makes of the container's args and env, parsed by its own parser."""
    server = template.container("server")
    args = server["args"]
    assert args[0] == "serve", args
    return parse_config(args[1:], server_env(template), budget=PlannedCpus(1, "test"))


def container_ports(template: PodTemplate) -> dict[str, int]:
    server = template.container("server")
    assert all(p["protocol"] == "TCP" for p in server["ports"])
    return {p["name"]: p["containerPort"] for p in server["ports"]}


@pytest.mark.parametrize(("name", "template"), servers(), ids=[n for n, _ in servers()])
def test_ports_are_the_servers(name: str, template: PodTemplate) -> None:
    """The declared ports are the ones the server listens on: gRPC and REST."""
    config = server_config(template)
    assert container_ports(template) == {"grpc": config.grpc_port, "http": config.rest_port}
    assert (config.grpc_port, config.rest_port) == (8500, 8501)  # TF Serving's


@pytest.mark.parametrize(("name", "template"), servers(), ids=[n for n, _ in servers()])
def test_probes_use_the_server_endpoints(name: str, template: PodTemplate) -> None:
    server = template.container("server")
    ports = container_ports(template)
    http = {
        probe: (server[probe]["httpGet"]["path"], server[probe]["httpGet"]["port"])
        for probe in ("startupProbe", "livenessProbe")
    }
    assert http == {"startupProbe": ("/healthz", "http"), "livenessProbe": ("/healthz", "http")}
    # Readiness: gRPC health checking, service "" (every model serves a version,
    # not draining). A gRPC probe takes a port number, not a name.
    readiness = server["readinessProbe"]
    assert set(readiness) & {"httpGet", "tcpSocket", "exec", "grpc"} == {"grpc"}
    assert readiness["grpc"] == {"port": ports["grpc"], "service": ""}
    startup = server["startupProbe"]
    # Long enough for TensorFlow's import on one throttled CPU; the model
    # itself is waited for by readiness, not by the startup probe.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60


@pytest.mark.parametrize(("name", "template"), servers(), ids=[n for n, _ in servers()])
def test_service_and_network_policy_expose_both_ports(name: str, template: PodTemplate) -> None:
    ports = container_ports(template)
    (service,) = [d for d in RENDERED[name] if d["kind"] == "Service"]
    assert service["spec"]["selector"].items() <= template.template["metadata"]["labels"].items()
    exposed = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert exposed == {"grpc": (8500, "grpc"), "http": (8501, "http")}
    # Istio reads the protocol from the port name (<protocol>[-suffix]) or appProtocol.
    protocols = {p["name"]: p.get("appProtocol") for p in service["spec"]["ports"]}
    assert protocols == {"grpc": "kubernetes.io/h2c", "http": "http"}
    (policy,) = [d for d in RENDERED[name] if d["kind"] == "NetworkPolicy"]
    admitted = {
        (p["port"], p["protocol"]) for rule in policy["spec"]["ingress"] for p in rule["ports"]
    }
    assert admitted == {(port, "TCP") for port in ports}
    assert policy["spec"]["egress"] == []


@pytest.mark.parametrize(("name", "template"), servers(), ids=[n for n, _ in servers()])
def test_grace_period_covers_the_drain(name: str, template: PodTemplate) -> None:
    server = template.container("server")
    drain = float(server_env(template)["SERVE_GRACE_PERIOD"])
    pre_stop = server["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    # Kubernetes counts the preStop hook inside terminationGracePeriodSeconds.
    budget = template.spec["terminationGracePeriodSeconds"]
    assert float(pre_stop[1]) + drain + 3 <= budget


@pytest.mark.parametrize(("name", "template"), servers(), ids=[n for n, _ in servers()])
def test_server_reads_the_model_volume_read_only(name: str, template: PodTemplate) -> None:
    server = template.container("server")
    (models,) = [m for m in server["volumeMounts"] if m["mountPath"] == "/models"]
    assert models["readOnly"] is True
    env = server_env(template)
    assert (env["MODEL_BASE_PATH"], env["MODEL_NAME"]) == ("/models", "model")
    ((model, path),) = [(m.name, m.base_path) for m in server_config(template).models.models]
    assert (model, str(path)) == ("model", "/models/model")


def test_gpu_overlay() -> None:
    (template,) = pod_templates(RENDERED["overlays/gpu"])
    server = template.container("server")
    assert split_image(server["image"])[:2] == ("tf-entrypoint", "gpu")
    resources = server["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == "1"
    assert server_env(template)["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    (cpu_template,) = pod_templates(RENDERED["base"])
    assert split_image(cpu_template.container("server")["image"])[:2] == ("tf-entrypoint", "cpu")
    assert "nvidia.com/gpu" not in cpu_template.container("server")["resources"]["limits"]


# --- training ------------------------------------------------------------------------


def demo_config_map(name: str) -> Doc:
    (config_map,) = [d for d in RENDERED[name] if d["kind"] == "ConfigMap"]
    return config_map


@pytest.mark.parametrize("name", ["training", "tfjob"])
def test_trainers_ship_the_demo_scripts(name: str) -> None:
    data = demo_config_map(name)["data"]
    for script in ("train.py", "train_multiworker.py"):
        assert data[script] == (REPO / "demo" / script).read_text()
    for template in pod_templates(RENDERED[name]):
        volumes = {v["name"]: v for v in template.spec["volumes"]}
        container = template.spec["containers"][0]
        script = container["args"][1]
        assert container["args"][0] == "python"
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/demo"]
        assert (
            volumes[mount["name"]]["configMap"]["name"] == demo_config_map(name)["metadata"]["name"]
        )
        assert script.removeprefix("/demo/") in data


def model_writers() -> list[PodTemplate]:
    return [
        t
        for name in ("training", "tfjob")
        for t in pod_templates(RENDERED[name])
        if any(m["mountPath"] == "/models" for m in t.spec["containers"][0]["volumeMounts"])
    ]


def test_only_one_tfjob_replica_writes_the_model() -> None:
    writers = [t.where for t in model_writers()]
    assert writers == ["Job/tf-train", "TFJob/tf-train-multiworker/Chief"]


def test_model_volume_is_the_namespaces_claim() -> None:
    (claim,) = [d for d in RENDERED["namespace"] if d["kind"] == "PersistentVolumeClaim"]
    for template in [*model_writers(), *(t for _, t in servers())]:
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in template.spec["volumes"]
            if "persistentVolumeClaim" in v
        ]
        assert claims == [claim["metadata"]["name"]], template.where
        assert template.spec["securityContext"]["fsGroup"] == image_uid(), template.where


def test_network_policies_select_every_pod() -> None:
    for name, docs in RENDERED.items():
        policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
        for template in pod_templates(docs):
            labels = template.template["metadata"]["labels"]
            assert any(
                p["spec"]["podSelector"]["matchLabels"].items() <= labels.items() for p in policies
            ), f"{name}: {template.where} has no NetworkPolicy"
