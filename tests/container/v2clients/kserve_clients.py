"""kserve's InferenceRESTClient and InferenceGRPCClient against a server's Open
Inference Protocol APIs (see __init__.py).

    python kserve_clients.py rest:HOST:PORT OPS_JSON
    python kserve_clients.py grpc:HOST:PORT OPS_JSON

kserve's clients have live, ready, model_ready and infer (no model metadata
call: over gRPC "model_metadata" calls ModelMetadata through kserve's own
generated stub; over REST it is refused). The gRPC client sends an input given
as a NumPy array as raw_input_contents and one given as a list in the typed
contents: an input's "binary" picks which. Over REST "binary" picks the binary
data extension. Requested outputs' "binary" sets their binary_data parameter.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc
import httpx
from _common import array, listed, main  # type: ignore[import-not-found]
from google.protobuf import json_format
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig
from kserve.protocol.grpc import grpc_predict_v2_pb2 as v2
from kserve.protocol.infer_type import RequestedOutput


def request(op: dict[str, Any], grpc_typed: bool) -> Any:
    inputs = []
    for spec in op["inputs"]:
        values = array(spec)
        tensor = InferInput(spec["name"], list(values.shape), spec["datatype"])
        if grpc_typed and not spec.get("binary", False):
            tensor.data = values.reshape(-1).tolist()  # the typed contents
        else:
            tensor.set_data_from_numpy(values, binary_data=spec.get("binary", False))
        inputs.append(tensor)
    outputs = None
    if "outputs" in op:
        outputs = [
            RequestedOutput(out["name"], {"binary_data": out.get("binary", False)})
            for out in op["outputs"]
        ]
    return InferRequest(
        op["model"],
        inputs,
        request_id=op.get("id"),
        request_outputs=outputs,
        model_version=op.get("version"),
        parameters=op.get("parameters"),
    )


def answer(response: Any) -> dict[str, Any]:
    return {
        "model_name": response.model_name,
        "model_version": response.model_version,
        "id": response.id,
        "outputs": {out.name: listed(out.datatype, out.as_numpy()) for out in response.outputs},
        "response": {
            "parameters": response.parameters if isinstance(response.parameters, dict) else None
        },
    }


async def rest(base: str, op: dict[str, Any], client: Any) -> Any:
    kind = op["op"]
    if kind == "live":
        return await client.is_server_live(base)
    if kind == "ready":
        return await client.is_server_ready(base)
    if kind == "model_ready":
        return await client.is_model_ready(base, op["model"])
    if kind == "infer":
        return answer(await client.infer(base, request(op, False), model_name=op["model"]))
    raise SystemExit(f"kserve's REST client has no {kind!r}")


async def grpc_call(op: dict[str, Any], client: Any) -> Any:
    kind = op["op"]
    if kind == "live":
        return await client.is_server_live()
    if kind == "ready":
        return await client.is_server_ready()
    if kind == "model_ready":
        return await client.is_model_ready(op["model"])
    if kind == "model_metadata":
        message = v2.ModelMetadataRequest(name=op["model"], version=op.get("version", ""))
        reply = await client._client_stub.ModelMetadata(message, timeout=60)
        return json_format.MessageToDict(reply, preserving_proto_field_name=True)
    if kind == "infer":
        return answer(await client.infer(request(op, True)))
    raise SystemExit(f"unknown op {kind!r}")


async def run_all(address: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    transport, _, target = address.partition(":")
    results: list[dict[str, Any]] = []
    client: Any
    if transport == "rest":
        client = InferenceRESTClient(RESTConfig(protocol="v2", retries=0, timeout=120))
    elif transport == "grpc":
        client = InferenceGRPCClient(target, timeout=120, retries=0)
    else:
        raise SystemExit(f"address {address!r}: expected rest:HOST:PORT or grpc:HOST:PORT")
    try:
        for op in ops:
            try:
                if transport == "rest":
                    value = await rest(f"http://{target}", op, client)
                else:
                    value = await grpc_call(op, client)
                results.append({"value": value})
            except httpx.HTTPStatusError as err:
                status = str(err.response.status_code)
                results.append({"error": {"status": status, "message": err.response.text}})
            except grpc.aio.AioRpcError as err:
                status = str(err.code())
                results.append({"error": {"status": status, "message": err.details() or ""}})
    finally:
        await client.close()
    return results


def run(address: str, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return asyncio.run(run_all(address, ops))


if __name__ == "__main__":
    sys.exit(main(__doc__ or "", run))
