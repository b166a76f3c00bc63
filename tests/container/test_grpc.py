"""TF Serving's gRPC API in the real image, called by TF Serving's own client stubs.

The server runs under --cpus 1 with gRPC on 8500 and REST on 8501
(harness/servers.py). The client (grpc_client.py: `tensorflow-serving-api`'s
stubs and TensorFlow's make_tensor_proto/make_ndarray) runs in a second
container of the same image that shares the server's network namespace, as a
sidecar would (harness/clients.py). Models (tests/container/grpc_models.py,
from the model library): plus/1 and plus/2 (y = x + V), dtypes/1 (identity
for every dtype), gated/1 (answers once the test opens the gate the call
names, gates.py), matmul/1, defaults/1 (an input with a default value) and
examples/1 (classify and regress signatures).

No test here assumes a CPU's speed: a call that must stay in flight is a
gated/1 call, held until the test opens its gate, and each step waits for the
server's state (its metrics, its log) instead of sleeping.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from harness import web
from harness.docker import poll, wait
from harness.models import ModelLibrary
from harness.servers import READY_TIMEOUT, Server, ServerPool, ServerSpec, serve
from tests.container.examples import f32
from tests.container.gates import Gate
from tests.container.grpc_models import CONFIG, MODELS, gate_volume, gated, x_tensor
from tests.tf_text import NODE, NOT_A_MATRIX, tf_text

#: The images this module tests (tests/container/conftest.py): the server is
#: the same in both; what the CUDA image changes is tested by the modules that run on both.
IMAGE_FLAVORS = ("cpu",)


def spec(*args: str, gate: Gate | None = None) -> ServerSpec:
    """A server of every model of grpc_models.py (its config), with `args` and `gate`."""
    return serve(
        "--model_config_file=/models/models.config",
        *args,
        models=MODELS,
        files={"models.config": CONFIG},
        volumes=gate_volume(gate) if gate else (),
    )


@pytest.fixture(scope="module")
def server(servers: ServerPool) -> Iterator[Server]:
    # The module's own: test_handle_reload_config_request (last) changes what it serves.
    with servers.private(spec()) as running:
        yield running


def test_every_rpc_answers_as_tf_serving_does(server: Server) -> None:
    ops: list[dict[str, Any]] = [
        {"op": "predict", "model": "plus", "inputs": {"x": x_tensor(1.0, 2.5)}},
        {"op": "predict", "model": "plus", "version": 1, "inputs": {"x": x_tensor(1.0)}},
        {"op": "predict", "model": "plus", "label": "canary", "inputs": {"x": x_tensor(1.0)}},
        {"op": "predict", "model": "plus", "label": "stable", "signature": "serving_default",
         "inputs": {"x": x_tensor(1.0)}, "output_filter": ["y"]},
        {"op": "metadata", "model": "plus", "version": 1},
        {"op": "status", "model": "plus"},
        {"op": "health", "service": ""},
        {"op": "health", "service": "plus"},
        {"op": "health", "service": "PredictionService"},
    ]  # fmt: skip
    (latest, v1, canary, stable, metadata, status, *health) = server.grpc(*ops)
    assert latest["code"] == "OK", latest
    assert latest["outputs"] == {"y": [3.0, 4.5]}
    assert latest["response"]["model_spec"] == {
        "name": "plus", "version": "2", "signature_name": "serving_default"
    }  # fmt: skip
    # Values come back in the typed field, as TF Serving's AsProtoField writes them.
    assert latest["fields"]["y"] == ["dtype", "float_val", "tensor_shape"]
    assert (v1["outputs"], canary["outputs"], stable["outputs"]) == (
        {"y": [2.0]}, {"y": [3.0]}, {"y": [2.0]}
    )  # fmt: skip
    assert metadata["response"]["model_spec"] == {"name": "plus", "version": "1"}
    signature = metadata["signature_def"]["signature_def"]["serving_default"]
    assert signature["method_name"] == "tensorflow/serving/predict"
    assert signature["inputs"]["x"]["dtype"] == "DT_FLOAT"
    assert signature["inputs"]["x"]["tensor_shape"] == {"dim": [{"size": "-1"}]}
    assert signature["outputs"]["y"]["dtype"] == "DT_FLOAT"
    assert status["response"]["model_version_status"] == [
        {"version": "2", "state": "AVAILABLE", "status": {}},
        {"version": "1", "state": "AVAILABLE", "status": {}},
    ]
    assert [h["response"] for h in health] == [{"status": "SERVING"}] * 3


def test_errors_carry_tf_serving_codes_and_messages(server: Server) -> None:
    ops: list[dict[str, Any]] = [
        {"op": "predict", "model": "nope", "inputs": {"x": x_tensor(1.0)}},
        {"op": "predict", "model": "plus", "version": 9, "inputs": {"x": x_tensor(1.0)}},
        {"op": "predict", "model": "plus", "label": "nolabel", "inputs": {"x": x_tensor(1.0)}},
        {"op": "predict", "model": "plus", "inputs": {"z": x_tensor(1.0)}},
        {"op": "predict", "model": "plus", "inputs": {"x": x_tensor(1, dtype="int32")}},
        {"op": "predict", "model": "matmul", "inputs": {"x": {"values": [[1.0, 2.0, 3.0]]}}},
        {"op": "predict", "model": "plus", "inputs": {"x": {"values": [1.0], "dtype_enum": 999}}},
        {"op": "predict", "model": "plus", "signature": "nope", "inputs": {"x": x_tensor(1.0)}},
        {"op": "predict", "model": "plus", "inputs": {"x": x_tensor(1.0)}, "output_filter": ["q"]},
        {"op": "metadata", "model": "plus", "fields": []},
        {"op": "metadata", "model": "plus", "fields": ["bogus"]},
        {"op": "status", "model": "plus", "version": 7},
        {"op": "status", "model": "nope"},
        {"op": "health", "service": "nope"},
        {"op": "multi_inference_tasks", "tasks": []},
        {"op": "big", "model": "plus", "floats": 3_000_000},
    ]  # fmt: skip
    got = [(r["code"], r["message"]) for r in server.grpc(*ops)]
    assert got == [
        ("NOT_FOUND", "Servable not found for request: Latest(nope)"),
        ("NOT_FOUND", "Servable not found for request: Specific(plus, 9)"),
        # TF Serving's code for an unknown label (server_core.cc), not NOT_FOUND.
        ("INVALID_ARGUMENT", "Unrecognized servable version label: nolabel"),
        ("INVALID_ARGUMENT", "input size does not match signature: 1!=1 len({z}) != len({x}). "
         "Sent extra: {z}. Missing but required: {x}."),
        ("INVALID_ARGUMENT", "Expects arg[0] to be float but int32 is provided"),
        ("INVALID_ARGUMENT", got[5][1]),  # the graph's own error, below
        ("INVALID_ARGUMENT", "tensor parsing error: x"),
        ("FAILED_PRECONDITION", 'Serving signature key "nope" not found.'),
        ("INVALID_ARGUMENT", "output tensor alias not found in signature: q Outputs expected "
         "to be in the set {y}."),
        ("INVALID_ARGUMENT", "GetModelMetadataRequest must specify at least one metadata_field"),
        ("INVALID_ARGUMENT", "Metadata field bogus is not supported"),
        ("NOT_FOUND", "Could not find version 7 of model plus"),
        ("NOT_FOUND", "Could not find any versions of model nope"),
        ("NOT_FOUND", "unknown service 'nope'"),
        # No task: no ModelSpec to find the model by (TF Serving's words).
        ("INVALID_ARGUMENT", "ModelSpec has no name specified."),
        ("RESOURCE_EXHAUSTED", got[-1][1]),
    ]  # fmt: skip
    # A shape the graph cannot take gets TensorFlow's own error with its code, as
    # TF Serving's Session::Run gives it (no shape is checked against the signature);
    # its node annotation depends on the host (tests/tf_text.py).
    assert tf_text(got[5][1]) == f"Matrix size-incompatible: In[0]: [1,3], In[1]: [2,1]\n\t {NODE}"
    # 12 MB of floats against the 8 MiB limit (--max-body-bytes, REST's too).
    assert "Received message larger than max" in got[-1][1]
    assert "Traceback" not in server.logs()


def test_a_message_that_does_not_parse_is_invalid_argument_naming_its_type(
    server: Server,
) -> None:
    """Bytes that are not the method's request message are the client's mistake:
    INVALID_ARGUMENT naming the type, no traceback (grpc's own answer was UNKNOWN
    "Unexpected DecodeError", logged with one). TF Serving's C++ deserializer
    fails such a call INTERNAL (docs/tf-serving.md)."""
    truncated = "\n\x05ab"  # field 1, 5 bytes long, with 2 sent
    methods = {
        "/tensorflow.serving.PredictionService/Predict": "tensorflow.serving.PredictRequest",
        "/tensorflow.serving.PredictionService/Classify": (
            "tensorflow.serving.ClassificationRequest"
        ),
        "/tensorflow.serving.PredictionService/GetModelMetadata": (
            "tensorflow.serving.GetModelMetadataRequest"
        ),
        "/tensorflow.serving.ModelService/GetModelStatus": (
            "tensorflow.serving.GetModelStatusRequest"
        ),
        "/grpc.health.v1.Health/Check": "grpc.health.v1.HealthCheckRequest",
    }
    got = server.grpc(*({"op": "raw", "method": m, "body": truncated} for m in methods))
    assert [(r["code"], r["message"]) for r in got] == [
        ("INVALID_ARGUMENT", f"Failed to parse the request message as {name}")
        for name in methods.values()
    ]
    logs = server.logs()
    assert "Traceback" not in logs
    assert "DecodeError" not in logs
    # Still serving.
    assert (
        server.grpc({"op": "predict", "model": "plus", "inputs": {"x": x_tensor(1.0)}})[0]["code"]
        == "OK"
    )


def test_the_graph_takes_shapes_its_signature_does_not_say(server: Server) -> None:
    """plus says x is [-1]; y = x + V takes any shape, so TF Serving answers a
    [1, 1] and a scalar x (its Session::Run feeds them as sent), and so does
    this server, over gRPC and REST."""
    two_d, scalar, rows = server.grpc(
        {"op": "predict", "model": "plus", "version": 1, "inputs": {"x": {"values": [[1.0]]}}},
        {"op": "predict", "model": "plus", "version": 1, "inputs": {"x": {"values": 2.0}}},
        {"op": "predict", "model": "matmul", "inputs": {"x": {"values": [[1.0, 2.0]]}}},
    )
    assert (two_d["code"], two_d["outputs"]) == ("OK", {"y": [[2.0]]}), two_d
    assert (scalar["code"], scalar["outputs"]) == ("OK", {"y": 3.0}), scalar
    assert (rows["code"], rows["outputs"]) == ("OK", {"y": [[3.0]]}), rows
    rest = web.post(
        server.rest + "/v1/models/plus/versions/1:predict",
        json={"instances": [[1.0, 2.0]]},
        timeout=30,
    )
    assert (rest.status_code, rest.json()) == (200, {"predictions": [[2.0, 3.0]]}), rest.text
    refused = web.post(
        server.rest + "/v1/models/matmul:predict", json={"instances": [1.0, 2.0]}, timeout=30
    )
    assert refused.status_code == 400, refused.text
    # TensorFlow's own words, which depend on the host (its kernel library and
    # how it rewrote the graph): compared normalized (tests/tf_text.py).
    assert tf_text(refused.json()["error"]) == f"{NOT_A_MATRIX}\n\t {NODE}", refused.text


def test_classify_and_regress(server: Server) -> None:
    examples = [{"x": [0.1], "y": [0.2]}, {"x": [1.5], "y": [3.0]}]
    classify, regress, on_predict, empty = server.grpc(
        {"op": "classify", "model": "examples", "signature": "classify", "examples": examples},
        {"op": "regress", "model": "examples", "signature": "regress", "examples": examples},
        {"op": "classify", "model": "plus", "examples": examples},
        {"op": "regress", "model": "examples", "signature": "regress", "examples": []},
    )
    pairs = [(f32(x[0]), f32(y[0])) for x, y in (e.values() for e in examples)]
    got = [
        [(c.get("label"), f32(c["score"])) for c in row["classes"]]
        for row in classify["response"]["result"]["classifications"]
    ]
    assert got == [[("sum", f32(x + y)), ("difference", f32(x - y))] for x, y in pairs]
    assert classify["response"]["model_spec"] == {
        "name": "examples", "version": "1", "signature_name": "classify"
    }  # fmt: skip
    values = [f32(r["value"]) for r in regress["response"]["result"]["regressions"]]
    assert values == [f32(f32(2 * x + y) + 1) for x, y in pairs]
    # TF Serving's answers: a predict signature has no classification input;
    # no examples at all.
    assert on_predict["code"] == "INVALID_ARGUMENT"
    assert on_predict["message"].startswith("No classification inputs found in SignatureDef")
    assert (empty["code"], empty["message"]) == ("INVALID_ARGUMENT", "Input is empty.")


CLASSIFY, REGRESS = "tensorflow/serving/classify", "tensorflow/serving/regress"


def tasks(*named: tuple[str, str], model: str = "examples") -> list[dict[str, Any]]:
    return [{"model": model, "signature": sig, "method": method} for sig, method in named]


def test_multi_inference(server: Server) -> None:
    """TF Serving's MultiInference: a classify and a regress task over the same
    examples, one result per task in the request's order, each with its model spec."""
    examples = [{"x": [0.1], "y": [0.2]}, {"x": [1.5], "y": [3.0]}, {"x": [-2.25]}]
    (multi,) = server.grpc(
        {
            "op": "multi_inference_tasks",
            "tasks": tasks(("regress", REGRESS), ("classify", CLASSIFY)),
            "examples": examples,
        }
    )
    assert (multi["code"], multi["message"]) == ("OK", ""), multi
    regressed, classified = multi["response"]["results"]
    pairs = [(f32(e["x"][0]), f32(e.get("y", [0.0])[0])) for e in examples]
    assert regressed["model_spec"] == {
        "name": "examples", "version": "1", "signature_name": "regress"
    }  # fmt: skip
    values = [f32(r["value"]) for r in regressed["regression_result"]["regressions"]]
    assert values == [f32(f32(2 * x + y) + 1) for x, y in pairs]
    assert classified["model_spec"] == {
        "name": "examples", "version": "1", "signature_name": "classify"
    }  # fmt: skip
    got = [
        [(c["label"], f32(c["score"])) for c in row["classes"]]
        for row in classified["classification_result"]["classifications"]
    ]
    assert got == [[("sum", f32(x + y)), ("difference", f32(x - y))] for x, y in pairs]


