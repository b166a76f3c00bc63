"""tritonclient.http against a server's Open Inference Protocol REST API (see __init__.py).

python triton_http.py HOST:PORT OPS_JSON
"""

from __future__ import annotations

import sys
from typing import Any

import tritonclient.http as triton
from _common import (  # type: ignore[import-not-found]
    array,
    listed,
    main,
    triton_call,
    triton_results,
)
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
    return triton_call(client, op, infer)


def run(address: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    client = triton.InferenceServerClient(url=address, network_timeout=120)
    results: list[dict[str, Any]] = triton_results(client, ops, call, InferenceServerException)
    return results


if __name__ == "__main__":
    sys.exit(main(__doc__ or "", run))
