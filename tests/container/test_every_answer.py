"""Every answer a client can be sent, in the real image (docs/robustness.md): never a 500,
INTERNAL or UNKNOWN for what a client sends or what a signature returns.

- The dtype sweep: every tf.dtypes type this TensorFlow builds a signature with
  (make_dtype_models.py: to_D, float32 -> D, and echo_D, D -> D) over every API
  (dtype_client.py, in a sidecar with TensorFlow and TF Serving's stubs: REST
  predict rows and columns, gRPC Predict, v2 REST JSON and binary, v2 gRPC
  ModelInfer). Each answer is the values TensorFlow computes, where the
  protocol carries the dtype, else a 400 / INVALID_ARGUMENT naming the tensor
  (x or y) and the dtype.
- The Open Inference Protocol's error walk: each mistake a request can make,
  over REST (httpx2) and gRPC (codec/v2_proto.py's messages), gets its 4xx /
  client code with a message, and the server logs no internal error.

The server (tests/container/v2_server.py, shared with test_v2_clients) runs
under --cpus 1 with REST (8501) and gRPC (8500) published on 127.0.0.1,
--max-body-bytes 65536; dtypes/1 and walk/1-2 are the model library's
dtype/ (make_dtype_models.py), whose dtypes.json is the sweep's manifest.
"""

from __future__ import annotations

import gzip
import json
import re
import struct
from pathlib import Path
from typing import Any

import grpc
import pytest

from harness import web
from harness.docker import Containers
from harness.models import ModelLibrary
from harness.servers import Server, ServerPool
from tests.container.v2_server import SPEC
from tf_entrypoint.serving.codec import v2_proto as pb

#: The images this module tests (tests/container/conftest.py): the server is the same in both.
IMAGE_FLAVORS = ("cpu",)

HERE = Path(__file__).resolve().parent
#: The types the sweep must cover (TensorFlow 2.21 builds them all; newer experimental
#: types are covered where this TensorFlow builds them).
REQUIRED = {
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool", "string", "complex64", "complex128",
    "qint8", "quint8", "qint16", "quint16", "qint32", "float8_e4m3fn", "float8_e5m2",
    "int4", "uint4", "variant", "resource",
}  # fmt: skip
#: The dtypes the Open Inference Protocol carries.
V2 = {
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool", "string",
}  # fmt: skip
#: What REST's JSON reads (the same) and writes: those and the narrower real numbers.
JSON_READ = V2
JSON_WRITTEN = V2 | {
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e5m2fnuz",
    "float4_e2m1fn", "int4", "uint4", "int2", "uint2",
}  # fmt: skip
#: What a TensorProto cannot carry (no values a client could read or write).
OPAQUE = {"variant", "resource"}
REFUSED = {"400", "INVALID_ARGUMENT"}
#: What no answer may be.
FAULTS = re.compile(r"^(5\d\d|INTERNAL|UNKNOWN|DATA_LOSS|client error)$")