def test_multi_inference_errors_are_tf_servings(server: Server) -> None:
    """multi_inference.cc's checks, codes and messages; the model and version are
    the first task's."""
    one = [{"x": [1.0]}]
    ops: list[dict[str, Any]] = [
        {"tasks": tasks(("regress", REGRESS)) + tasks(("classify", CLASSIFY), model="plus")},
        {"tasks": tasks(("regress", REGRESS), ("regress", REGRESS))},
        {"tasks": tasks(("regress", "tensorflow/serving/predict"))},
        {"tasks": tasks(("nope", REGRESS))},
        {"tasks": tasks(("regress", REGRESS)) + tasks(("classify", CLASSIFY), model="")},
        {"tasks": tasks(("regress", REGRESS), ("classify", CLASSIFY)), "examples": []},
        {"tasks": tasks(("regress", REGRESS), model="nope")},
        {"tasks": [{"model": "examples", "version": 9, "signature": "regress",
                    "method": REGRESS}]},
        {"tasks": tasks(("bad_scores", CLASSIFY))},
    ]  # fmt: skip
    got = [
        (r["code"], r["message"])
        for r in server.grpc(
            *({"op": "multi_inference_tasks", "examples": one, **op} for op in ops)
        )
    ]
    assert got == [
        ("INVALID_ARGUMENT",
         "All ModelSpecs in a MultiInferenceRequest must access the same model name."),
        ("INVALID_ARGUMENT", "Duplicate evaluation of signature: regress"),
        ("UNIMPLEMENTED", "Unsupported signature method_name: tensorflow/serving/predict"),
        ("INVALID_ARGUMENT", "Requested signature not found in model graph: nope"),
        ("INVALID_ARGUMENT", "Found ModelSpec with an empty model name."),
        ("INVALID_ARGUMENT", "Input is empty."),
        ("NOT_FOUND", "Servable not found for request: Latest(nope)"),
        ("NOT_FOUND", "Servable not found for request: Specific(examples, 9)"),
        ("INVALID_ARGUMENT", "Expected Tensor shape: [batch_size num_classes] but got [1]"),
    ]  # fmt: skip
    assert "Traceback" not in server.logs()


