"""The Open Inference Protocol (KServe v2) in the real image, called by real clients.

tritonclient (HTTP and gRPC) and kserve's InferenceRESTClient and
InferenceGRPCClient run unchanged from .venv-clients (requirements/clients.lock,
`make clients`; $TF_ENTRYPOINT_CLIENTS_PYTHON names another interpreter) as
subprocesses: tests/container/v2clients/SCRIPT ADDRESS OPS_JSON prints a result
per operation (v2clients/_common.py describes both). Raw requests (httpx2) cover
what no client sends: bad datatypes and shapes, a binary header beyond the body,
a body over --max-body-bytes.

The server (tests/container/v2_server.py, shared with test_every_answer) runs
under --cpus 1 with REST (8501) and gRPC (8500) published on 127.0.0.1.
Models (from the model library): plus/1 and plus/2 (y = x + V,
make_models.py), mixed/1 (FP32, INT64, INT32, BYTES and BOOL inputs, each
output a known function of one, make_v2_models.py), complex/1 (a COMPLEX64
input, which the protocol has no datatype for), datatypes/1 (make_v2_models.py's
dtypes/1, under another name: test_every_answer's dtypes/1 is the dtype sweep)
and, for batching, mlp/1 (make_batch_models.py) on a server of its own. Every
infer is checked against TF Serving's v1 predict of the same input on the same
server.
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from harness import web
from harness.docker import REPO, poll
from harness.servers import Server, ServerPool, serve
from tests.container.gates import OPEN, Gate
from tests.container.grpc_models import gate_volume
from tests.container.v2_server import MAX_BODY, SPEC

#: The images this module tests (tests/container/conftest.py): the server is
#: the same in both; what the CUDA image changes is tested by the modules that run on both.
IMAGE_FLAVORS = ("cpu",)

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "v2clients"
CLIENTS_PYTHON = Path(
    os.environ.get("TF_ENTRYPOINT_CLIENTS_PYTHON") or REPO / ".venv-clients" / "bin" / "python"
)
#: One batch thread, no timeout: requests that arrive while it is busy gather into one batch.
BATCHING = """
max_batch_size { value: 8 }
batch_timeout_micros { value: 0 }
num_batch_threads { value: 1 }
"""
VERSION = re.search(
    r'^__version__ = "([^"]+)"',
    (REPO / "entrypoint" / "tf_entrypoint" / "__init__.py").read_text(),
    re.MULTILINE,
)
SERVER_METADATA = {
    "name": "tf-entrypoint",
    "version": VERSION.group(1) if VERSION else "?",
    "extensions": ["binary_tensor_data"],
}
NOT_FOUND = "StatusCode.NOT_FOUND"
INVALID = "StatusCode.INVALID_ARGUMENT"


def b64(*texts: str) -> list[str]:
    return [base64.b64encode(text.encode()).decode() for text in texts]


#: mixed/1's inputs (v2 datatypes; BYTES as base64, the scripts' format) and the same as v1 JSON.
X = [[0.1, -2.5, 3.0], [1e-3, 7.25, -0.5]]
N = [-(2**63), 41]
K = [-(2**30), 21]
S = ["a", "\u00e9t\u00e9"]
B = [True, False]
MIXED = [
    {"name": "x", "datatype": "FP32", "shape": [2, 3], "data": [v for row in X for v in row]},
    {"name": "n", "datatype": "INT64", "shape": [2], "data": N},
    {"name": "k", "datatype": "INT32", "shape": [2], "data": K},
    {"name": "s", "datatype": "BYTES", "shape": [2], "data": b64(*S)},
    {"name": "b", "datatype": "BOOL", "shape": [2], "data": B},
]
MIXED_V1 = {"x": X, "n": N, "k": K, "s": S, "b": B}
#: What mixed/1 returns for them, beside what v1 says (exact, from the model's definition).
KNOWN = {
    "n_next": [-(2**63) + 1, 42],
    "k_twice": [-(2**31), 42],
    "s_tagged": b64("a!", "\u00e9t\u00e9!"),
    "b_not": [False, True],
}
MIXED_TYPES = {
    "y": ("FP32", [2, 3]), "total": ("FP32", [2]), "n_next": ("INT64", [2]),
    "k_twice": ("INT32", [2]), "s_tagged": ("BYTES", [2]), "b_not": ("BOOL", [2]),
}  # fmt: skip
MIXED_METADATA = {
    "name": "mixed",
    "versions": ["1"],
    "platform": "tensorflow_savedmodel",
    "inputs": [
        {"name": "b", "datatype": "BOOL", "shape": [-1]},
        {"name": "k", "datatype": "INT32", "shape": [-1]},
        {"name": "n", "datatype": "INT64", "shape": [-1]},
        {"name": "s", "datatype": "BYTES", "shape": [-1]},
        {"name": "x", "datatype": "FP32", "shape": [-1, 3]},
    ],
    "outputs": [
        {"name": "b_not", "datatype": "BOOL", "shape": [-1]},
        {"name": "k_twice", "datatype": "INT32", "shape": [-1]},
        {"name": "n_next", "datatype": "INT64", "shape": [-1]},
        {"name": "s_tagged", "datatype": "BYTES", "shape": [-1]},
        {"name": "total", "datatype": "FP32", "shape": [-1]},
        {"name": "y", "datatype": "FP32", "shape": [-1, 3]},
    ],
}
PLUS_METADATA = {
    "name": "plus",
    "versions": ["1", "2"],
    "platform": "tensorflow_savedmodel",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1]}],
}
COMPLEX_METADATA = {
    "name": "complex",
    "versions": ["1"],
    "platform": "tensorflow_savedmodel",
    "inputs": [{"name": "z", "datatype": "COMPLEX64", "shape": [-1]}],
    "outputs": [{"name": "re", "datatype": "FP32", "shape": [-1]}],
}
COMPLEX_REFUSED = "COMPLEX64, which has no Open Inference Protocol equivalent"


#: datatypes/1's inputs: every datatype the protocol and TensorFlow share, at the edges
#: of its range (the model returns each unchanged as NAME_out).
DTYPES: dict[str, list[Any]] = {
    "BOOL": [True, False],
    "UINT8": [0, 255],
    "UINT16": [0, 65535],
    "UINT32": [0, 2**32 - 1],
    "UINT64": [0, 2**64 - 1],
    "INT8": [-128, 127],
    "INT16": [-32768, 32767],
    "INT32": [-(2**31), 2**31 - 1],
    "INT64": [-(2**63), 2**63 - 1],
    "FP16": [1.5, -2048.0],
    "FP32": [0.1, -3e38],
    "FP64": [0.1, -1.7976931348623157e308],
    "BYTES": [base64.b64encode(b"caf\xc3\xa9").decode(), base64.b64encode(b"").decode()],
    "BF16": [1.5, -2.0],
}


def dtypes(binary: bool, names: list[str]) -> dict[str, Any]:
    """An infer of datatypes/1 with DTYPES' `names` (the rest left out: the signature
    needs them all, so a subset is refused naming the missing ones)."""
    inputs = [
        {"name": name.lower(), "datatype": name, "shape": [2], "data": DTYPES[name],
         "binary": binary}
        for name in names
    ]  # fmt: skip
    return {"op": "infer", "model": "datatypes", "inputs": inputs}


def mixed(binary: bool, **op: Any) -> dict[str, Any]:
    """An infer of mixed/1 with MIXED, every input binary or none."""
    inputs = [{**spec, "binary": binary} for spec in MIXED]
    return {"op": "infer", "model": "mixed", "inputs": inputs, **op}


def plus(*values: float, datatype: str = "FP32", **op: Any) -> dict[str, Any]:
    spec = {"name": "x", "datatype": datatype, "shape": [len(values)], "data": list(values)}
    return {"op": "infer", "model": "plus", "inputs": [spec], **op}


def flat(values: Any) -> list[Any]:
    if isinstance(values, list):
        return [v for value in values for v in flat(value)]
    return [values]


@dataclass
class V2Server:
    server: Server
    grpc: str

    @property
    def rest(self) -> str:
        return self.server.rest

    @property
    def rest_address(self) -> str:
        return self.server.rest.removeprefix("http://")

    def clients(self, script: str, address: str, *ops: dict[str, Any]) -> list[dict[str, Any]]:
        """Run a v2clients script (in .venv-clients) on `ops`; its results."""
        assert CLIENTS_PYTHON.exists(), f"{CLIENTS_PYTHON}: run `make clients` first"
        ran = subprocess.run(
            [str(CLIENTS_PYTHON), str(SCRIPTS / script), address, json.dumps(list(ops))],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        results: list[dict[str, Any]] = json.loads(ran.stdout.strip().splitlines()[-1])
        assert len(results) == len(ops), results
        return results

    def v1(self, model: str, inputs: Any, version: int | None = None) -> Any:
        """TF Serving's REST predict (columnar): its outputs as v2 results, flat, by name."""
        path = f"{model}/versions/{version}" if version else model
        answer = web.post(
            f"{self.rest}/v1/models/{path}:predict", json={"inputs": inputs}, timeout=60
        )
        assert answer.status_code == 200, answer.text
        outputs = answer.json()["outputs"]
        return outputs if isinstance(outputs, dict) else {"y": outputs}

    def v2(self, path: str, **request: Any) -> httpx2.Response:
        return web.post(f"{self.rest}/v2/{path}", timeout=60, **request)


