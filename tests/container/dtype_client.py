"""The dtype sweep's client: every signature of make_dtype_models.py over every API (runs in
the image, in the server's network namespace; prints JSON).

    python dtype_client.py MANIFEST_JSON

For each dtype of the manifest (DIR/dtypes.json) with a `to_D` signature, X
is sent as float32; with an `echo_D` signature, the manifest's `expected`
values are sent as D (what to_D returned: what TensorFlow makes of X in D).
Each is sent over every API (APIS): REST predict in the row and columnar
formats, TF Serving's gRPC Predict (TensorFlow's make_tensor_proto, as a TF
Serving client writes it), the Open Inference Protocol's REST infer with
JSON data and with binary data, and its gRPC ModelInfer (raw contents; the
server's own message classes, codec/v2_proto.py). Each result is {"dtype",
"signature", "api", "status" (the HTTP status or the gRPC code's name),
"message" (an error's), "values" (the output y made plain, as `plain` makes
TensorFlow's own result)}.
"""

from __future__ import annotations

import json
import struct
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

#: Every tf.dtypes type a signature might take or give (make_dtype_models.py builds the
#: ones this TensorFlow can).
SWEEP = (
    "float16", "bfloat16", "float32", "float64",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "bool", "string", "complex64", "complex128",
    "qint8", "quint8", "qint16", "quint16", "qint32",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e4m3b11fnuz",
    "float8_e5m2fnuz", "float4_e2m1fn", "int4", "uint4", "int2", "uint2",
    "variant", "resource",
)  # fmt: skip
#: to_D's input: exact in every float type, and within int4's range.
X = [0.0, 1.5, 5.0]
#: echo_D's input where to_D could not be built (no cast to D): within int2's range.
SMALL = [0.0, 1.0]
#: The Open Inference Protocol's datatype names (else TensorFlow's name in upper case).
V2 = {
    "bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32",
    "uint64": "UINT64", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
    "float16": "FP16", "float32": "FP32", "float64": "FP64", "string": "BYTES",
    "bfloat16": "BF16",
}  # fmt: skip
APIS = ("rest_rows", "rest_columns", "grpc_predict", "v2_json", "v2_binary", "v2_grpc")
REST = "http://127.0.0.1:8501"
GRPC = "127.0.0.1:8500"


def tf_dtype(tf: Any, name: str) -> Any:
    """tf.NAME, or tf.dtypes.experimental.NAME (float8, int4, ...); None where neither is."""
    return getattr(tf, name, None) or getattr(tf.dtypes.experimental, name, None)


def plain(array: Any) -> list[Any]:
    """A tensor's values as JSON: numbers (float types as floats), bools, text,
    complex as [re, im], quantized types as their integers."""
    import numpy as np  # noqa: PLC0415

    flat = np.asarray(array).reshape(-1)
    if flat.dtype.names:  # quantized: a structured dtype of one integer field
        flat = flat[flat.dtype.names[0]]
    if flat.dtype.kind == "c":
        return [[float(v.real), float(v.imag)] for v in flat.tolist()]
    if flat.dtype == object:
        return [v.decode() if isinstance(v, bytes) else v for v in flat.tolist()]
    if flat.dtype.kind not in "biu":  # floats (ml_dtypes' too) and int4, int2: as doubles
        flat = flat.astype(np.float64)
    values: list[Any] = flat.tolist()
    return values


def numpy_values(dtype: str, values: list[Any]) -> Any:
    """`values` (as plain writes them) as an array of `dtype`."""
    import numpy as np  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    if dtype == "string":
        return np.array([v.encode() for v in values], dtype=object)
    if dtype.startswith("complex"):
        values = [complex(re, im) for re, im in values]
    numpy_type = tf.as_dtype(tf_dtype(tf, dtype)).as_numpy_dtype
    if dtype.startswith(("qint", "quint")):
        return np.array([(v,) for v in values], dtype=numpy_type)
    return np.array(values).astype(numpy_type)