def test_metadata_holds_the_signature_defs_as_the_savedmodel_does(server: Server) -> None:
    """REST and gRPC metadata of a signature with a default input (TensorFlow 2.13+
    writes it into the SignatureDef's `defaults`): as TF Serving answers, the
    default's TensorProto, `"defaults": {}` where there is none, and TensorFlow's
    own __saved_model_init_op signature."""
    rest = web.get(f"{server.rest}/v1/models/defaults/metadata", timeout=10)
    assert rest.status_code == 200, rest.text
    body = rest.json()
    assert list(body) == ["model_spec", "metadata"]
    assert list(body["model_spec"].items()) == [
        ("name", "defaults"), ("version", "1"), ("signature_name", "")
    ]  # fmt: skip
    defs = body["metadata"]["signature_def"]["signature_def"]
    assert sorted(defs) == ["__saved_model_init_op", "serving_default"]
    serving = defs["serving_default"]
    assert list(serving) == ["inputs", "outputs", "method_name", "defaults"]
    assert serving["method_name"] == "tensorflow/serving/predict"
    x = serving["inputs"]["x"]
    assert list(x) == ["name", "dtype", "tensor_shape"]
    assert (x["dtype"], x["tensor_shape"]) == (
        "DT_FLOAT", {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False}
    )  # fmt: skip
    assert serving["inputs"]["y"]["tensor_shape"] == {"dim": [], "unknown_rank": False}
    default = serving["defaults"]["y"]
    assert default["dtype"] == "DT_FLOAT"
    assert default["float_val"] == [2.0]
    assert default["tensor_shape"] == {"dim": [], "unknown_rank": False}
    # Every field without presence is printed, as TF Serving's printer does.
    assert (default["version_number"], default["tensor_content"], default["int_val"]) == (
        0, "", []
    )  # fmt: skip
    assert defs["__saved_model_init_op"]["defaults"] == {}
    (grpc_metadata,) = server.grpc({"op": "metadata", "model": "defaults"})
    assert grpc_metadata["code"] == "OK", grpc_metadata
    packed = grpc_metadata["signature_def"]["signature_def"]
    assert sorted(packed) == sorted(defs)
    assert packed["serving_default"]["defaults"]["y"]["float_val"] == [2.0]
    assert packed["serving_default"]["inputs"]["x"]["name"] == x["name"]