@pytest.fixture(scope="module")
def server(servers: ServerPool) -> V2Server:
    running = servers.shared(SPEC)
    return V2Server(running, running.grpc_address)


def by_name(metadata: dict[str, Any]) -> dict[str, Any]:
    """Model metadata with inputs and outputs sorted by name and shapes as ints (gRPC's
    JSON writes int64 as strings); the order is the server's to choose."""
    tidy = dict(metadata)
    for key in ("inputs", "outputs"):
        tidy[key] = sorted(
            (
                {**tensor, "shape": [int(dim) for dim in tensor.get("shape", [])]}
                for tensor in metadata.get(key, [])
            ),
            key=lambda tensor: str(tensor["name"]),
        )
    return tidy


def expected_mixed(server: V2Server, outputs: list[str] | None = None) -> dict[str, Any]:
    """mixed/1's outputs for MIXED as the scripts report them, from v1's predict."""
    v1 = server.v1("mixed", MIXED_V1)
    answer: dict[str, Any] = {}
    for name in outputs or list(MIXED_TYPES):
        datatype, shape = MIXED_TYPES[name]
        data: list[Any] = flat(v1[name])
        if datatype == "BYTES":
            data = list(b64(*data))
        answer[name] = {"datatype": datatype, "shape": shape, "data": data}
    for name, known in KNOWN.items():
        if name in answer:
            assert answer[name]["data"] == known, (name, v1[name])
    return answer


