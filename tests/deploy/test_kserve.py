"""deploy/kserve: KServe's own TF Serving runtime, run on our image, hardened; offline.

No cluster and no KServe here: the ServingRuntime and the InferenceService are
validated against KServe's CRD schemas (vendored from a pinned KServe release,
tests/deploy/kserve/UPSTREAM.md) with jsonschema, strictly (unknown fields are
errors, as `kubectl apply` makes them); the runtime's command, args, model
formats and protocols are compared with KServe's kserve-tensorflow-serving
runtime; and the predictor pod KServe would build from the two passes the same
checks as deploy/kubernetes' server: the Kubernetes schemas, the restricted Pod
Security Standard, the image's user, a CPU limit with the downward-API hint.
"""

from __future__ import annotations

import copy
import re

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tests.deploy.kserve import (
    API_VERSIONS,
    ISVC_POD_LABEL,
    KSERVE,
    MODEL_MOUNT,
    load_schema,
    predictor_pod,
    strict,
    upstream_runtime,
)
from tests.deploy.kustomize import (
    DEPLOY,
    Doc,
    PodTemplate,
    environment,
    quantity,
    render,
    split_image,
)
from tests.deploy.test_manifests import KUBERNETES_VERSIONS, image_uid, restricted_violations
from tf_entrypoint.settings import CPU_LIMIT_MILLICORES

RENDERED = render(KSERVE)
(RUNTIME,) = [d for d in RENDERED if d["kind"] == "ServingRuntime"]
(ISVC,) = [d for d in RENDERED if d["kind"] == "InferenceService"]
(POLICY,) = [d for d in RENDERED if d["kind"] == "NetworkPolicy"]
CUSTOM = [d for d in RENDERED if d["kind"] != "NetworkPolicy"]
UPSTREAM = upstream_runtime()


def errors(doc: Doc) -> list[str]:
    validator = jsonschema.Draft4Validator(strict(load_schema(doc["kind"])))
    return sorted(
        f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(doc)
    )


def flags(args: list[str]) -> dict[str, str]:
    """`--name=value` args as a dict (KServe's runtime writes every flag this way)."""
    found = {}
    for arg in args:
        match = re.fullmatch(r"--([a-z_]+)=(.*)", arg)
        assert match, f"not --flag=value: {arg!r}"
        found[match.group(1)] = match.group(2)
    return found


def pod() -> PodTemplate:
    spec = predictor_pod(RUNTIME, ISVC)
    return PodTemplate("InferenceService/demo/predictor", ISVC, {"spec": spec})


# --- KServe's schemas --------------------------------------------------------------


def test_kustomization_renders_both() -> None:
    kinds = sorted(d["kind"] for d in RENDERED)
    assert kinds == ["InferenceService", "NetworkPolicy", "ServingRuntime"]
    for doc in CUSTOM:
        assert doc["apiVersion"] == API_VERSIONS[doc["kind"]]


@pytest.mark.parametrize("doc", CUSTOM, ids=lambda d: d["kind"])
def test_valid_for_kserves_crd(doc: Doc) -> None:
    assert errors(doc) == []
    name = doc["metadata"]["name"]
    # InferenceService names become Service and host names: a DNS-1035 label.
    assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name), name


def test_the_strict_schema_catches_mistakes() -> None:
    wrong = copy.deepcopy(ISVC)
    model = wrong["spec"]["predictor"]["model"]
    model["storageURI"] = model.pop("storageUri")  # a typo KServe would prune silently
    model["modelFormat"] = {"version": "2"}  # no name
    model["ports"][0]["containerPort"] = "8080"
    assert errors(wrong) == [
        "spec/predictor/model/modelFormat: 'name' is a required property",
        "spec/predictor/model/ports/0/containerPort: '8080' is not of type 'integer'",
        "spec/predictor/model: Additional properties are not allowed ('storageURI' was unexpected)",
    ]


# --- the same runtime as KServe's -----------------------------------------------------


def test_runtime_runs_the_image_as_kserve_runs_tf_serving() -> None:
    (ours,) = RUNTIME["spec"]["containers"]
    (theirs,) = UPSTREAM["spec"]["containers"]
    assert ours["name"] == theirs["name"] == "kserve-container"
    assert ours["command"] == theirs["command"] == ["/usr/bin/tensorflow_model_server"]
    assert ours["args"] == theirs["args"]
    assert split_image(ours["image"])[:2] == ("tf-entrypoint", "cpu")


def test_runtime_serves_what_kserves_serves() -> None:
    for field in ("supportedModelFormats", "protocolVersions", "annotations"):
        assert RUNTIME["spec"][field] == UPSTREAM["spec"][field], field
    assert RUNTIME["metadata"]["annotations"] == UPSTREAM["metadata"]["annotations"]
    # The same default size as KServe's; an InferenceService overrides it.
    assert (
        RUNTIME["spec"]["containers"][0]["resources"]
        == UPSTREAM["spec"]["containers"][0]["resources"]
    )


def test_metrics_are_on_the_rest_port() -> None:
    (container,) = RUNTIME["spec"]["containers"]
    annotations = RUNTIME["spec"]["annotations"]
    assert annotations["prometheus.kserve.io/port"] == flags(container["args"])["rest_api_port"]
    assert annotations["prometheus.kserve.io/path"] == "/metrics"


# --- the InferenceService ------------------------------------------------------------------


def test_inference_service_uses_the_runtime() -> None:
    model = ISVC["spec"]["predictor"]["model"]
    assert model["runtime"] == RUNTIME["metadata"]["name"]
    supported = {f["name"] for f in RUNTIME["spec"]["supportedModelFormats"]}
    assert model["modelFormat"]["name"] in supported
    assert ISVC["metadata"]["namespace"] == RUNTIME["metadata"]["namespace"]


