"""A TF Serving gRPC client for the container tests: runs in the image, prints JSON.

    python grpc_client.py ADDRESS [OPERATIONS_JSON]   (else read from stdin)
    python grpc_client.py --listen SOCKET             (calls over a UNIX socket: listen())

The client is TF Serving's own: `tensorflow-serving-api`'s stubs and
TensorFlow's make_tensor_proto/make_ndarray, as a program written for TF
Serving uses them. stdin is a JSON list of operations; stdout is a JSON list
with one result per operation: {"code": "OK" or the status code's name,
"message": ..., "response": the response as a dict (MessageToDict), plus
what the operation adds}. Operations ({"op": ...}):

- predict: model, version|label, signature, inputs {name: {dtype, values}},
  output_filter, timeout; the result adds "outputs" {name: nested list}.
  (dtype "bytes" with a string value sends a DT_STRING scalar, such as the
  gate of make_grpc_models.py's gated/1.)
- predict_many: model, n, x0; n concurrent predicts of x = [x0 + i]; the
  result is {"answers": [[i, y, version] or [i, code, message]]}.
- dtypes: model; sends every dtype as make_tensor_proto writes it
  (tensor_content) and as the typed fields, compares what comes back.
- metadata (model, version, fields), status (model, version),
  reload (config: text ModelServerConfig, timeout), health (service), classify and
  regress (model, signature, examples: [{feature: [floats]}]),
  multi_inference (model), big (floats: a predict of that many zeros),
  watch (service, seconds: Health.Watch's statuses), parallel (ops: at once).
- predict_proto: model, inputs {name: a TensorProto in protobuf's JSON form}
  sent exactly as given (a shape larger than its values, say).
- examples_context (kind classify|regress, model, signature, context_bytes,
  count): `count` examples {x: [1.0]} with a context holding a bytes feature
  of context_bytes bytes (and y: [0.5]).
- hold_then (model, x, wait, ops): a Predict of x whose message is held back;
  once the server counts it in flight (REST's /metrics on 127.0.0.1:8501) and
  `wait` seconds more have passed (to let it wait longer than a bound, which
  is safe on any CPU), `ops` run; then the message is sent. The result:
  "admitted" (whether it was counted within 30 s), "results" (of ops),
  "held" (the held call's result).
- predict_typed: predict with each input's values in its typed field
  (float_val...), as TF Serving's own tests write them, not tensor_content.
- multi_inference_tasks: tasks [{model, version|label, signature, method}]
  over examples [{feature: [floats]}].
- via: address, ops: the ops in order on a channel to that address (such as
  unix:/PATH, TF Serving's --grpc_socket_path).
- tls: ca, cert, key (paths of PEM files; cert and key optional), address
  and server_name (the certificate's name to expect; both optional), ops:
  the ops on a TLS channel (grpc.ssl_channel_credentials) trusting that CA,
  showing that client certificate.
- channel_idle: seconds; a Health check, then the channel's connectivity
  states until it goes IDLE (the server closed the connection: GOAWAY, as
  grpc.max_connection_age_ms makes it) or the seconds pass.
- raw: method (a full gRPC method path), body (text, sent as bytes), timeout;
  the answer's bytes are left out, their length is "size".
- wire: method (a short name of WIRE_METHODS), request (the request message in
  text format), or request_b64 (its bytes as sent, e.g. a corrupt message),
  fill ({input, floats}: that input becomes that many float zeros, as
  tensor_content), timeout; the result is {"code", "message", "size" (the
  answer's byte count), "sha256" (of the answer serialized deterministically:
  map entries in key order, also inside Any fields), "text" (the answer in text
  format, Any fields expanded)}: for test_answers.py, which records answers.
- profile: logdir, duration_ms, attempts, predict (a predict_typed op);
  TensorFlow's own profiler client (profiler_client.trace, as TensorBoard's
  profile plugin calls it) against the gRPC port while the predict runs
  again and again; the result adds the predicts' codes and a summary of
  each trace written under logdir (the server writes it there: mount it
  at the same path in both containers).
"""