def value(result: dict[str, Any]) -> Any:
    assert "value" in result, result
    return result["value"]


def error(result: dict[str, Any]) -> tuple[str, str]:
    assert "error" in result, result
    return result["error"]["status"], result["error"]["message"]


# -- tritonclient ---------------------------------------------------------------------------


def health_and_metadata_ops() -> list[dict[str, Any]]:
    return [
        {"op": "live"},
        {"op": "ready"},
        {"op": "model_ready", "model": "mixed"},
        {"op": "model_ready", "model": "plus", "version": "1"},
        {"op": "server_metadata"},
        {"op": "model_metadata", "model": "mixed"},
        {"op": "model_metadata", "model": "plus"},
        {"op": "model_metadata", "model": "plus", "version": "1"},
        {"op": "model_metadata", "model": "complex"},
    ]


@pytest.mark.parametrize("script", ["triton_http.py", "triton_grpc.py"])
def test_tritonclient_health_and_metadata(server: V2Server, script: str) -> None:
    address = server.rest_address if script == "triton_http.py" else server.grpc
    results = server.clients(script, address, *health_and_metadata_ops())
    live, ready, mixed_ready, plus1_ready, meta, mixed_meta, plus_meta, plus1_meta, cplx = [
        value(result) for result in results
    ]
    assert (live, ready, mixed_ready, plus1_ready) == (True, True, True, True)
    assert meta == SERVER_METADATA
    assert by_name(mixed_meta) == MIXED_METADATA
    assert by_name(plus_meta) == PLUS_METADATA
    assert by_name(plus1_meta) == PLUS_METADATA  # the versions available, whichever is asked
    assert by_name(cplx) == COMPLEX_METADATA


