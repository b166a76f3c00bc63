"""GetModelMetadata's `signature_def`, over REST and gRPC, as TF Serving answers it;
REST's status answer (GetModelStatus as JSON).

TF Serving copies the SavedModel's SignatureDefs, every one of them as the
MetaGraphDef holds it (`__saved_model_init_op` included, `defaults`, dimension
names and TensorInfos without a shape as they are), into a
`tensorflow.serving.SignatureDefMap` (servables/tensorflow/
get_model_metadata_impl.cc): gRPC packs that message into the response's
`metadata["signature_def"]`; REST prints it as JSON with protobuf's C++ printer
(:mod:`proto_json`) inside `{"model_spec": ..., "metadata": {"signature_def":
...}}` (http_rest_api_util.cc). A servable gives the message serialized
(`Servable.signature_def_map`, b"" when it has none: then the metadata is
written from its `signatures`, in the same form).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tf_entrypoint.serving.codec import json_values, proto_json
from tf_entrypoint.serving.core import types as p

#: The type URL of a packed SignatureDefMap (google.protobuf.Any).
TYPE_URL = "type.googleapis.com/tensorflow.serving.SignatureDefMap"


def rest_body(model: str, version: int, servable: Any) -> dict[str, Any]:
    """GET /v1/models/NAME[/versions/N]/metadata's answer: ModelSpec's fields in field
    order (name, version, signature_name), then the SignatureDefMap."""
    return {
        "model_spec": {"name": model, "version": str(version), "signature_name": ""},
        "metadata": {"signature_def": signature_def_map_json(servable)},
    }


def rest_answer(model: str, version: int, servable: Any) -> bytes:
    """:func:`rest_body` as sent; the manager encodes it once, when the version loads."""
    return json_values.encode(rest_body(model, version, servable))


def signature_def_map_json(servable: Any) -> dict[str, Any]:
    serialized: bytes = servable.signature_def_map
    if not serialized:
        return signatures_json(servable.signatures)
    from tensorflow_serving.apis import get_model_metadata_pb2  # noqa: PLC0415 - in the image

    message = get_model_metadata_pb2.SignatureDefMap.FromString(serialized)
    return proto_json.message_json(message)


def status_body(versions: Sequence[p.VersionStatus]) -> dict[str, Any]:
    """GET /v1/models/NAME[/versions/N|/labels/L]'s answer (TF Serving's GetModelStatus as JSON)."""
    return {
        "model_version_status": [
            {
                "version": str(v.version),
                "state": v.state,
                "status": {"error_code": v.error_code, "error_message": v.error_message},
            }
            for v in versions
        ]
    }


def tensor_info(spec: p.TensorSpec) -> dict[str, Any]:
    """A TensorInfo as TF Serving's REST metadata writes it: fields in field order."""
    dims = [] if spec.shape is None else [{"size": str(d), "name": ""} for d in spec.shape]
    return {
        "name": spec.tensor_name,
        "dtype": spec.dtype,
        "tensor_shape": {"dim": dims, "unknown_rank": spec.shape is None},
    }


def signatures_json(signatures: Mapping[str, p.Signature]) -> dict[str, Any]:
    """A SignatureDefMap as TF Serving's REST metadata writes it, from what `signatures`
    hold (:func:`signature_def_map_json` writes a servable's own SignatureDefs, when it
    has them)."""
    defs = {
        name: {
            "inputs": {key: tensor_info(spec) for key, spec in sorted(sig.inputs.items())},
            "outputs": {key: tensor_info(spec) for key, spec in sorted(sig.outputs.items())},
            "method_name": sig.method_name,
            "defaults": {},
        }
        for name, sig in sorted(signatures.items())
    }
    return {"signature_def": defs}
