"""KServe: what is vendored here (see UPSTREAM.md), and the predictor pod KServe builds."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.kustomize import REPO, Doc

HERE = Path(__file__).resolve().parent
KSERVE = REPO / "deploy" / "kserve"
#: One InferenceService per protocol besides the demo's (a kustomization of its own).
EXAMPLES = KSERVE / "examples"
#: KServe's own TF Serving runtime, byte for byte (UPSTREAM.md records the commit).
UPSTREAM_RUNTIME = HERE / "kserve-tensorflow-serving.yaml"
#: The CRDs' OpenAPI v3 schemas, by kind.
SCHEMAS = {
    "ServingRuntime": HERE / "servingruntime.schema.json",
    "InferenceService": HERE / "inferenceservice.schema.json",
}
#: What the CRDs' apiVersions are at the vendored commit.
API_VERSIONS = {
    "ServingRuntime": "serving.kserve.io/v1alpha1",
    "InferenceService": "serving.kserve.io/v1beta1",
}

#: KServe's names (pkg/constants): the model's mount point, the PVC volume, and
#: the label on every pod of an InferenceService (its value: the name).
MODEL_MOUNT = "/mnt/models"
PVC_VOLUME = "kserve-pvc-source"
ISVC_POD_LABEL = "serving.kserve.io/inferenceservice"
#: KServe's protocol versions (pkg/constants: InferenceServiceProtocol), in its
#: order of preference: an InferenceService without `protocolVersion` gets the
#: first its runtime declares (GetProtocolVersionPriority), and a runtime must
#: declare an InferenceService's protocolVersion to be picked for it.
PROTOCOLS = ("v1", "v2", "grpc-v1", "grpc-v2")
#: The port names Knative accepts (KServe passes them on): h2c is gRPC; KServe
#: gives a port whose name has "h2c" or "grpc" appProtocol kubernetes.io/h2c
#: and routes inference.GRPCInferenceService calls to it.
PORT_NAMES = {"http1": "REST", "h2c": "gRPC"}
#: Fields of predictor.model that select the model, not the container.
MODEL_ONLY_FIELDS = {"modelFormat", "runtime", "runtimeVersion", "storageUri", "storage",
                     "protocolVersion"}  # fmt: skip
#: Fields of the predictor that configure KServe, not the pod.
COMPONENT_FIELDS = {
    "model", "minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "scaleMetricType",
    "containerConcurrency", "timeout", "canaryTrafficPercent", "logger", "batcher",
    "labels", "annotations", "deploymentStrategy", "autoScaling", "storageUris", "workerSpec",
}  # fmt: skip


def load_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMAS[kind].read_text())
    return schema


def upstream_runtime() -> Doc:
    doc: Doc = yaml.safe_load(UPSTREAM_RUNTIME.read_text())
    return doc


def strict(schema: Any) -> Any:
    """The schema as the API server applies it with fieldValidation=Strict (kubectl's
    default): an object's fields not in `properties` are errors, unless the schema
    keeps unknown fields (x-kubernetes-preserve-unknown-fields) or is a map
    (additionalProperties)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def predictor_pod(runtime: Doc, isvc: Doc) -> Doc:
    """The predictor's pod spec, assembled as KServe does for a pvc:// model (an
    approximation for the checks here, not KServe's code): the runtime's container
    with the InferenceService's model fields merged over it, the predictor's pod
    fields, the runtime's volumes, and the claim mounted read-only at /mnt/models."""
    predictor = isvc["spec"]["predictor"]
    model = predictor["model"]
    (container,) = copy.deepcopy(runtime["spec"]["containers"])
    for key, value in model.items():
        if key not in MODEL_ONLY_FIELDS:
            container[key] = copy.deepcopy(value)
    spec = {k: copy.deepcopy(v) for k, v in predictor.items() if k not in COMPONENT_FIELDS}
    spec["containers"] = [container]
    spec["volumes"] = copy.deepcopy(runtime["spec"].get("volumes", []))
    uri = model["storageUri"]
    if uri.startswith("pvc://"):
        claim, _, _ = uri.removeprefix("pvc://").partition("/")
        spec["volumes"].append(
            {"name": PVC_VOLUME, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        )
        container.setdefault("volumeMounts", []).append(
            {"name": PVC_VOLUME, "mountPath": MODEL_MOUNT, "readOnly": True}
        )
    return spec