def test_every_dtype_round_trips(server: Server) -> None:
    (result,) = server.grpc({"op": "dtypes", "model": "dtypes"})
    for form in ("tensor_content", "typed_fields"):
        compared = result["compared"][form]
        assert isinstance(compared, dict), compared
        assert compared == dict.fromkeys(compared, True), form
        assert len(compared) == 16


def test_handle_reload_config_request(server: Server) -> None:
    # Runs last on the module's server: it changes what that server serves.
    specific = """model_config_list { config { name: "plus" base_path: "/models/plus"
        model_version_policy { specific { versions: 1 } } } }"""
    reload, status, predict, gone = server.grpc(
        {"op": "reload", "config": specific},
        {"op": "status", "model": "plus"},
        {"op": "predict", "model": "plus", "inputs": {"x": x_tensor(1.0)}},
        {"op": "predict", "model": "dtypes", "inputs": {"x": x_tensor(1.0)}},
    )
    assert reload["code"] == "OK", reload
    assert reload["response"].get("status", {}) == {}  # error_code OK (0), as TF Serving's
    states = {v["version"]: v["state"] for v in status["response"]["model_version_status"]}
    assert states["1"] == "AVAILABLE", states
    assert states["2"] in ("UNLOADING", "END"), states
    assert predict["outputs"] == {"y": [2.0]}
    assert (gone["code"], gone["message"]) == (
        "NOT_FOUND", "Servable not found for request: Latest(dtypes)"
    )  # fmt: skip
    custom, empty_specific = server.grpc(
        {"op": "reload", "config": 'custom_model_config { type_url: "x" }'},
        {"op": "reload", "config": """model_config_list { config { name: "plus"
            base_path: "/models/plus" model_version_policy { specific { } } } }"""},
    )  # fmt: skip
    assert (custom["code"], custom["message"]) == (
        "INVALID_ARGUMENT",
        "ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
        "ModelConfigList is currently supported",
    )
    assert empty_specific["code"] == "INVALID_ARGUMENT"
    assert empty_specific["message"].startswith(
        "ReloadConfigRequest (config #1) (model 'plus'): model_version_policy.specific lists "
        "no versions"
    ), empty_specific