@pytest.mark.parametrize("script", ["triton_http.py", "triton_grpc.py"])
def test_tritonclient_infer_equals_v1_predict(server: V2Server, script: str) -> None:
    address = server.rest_address if script == "triton_http.py" else server.grpc
    everything = expected_mixed(server)
    some = expected_mixed(server, ["y", "s_tagged"])
    json_outputs = [{"name": name, "binary": False} for name in MIXED_TYPES]
    requested = [{"name": "y", "binary": True}, {"name": "s_tagged", "binary": False}]
    as_json, as_binary, filtered, v1, latest = server.clients(
        script,
        address,
        mixed(False, id="req-json", outputs=json_outputs),
        mixed(True, id="req-binary"),  # no outputs named: tritonclient asks for binary outputs
        mixed(True, outputs=requested),
        plus(1.0, 2.5, version="1"),
        plus(1.0, 2.5),
    )
    for result, request_id in ((as_json, "req-json"), (as_binary, "req-binary")):
        answer = value(result)
        assert answer["outputs"] == everything
        assert (answer["model_name"], answer["model_version"]) == ("mixed", "1")
        assert answer["id"] == request_id
    assert value(filtered)["outputs"] == some
    assert value(v1)["outputs"] == {
        "y": {"datatype": "FP32", "shape": [2], "data": flat(server.v1("plus", [1.0, 2.5], 1)["y"])}
    }
    assert value(v1)["outputs"]["y"]["data"] == [2.0, 3.5]
    assert value(v1)["model_version"] == "1"
    assert value(latest)["outputs"]["y"]["data"] == [3.0, 4.5]
    assert value(latest)["model_version"] == "2"
    if script == "triton_http.py":
        # JSON outputs carry data; binary ones binary_data_size and no data (Triton's rule).
        header = value(as_json)["response"]["outputs"]
        assert all("data" in out and "parameters" not in out for out in header)
        header = value(as_binary)["response"]["outputs"]
        assert all("data" not in out and out["parameters"]["binary_data_size"] > 0
                   for out in header)  # fmt: skip
        by = {out["name"]: out for out in value(filtered)["response"]["outputs"]}
        assert sorted(by) == ["s_tagged", "y"]
        assert by["y"]["parameters"] == {"binary_data_size": 24}  # 6 float32
        assert "data" in by["s_tagged"]


@pytest.mark.parametrize("script", ["triton_http.py", "triton_grpc.py"])
def test_tritonclient_errors(server: V2Server, script: str) -> None:
    http = script == "triton_http.py"
    address = server.rest_address if http else server.grpc
    wide = [
        {**spec, "shape": [2, 4], "data": [float(i) for i in range(8)]} if spec["name"] == "x"
        else spec for spec in MIXED
    ]  # fmt: skip
    results = server.clients(
        script,
        address,
        plus(1.0, model="nope"),
        plus(1.0, version="9"),
        plus(1.0, datatype="FP64"),
        {"op": "infer", "model": "mixed", "inputs": wide},
        plus(1.0, outputs=[{"name": "nope"}]),
        {"op": "infer", "model": "complex", "inputs": [
            {"name": "z", "datatype": "FP32", "shape": [1], "data": [1.0]}]},
        {"op": "model_metadata", "model": "nope"},
        {"op": "model_ready", "model": "nope"},
    )  # fmt: skip
    missing, version, datatype, shape, output, cplx, metadata = map(error, results[:7])
    not_found, invalid = ("404", "400") if http else (NOT_FOUND, INVALID)
    assert missing[0] == not_found
    assert "nope" in missing[1]
    assert version[0] == not_found
    assert "plus" in version[1]
    assert datatype == (invalid, "input 'x' has datatype FP64; the model's signature expects FP32")
    assert shape == (invalid, "input 'x' has shape [2,4]; the signature expects [-1,3]")
    assert output[0] == invalid
    assert "nope" in output[1]
    assert cplx[0] == invalid
    assert COMPLEX_REFUSED in cplx[1]
    assert metadata[0] == not_found
    assert "nope" in metadata[1]
    if http:
        assert value(results[7]) is False  # tritonclient.http: not ready, not an exception
    else:  # the design leaves open whether ModelReady of an unknown model is an error
        ready = results[7]
        assert ready.get("value") is False or ready.get("error", {}).get("status") == NOT_FOUND