@pytest.fixture(scope="module")
def manifest(model_library: ModelLibrary, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the sweep's manifest, dtypes.json (for dtype_client.py at /models)."""
    folder = tmp_path_factory.mktemp("every-answer")
    folder.chmod(0o755)  # the image's user reads it
    model_library.copy("dtype/dtypes.json", folder / "dtypes.json")
    return folder


@pytest.fixture(scope="module")
def server(servers: ServerPool) -> tuple[Server, str]:
    running = servers.shared(SPEC)
    return running, running.grpc_address


def no_internal_error_logged(server: Server) -> None:
    logs = server.logs()
    for needle in ("answered INTERNAL", "answered UNKNOWN", "internal error", "Traceback"):
        assert needle not in logs, logs[-4000:]


# -- the dtype sweep ------------------------------------------------------------------------


def carried(api: str, dtype: str, signature: str) -> bool:
    """Whether `api` carries `dtype` where `signature` sends and returns it (echo_D) or
    only returns it (to_D)."""
    if api.startswith("rest_"):
        return dtype in (JSON_WRITTEN if signature.startswith("to_") else JSON_READ)
    if api == "grpc_predict":
        return dtype not in OPAQUE
    return dtype in V2


#: The Open Inference Protocol's names where they are not TensorFlow's in upper case.
V2_NAMES = {"float16": "FP16", "float32": "FP32", "float64": "FP64", "bfloat16": "BF16",
            "string": "BYTES"}  # fmt: skip


def judge(result: dict[str, Any], entry: dict[str, Any]) -> str | None:
    """What is wrong with one answer of the sweep (None: nothing). `entry`: its dtype's
    line of the manifest."""
    dtype, signature, api, status = (result[k] for k in ("dtype", "signature", "api", "status"))
    message = result.get("message", "")
    where = f"{signature} over {api}: {status} {message!r}"
    tensor = "y" if signature.startswith("to_") else "x"
    # to_D: what TensorFlow computes; echo_D: what was sent (the same, else dtype_client.SMALL)
    expected = entry.get("expected") or [0.0, 1.0]
    datatype = result.get("datatype")
    if FAULTS.match(status):
        wrong = [f"a fault: {where}"]
    elif not carried(api, dtype, signature):
        wrong = [
            f"not a clear refusal: {where}" if status not in REFUSED else "",
            f"the refusal does not name {tensor} and {dtype}: {where}"
            if dtype not in message.lower() or not re.search(rf"\b{tensor}\b", message)
            else "",
        ]
    elif status not in ("200", "OK"):
        wrong = [f"refused, but the protocol carries {dtype}: {where}"]
    else:
        wrong = [
            f"{where}: {result['values']} != {expected}" if result["values"] != expected else "",
            f"{where}: datatype {datatype}"
            if datatype not in (None, V2_NAMES.get(dtype, dtype.upper()))
            else "",
        ]
    return "; ".join(w for w in wrong if w) or None


def test_every_dtype_in_and_out_of_every_api(
    server: tuple[Server, str], containers: Containers, manifest: Path
) -> None:
    running, _ = server
    dtypes = json.loads((manifest / "dtypes.json").read_text())
    built = {name for name, entry in dtypes.items() if entry["echo"] is True}
    assert built >= REQUIRED, {name: dtypes.get(name) for name in REQUIRED - built}
    ran = containers.run(
        ["python", "/t/dtype_client.py", "/models/dtypes.json"],
        network_mode=f"container:{running.container.id}",
        volumes={
            str(HERE): {"bind": "/t", "mode": "ro"},
            str(manifest): {"bind": "/models", "mode": "ro"},
        },
        timeout=600,
    )
    assert ran.exit_code == 0, ran.stderr
    results: list[dict[str, Any]] = json.loads(ran.stdout.strip().splitlines()[-1])
    seen = {(r["signature"], r["api"]) for r in results}
    apis = ("rest_rows", "rest_columns", "grpc_predict", "v2_json", "v2_binary", "v2_grpc")
    assert {(f"echo_{name}", api) for name in built for api in apis} <= seen
    problems = [judge(result, dtypes[result["dtype"]]) for result in results]
    assert not any(problems), "\n".join(p for p in problems if p)
    no_internal_error_logged(running)


# -- the Open Inference Protocol's error walk ---------------------------------------------


X = {"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]}
N = {"name": "n", "datatype": "INT64", "shape": [1], "data": [3]}


def infer(*inputs: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"inputs": list(inputs or (X, N)), **fields}


def binary(header: dict[str, Any], tail: bytes, length: int | None = None) -> dict[str, Any]:
    """A request with the binary data extension: header JSON, then `tail`."""
    text = json.dumps(header).encode()
    return {
        "content": text + tail,
        "headers": {
            "Inference-Header-Content-Length": str(len(text) if length is None else length)
        },
    }


def rest_cases() -> list[tuple[str, str, str, dict[str, Any], int]]:
    """(case, method, path, httpx2 arguments, status)."""
    walk, dtypes = "/v2/models/walk/infer", "/v2/models/dtypes/infer"
    bad_x = {**X, "parameters": {"binary_data_size": 8}}
    cases: list[tuple[str, str, str, dict[str, Any], int]] = [
        ("unknown model", "POST", "/v2/models/nope/infer", {"json": infer()}, 404),
        ("unknown version", "POST", "/v2/models/walk/versions/9/infer", {"json": infer()}, 404),
        ("a label for a version", "POST", "/v2/models/walk/versions/stable/infer",
         {"json": infer()}, 400),
        ("a version beyond int64", "POST", "/v2/models/walk/versions/99999999999999999999/infer",
         {"json": infer()}, 400),
        ("unknown signature", "POST", walk,
         {"json": infer(parameters={"signature_name": "nope"})}, 400),
        ("signature_name not a string", "POST", walk,
         {"json": infer(parameters={"signature_name": 7})}, 400),
        ("a signature that cannot predict", "POST", dtypes,
         {"json": infer(X, parameters={"signature_name": "__saved_model_init_op"})}, 400),
        ("unknown input", "POST", walk, {"json": infer(X, {**N, "name": "q"})}, 400),
        ("missing input", "POST", walk, {"json": infer(X)}, 400),
        ("input twice", "POST", walk, {"json": infer(X, N, N)}, 400),
        ("wrong datatype", "POST", walk, {"json": infer({**X, "datatype": "FP64"}, N)}, 400),
        ("unknown datatype", "POST", walk, {"json": infer({**X, "datatype": "FP8"}, N)}, 400),
        ("datatype not a string", "POST", walk, {"json": infer({**X, "datatype": 1}, N)}, 400),
        ("datatype with no v2 equivalent", "POST", walk,
         {"json": infer({**X, "datatype": "COMPLEX64"}, N)}, 400),
        ("wrong shape", "POST", walk, {"json": infer({**X, "shape": [1, 3]}, N)}, 400),
        ("shape not a list", "POST", walk, {"json": infer({**X, "shape": "1,2"}, N)}, 400),
        ("negative dimension", "POST", walk, {"json": infer({**X, "shape": [-1, 2]}, N)}, 400),
        ("data not the shape's count", "POST", walk,
         {"json": infer({**X, "data": [1.0]}, N)}, 400),
        ("data of the wrong type", "POST", walk,
         {"json": infer({**X, "data": ["a", "b"]}, N)}, 400),
        ("an integer out of range", "POST", walk, {"json": infer(X, {**N, "data": [2**64]})}, 400),
        ("data nested too deep", "POST", walk,
         {"json": infer({**X, "data": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1.0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}, N)}, 400),  # noqa: E501
        ("no data", "POST", walk, {"json": infer({k: v for k, v in X.items() if k != "data"}, N)},
         400),
        ("bad JSON", "POST", walk, {"content": b'{"inputs": [', "headers": {}}, 400),
        ("empty body", "POST", walk, {"content": b"", "headers": {}}, 400),
        ("not an object", "POST", walk, {"json": [1, 2]}, 400),
        ("inputs not a list", "POST", walk, {"json": {"inputs": {"x": 1}}}, 400),
        ("an input not an object", "POST", walk, {"json": {"inputs": [1]}}, 400),
        ("an input without a name", "POST", walk,
         {"json": infer({k: v for k, v in X.items() if k != "name"}, N)}, 400),
        ("id not a string", "POST", walk, {"json": infer(id=5)}, 400),
        ("parameters not an object", "POST", walk, {"json": infer(parameters=[1])}, 400),
        ("binary_data_output not a bool", "POST", walk,
         {"json": infer(parameters={"binary_data_output": "yes"})}, 400),
        ("outputs not a list", "POST", walk, {"json": infer(outputs="y")}, 400),
        ("an output without a name", "POST", walk, {"json": infer(outputs=[{}])}, 400),
        ("unknown output", "POST", walk, {"json": infer(outputs=[{"name": "z"}])}, 400),
        ("an output twice", "POST", walk,
         {"json": infer(outputs=[{"name": "y"}, {"name": "y"}])}, 400),
        ("binary_data not a bool", "POST", walk,
         {"json": infer(outputs=[{"name": "y", "parameters": {"binary_data": 1}}])}, 400),
        ("an output v2 cannot carry", "POST", dtypes,
         {"json": infer(X | {"shape": [2], "data": [1.0, 2.0]},
                        parameters={"signature_name": "to_complex64"})}, 400),
        ("a BYTES output that is not UTF-8, as JSON", "POST", dtypes,
         binary({"parameters": {"signature_name": "echo_string"}, "inputs": [
             {"name": "x", "datatype": "BYTES", "shape": [1],
              "parameters": {"binary_data_size": 5}}]}, struct.pack("<I", 1) + b"\xff"), 400),
        ("header length beyond the body", "POST", walk, binary(infer(), b"", 10**6), 400),
        ("header length not a number", "POST", walk,
         {"content": json.dumps(infer()).encode(),
          "headers": {"Inference-Header-Content-Length": "ten"}}, 400),
        ("binary sizes beyond the data", "POST", walk, binary(infer(bad_x, N), b"\x00" * 4), 400),
        ("binary data left over", "POST", walk, binary(infer(bad_x, N), b"\x00" * 12), 400),
        ("binary size not an integer", "POST", walk,
         binary(infer({**bad_x, "parameters": {"binary_data_size": "8"}}, N), b"\x00" * 8), 400),
        ("binary size and data both", "POST", walk,
         binary(infer({**bad_x, "data": [1.0, 2.0]}, N), b"\x00" * 8), 400),
        ("binary bytes not the shape's", "POST", walk,
         binary(infer({**bad_x, "parameters": {"binary_data_size": 4}}, N), b"\x00" * 4), 400),
        ("BYTES length beyond the data", "POST", dtypes,
         binary({"parameters": {"signature_name": "echo_string"}, "inputs": [
             {"name": "x", "datatype": "BYTES", "shape": [1],
              "parameters": {"binary_data_size": 5}}]}, struct.pack("<I", 9) + b"a"), 400),
        ("a body over --max-body-bytes", "POST", walk,
         {"json": infer({**X, "shape": [20000, 2], "data": [1.0] * 40000}, N)}, 413),
        ("an unknown Content-Encoding", "POST", walk,
         {"content": json.dumps(infer()).encode(), "headers": {"Content-Encoding": "br"}}, 415),
        ("a corrupt gzip body", "POST", walk,
         {"content": gzip.compress(json.dumps(infer()).encode())[:-9],
          "headers": {"Content-Encoding": "gzip"}}, 400),
        ("GET on infer", "GET", walk, {}, 405),
        ("an unknown path", "GET", "/v2/models/walk/nothing", {}, 404),
        ("metadata of an unknown model", "GET", "/v2/models/nope", {}, 404),
        ("metadata of an unknown version", "GET", "/v2/models/walk/versions/9", {}, 404),
        ("readiness of an unknown model", "GET", "/v2/models/nope/ready", {}, 404),
        ("v1: a signature that cannot predict", "POST", "/v1/models/dtypes:predict",
         {"json": {"signature_name": "__saved_model_init_op", "instances": [1.0]}}, 400),
    ]  # fmt: skip
    return cases


def test_every_v2_rest_error_is_the_user_s_not_a_500(server: tuple[Server, str]) -> None:
    running, _ = server
    problems = []
    for case, method, path, arguments, status in rest_cases():
        answer = web.request(method, running.rest + path, timeout=60, **arguments)
        error = answer.json().get("error", "") if answer.content else ""
        if answer.status_code != status or not error:
            problems.append(f"{case}: {answer.status_code} {answer.text[:300]!r}, not {status}")
    assert not problems, "\n".join(problems)
    no_internal_error_logged(running)


def grpc_cases() -> list[tuple[str, Any, grpc.StatusCode]]:
    """(case, ModelInferRequest or its bytes, code)."""
    invalid, not_found = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND

    def request(model: str = "walk", signature: Any = None, **fields: Any) -> Any:
        made = pb.ModelInferRequest(model_name=model, **fields)
        if signature is not None:
            pb.set_parameter(made.parameters, "signature_name", signature)
        return made

    def walk(**fields: Any) -> Any:
        made = request(**fields)
        made.inputs.add(name="x", datatype="FP32", shape=[1, 2]).contents.fp32_contents.extend(
            [1, 2]
        )
        made.inputs.add(name="n", datatype="INT64", shape=[1]).contents.int64_contents.append(3)
        return made

    cases: list[tuple[str, Any, grpc.StatusCode]] = [
        ("no model name", walk(model=""), invalid),
        ("unknown model", walk(model="nope"), not_found),
        ("unknown version", walk(model_version="9"), not_found),
        ("a label for a version", walk(model_version="stable"), invalid),
        ("unknown signature", walk(signature="nope"), invalid),
        ("signature_name not a string", walk(signature=7), invalid),
    ]
    init_op = request("dtypes", "__saved_model_init_op")
    init_op.inputs.add(name="x", datatype="FP32", shape=[1]).contents.fp32_contents.append(1)
    cases.append(("a signature that cannot predict", init_op, invalid))
    complex_out = request("dtypes", "to_complex64")
    complex_out.inputs.add(name="x", datatype="FP32", shape=[1]).contents.fp32_contents.append(1)
    cases.append(("an output v2 cannot carry", complex_out, invalid))
    unknown_input = walk()
    unknown_input.inputs[1].name = "q"
    cases.append(("unknown input", unknown_input, invalid))
    missing = walk()
    del missing.inputs[1]
    cases.append(("missing input", missing, invalid))
    twice = walk()
    twice.inputs.append(twice.inputs[1])
    cases.append(("input twice", twice, invalid))
    for case, field, value in (
        ("wrong datatype", "datatype", "FP64"),
        ("unknown datatype", "datatype", "FP8"),
        ("datatype with no v2 equivalent", "datatype", "COMPLEX64"),
    ):
        made = walk()
        setattr(made.inputs[0], field, value)
        cases.append((case, made, invalid))
    wrong_shape = walk()
    wrong_shape.inputs[0].shape[:] = [1, 3]
    cases.append(("wrong shape", wrong_shape, invalid))
    short = walk()
    del short.inputs[0].contents.fp32_contents[1:]
    cases.append(("contents not the shape's count", short, invalid))
    out_of_range = request("dtypes", "echo_int8")
    out_of_range.inputs.add(name="x", datatype="INT8", shape=[1]).contents.int_contents.append(300)
    cases.append(("an integer out of range", out_of_range, invalid))
    half = request("dtypes", "echo_float16")
    half.inputs.add(name="x", datatype="FP16", shape=[1]).contents.fp32_contents.append(1)
    cases.append(("FP16 in typed contents", half, invalid))
    raw_and_typed = walk()
    raw_and_typed.raw_input_contents.extend([b"\x00" * 8, b"\x00" * 8])
    cases.append(("raw and typed contents both", raw_and_typed, invalid))
    raw_count = request()
    raw_count.inputs.add(name="x", datatype="FP32", shape=[1, 2])
    raw_count.inputs.add(name="n", datatype="INT64", shape=[1])
    raw_count.raw_input_contents.append(b"\x00" * 8)
    cases.append(("raw contents for some inputs", raw_count, invalid))
    raw_size = request()
    raw_size.inputs.add(name="x", datatype="FP32", shape=[1, 2])
    raw_size.inputs.add(name="n", datatype="INT64", shape=[1])
    raw_size.raw_input_contents.extend([b"\x00" * 7, b"\x00" * 8])
    cases.append(("raw bytes not the shape's", raw_size, invalid))
    unknown_output = walk()
    unknown_output.outputs.add(name="z")
    cases.append(("unknown output", unknown_output, invalid))
    cases.append(("a message that does not parse", b"\xff\xff\xff", invalid))
    return cases


def test_every_v2_grpc_error_is_the_user_s_not_internal(server: tuple[Server, str]) -> None:
    running, address = server
    problems = []
    with grpc.insecure_channel(address) as channel:
        infer_call = channel.unary_unary(
            f"/{pb.SERVICE}/ModelInfer",
            request_serializer=lambda message: (
                message if isinstance(message, bytes) else message.SerializeToString()
            ),
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        for case, request, code in grpc_cases():
            try:
                infer_call(request, timeout=60)
                problems.append(f"{case}: answered OK")
            except grpc.RpcError as err:
                if err.code() != code or not err.details():
                    problems.append(f"{case}: {err.code().name} {err.details()!r}, not {code.name}")
        for method, message in (
            ("ModelMetadata", pb.ModelMetadataRequest(name="nope")),
            ("ModelMetadata", pb.ModelMetadataRequest(name="walk", version="9")),
        ):
            response_class = {name: response for name, _, response in pb.METHODS}[method]
            call = channel.unary_unary(
                f"/{pb.SERVICE}/{method}",
                request_serializer=type(message).SerializeToString,
                response_deserializer=response_class.FromString,
            )
            try:
                call(message, timeout=60)
                problems.append(f"{method} {message}: answered OK")
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.NOT_FOUND:
                    problems.append(f"{method} {message}: {err.code().name} {err.details()!r}")
    assert not problems, "\n".join(problems)
    no_internal_error_logged(running)