def test_400_concurrent_predicts_are_all_answered_correctly(servers: ServerPool) -> None:
    # The admission limit (32 per worker by default) is raised so that all 400
    # are admitted: this test is about correctness under concurrency; the
    # limit has its own test below.
    with servers.private(spec("--max-queue", "512")) as server:
        (result,) = server.grpc({"op": "predict_many", "model": "plus", "n": 400, "x0": 1000})
    answers = result["answers"]
    assert len(answers) == 400
    wrong = [a for a in answers if a[1:] != [1000 + a[0] + 2, 2]]
    assert wrong == []


def test_overload_is_resource_exhausted_and_timeouts_deadline_exceeded(
    servers: ServerPool, tmp_path: Path
) -> None:
    """One worker, one admission slot, a 1 s timeout; on any CPU.

    The long call is gated: it holds the worker until the test opens its gate
    (a call sized in loop steps finished within the 1 s on a faster CPU), so
    its timeout passes whatever the speed, and the worker stays busy after it
    (TensorFlow cannot stop a running call): the crowd that follows, in the
    same client, finds the only slot taken. The short call waits for the
    server to be idle (a metric), not for a guessed time.
    """
    gate = Gate(tmp_path / "gates")
    with servers.private(
        spec("--workers", "1", "--max-queue", "1", "--request-timeout", "1", gate=gate)
    ) as server:
        crowd = [{"op": "predict", "model": "plus", "inputs": {"x": x_tensor(1.0)}}] * 8
        first, together = server.grpc(gated("held"), {"op": "parallel", "ops": crowd})
        still_running = server.metric("serving_predict_in_flight")
        gate.open("held")
        assert poll(server.idle, 60, 0.05), server.logs()
        (deadline,) = server.grpc(gated("short", timeout=0.5))  # its gate stays shut
    assert (first["code"], first["message"]) == (
        "DEADLINE_EXCEEDED", "Request timed out after 1 s (--request-timeout)"
    )  # fmt: skip
    assert still_running == 1  # the timed-out call kept its worker and its slot
    rest = together["results"]
    # The slot was taken for all of them: none could run (formerly some could,
    # when the sized call ended early; the gate makes it exact).
    assert {r["code"] for r in rest} == {"RESOURCE_EXHAUSTED"}, rest
    refused = next(r for r in rest if r["code"] == "RESOURCE_EXHAUSTED")
    assert refused["message"].startswith("Server is at capacity")
    assert deadline["code"] == "DEADLINE_EXCEEDED"


