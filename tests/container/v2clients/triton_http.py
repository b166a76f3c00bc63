"""tritonclient.http against a server's Open Inference Protocol REST API (see __init__.py).

python triton_http.py HOST:PORT OPS_JSON
"""

from __future__ import annotations

import sys
from typing import Any

import tritonclient.http as triton
from _common import array, listed, main  # type: ignore[import-not-found]
from tritonclient.utils import InferenceServerException


def infer(client: Any, op: dict[str, Any]) -> dict[str, Any]:
    inputs = []
    for spec in op["inputs"]:
        tensor = triton.InferInput(spec["name"], spec["shape"], spec["datatype"])
        tensor.set_data_from_numpy(array(spec), binary_data=spec.get("binary", False))
        inputs.append(tensor)
    outputs = None
    if "outputs" in op:
        outputs = [
            triton.InferRequestedOutput(out["name"], binary_data=out.get("binary", False))
            for out in op["outputs"]
        ]
    result = client.infer(
        op["model"],
        inputs,
        model_version=op.get("version", ""),
        outputs=outputs,
        request_id=op.get("id", ""),
    )
    response = result.get_response()
    return {
        "model_name": response.get("model_name"),
        "model_version": response.get("model_version"),
        "id": response.get("id"),
        "outputs": {
            out["name"]: listed(out["datatype"], result.as_numpy(out["name"]))
            for out in response["outputs"]
        },
        "response": response,
    }


def call(client: Any, op: dict[str, Any]) -> Any:
    kind = op["op"]
    version = op.get("version", "")
    if kind == "live":
        return client.is_server_live()
    if kind == "ready":
        return client.is_server_ready()
    if kind == "model_ready":
        return client.is_model_ready(op["model"], model_version=version)
    if kind == "server_metadata":
        return client.get_server_metadata()
    if kind == "model_metadata":
        return client.get_model_metadata(op["model"], model_version=version)
    if kind == "infer":
        return infer(client, op)
    raise SystemExit(f"unknown op {kind!r}")


def run(address: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    client = triton.InferenceServerClient(url=address, network_timeout=120)
    results: list[dict[str, Any]] = []
    try:
        for op in ops:
            try:
                results.append({"value": call(client, op)})
            except InferenceServerException as err:
                status = err.status()
                results.append({"error": {"status": str(status), "message": err.message()}})
    finally:
        client.close()
    return results


if __name__ == "__main__":
    sys.exit(main(__doc__ or "", run))