from __future__ import annotations

import base64
import collections
import concurrent.futures
import contextlib
import hashlib
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import tensorflow as tf
from google.protobuf import descriptor_pool, json_format, message_factory, text_format
from grpc_dtypes import DTYPES  # type: ignore[import-not-found]
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tensorflow.core.framework import tensor_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from tensorflow_serving.config import model_server_config_pb2


def spec(message: Any, op: dict[str, Any]) -> None:
    message.model_spec.name = op.get("model", "model")
    if "version" in op:
        message.model_spec.version.value = op["version"]
    if "label" in op:
        message.model_spec.version_label = op["label"]
    if "signature" in op:
        message.model_spec.signature_name = op["signature"]


def call(method: Any, request: Any, timeout: float | None = 60) -> tuple[str, str, Any]:
    try:
        return "OK", "", method(request, timeout=timeout)
    except grpc.RpcError as err:
        return err.code().name, err.details() or "", None


def as_dict(response: Any) -> Any:
    if response is None:
        return None
    return json_format.MessageToDict(response, preserving_proto_field_name=True)


def typed_fields(array: Any, dtype: str) -> Any:
    """The same tensor with its values in the typed field (as TF Serving writes them)."""
    made = tf.make_tensor_proto(array, dtype=getattr(tf, dtype))
    proto = type(made)(dtype=made.dtype, tensor_shape=made.tensor_shape)  # no values yet
    flat = array.reshape(-1)
    if dtype in ("float16", "bfloat16"):
        proto.half_val.extend(flat.view(np.uint16).tolist())
    elif dtype.startswith("complex"):
        pairs = [part for number in flat.tolist() for part in (number.real, number.imag)]
        (proto.scomplex_val if dtype == "complex64" else proto.dcomplex_val).extend(pairs)
    else:
        field = {
            "float32": "float_val", "float64": "double_val", "int64": "int64_val",
            "uint32": "uint32_val", "uint64": "uint64_val", "bool": "bool_val",
            "string": "string_val",
        }.get(dtype, "int_val")  # fmt: skip
        values = flat.tolist()
        getattr(proto, field).extend(values)
    return proto


#: The server's REST port as the sidecar sees it (in the server's network namespace).
REST = "http://127.0.0.1:8501"


class Stubs:
    """A channel to `address` with TF Serving's stubs; `rest` is the same server's REST
    base URL (for the ops that read its /metrics or send a REST call beside gRPC)."""

    def __init__(
        self, address: str, credentials: Any = None, server_name: str = "", rest: str = REST
    ) -> None:
        self.address = address
        self.rest = rest
        options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
        ]
        if server_name:  # the name the server's certificate must have (a unix: address has none)
            options.append(("grpc.ssl_target_name_override", server_name))
        if credentials is None:
            self.channel = grpc.insecure_channel(address, options=options)
        else:
            self.channel = grpc.secure_channel(address, credentials, options=options)
        self.predictions = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        self.models = model_service_pb2_grpc.ModelServiceStub(self.channel)
        self.health: Any = health_pb2_grpc.HealthStub(self.channel)

    def another(self, address: str = "", credentials: Any = None, server_name: str = "") -> Stubs:
        """A new channel (to `address`, else this one's) to the same server."""
        return Stubs(address or self.address, credentials, server_name, self.rest)


def result(code: str, message: str, response: Any, **extra: Any) -> dict[str, Any]:
    return {"code": code, "message": message, "response": as_dict(response), **extra}