def test_streams_that_send_no_message_lock_nobody_out(servers: ServerPool) -> None:
    """64 Predict calls that open a stream and never send their message, twice --max-queue.

    They used to hold every admission place until their client went away:
    every other call, gRPC or REST, got RESOURCE_EXHAUSTED / 503. Now another
    client's Predict, ModelInfer and REST predict get in (a call still awaiting
    its message gives its place to a newcomer once it has waited a second),
    and the stalled calls end at --request-timeout with DEADLINE_EXCEEDED,
    counted. The 20 s timeout leaves 19 s between the second a newcomer waits
    and the deadline: the others get in while the stalled calls are open, on
    any CPU; the bounds (15 s to get in, 90 s for the rest) only say it happens.
    """
    with servers.private(spec("--max-queue", "32", "--request-timeout", "20")) as server:
        (stall,) = server.grpc(
            {"op": "stall", "streams": 64, "admitted": 32, "within": 15, "wait": 90}
        )
        timed_out = server.metric(
            "serving_grpc_requests_total",
            method="Predict", code="DEADLINE_EXCEEDED", model="", protocol="v1",
        )  # fmt: skip
        logs = server.logs()
    assert stall["admitted"] == 32, stall["admitted"]
    others = stall["others"]
    assert {name: o["code"] for name, o in others.items()} == {
        "Predict": "OK", "ModelInfer": "OK", "REST predict": "OK"
    }, others  # fmt: skip
    assert stall["open_after_others"] > 0  # they got in while stalled calls were still open
    codes = collections.Counter(code for code, _ in stall["stalled"])
    assert set(codes) == {"DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"}, codes
    late = [message for code, message in stall["stalled"] if code == "DEADLINE_EXCEEDED"]
    assert all(m == "Request message not received within 20 s (--request-timeout)" for m in late)
    assert timed_out == codes["DEADLINE_EXCEEDED"]
    assert "did not arrive within --request-timeout" in logs
    assert logs.count("did not arrive within") == 1  # the rest counted, not logged