# -- kserve -------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["rest", "grpc"])
def test_kserve_clients(server: V2Server, transport: str) -> None:
    address = f"{transport}:{server.rest_address if transport == 'rest' else server.grpc}"
    everything = expected_mixed(server)
    json_outputs = [{"name": name, "binary": False} for name in MIXED_TYPES]
    ops = [
        {"op": "live"},
        {"op": "ready"},
        {"op": "model_ready", "model": "mixed"},
        mixed(False, id="typed", outputs=json_outputs),  # REST: JSON; gRPC: typed contents
        mixed(True, id="raw", outputs=json_outputs),  # REST: binary inputs; gRPC: raw contents
        plus(1.0, 2.5),
        plus(1.0, model="nope"),
    ]
    if transport == "grpc":
        ops.append({"op": "model_metadata", "model": "mixed"})
    live, ready, model_ready, typed, raw, latest, missing, *metadata = server.clients(
        "kserve_clients.py", address, *ops
    )
    assert (value(live), value(ready), value(model_ready)) == (True, True, True)
    # kserve 0.21's REST client drops model_version when it reads a response
    # (InferResponse.from_bytes); its gRPC client keeps it.
    version = None if transport == "rest" else "1"
    for result, request_id in ((typed, "typed"), (raw, "raw")):
        answer = value(result)
        assert answer["outputs"] == everything
        assert (answer["model_name"], answer["model_version"], answer["id"]) == (
            "mixed", version, request_id
        )  # fmt: skip
    assert value(latest)["outputs"]["y"]["data"] == flat(server.v1("plus", [1.0, 2.5])["y"])
    status, message = error(missing)
    assert status == ("404" if transport == "rest" else NOT_FOUND)
    assert "nope" in message
    if metadata:
        assert by_name(value(metadata[0])) == MIXED_METADATA


# -- raw REST -----------------------------------------------------------------------------


def test_rest_health_and_metadata_routes(server: V2Server) -> None:
    assert web.get(f"{server.rest}/v2", timeout=10).json() == SERVER_METADATA
    for path in (
        "health/live",
        "health/ready",
        "models/mixed/ready",
        "models/plus/versions/1/ready",
    ):
        assert web.get(f"{server.rest}/v2/{path}", timeout=10).status_code == 200, path
    answer = web.get(f"{server.rest}/v2/models/plus/versions/2", timeout=10)
    assert answer.status_code == 200
    assert by_name(answer.json()) == PLUS_METADATA
    for path in ("models/nope", "models/nope/ready", "models/plus/versions/9"):
        answer = web.get(f"{server.rest}/v2/{path}", timeout=10)
        assert answer.status_code == 404, path
        assert list(answer.json()) == ["error"], answer.text


def test_rest_json_infer_answers_exactly(server: V2Server) -> None:
    request = {
        "id": "abc",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1.0, 2.5]}],
    }
    answer = server.v2("models/plus/infer", json=request)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "model_name": "plus", "model_version": "2", "id": "abc",
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [2], "data": [3.0, 4.5]}],
    }  # fmt: skip
    nested = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 3], "data": X}]}
    nested["inputs"] += [spec for spec in MIXED if spec["name"] != "x"]
    for spec in nested["inputs"]:
        if spec["datatype"] == "BYTES":
            spec["data"] = S  # JSON strings, UTF-8
    answer = server.v2("models/mixed/versions/1/infer", json=nested)
    assert answer.status_code == 200, answer.text
    outputs = {out["name"]: out for out in answer.json()["outputs"]}
    assert outputs["n_next"] == {"name": "n_next", "datatype": "INT64", "shape": [2],
                                 "data": KNOWN["n_next"]}  # fmt: skip
    assert outputs["s_tagged"]["data"] == ["a!", "\u00e9t\u00e9!"]
    assert outputs["b_not"]["data"] == [False, True]
    assert outputs["y"]["data"] == flat(server.v1("mixed", MIXED_V1)["y"])


