"""deploy/kserve: KServe's own TF Serving runtime, run on our image, hardened; offline.

No cluster and no KServe here: the ServingRuntime and the InferenceService are
validated against KServe's CRD schemas (vendored from a pinned KServe release,
tests/deploy/kserve/UPSTREAM.md) with jsonschema, strictly (unknown fields are
errors, as `kubectl apply` makes them); the runtime's command, args, model
formats and protocols are compared with KServe's kserve-tensorflow-serving
runtime (which adds the Open Inference Protocol's v2 and grpc-v2 to them); the
examples (deploy/kserve/examples: one InferenceService per protocol) are
validated the same way and checked against what KServe does with a protocol
and its ports; and every predictor pod KServe would build passes the same
checks as deploy/kubernetes' server: the Kubernetes schemas, the restricted Pod
Security Standard, the image's user, a CPU limit with the downward-API hint.
"""

from __future__ import annotations

import copy
import re

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.deploy.kserve import (
    API_VERSIONS,
    EXAMPLES,
    ISVC_POD_LABEL,
    KSERVE,
    MODEL_MOUNT,
    PORT_NAMES,
    PROTOCOLS,
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
    load_yaml_documents,
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
#: deploy/kserve/examples: an InferenceService and its NetworkPolicy per protocol.
EXAMPLE_DOCS = render(EXAMPLES)
#: Every InferenceService a user may apply: the demo (v1) and the examples.
ISVCS = [ISVC, *[d for d in EXAMPLE_DOCS if d["kind"] == "InferenceService"]]
POLICIES = [POLICY, *[d for d in EXAMPLE_DOCS if d["kind"] == "NetworkPolicy"]]


def name_of(doc: Doc) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


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


def pod(isvc: Doc = ISVC) -> PodTemplate:
    spec = predictor_pod(RUNTIME, isvc)
    where = f"InferenceService/{isvc['metadata']['name']}/predictor"
    return PodTemplate(where, isvc, {"spec": spec})


# --- KServe's schemas --------------------------------------------------------------


def test_kustomization_renders_both() -> None:
    kinds = sorted(d["kind"] for d in RENDERED)
    assert kinds == ["InferenceService", "NetworkPolicy", "ServingRuntime"]
    for doc in CUSTOM:
        assert doc["apiVersion"] == API_VERSIONS[doc["kind"]]


@pytest.mark.parametrize("doc", [RUNTIME, *ISVCS], ids=name_of)
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
    for field in ("supportedModelFormats", "annotations"):
        assert RUNTIME["spec"][field] == UPSTREAM["spec"][field], field
    assert RUNTIME["metadata"]["annotations"] == UPSTREAM["metadata"]["annotations"]
    # The same default size as KServe's; an InferenceService overrides it.
    assert (
        RUNTIME["spec"]["containers"][0]["resources"]
        == UPSTREAM["spec"]["containers"][0]["resources"]
    )


def test_runtime_adds_the_open_inference_protocol() -> None:
    """KServe's protocols and the OIP's, all KServe knows: v1 stays the default, the
    lowest the runtime declares, so an InferenceService written for KServe's own
    TF Serving runtime gets what it got there."""
    ours, theirs = RUNTIME["spec"]["protocolVersions"], UPSTREAM["spec"]["protocolVersions"]
    assert set(theirs) == {"v1", "grpc-v1"}
    assert sorted(ours, key=PROTOCOLS.index) == list(PROTOCOLS)
    assert min(ours, key=PROTOCOLS.index) == min(theirs, key=PROTOCOLS.index) == "v1"


def test_the_schema_takes_any_protocol_string() -> None:
    """KServe's CRD does not list the protocols (a plain string), so the tests here
    check each protocolVersion against KServe's constants instead."""
    wrong = copy.deepcopy(ISVC)
    wrong["spec"]["predictor"]["model"]["protocolVersion"] = "v3"
    assert errors(wrong) == []
    wrong = copy.deepcopy(RUNTIME)
    wrong["spec"]["protocolVersions"].append("grpc-v3")
    assert errors(wrong) == []


def test_metrics_are_on_the_rest_port() -> None:
    (container,) = RUNTIME["spec"]["containers"]
    annotations = RUNTIME["spec"]["annotations"]
    assert annotations["prometheus.kserve.io/port"] == flags(container["args"])["rest_api_port"]
    assert annotations["prometheus.kserve.io/path"] == "/metrics"


# --- the InferenceService ------------------------------------------------------------------


@pytest.mark.parametrize("isvc", ISVCS, ids=name_of)
def test_inference_service_uses_the_runtime(isvc: Doc) -> None:
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == RUNTIME["metadata"]["name"]
    supported = {f["name"] for f in RUNTIME["spec"]["supportedModelFormats"]}
    assert model["modelFormat"]["name"] in supported
    assert isvc["metadata"]["namespace"] == RUNTIME["metadata"]["namespace"]
    # KServe refuses a runtime named for a protocol it does not declare.
    assert model["protocolVersion"] in PROTOCOLS
    assert model["protocolVersion"] in RUNTIME["spec"]["protocolVersions"]


def test_one_inference_service_per_protocol() -> None:
    """The demo is v1; examples/ adds the others, each under its own name."""
    protocols = [i["spec"]["predictor"]["model"]["protocolVersion"] for i in ISVCS]
    assert sorted(protocols, key=PROTOCOLS.index) == list(PROTOCOLS)
    assert ISVC["spec"]["predictor"]["model"]["protocolVersion"] == "v1"
    names = [i["metadata"]["name"] for i in ISVCS]
    assert len(set(names)) == len(names)
    for isvc in ISVCS[1:]:
        protocol = isvc["spec"]["predictor"]["model"]["protocolVersion"]
        assert isvc["metadata"]["name"] == f"demo-{protocol}"
    # Each example is in its own file, named for its protocol.
    spec = yaml.safe_load((EXAMPLES / "kustomization.yaml").read_text())
    assert sorted(spec["resources"]) == sorted(f"{p}.yaml" for p in PROTOCOLS if p != "v1")
    assert {p.name for p in EXAMPLES.glob("*.yaml")} == {"kustomization.yaml", *spec["resources"]}
    for resource in spec["resources"]:
        (isvc,) = [
            d for d in load_yaml_documents(EXAMPLES / resource) if d["kind"] == "InferenceService"
        ]
        assert isvc["spec"]["predictor"]["model"]["protocolVersion"] == resource.removesuffix(
            ".yaml"
        )


@pytest.mark.parametrize("isvc", ISVCS, ids=name_of)
def test_inference_service_serves_the_trained_demo_model(isvc: Doc) -> None:
    """pvc://CLAIM/PATH: the namespace's model volume, where the training Job exports."""
    claim, _, path = (
        isvc["spec"]["predictor"]["model"]["storageUri"].removeprefix("pvc://").partition("/")
    )
    namespace = render(DEPLOY / "namespace")
    (pvc,) = [d for d in namespace if d["kind"] == "PersistentVolumeClaim"]
    (ns,) = [d for d in namespace if d["kind"] == "Namespace"]
    assert claim == pvc["metadata"]["name"]
    assert isvc["metadata"]["namespace"] == ns["metadata"]["name"]
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


@pytest.mark.parametrize("isvc", ISVCS, ids=name_of)
def test_the_first_port_speaks_the_protocol(isvc: Doc) -> None:
    """KServe makes the first port the Service's port 80, where its gateway sends
    whatever is not an inference.GRPCInferenceService call: REST (http1, the
    --rest_api_port) for v1 and v2; for grpc-v1 and grpc-v2 the gRPC port alone,
    named h2c (KServe's grpc samples do the same; TF Serving's gRPC paths would
    go to a REST port beside it)."""
    args = flags(RUNTIME["spec"]["containers"][0]["args"])
    numbers = {"http1": int(args["rest_api_port"]), "h2c": int(args["port"])}
    protocol = isvc["spec"]["predictor"]["model"]["protocolVersion"]
    ports = isvc["spec"]["predictor"]["model"]["ports"]
    for port in ports:
        assert port["name"] in PORT_NAMES, port
        assert (port["containerPort"], port["protocol"]) == (numbers[port["name"]], "TCP")
    names = [p["name"] for p in ports]
    if protocol.startswith("grpc-"):
        assert names == ["h2c"]
    else:
        assert names == ["http1", "h2c"]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"


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


@pytest.mark.parametrize("isvc", ISVCS, ids=name_of)
def test_network_policy_admits_the_predictors_ports_only(isvc: Doc) -> None:
    """Each InferenceService comes with its own policy, NAME-predictor."""
    assert len(POLICIES) == len(ISVCS)
    (policy,) = [
        p for p in POLICIES if p["metadata"]["name"] == f"{isvc['metadata']['name']}-predictor"
    ]
    assert policy["metadata"]["namespace"] == isvc["metadata"]["namespace"]
    assert policy["spec"]["podSelector"] == {
        "matchLabels": {ISVC_POD_LABEL: isvc["metadata"]["name"]}
    }
    admitted = {(p["port"], p["protocol"]) for r in policy["spec"]["ingress"] for p in r["ports"]}
    ports = isvc["spec"]["predictor"]["model"]["ports"]
    assert admitted == {(p["containerPort"], p["protocol"]) for p in ports}
    assert policy["spec"]["egress"] == []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("policy", POLICIES, ids=name_of)
def test_network_policy_is_valid_for_kubernetes(policy: Doc, version: str) -> None:
    kubernetes_validate.validate(policy, version, strict=True)


# --- the predictor pod: the checks deploy/kubernetes' server passes -------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("isvc", ISVCS, ids=name_of)
def test_predictor_pod_is_valid_for_kubernetes(isvc: Doc, version: str) -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": f"{isvc['metadata']['name']}-predictor"},
        "template": pod(isvc).template,
    }
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        pytest.fail(f"{'/'.join(str(p) for p in err.path)}: {err.message}")


@pytest.mark.parametrize("isvc", ISVCS, ids=name_of)
def test_predictor_pod_is_restricted(isvc: Doc) -> None:
    assert restricted_violations(pod(isvc).spec) == []


@pytest.mark.parametrize("isvc", ISVCS, ids=name_of)
def test_predictor_pod_runs_as_the_image_user_hardened(isvc: Doc) -> None:
    uid = image_uid()
    spec = pod(isvc).spec
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


@pytest.mark.parametrize("isvc", ISVCS, ids=name_of)
def test_predictor_is_sized_to_its_cpu_limit(isvc: Doc) -> None:
    template = pod(isvc)
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