def test_inference_service_serves_the_trained_demo_model() -> None:
    """pvc://CLAIM/PATH: the namespace's model volume, where the training Job exports."""
    claim, _, path = (
        ISVC["spec"]["predictor"]["model"]["storageUri"].removeprefix("pvc://").partition("/")
    )
    namespace = render(DEPLOY / "namespace")
    (pvc,) = [d for d in namespace if d["kind"] == "PersistentVolumeClaim"]
    (ns,) = [d for d in namespace if d["kind"] == "Namespace"]
    assert claim == pvc["metadata"]["name"]
    assert ISVC["metadata"]["namespace"] == ns["metadata"]["name"]
    (job,) = [d for d in render(DEPLOY / "training") if d["kind"] == "Job"]
    (trainer,) = job["spec"]["template"]["spec"]["containers"]
    trainer_env = {v["name"]: v.get("value") for v in trainer["env"]}
    assert path == trainer_env["MODEL_NAME"]
    args = flags(RUNTIME["spec"]["containers"][0]["args"])
    assert args["model_base_path"] == MODEL_MOUNT


def test_ports_are_the_runtimes() -> None:
    """REST first (KServe makes it the Service's port 80), then gRPC, named h2c
    (KServe gives it appProtocol kubernetes.io/h2c); both the numbers the args give."""
    args = flags(RUNTIME["spec"]["containers"][0]["args"])
    ports = [
        (p["name"], p["containerPort"], p["protocol"])
        for p in ISVC["spec"]["predictor"]["model"]["ports"]
    ]
    assert ports == [
        ("http1", int(args["rest_api_port"]), "TCP"),
        ("h2c", int(args["port"]), "TCP"),
    ]
    # Two ports: only KServe's Standard mode (Knative allows one).
    assert ISVC["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"


def test_probes_use_the_rest_port() -> None:
    (container,) = RUNTIME["spec"]["containers"]
    rest = int(flags(container["args"])["rest_api_port"])
    probes = {
        name: (container[name]["httpGet"]["path"], container[name]["httpGet"]["port"])
        for name in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert probes == {
        "startupProbe": ("/healthz", rest),
        "livenessProbe": ("/healthz", rest),
        "readinessProbe": ("/readyz", rest),
    }
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60


def test_network_policy_admits_the_predictors_ports_only() -> None:
    assert POLICY["metadata"]["namespace"] == ISVC["metadata"]["namespace"]
    assert POLICY["spec"]["podSelector"] == {
        "matchLabels": {ISVC_POD_LABEL: ISVC["metadata"]["name"]}
    }
    admitted = {(p["port"], p["protocol"]) for r in POLICY["spec"]["ingress"] for p in r["ports"]}
    ports = ISVC["spec"]["predictor"]["model"]["ports"]
    assert admitted == {(p["containerPort"], p["protocol"]) for p in ports}
    assert POLICY["spec"]["egress"] == []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_network_policy_is_valid_for_kubernetes(version: str) -> None:
    kubernetes_validate.validate(POLICY, version, strict=True)


# --- the predictor pod: the checks deploy/kubernetes' server passes -------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_predictor_pod_is_valid_for_kubernetes(version: str) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "demo-predictor"},
        "template": pod().template,
    }
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        pytest.fail(f"{'/'.join(str(p) for p in err.path)}: {err.message}")


def test_predictor_pod_is_restricted() -> None:
    assert restricted_violations(pod().spec) == []


def test_predictor_pod_runs_as_the_image_user_hardened() -> None:
    uid = image_uid()
    spec = pod().spec
    context = spec["securityContext"]
    assert (context["runAsNonRoot"], context["runAsUser"], context["runAsGroup"]) == (
        True,
        uid,
        uid,
    )
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert (context["runAsNonRoot"], context["runAsUser"], context["runAsGroup"]) == (
        True,
        uid,
        uid,
    )
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["privileged"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    (tmp,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert "emptyDir" in volumes[tmp["name"]]
    (models,) = [m for m in container["volumeMounts"] if m["mountPath"] == MODEL_MOUNT]
    assert models["readOnly"] is True


def test_predictor_is_sized_to_its_cpu_limit() -> None:
    template = pod()
    (container,) = template.spec["containers"]
    resources = container["resources"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(resources[kind]), kind
    limit = quantity(resources["limits"]["cpu"])
    assert quantity(resources["requests"]["cpu"]) <= limit
    (hint,) = [v for v in container["env"] if v["name"] == CPU_LIMIT_MILLICORES]
    assert hint["valueFrom"]["resourceFieldRef"] == {
        "containerName": container["name"],
        "resource": "limits.cpu",
        "divisor": "1m",
    }
    assert int(environment(template, container)[CPU_LIMIT_MILLICORES]) == limit * 1000


def test_the_server_accepts_the_runtimes_args_as_kserve_fills_them() -> None:
    """KServe replaces {{.Name}} with the InferenceService's name; the server's own
    parser (as /usr/bin/tensorflow_model_server runs it) takes the result."""
    from tf_entrypoint.serving.config import PlannedCpus, parse_config  # noqa: PLC0415

    name = ISVC["metadata"]["name"]
    args = [a.replace("{{.Name}}", name) for a in RUNTIME["spec"]["containers"][0]["args"]]
    conf = parse_config(args, {}, budget=PlannedCpus(1, "test"))
    (model,) = conf.models.models
    assert (model.name, str(model.base_path)) == (name, MODEL_MOUNT)
    assert (conf.grpc_port, conf.rest_port, conf.request_timeout) == (9000, 8080, 60.0)
