"""What the client scripts share: the operations' format, NumPy <-> JSON, the main loop.

An operation is a dict with "op" and its arguments:

- {"op": "live"}, {"op": "ready"}, {"op": "server_metadata"}
- {"op": "model_ready" | "model_metadata", "model": M, "version": V (optional, str)}
- {"op": "infer", "model": M, "version": V?, "id": ID?, "parameters": {...}? (kserve
   only), "inputs": [INPUT...],
   "outputs": [{"name": N, "binary": bool?}...]?}, where INPUT is
   {"name", "datatype", "shape", "data" (flat, row-major; BYTES as base64 text),
    "binary": bool (the binary data extension over REST; raw contents over gRPC)}

A result is {"value": ...} or {"error": {"status": str, "message": str}} (the
client library's exception: an HTTP status or a gRPC status code). An infer's
value is {"model_name", "model_version", "id", "outputs": {NAME: {"datatype",
"shape", "data"}}, "response": the response's JSON header or message as JSON, its
raw contents left out}; output data is flat, FP16/FP32 values as the shortest
text of their float (as TF Serving's JSON writes them), BYTES as base64 text.
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Callable
from typing import Any

import ml_dtypes  # tritonclient's own dependency: its BF16 arrays
import numpy as np

NUMPY = {
    "BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    "BYTES": np.object_, "BF16": ml_dtypes.bfloat16,
}  # fmt: skip


def array(spec: dict[str, Any]) -> Any:
    """The NumPy array an operation's input describes."""
    datatype = spec["datatype"]
    data = spec["data"]
    if datatype == "BYTES":
        data = [base64.b64decode(value) for value in data]
    return np.array(data, dtype=NUMPY[datatype]).reshape(spec["shape"])


def listed(datatype: str, values: Any) -> dict[str, Any]:
    """An output as JSON: {"datatype", "shape", "data" (flat)}."""
    flat = values.reshape(-1)
    data: list[Any]
    if datatype == "BYTES":
        # kserve gives the elements of a JSON BYTES output as str, tritonclient as bytes.
        data = [
            base64.b64encode(value.encode() if isinstance(value, str) else bytes(value)).decode()
            for value in flat
        ]
    elif datatype in ("FP16", "FP32"):
        data = [float(str(value)) for value in flat]  # the shortest text of the float
    elif datatype == "BF16":
        data = [float(value) for value in flat]
    else:
        data = flat.tolist()
    return {"datatype": datatype, "shape": list(values.shape), "data": data}


def triton_call(
    client: Any, op: dict[str, Any], infer: Callable[[Any, dict[str, Any]], Any], **metadata: Any
) -> Any:
    """One operation through a tritonclient client (HTTP or gRPC: the same calls);
    `metadata`: the metadata calls' extra arguments (gRPC's as_json)."""
    kind = op["op"]
    version = op.get("version", "")
    if kind == "live":
        return client.is_server_live()
    if kind == "ready":
        return client.is_server_ready()
    if kind == "model_ready":
        return client.is_model_ready(op["model"], model_version=version)
    if kind == "server_metadata":
        return client.get_server_metadata(**metadata)
    if kind == "model_metadata":
        return client.get_model_metadata(op["model"], model_version=version, **metadata)
    if kind == "infer":
        return infer(client, op)
    raise SystemExit(f"unknown op {kind!r}")


def triton_results(
    client: Any, ops: list[dict[str, Any]], call: Callable[[Any, dict[str, Any]], Any],
    error: type[Exception],
) -> list[dict[str, Any]]:  # fmt: skip
    """Each operation's result; the client's `error` (InferenceServerException) as its
    status and message; the client closed after."""
    results: list[dict[str, Any]] = []
    try:
        for op in ops:
            try:
                results.append({"value": call(client, op)})
            except error as err:
                status = err.status()  # type: ignore[attr-defined]
                message = err.message()  # type: ignore[attr-defined]
                results.append({"error": {"status": str(status), "message": message}})
    finally:
        client.close()
    return results


def main(description: str, run: Callable[[str, list[dict[str, Any]]], list[dict[str, Any]]]) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("address", help="host:port of the server")
    parser.add_argument("ops", help="a JSON list of operations (see _common.py)")
    parser.add_argument(
        "--dry-run", action="store_true", help="check the operations and imports, call nothing"
    )
    args = parser.parse_args()
    ops = json.loads(args.ops)
    if not isinstance(ops, list) or not all(isinstance(op, dict) and "op" in op for op in ops):
        parser.error("ops must be a JSON list of objects with an 'op'")
    if args.dry_run:
        print(json.dumps([{"value": op["op"]} for op in ops]))
        return 0
    print(json.dumps(run(args.address, ops)))
    return 0