def op_predict(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    request = predict_pb2.PredictRequest()
    spec(request, op)
    for name, tensor in op.get("inputs", {}).items():
        array = np.array(tensor["values"], dtype=tensor.get("dtype", "float32"))
        request.inputs[name].CopyFrom(tf.make_tensor_proto(array, shape=tensor.get("shape")))
        if "dtype_enum" in tensor:  # a DataType number as a buggy client might send
            request.inputs[name].dtype = tensor["dtype_enum"]
    request.output_filter.extend(op.get("output_filter", []))
    code, message, response = call(stubs.predictions.Predict, request, op.get("timeout", 60))
    extra: dict[str, Any] = {}
    if response is not None:
        extra["outputs"] = {k: tf.make_ndarray(v).tolist() for k, v in response.outputs.items()}
        extra["fields"] = {
            k: sorted(f.name for f, _ in v.ListFields()) for k, v in response.outputs.items()
        }
    return result(code, message, response, **extra)


def op_predict_many(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    n, x0 = op["n"], op.get("x0", 0)

    def one(i: int) -> list[Any]:
        request = predict_pb2.PredictRequest()
        spec(request, op)
        request.inputs["x"].CopyFrom(tf.make_tensor_proto([float(x0 + i)], tf.float32))
        code, message, response = call(stubs.predictions.Predict, request)
        if response is None:
            return [i, code, message]
        y = float(tf.make_ndarray(response.outputs["y"])[0])
        return [i, y, int(response.model_spec.version.value)]

    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        answers = list(pool.map(one, range(n)))
    return {"code": "OK", "answers": answers}


def op_predict_rows(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    """op["requests"] (each a list of rows for input "x") at once on op["threads"] threads."""

    def one(rows: list[Any]) -> list[Any]:
        request = predict_pb2.PredictRequest()
        spec(request, op)
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array(rows, dtype="float32")))
        code, message, response = call(stubs.predictions.Predict, request, op.get("timeout", 60))
        if response is None:
            return [code, message, None]
        outputs = {k: tf.make_ndarray(v).tolist() for k, v in response.outputs.items()}
        return [code, message, outputs]

    with concurrent.futures.ThreadPoolExecutor(max_workers=op.get("threads", 32)) as pool:
        answers = list(pool.map(one, op["requests"]))
    return {"code": "OK", "answers": answers}


def _numpy(dtype: str, values: list[Any]) -> Any:
    if dtype == "string":
        return np.array(values, dtype=object)
    return np.array(values, dtype=tf.dtypes.as_dtype(getattr(tf, dtype)).as_numpy_dtype)


def op_dtypes(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    compared: dict[str, Any] = {}
    for form in ("tensor_content", "typed_fields"):
        request = predict_pb2.PredictRequest()
        spec(request, op)
        sent = {dtype: _numpy(dtype, values) for dtype, values in DTYPES.items()}
        for dtype, array in sent.items():
            if form == "tensor_content":
                proto = tf.make_tensor_proto(array, dtype=getattr(tf, dtype))
            else:
                proto = typed_fields(array, dtype)
            request.inputs[f"in_{dtype}"].CopyFrom(proto)
        code, message, response = call(stubs.predictions.Predict, request)
        if response is None:
            compared[form] = [code, message]
            continue
        compared[form] = {}
        for dtype, array in sent.items():
            out = response.outputs[f"out_{dtype}"]
            same = bool(np.array_equal(tf.make_ndarray(out), array))
            compared[form][dtype] = same and out.tensor_content == b""
    return {"code": "OK", "compared": compared}


def op_metadata(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    spec(request, op)
    request.metadata_field.extend(op.get("fields", ["signature_def"]))
    code, message, response = call(stubs.predictions.GetModelMetadata, request)
    extra = {}
    if response is not None:
        defs = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(defs)
        extra["signature_def"] = as_dict(defs)
    return result(code, message, response, **extra)


def op_status(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    request = get_model_status_pb2.GetModelStatusRequest()
    spec(request, op)
    return result(*call(stubs.models.GetModelStatus, request))


def op_reload(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    request = model_management_pb2.ReloadConfigRequest()
    config = model_server_config_pb2.ModelServerConfig()
    text_format.Parse(op["config"], config)
    request.config.CopyFrom(config)
    return result(*call(stubs.models.HandleReloadConfigRequest, request, op.get("timeout", 120)))


def op_health(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    request = health_pb2.HealthCheckRequest(service=op.get("service", ""))
    return result(*call(stubs.health.Check, request, 5))


def op_examples(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    classify = op["op"] == "classify"
    request: Any = (
        classification_pb2.ClassificationRequest()
        if classify
        else regression_pb2.RegressionRequest()
    )
    spec(request, op)
    for features in op.get("examples", []):
        example = request.input.example_list.examples.add()
        for key, values in features.items():
            example.features.feature[key].float_list.value.extend(values)
    method = stubs.predictions.Classify if classify else stubs.predictions.Regress
    return result(*call(method, request))


def op_multi_inference(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    request = inference_pb2.MultiInferenceRequest()
    task = request.tasks.add()
    task.model_spec.name = op.get("model", "model")
    task.method_name = "tensorflow/serving/regress"
    return result(*call(stubs.predictions.MultiInference, request))


def op_big(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    """A predict of op["floats"] zeros: to cross the message size limit."""
    request = predict_pb2.PredictRequest()
    spec(request, op)
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.zeros(op["floats"], dtype=np.float32)))
    code, message, _ = call(stubs.predictions.Predict, request)
    return result(code, message, None)


def op_watch(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    """Health.Watch on op["service"] for up to op["seconds"]: the statuses seen, in order."""
    request = health_pb2.HealthCheckRequest(service=op.get("service", ""))
    seen: list[str] = []
    try:
        for answer in stubs.health.Watch(request, timeout=op.get("seconds", 30)):
            seen.append(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))
    except grpc.RpcError as err:
        return {"code": err.code().name, "message": err.details() or "", "seen": seen}
    return {"code": "OK", "message": "", "seen": seen}


def op_parallel(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    """Run op["ops"] at once, each on its own thread (and channel).

    No op is delayed by a sleep: a test that needs one call to be running
    before the next arrives holds it with a gate (gates.py) and sends the next
    once the server's metrics show it running, or sends them in order (the
    operations of one client run one after the other).
    """

    def one(o: dict[str, Any]) -> dict[str, Any]:
        return OPERATIONS[o["op"]](stubs.another(), o)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(op["ops"])) as pool:
        futures = [pool.submit(one, o) for o in op["ops"]]
        return {"code": "OK", "results": [f.result() for f in futures]}


def op_predict_proto(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    request = predict_pb2.PredictRequest()
    spec(request, op)
    for name, tensor in op["inputs"].items():
        request.inputs[name].CopyFrom(json_format.ParseDict(tensor, tensor_pb2.TensorProto()))
    code, message, response = call(stubs.predictions.Predict, request, op.get("timeout", 60))
    extra: dict[str, Any] = {"request_bytes": request.ByteSize()}
    if response is not None:
        extra["outputs"] = {k: tf.make_ndarray(v).tolist() for k, v in response.outputs.items()}
    return result(code, message, None, **extra)


def op_examples_context(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    classify = op["kind"] == "classify"
    request: Any = (
        classification_pb2.ClassificationRequest()
        if classify
        else regression_pb2.RegressionRequest()
    )
    spec(request, op)
    listed = request.input.example_list_with_context
    context = listed.context.features.feature
    context["y"].float_list.value.append(0.5)
    context["pad"].bytes_list.value.append(b"\0" * op["context_bytes"])
    one = listed.examples.add()
    one.features.feature["x"].float_list.value.append(1.0)
    for _ in range(op["count"] - 1):
        listed.examples.add().CopyFrom(one)
    method = stubs.predictions.Classify if classify else stubs.predictions.Regress
    code, message, response = call(method, request, op.get("timeout", 60))
    return result(code, message, response, request_bytes=request.ByteSize())


def in_flight(stubs: Stubs) -> float:
    """serving_predict_in_flight from the server's REST /metrics."""
    with urllib.request.urlopen(f"{stubs.rest}/metrics", timeout=10) as page:  # noqa: S310
        for line in page.read().decode().splitlines():
            if line.startswith("serving_predict_in_flight "):
                return float(line.split()[1])
    return 0.0


def op_hold_then(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    request = predict_pb2.PredictRequest()
    spec(request, op)
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(op["x"], tf.float32))
    release = threading.Event()

    def messages() -> Any:
        release.wait(120)
        yield request

    # The same method on the wire, called so that its one message can wait.
    predict = stubs.channel.stream_unary(
        "/tensorflow.serving.PredictionService/Predict",
        request_serializer=predict_pb2.PredictRequest.SerializeToString,
        response_deserializer=predict_pb2.PredictResponse.FromString,
    )
    held = predict.future(messages(), timeout=120)
    deadline = time.monotonic() + 30
    admitted = False
    while not admitted and time.monotonic() < deadline:
        admitted = in_flight(stubs) >= 1
        if not admitted:
            time.sleep(0.05)
    if admitted:
        time.sleep(op.get("wait", 0))
    results = [OPERATIONS[o["op"]](stubs, o) for o in op["ops"]] if admitted else []
    release.set()
    try:
        response = held.result()
        outputs = {k: tf.make_ndarray(v).tolist() for k, v in response.outputs.items()}
        outcome = result("OK", "", response, outputs=outputs)
    except grpc.RpcError as err:
        outcome = result(err.code().name, err.details() or "", None)
    return {"code": "OK", "admitted": admitted, "results": results, "held": outcome}


def op_predict_typed(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    request = predict_pb2.PredictRequest()
    spec(request, op)
    for name, tensor in op.get("inputs", {}).items():
        dtype = tensor.get("dtype", "float32")
        array = np.array(tensor["values"], dtype=dtype)
        if "shape" in tensor:
            array = array.reshape(tensor["shape"])
        request.inputs[name].CopyFrom(typed_fields(array, dtype))
    request.output_filter.extend(op.get("output_filter", []))
    code, message, response = call(stubs.predictions.Predict, request, op.get("timeout", 60))
    extra: dict[str, Any] = {}
    if response is not None:
        extra["outputs"] = {k: tf.make_ndarray(v).tolist() for k, v in response.outputs.items()}
    return result(code, message, response, **extra)


def _examples(target: Any, examples: list[dict[str, list[float]]]) -> None:
    for features in examples:
        example = target.example_list.examples.add()
        for key, values in features.items():
            example.features.feature[key].float_list.value.extend(values)


def op_multi_inference_tasks(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    request = inference_pb2.MultiInferenceRequest()
    for task in op["tasks"]:
        added = request.tasks.add()
        spec(added, task)
        added.method_name = task["method"]
    _examples(request.input, op.get("examples", []))
    return result(*call(stubs.predictions.MultiInference, request, op.get("timeout", 60)))


def op_tls(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    def read(key: str) -> bytes | None:
        return Path(op[key]).read_bytes() if op.get(key) else None

    credentials = grpc.ssl_channel_credentials(read("ca"), read("key"), read("cert"))
    other = stubs.another(op.get("address", ""), credentials, op.get("server_name", ""))
    return {"code": "OK", "results": [OPERATIONS[o["op"]](other, o) for o in op["ops"]]}


def op_via(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    other = stubs.another(op["address"])
    return {"code": "OK", "results": [OPERATIONS[o["op"]](other, o) for o in op["ops"]]}


def op_channel_idle(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    fresh = stubs.another()
    code, message, _ = call(fresh.health.Check, health_pb2.HealthCheckRequest(), 10)
    if code != "OK":
        return {"code": code, "message": message, "seen": []}
    began = time.monotonic()
    seen: list[list[Any]] = []
    idle = threading.Event()

    def changed(state: grpc.ChannelConnectivity) -> None:
        seen.append([state.name, round(time.monotonic() - began, 2)])
        if state == grpc.ChannelConnectivity.IDLE:
            idle.set()

    fresh.channel.subscribe(changed)
    idle.wait(op["seconds"])
    fresh.channel.unsubscribe(changed)
    return {"code": "OK", "message": "", "seen": seen}


def _trace_summary(logdir: Path) -> dict[str, Any]:
    """Each *.xplane.pb under logdir: its planes, with their event counts."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: PLC0415 - TensorFlow's own

    traces: dict[str, Any] = {}
    for path in sorted(logdir.glob("plugins/profile/*/*.xplane.pb")):
        space = xplane_pb2.XSpace()
        space.ParseFromString(path.read_bytes())
        traces[str(path.relative_to(logdir))] = {
            plane.name: sum(len(line.events) for line in plane.lines) for plane in space.planes
        }
    return traces


def op_profile(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    from tensorflow.python.profiler import profiler_client  # noqa: PLC0415 - TensorBoard's call

    stop = threading.Event()
    codes: list[str] = []

    def load() -> None:
        predicting = stubs.another()
        while not stop.is_set():
            codes.append(op_predict_typed(predicting, op["predict"])["code"])

    thread = threading.Thread(target=load)
    thread.start()
    code, message = "OK", ""
    try:
        profiler_client.trace(
            stubs.address, op["logdir"], op.get("duration_ms", 1000), "", op.get("attempts", 10)
        )
    except Exception as err:  # noqa: BLE001 - the client's error is the answer
        code, message = type(err).__name__, str(err)
    finally:
        stop.set()
        thread.join()
    return {
        "code": code,
        "message": message,
        "predicts": dict(collections.Counter(codes)),
        "traces": _trace_summary(Path(op["logdir"])),
    }


def op_raw(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    method: Any = stubs.channel.unary_unary(op["method"])  # bytes in, bytes out
    code, message, answer = call(method, op.get("body", "").encode(), op.get("timeout", 60))
    return {"code": code, "message": message, "size": None if answer is None else len(answer)}


def _until_admitted(attempt: Any, within: float) -> dict[str, Any]:
    """`attempt()` -> (code, message), retried while the server is at capacity."""
    started = time.monotonic()
    code, message, tries = "RESOURCE_EXHAUSTED", "", 0
    while time.monotonic() - started < within:
        tries += 1
        code, message = attempt()
        if code != "RESOURCE_EXHAUSTED":
            break
        time.sleep(0.05)
    return {"code": code, "message": message, "tries": tries,
            "seconds": round(time.monotonic() - started, 2)}  # fmt: skip


def op_stall(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    """op["streams"] Predict calls that open a stream and send no message (no client
    deadline), once op["admitted"] hold their place: another client's Predict,
    ModelInfer and REST predict, each retried while at capacity for op["within"]
    seconds; then how the stalled calls ended (within op["wait"] seconds)."""
    from tf_entrypoint.serving.codec import v2_proto  # noqa: PLC0415 - the image's own messages

    never = threading.Event()

    def nothing() -> Any:
        never.wait()
        yield predict_pb2.PredictRequest()  # never reached while the test runs

    predict = stubs.channel.stream_unary(
        "/tensorflow.serving.PredictionService/Predict",
        request_serializer=predict_pb2.PredictRequest.SerializeToString,
        response_deserializer=predict_pb2.PredictResponse.FromString,
    )
    stalled = [predict.future(nothing()) for _ in range(op["streams"])]
    deadline = time.monotonic() + 30
    while in_flight(stubs) < op["admitted"] and time.monotonic() < deadline:
        time.sleep(0.05)
    admitted = in_flight(stubs)
    other = stubs.another()  # another client: its own channel

    def grpc_predict() -> tuple[str, str]:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "plus"
        request.inputs["x"].CopyFrom(tf.make_tensor_proto([1.0], tf.float32))
        code, message, _ = call(other.predictions.Predict, request, 30)
        return code, message

    def model_infer() -> tuple[str, str]:
        request = v2_proto.ModelInferRequest(model_name="plus")
        request.inputs.add(name="x", datatype="FP32", shape=[1])
        request.raw_input_contents.append(np.array([1.0], "<f4").tobytes())
        method = other.channel.unary_unary(
            f"/{v2_proto.SERVICE}/ModelInfer",
            request_serializer=v2_proto.ModelInferRequest.SerializeToString,
            response_deserializer=v2_proto.ModelInferResponse.FromString,
        )
        code, message, _ = call(method, request, 30)
        return code, message

    def rest_predict() -> tuple[str, str]:
        body = json.dumps({"instances": [1.0]}).encode()
        url = f"{stubs.rest}/v1/models/plus:predict"
        request = urllib.request.Request(url, body)  # noqa: S310 - http, built here
        try:
            with urllib.request.urlopen(request, timeout=30):  # noqa: S310 - http, built here
                return "OK", ""
        except urllib.error.HTTPError as err:
            code = "RESOURCE_EXHAUSTED" if err.code == 503 else f"HTTP {err.code}"
            return code, err.read().decode(errors="replace")

    others = {
        name: _until_admitted(attempt, op["within"])
        for name, attempt in (
            ("Predict", grpc_predict),
            ("ModelInfer", model_infer),
            ("REST predict", rest_predict),
        )
    }
    open_after_others = sum(not future.done() for future in stalled)
    ended = time.monotonic() + op["wait"]
    outcomes: list[list[str]] = []
    for future in stalled:
        try:
            future.result(timeout=max(ended - time.monotonic(), 0.01))
            outcomes.append(["OK", ""])
        except grpc.FutureTimeoutError:
            future.cancel()
            outcomes.append(["STILL OPEN", ""])
        except grpc.RpcError as err:
            outcomes.append([err.code().name, err.details() or ""])
    never.set()
    return {"code": "OK", "admitted": admitted, "others": others,
            "open_after_others": open_after_others, "stalled": outcomes}  # fmt: skip


#: The methods a `wire` op may call: full path, request and response classes.
WIRE_METHODS: dict[str, tuple[str, Any, Any]] = {
    "Predict": ("/tensorflow.serving.PredictionService/Predict",
                predict_pb2.PredictRequest, predict_pb2.PredictResponse),
    "Classify": ("/tensorflow.serving.PredictionService/Classify",
                 classification_pb2.ClassificationRequest,
                 classification_pb2.ClassificationResponse),
    "Regress": ("/tensorflow.serving.PredictionService/Regress",
                regression_pb2.RegressionRequest, regression_pb2.RegressionResponse),
    "MultiInference": ("/tensorflow.serving.PredictionService/MultiInference",
                       inference_pb2.MultiInferenceRequest,
                       inference_pb2.MultiInferenceResponse),
    "GetModelMetadata": ("/tensorflow.serving.PredictionService/GetModelMetadata",
                         get_model_metadata_pb2.GetModelMetadataRequest,
                         get_model_metadata_pb2.GetModelMetadataResponse),
    "GetModelStatus": ("/tensorflow.serving.ModelService/GetModelStatus",
                       get_model_status_pb2.GetModelStatusRequest,
                       get_model_status_pb2.GetModelStatusResponse),
    "HandleReloadConfigRequest": ("/tensorflow.serving.ModelService/HandleReloadConfigRequest",
                                  model_management_pb2.ReloadConfigRequest,
                                  model_management_pb2.ReloadConfigResponse),
    "Check": ("/grpc.health.v1.Health/Check",
              health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse),
}  # fmt: skip


def canonical(message: Any) -> None:
    """Make every google.protobuf.Any in `message` hold its message serialized
    deterministically (map entries by key), as SerializeToString(deterministic=True)
    writes the rest: the server writes map entries in an order that varies
    between runs."""
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if hasattr(value, "DESCRIPTOR"):  # one message
            children = [value]
        elif field.message_type.GetOptions().map_entry:
            valued = field.message_type.fields_by_name["value"].message_type is not None
            children = list(value.values()) if valued else []
        else:  # a repeated message field
            children = list(value)
        for child in children:
            if child.DESCRIPTOR.full_name == "google.protobuf.Any":
                inner = message_factory.GetMessageClass(
                    descriptor_pool.Default().FindMessageTypeByName(child.TypeName())
                )()
                child.Unpack(inner)
                canonical(inner)
                child.value = inner.SerializeToString(deterministic=True)
            else:
                canonical(child)


def op_wire(stubs: Stubs, op: dict[str, Any]) -> dict[str, Any]:
    path, request_class, response_class = WIRE_METHODS[op["method"]]
    if "request_b64" in op:
        body = base64.b64decode(op["request_b64"])
    else:
        request = text_format.Parse(op.get("request", ""), request_class())
        if "fill" in op:
            tensor = request.inputs[op["fill"]["input"]]
            tensor.dtype = tf.float32.as_datatype_enum
            tensor.tensor_shape.dim.add().size = op["fill"]["floats"]
            tensor.tensor_content = bytes(4 * op["fill"]["floats"])
        body = request.SerializeToString(deterministic=True)
    method: Any = stubs.channel.unary_unary(path)  # bytes in, bytes out
    code, message, answer = call(method, body, op.get("timeout", 60))
    if answer is None:
        return {"code": code, "message": message}
    response = response_class.FromString(answer)
    text = text_format.MessageToString(response, descriptor_pool=descriptor_pool.Default())
    canonical(response)
    digest = hashlib.sha256(response.SerializeToString(deterministic=True)).hexdigest()
    return {"code": code, "message": message, "size": len(answer), "sha256": digest, "text": text}


OPERATIONS = {
    "wire": op_wire,
    "watch": op_watch,
    "parallel": op_parallel,
    "predict": op_predict,
    "predict_many": op_predict_many,
    "predict_rows": op_predict_rows,
    "dtypes": op_dtypes,
    "metadata": op_metadata,
    "status": op_status,
    "reload": op_reload,
    "health": op_health,
    "classify": op_examples,
    "regress": op_examples,
    "multi_inference": op_multi_inference,
    "big": op_big,
    "predict_proto": op_predict_proto,
    "examples_context": op_examples_context,
    "hold_then": op_hold_then,
    "predict_typed": op_predict_typed,
    "multi_inference_tasks": op_multi_inference_tasks,
    "via": op_via,
    "tls": op_tls,
    "channel_idle": op_channel_idle,
    "profile": op_profile,
    "raw": op_raw,
    "stall": op_stall,
}


def run_operations(
    address: str, operations: list[dict[str, Any]], rest: str = REST
) -> list[dict[str, Any]]:
    """The operations in order on a new channel to `address` (closed after); `rest` is
    the same server's REST base URL."""
    stubs = Stubs(address, rest=rest)
    try:
        return [OPERATIONS[op["op"]](stubs, op) for op in operations]
    finally:
        stubs.channel.close()


def listen(path: str) -> int:
    """Answer calls on the UNIX socket `path` until killed: each connection sends one
    JSON line {"address", "ops", "rest" (optional: the server's REST base URL, else
    127.0.0.1:8501's)} and reads one JSON line back, the results or {"error":
    traceback}. One process for many calls saves each call the start of a container
    and of TensorFlow (harness/clients.py): a sidecar of one server, or the client
    of every server of a test session, reaching each at its address."""
    import socketserver  # noqa: PLC0415
    import traceback  # noqa: PLC0415

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            call = json.loads(self.rfile.readline())
            try:
                answer: Any = run_operations(call["address"], call["ops"], call.get("rest", REST))
            except Exception:  # noqa: BLE001  # the test reports it, with the traceback
                answer = {"error": traceback.format_exc()}
            self.wfile.write(json.dumps(answer).encode() + b"\n")

    class Server(socketserver.ThreadingUnixStreamServer):
        daemon_threads = True

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a socket left by a client that was stopped: this one replaces it
    with Server(path, Handler) as server:
        os.chmod(path, 0o777)  # noqa: S103  # the tests connect as another user
        print("listening", flush=True)
        server.serve_forever()
    return 0


def main() -> int:
    if sys.argv[1] == "--listen":
        return listen(sys.argv[2])
    operations = json.loads(sys.argv[2]) if len(sys.argv) > 2 else json.load(sys.stdin)
    print(json.dumps(run_operations(sys.argv[1], operations)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