def http(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(  # noqa: S310 - our server, over http
        REST + path, data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310
            return answer.status, answer.read(), dict(answer.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers)


def rest(api: str, signature: str, values: list[Any]) -> dict[str, Any]:
    key = "instances" if api == "rest_rows" else "inputs"
    body = json.dumps({"signature_name": signature, key: values}).encode()
    status, data, _ = http("/v1/models/dtypes:predict", body, {"Content-Type": "application/json"})
    answer = json.loads(data)
    if status != 200:
        return {"status": str(status), "message": answer.get("error", data.decode())}
    return {"status": "200", "values": answer["predictions" if key == "instances" else "outputs"]}


def tensor_proto(dtype: str, values: list[Any]) -> Any:
    import tensorflow as tf  # noqa: PLC0415
    from tensorflow.core.framework import tensor_pb2, types_pb2  # noqa: PLC0415

    if dtype in ("variant", "resource"):  # no values a client can write: the shape alone
        proto = tensor_pb2.TensorProto(dtype=types_pb2.DataType.Value(f"DT_{dtype.upper()}"))
        proto.tensor_shape.dim.add(size=len(values))
        return proto
    array = numpy_values(dtype, values)
    try:
        return tf.make_tensor_proto(array, dtype=tf_dtype(tf, dtype))
    except TypeError:  # a type TensorFlow's Python cannot write (float8_e4m3fnuz): its bytes
        proto = tensor_pb2.TensorProto(
            dtype=tf_dtype(tf, dtype).as_datatype_enum, tensor_content=array.tobytes()
        )
        proto.tensor_shape.dim.add(size=len(values))
        return proto


def from_proto(proto: Any) -> list[Any]:
    """A TensorProto's values made plain (make_ndarray, else read by hand where
    TensorFlow's Python has no reader for the type)."""
    import numpy as np  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    try:
        return plain(tf.make_ndarray(proto))
    except TypeError:
        numpy_type = tf.as_dtype(proto.dtype).as_numpy_dtype
        if proto.tensor_content:
            return plain(np.frombuffer(proto.tensor_content, dtype=numpy_type))
        if proto.float8_val:
            return plain(np.frombuffer(proto.float8_val, dtype=numpy_type))
        return plain(np.array(list(proto.int_val)).astype(numpy_type))


def grpc_predict(dtype: str, signature: str, values: list[Any]) -> dict[str, Any]:
    import grpc  # noqa: PLC0415
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc  # noqa: PLC0415

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "dtypes"
    request.model_spec.signature_name = signature
    request.inputs["x"].CopyFrom(tensor_proto(dtype, values))
    with grpc.insecure_channel(GRPC) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            response = stub.Predict(request, timeout=60)
        except grpc.RpcError as err:
            return {"status": err.code().name, "message": err.details() or ""}
    return {"status": "OK", "values": from_proto(response.outputs["y"])}


def raw(dtype: str, values: list[Any]) -> bytes:
    """Values as the Open Inference Protocol's raw bytes (BYTES length-prefixed)."""
    if dtype == "string":
        return b"".join(struct.pack("<I", len(v.encode())) + v.encode() for v in values)
    if dtype in ("variant", "resource"):
        return b""
    data: bytes = numpy_values(dtype, values).tobytes()
    return data


def from_raw(datatype: str, data: bytes) -> list[Any]:
    """The Open Inference Protocol's raw bytes as plain values."""
    import numpy as np  # noqa: PLC0415

    if datatype == "BYTES":
        texts, offset = [], 0
        while offset < len(data):
            (length,) = struct.unpack_from("<I", data, offset)
            texts.append(data[offset + 4 : offset + 4 + length].decode())
            offset += 4 + length
        return texts
    if datatype == "BF16":
        bits = np.frombuffer(data, dtype=np.uint16).astype(np.uint32) << 16
        return plain(bits.view(np.float32))
    formats = {
        "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
        "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
        "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    }  # fmt: skip
    return plain(np.frombuffer(data, dtype=formats[datatype]))


def v2_rest(api: str, dtype: str, signature: str, values: list[Any]) -> dict[str, Any]:
    datatype = V2.get(dtype, dtype.upper())
    spec: dict[str, Any] = {"name": "x", "datatype": datatype, "shape": [len(values)]}
    parameters: dict[str, Any] = {"signature_name": signature}
    tail = b""
    if api == "v2_json":
        spec["data"] = values
    else:
        tail = raw(dtype, values)
        spec["parameters"] = {"binary_data_size": len(tail)}
        parameters["binary_data_output"] = True
    header = json.dumps({"parameters": parameters, "inputs": [spec]}).encode()
    headers = {"Content-Type": "application/octet-stream"}
    if api == "v2_binary":
        headers["Inference-Header-Content-Length"] = str(len(header))
    status, data, answer_headers = http("/v2/models/dtypes/infer", header + tail, headers)
    length = {k.lower(): v for k, v in answer_headers.items()}.get(
        "inference-header-content-length"
    )
    document = json.loads(data[: int(length)] if length else data)
    if status != 200:
        return {"status": str(status), "message": document.get("error", "")}
    (output,) = document["outputs"]
    if "data" in output:
        return {"status": "200", "values": output["data"], "datatype": output["datatype"]}
    found = from_raw(output["datatype"], data[int(length or 0) :])
    return {"status": "200", "values": found, "datatype": output["datatype"]}


def v2_grpc(dtype: str, signature: str, values: list[Any]) -> dict[str, Any]:
    import grpc  # noqa: PLC0415

    from tf_entrypoint.serving.codec import v2_proto as pb  # noqa: PLC0415

    request = pb.ModelInferRequest(model_name="dtypes")
    pb.set_parameter(request.parameters, "signature_name", signature)
    request.inputs.add(name="x", datatype=V2.get(dtype, dtype.upper()), shape=[len(values)])
    request.raw_input_contents.append(raw(dtype, values))
    with grpc.insecure_channel(GRPC) as channel:
        stub = channel.unary_unary(
            f"/{pb.SERVICE}/ModelInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        try:
            response = stub(request, timeout=60)
        except grpc.RpcError as err:
            return {"status": err.code().name, "message": err.details() or ""}
    datatype = response.outputs[0].datatype
    return {
        "status": "OK",
        "values": from_raw(datatype, response.raw_output_contents[0]),
        "datatype": datatype,
    }


def one(api: str, dtype: str, signature: str, values: list[Any]) -> dict[str, Any]:
    """One call of `signature` over `api`: `values` are of `dtype` for echo_D, float32
    for to_D."""
    sent = dtype
    if signature.startswith("to_"):
        dtype = "float32"
    try:
        if api.startswith("rest_"):
            found = rest(api, signature, values)
        elif api == "grpc_predict":
            found = grpc_predict(dtype, signature, values)
        elif api == "v2_grpc":
            found = v2_grpc(dtype, signature, values)
        else:
            found = v2_rest(api, dtype, signature, values)
    except Exception as err:  # noqa: BLE001 - reported: the test shows it
        found = {"status": "client error", "message": f"{type(err).__name__}: {err}"}
    return {"dtype": sent, "signature": signature, "api": api, **found}


def main() -> int:
    manifest = json.loads(Path(sys.argv[1]).read_text())
    results = []
    for dtype, entry in manifest.items():
        for kind, values in (("to", X), ("echo", entry.get("expected") or SMALL)):
            if entry.get(kind) is True:
                for api in APIS:
                    results.append(one(api, dtype, f"{kind}_{dtype}", values))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