def binary_request(header: dict[str, Any], payload: bytes, declared: int | None = None) -> Any:
    document = json.dumps(header).encode()
    length = len(document) if declared is None else declared
    return {
        "content": document + payload,
        "headers": {
            "content-type": "application/octet-stream",
            "inference-header-content-length": str(length),
        },
    }


def test_rest_binary_extension(server: V2Server) -> None:
    header = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [2],
                    "parameters": {"binary_data_size": 8}}],
        "parameters": {"binary_data_output": True},
    }  # fmt: skip
    answer = server.v2("models/plus/infer", **binary_request(header, struct.pack("<2f", 1, 2.5)))
    assert answer.status_code == 200, answer.text
    length = int(answer.headers["inference-header-content-length"])
    document = json.loads(answer.content[:length])
    assert document == {
        "model_name": "plus", "model_version": "2",
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [2],
                     "parameters": {"binary_data_size": 8}}],
    }  # fmt: skip
    assert answer.content[length:] == struct.pack("<2f", 3.0, 4.5)

    beyond = binary_request(header, struct.pack("<2f", 1, 2.5), declared=10_000)
    answer = server.v2("models/plus/infer", **beyond)
    assert answer.status_code == 400, answer.text
    assert list(answer.json()) == ["error"]

    short = binary_request(header, struct.pack("<f", 1))  # binary_data_size 8, 4 bytes sent
    answer = server.v2("models/plus/infer", **short)
    assert answer.status_code == 400, answer.text
    assert re.search(r"\bx\b", answer.json()["error"]), answer.text


