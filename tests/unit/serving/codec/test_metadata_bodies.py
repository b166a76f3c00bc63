"""REST's status and metadata bodies (codec/metadata.py), from the core's plain types."""

from __future__ import annotations

from tf_entrypoint.serving.codec import metadata
from tf_entrypoint.serving.core import types as p

F32 = p.TensorSpec("DT_FLOAT", (-1,), "serving_default_x:0")
HALF_PLUS_TWO = p.Signature(inputs={"x": F32}, outputs={"y": p.TensorSpec("DT_FLOAT", (-1,))})


def test_status_and_metadata_bodies() -> None:
    assert metadata.status_body([p.VersionStatus(1, "AVAILABLE")]) == {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    defs = metadata.signatures_json({"serving_default": HALF_PLUS_TWO})["signature_def"]
    sig = defs["serving_default"]
    assert list(sig) == ["inputs", "outputs", "method_name", "defaults"]
    assert sig["method_name"] == "tensorflow/serving/predict"
    assert sig["defaults"] == {}
    assert sig["inputs"]["x"] == {
        "name": "serving_default_x:0",
        "dtype": "DT_FLOAT",
        "tensor_shape": {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False},
    }
    assert list(sig["inputs"]["x"]) == ["name", "dtype", "tensor_shape"]
    unknown = metadata.tensor_info(p.TensorSpec("DT_STRING", None))
    assert unknown["tensor_shape"] == {"dim": [], "unknown_rank": True}