def test_health_follows_loading_and_sigterm_drains_calls_in_flight(
    servers: ServerPool, model_library: ModelLibrary, tmp_path: Path
) -> None:
    """A call in flight at SIGTERM is answered before the server exits; on any CPU.

    The call is gated: it is in flight (a metric says so) when SIGTERM is
    sent, and stays so until the server has logged its drain; only then does
    the test open its gate. A call sized in loop steps could end before the
    signal on a fast CPU, and the drain would have nothing to wait for.
    """
    models = model_library.tree(tmp_path / "models", {})
    (models / "gated").mkdir()
    (models / "gated").chmod(0o777)
    gate = Gate(tmp_path / "gates")
    command = ServerSpec(
        args=("serve", "--model_name=gated", "--grace-period", "30"),
        volumes=gate_volume(gate),
        ready=False,
    )
    with (
        servers.private(command, models) as server,
        ThreadPoolExecutor(1) as pool,
        gate.shut("drain"),  # opened at the end also if the test fails
    ):
        container = server.container
        listening = "gRPC (TF Serving's PredictionService"
        assert poll(lambda: listening in server.logs(), READY_TIMEOUT, 0.25), server.logs()
        # No version on disk yet: loading.
        loading = server.grpc({"op": "health"}, {"op": "health", "service": "gated"})
        assert [r["response"] for r in loading] == [{"status": "NOT_SERVING"}] * 2
        staged = model_library.copy("grpc/gated/1", models / "gated" / ".staged-1")
        staged.rename(models / "gated" / "1")
        # Health is asked once the version is loaded (REST's status says so),
        # not after however long a sidecar takes to start; the server refreshes it
        # from its models' state every 0.2 s (grpc/health.py's HEALTH_EVERY), so it
        # is asked until it follows (the sidecar is up already: no start hides the lag).
        assert poll(lambda: server.state("gated") == "AVAILABLE", 120, 0.1), server.logs()

        def health() -> list[dict[str, Any]]:
            answers = server.grpc({"op": "health"}, {"op": "health", "service": "gated"})
            return [r["response"] for r in answers]

        serving = [{"status": "SERVING"}] * 2
        assert poll(lambda: health() == serving, 30, 0.1), (health(), server.logs())

        # A health watch and a held predict are in flight when SIGTERM comes.
        held = gated("drain", x=7.0, timeout=300)
        operations = {"op": "parallel", "ops": [{"op": "watch", "seconds": 120}, held]}
        client = pool.submit(server.grpc, operations)

        def in_flight() -> bool:
            return server.metric("serving_predict_in_flight") == 1

        assert poll(lambda: client.done() or in_flight(), 120, 0.05), server.logs()
        assert in_flight(), server.logs()
        sent = time.monotonic()
        container.kill(signal="SIGTERM")
        draining = lambda: "received SIGTERM: draining" in server.logs()  # noqa: E731
        assert poll(draining, 60, 0.05), server.logs()
        container.reload()
        waited = container.status  # the held call keeps the server up
        gate.open("drain")
        (answers,) = client.result(timeout=120)
        stopped = wait(container, 60)
        drained_in = time.monotonic() - sent
    assert waited == "running"
    watch, answer = answers["results"]
    assert (answer["code"], answer["outputs"]) == ("OK", {"y": [7.0]}), answer
    assert watch["seen"] == ["SERVING", "NOT_SERVING"], watch
    assert stopped.exit_code == 0, stopped.stderr
    assert "received SIGTERM: draining" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert drained_in < 30