def test_rest_bad_requests(server: V2Server) -> None:
    def infer(path: str, *inputs: dict[str, Any]) -> tuple[int, str]:
        answer = server.v2(path, json={"inputs": list(inputs)})
        body = answer.json()
        assert list(body) == ["error"], answer.text
        return answer.status_code, str(body["error"])

    x = {"name": "x", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}
    status, message = infer("models/nope/infer", x)
    assert status == 404
    assert "nope" in message
    status, message = infer("models/plus/versions/9/infer", x)
    assert status == 404
    assert "plus" in message
    assert infer("models/plus/infer", {**x, "datatype": "FP64"}) == (
        400, "input 'x' has datatype FP64; the model's signature expects FP32"
    )  # fmt: skip
    status, message = infer("models/plus/infer", {**x, "shape": [3]})  # 2 values for 3
    assert status == 400
    assert re.search(r"\bx\b", message), message
    z = {"name": "z", "datatype": "FP32", "shape": [1], "data": [1.0]}
    status, message = infer("models/complex/infer", z)
    assert status == 400
    assert COMPLEX_REFUSED in message

    big = b'{"inputs": [' + b" " * MAX_BODY + b"]}"
    answer = server.v2(
        "models/plus/infer", content=big, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 413
    assert answer.json() == {
        "error": f"Request body exceeds the limit of {MAX_BODY} bytes (--max-body-bytes)"
    }


# -- batching -----------------------------------------------------------------------------


def test_a_v2_request_batches_with_v1_requests(servers: ServerPool, tmp_path: Path) -> None:
    """One batch thread, held by a gated v1 predict until the test opens the gate; a v1 and a
    v2 request of the gated signature queue meanwhile and run as one batch, on any CPU."""
    gate = Gate(tmp_path / "gates")
    spec = serve(
        "--model_name=mlp",
        "--enable_batching",
        "--batching_parameters_file=/models/batching.txt",
        models={"mlp": "batch/mlp"},
        files={"batching.txt": BATCHING},
        volumes=gate_volume(gate),
    )
    with servers.private(spec) as running:

        def v1(x: float) -> httpx2.Response:
            return web.post(
                f"{running.rest}/v1/models/mlp:predict",
                json={"signature_name": "gated", "inputs": {"x": [x]}},
                timeout=120,
            )

        def v2(x: float) -> httpx2.Response:
            return web.post(
                f"{running.rest}/v2/models/mlp/infer",
                json={
                    "parameters": {"signature_name": "gated"},
                    "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [x]}],
                },
                timeout=120,
            )

        batches = running.metric("serving_batches_total")
        requests = running.metric("serving_batch_requests_sum")
        with ThreadPoolExecutor(3) as pool, gate.shut(OPEN):
            held = pool.submit(v1, 1.0)

            def started() -> bool:
                return running.metric("serving_batches_total") - batches == 1

            def three() -> bool:  # the v2 request is admitted as a v1 predict is
                return running.metric("serving_predict_in_flight") == 3

            assert poll(lambda: held.done() or started(), 180, 0.05), running.logs()
            assert started(), running.logs()
            queued = [pool.submit(v1, 2.0), pool.submit(v2, 3.0)]
            assert poll(three, 60, 0.05), running.logs()  # both wait behind the held one
            gate.open(OPEN)
            first, second, third = held.result(), *(future.result() for future in queued)
        assert (first.status_code, second.status_code, third.status_code) == (200, 200, 200)
        assert first.json() == {"outputs": [2.0]}
        assert second.json() == {"outputs": [3.0]}
        assert third.json()["outputs"] == [
            {"name": "y", "datatype": "FP32", "shape": [1], "data": [4.0]}
        ]
        assert running.metric("serving_batches_total") - batches == 2  # held, then the pair
        assert running.metric("serving_batch_requests_sum") - requests == 3
        assert "Traceback" not in running.logs()


@pytest.mark.parametrize("script", ["triton_http.py", "triton_grpc.py"])
def test_every_datatype_round_trips_through_tensorflow(server: V2Server, script: str) -> None:
    """Each datatype's values reach TensorFlow as themselves and come back so.

    tritonclient over REST: the binary extension, then JSON (BF16 has no JSON
    form in tritonclient: sent binary beside the JSON ones); over gRPC: raw
    contents. A request without BF16 misses one of the signature's inputs and
    is refused naming it.
    """
    address = server.rest_address if script == "triton_http.py" else server.grpc
    every = list(DTYPES)
    typed = [name for name in every if name != "BF16"]
    mixed_forms = dtypes(False, every)
    mixed_forms["inputs"][-1]["binary"] = True  # BF16 binary, the rest JSON
    ops = [dtypes(True, every), dtypes(False, typed), mixed_forms]
    if script == "triton_grpc.py":  # tritonclient.grpc sends every input raw
        ops = ops[:1]
    results = server.clients(script, address, *ops)
    outputs = value(results[0])["outputs"]
    assert sorted(outputs) == sorted(f"{name.lower()}_out" for name in every)
    for name in every:
        expected = {"datatype": name, "shape": [2], "data": DTYPES[name]}
        assert outputs[f"{name.lower()}_out"] == expected, name
    if len(results) == 1:
        return
    assert "bf16" in results[1]["error"]["message"], results[1]
    outputs = value(results[2])["outputs"]
    for name in every:
        assert outputs[f"{name.lower()}_out"]["data"] == DTYPES[name], name


def test_kserve_typed_contents_carry_every_datatype(server: V2Server) -> None:
    """kserve's gRPC client: every datatype with typed contents (signature "typed":
    datatypes/1 without FP16 and BF16, picked by the signature_name parameter); without
    the parameter the default signature misses those two; one input raw beside
    typed ones is refused (the protocol: raw contents for every input or none)."""
    typed = [name for name in DTYPES if name not in ("FP16", "BF16")]
    picked = {**dtypes(False, typed), "parameters": {"signature_name": "typed"}}
    one_raw = {**dtypes(False, typed), "parameters": {"signature_name": "typed"}}
    one_raw["inputs"][0]["binary"] = True
    ok, missing, mixed_forms = server.clients(
        "kserve_clients.py", f"grpc:{server.grpc}", picked, dtypes(False, typed), one_raw
    )
    outputs = value(ok)["outputs"]
    assert sorted(outputs) == sorted(f"{name.lower()}_out" for name in typed)
    for name in typed:
        expected = {"datatype": name, "shape": [2], "data": DTYPES[name]}
        assert outputs[f"{name.lower()}_out"] == expected, name
    assert "bf16" in missing["error"]["message"], missing
    assert "fp16" in missing["error"]["message"], missing
    assert "raw_input_contents" in mixed_forms["error"]["message"], mixed_forms
