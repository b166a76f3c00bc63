"""TF Serving's end-to-end flows, walked against the real image.

TF Serving's own end-to-end test (tensorflow_model_server_test.py and its
test_util harness) starts tensorflow_model_server with its harness's flags
and calls it with TF Serving's client. These tests walk the same flows: the
image's /usr/bin/tensorflow_model_server with the same flags (--port,
--rest_api_port, --rest_api_timeout_in_ms=5000, --grpc_socket_path,
--model_name with --model_base_path or --model_config_file,
--monitoring_config_file, --model_config_file_poll_wait_seconds,
--grpc_channel_arguments) under --cpus 1; gRPC through TF Serving's stubs in
a sidecar container sharing the server's network (grpc_client.py), REST
from here.

The models are the model library's tfserving/ folder (harness/models.py),
exported in the image by make_tfserving_models.py (its docstring says what
each one is): half_plus_two, a TF1 export
(tf.compat.v1 graph, SavedModelBuilder, an asset and a main op), as TF
Serving's saved_model_half_plus_two_cpu; half_plus_three, an Estimator-era
TF1 export (signature TensorInfos without shapes, a legacy_init_op);
half_plus_two_tf2 (tf.saved_model.save); the two tf.saved_model.save
exports of TF Serving's test (unknown rank, two signatures) and Keras 3
Sequential models. Every version is 123, as in TF Serving's testdata.

The expected answers are TF Serving's: it feeds the request's tensor to the
graph (Session::Run) and answers what the graph computes, so x of shape [1]
gives y of shape [1] although the signature says [-1, 1]; a REST row of
three scalars is a batch of three. make_tfserving_models.py's docstring
has the arithmetic.

Servers are shared by the tests of one flow (module fixtures), as TF
Serving's test reuses its servers: the read-only flows' (the exports) is the
session pool's (harness/servers.py); the flows that change what a server
serves (config reloads, the profiler's traces) or how it starts (channel
arguments, bad flags and files) start their own. The profiler's
test is last: it is the one whose expectation may change (a trace, or a
clear refusal at start-up).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from docker.models.containers import Container

from harness.docker import Containers, poll
from harness.servers import MODEL_SERVER, Server, ServerPool
from tests.container.model_servers import HARNESS, model_config, model_server, write_config
from tf_entrypoint.serving.codec import profiler_proto

#: The images this module tests (tests/container/conftest.py): the server is
#: the same in both; what the CUDA image changes is tested by the modules that run on both.
IMAGE_FLAVORS = ("cpu",)

SOCKET = "/sock/tf-serving.sock"
VERSION = "123"
PREDICT = "tensorflow/serving/predict"
CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"
NOT_FOUND = "Servable not found for request: Latest({})"


def tfserving(*names: str) -> dict[str, str]:
    """/models/NAME -> the model library's tfserving/NAME (make_tfserving_models.py)."""
    return {name: f"tfserving/{name}" for name in names}


def serving(config: Mapping[str, str]) -> dict[str, str]:
    """The library exports a model config (model -> /models/NAME) serves."""
    return tfserving(*sorted({Path(path).name for path in config.values()}))


def shared_folder(tmp: Path, name: str, bind: str) -> tuple[str, str, str]:
    """A host folder every container may write (the image's user is not root here),
    as a ServerSpec volume."""
    folder = tmp / name
    folder.mkdir()
    folder.chmod(0o777)
    return (str(folder), bind, "rw")


# --- what TF Serving's VerifyPredictRequest sends and checks


def verify_predict(
    model: str = "default",
    *,
    output_filter: bool = True,
    batch: bool = False,
    signature: str = "serving_default",
    x: str = "x",
    y: str = "y",
) -> dict[str, Any]:
    """x = 2.0 in float_val, of shape [1] ([1, 1] with `batch`), as TF Serving's
    harness sends it; `output_filter` asks for `y` only."""
    op: dict[str, Any] = {
        "op": "predict_typed",
        "model": model,
        "signature": signature,
        "inputs": {x: {"values": [2.0], "shape": [1, 1] if batch else [1]}},
    }
    if output_filter:
        op["output_filter"] = [y]
    return op


def dims(*sizes: int) -> dict[str, Any]:
    """A TensorShapeProto as MessageToDict writes it."""
    return {"dim": [{"size": str(size)} for size in sizes]} if sizes else {}


def assert_predicted(
    result: dict[str, Any],
    model: str,
    expected: float,
    *,
    signature: str = "serving_default",
    shape: Sequence[int] = (1,),
    y: str = "y",
) -> None:
    """TF Serving's checks (y present, DT_FLOAT, one float_val equal to `expected`,
    the model spec with version 123), and the shape the graph gives."""
    assert result["code"] == "OK", result
    response = result["response"]
    assert response["model_spec"] == {
        "name": model,
        "version": VERSION,
        "signature_name": signature,
    }
    outputs = response["outputs"]
    assert list(outputs) == [y], outputs
    # A scalar's shape is an empty TensorShapeProto, which proto3 reads the same
    # whether it is sent (TF Serving's AsProtoField) or left out.
    assert {"tensor_shape": {}, **outputs[y]} == {
        "dtype": "DT_FLOAT",
        "tensor_shape": dims(*shape),
        "float_val": [expected],
    }


def model_spec(signature: str, model: str = "default") -> dict[str, str]:
    return {"name": model, "version": VERSION, "signature_name": signature}


def classify_ops(model: str) -> list[dict[str, Any]]:
    """TF Serving's Classify, Regress and MultiInference requests: one example, x = 2.0."""
    example = [{"x": [2.0]}]
    return [
        {"op": "classify", "model": model, "signature": "classify_x_to_y", "examples": example},
        {"op": "regress", "model": model, "signature": "regress_x_to_y", "examples": example},
        {
            "op": "multi_inference_tasks",
            "tasks": [
                {"model": model, "signature": "regress_x_to_y", "method": REGRESS},
                {"model": model, "signature": "classify_x_to_y", "method": CLASSIFY},
            ],
            "examples": example,
        },
    ]


def assert_classified(classify: dict[str, Any], regress: dict[str, Any], model: str) -> None:
    """One classification of one class scored 3.0 (no label: the signature has no
    classes output), one regression of 3.0."""
    assert (classify["code"], classify["message"]) == ("OK", "")
    assert classify["response"] == {
        "model_spec": model_spec("classify_x_to_y", model),
        "result": {"classifications": [{"classes": [{"score": 3.0}]}]},
    }
    assert (regress["code"], regress["message"]) == ("OK", "")
    assert regress["response"] == {
        "model_spec": model_spec("regress_x_to_y", model),
        "result": {"regressions": [{"value": 3.0}]},
    }


def assert_multi_inferred(result: dict[str, Any], model: str) -> None:
    """Both tasks over the one example, in the request's order, each with its model spec."""
    assert (result["code"], result["message"]) == ("OK", "")
    assert result["response"] == {
        "results": [
            {
                "model_spec": model_spec("regress_x_to_y", model),
                "regression_result": {"regressions": [{"value": 3.0}]},
            },
            {
                "model_spec": model_spec("classify_x_to_y", model),
                "classification_result": {"classifications": [{"classes": [{"score": 3.0}]}]},
            },
        ]
    }


def assert_rest_classified(server: Server, model: str) -> None:
    """TF Serving's testClassifyREST and testRegressREST, exactly."""
    example = {"examples": [{"x": 2.0}]}
    classify = server.post(
        f"/v1/models/{model}:classify", {"signature_name": "classify_x_to_y", **example}
    )
    assert classify.status_code == 200, classify.text
    assert classify.json() == {"results": [[["", 3.0]]]}
    regress = server.post(
        f"/v1/models/{model}:regress", {"signature_name": "regress_x_to_y", **example}
    )
    assert regress.status_code == 200, regress.text
    assert regress.json() == {"results": [3.0]}


# --- TF2, tf.saved_model.save and Keras exports: one server, a model config file

EXPORTS = {
    "half_plus_two_tf2": "/models/half_plus_two_tf2",
    "tf_saved_model_save": "/models/saved_model_save",
    "multiple_signatures": "/models/two_signatures",
    "keras_sequential": "/models/keras",
    "keras_export": "/models/keras_export",
    "keras_distributed": "/models/keras_distributed",
}


@pytest.fixture(scope="module")
def exports(servers: ServerPool) -> Server:
    """One server of every export, from a model config file; read only: the pool's."""
    return servers.shared(model_server(models=serving(EXPORTS), config=EXPORTS))


@pytest.fixture(scope="module")
def exports_grpc(exports: Server) -> dict[str, dict[str, Any]]:
    """Every gRPC call of the exports' flows, in one sidecar run."""
    classify, regress, multi = classify_ops("half_plus_two_tf2")
    calls: dict[str, dict[str, Any]] = {
        "tf2_predict": verify_predict("half_plus_two_tf2", output_filter=False),
        "tf2_classify": classify,
        "tf2_regress": regress,
        "tf2_multi": multi,
        "saved_model_save": verify_predict("tf_saved_model_save", output_filter=False),
        "custom_signature": verify_predict("multiple_signatures", signature="custom_signature_key"),
        "default_signature": verify_predict("multiple_signatures"),
        # Keras 3's names: tf.saved_model.save(model) writes input "inputs" and
        # output "output_0"; model.export() takes its input's name from the
        # Input layer ("x") and also says "output_0".
        "keras_sequential": verify_predict(
            "keras_sequential", output_filter=False, batch=True, x="inputs", y="output_0"
        ),
        "keras_export": verify_predict(
            "keras_export", output_filter=False, batch=True, y="output_0"
        ),
        "keras_distributed": verify_predict(
            "keras_distributed", output_filter=False, batch=True, x="inputs", y="output_0"
        ),
        # This server has no --profile-dir: a trace to a folder it could write is refused.
        "profile": profile_call("/tmp/logs/plugins/profile"),
    }
    return dict(zip(calls, exports.grpc(*calls.values()), strict=True))


def test_classify_and_regress_on_a_tf2_export(
    exports: Server, exports_grpc: dict[str, dict[str, Any]]
) -> None:
    """testClassifyTf2 and testRegressTf2, and the same over REST. The signatures
    say method predict, as every tf.saved_model.save export does."""
    assert_classified(
        exports_grpc["tf2_classify"], exports_grpc["tf2_regress"], "half_plus_two_tf2"
    )
    assert_rest_classified(exports, "half_plus_two_tf2")


def test_multi_inference_on_a_tf2_export(exports_grpc: dict[str, dict[str, Any]]) -> None:
    """testMultiInferenceTf2: a regress task and a classify task over one example."""
    assert_multi_inferred(exports_grpc["tf2_multi"], "half_plus_two_tf2")


def test_predict_on_a_tf2_export_takes_what_its_graph_takes(
    exports: Server, exports_grpc: dict[str, dict[str, Any]]
) -> None:
    """serving_default says x is [-1, 1]; TF Serving feeds x as sent (Session::Run),
    so [1] and a REST row of three scalars are answered, as for a TF1 export."""
    assert_predicted(exports_grpc["tf2_predict"], "half_plus_two_tf2", 3.0)
    rows = exports.post("/v1/models/half_plus_two_tf2:predict", {"instances": [2.0, 3.0, 4.0]})
    assert rows.status_code == 200, rows.text
    assert rows.json() == {"predictions": [3.0, 3.5, 4.0]}


def test_tf_saved_model_save_of_an_unknown_rank_function(
    exports_grpc: dict[str, dict[str, Any]],
) -> None:
    """test_tf_saved_model_save: y = v1 * v2 * x = 3 * 2 * 2 on TensorSpec(None)."""
    assert_predicted(exports_grpc["saved_model_save"], "tf_saved_model_save", 12.0)


def test_tf_saved_model_save_with_two_signatures(exports_grpc: dict[str, dict[str, Any]]) -> None:
    """test_tf_saved_model_save_multiple_signatures: each signature answers its
    own constant, a scalar."""
    assert_predicted(
        exports_grpc["custom_signature"],
        "multiple_signatures",
        2.0,
        signature="custom_signature_key",
        shape=(),
    )
    assert_predicted(exports_grpc["default_signature"], "multiple_signatures", 1.0, shape=())


def test_keras_sequential_exports(exports_grpc: dict[str, dict[str, Any]]) -> None:
    """test_sequential_keras_saved_model_save and its MirroredStrategy twin, on
    Keras 3: y = x for x = [[2.0]]."""
    for model, y in (
        ("keras_sequential", "output_0"),
        ("keras_export", "output_0"),
        ("keras_distributed", "output_0"),
    ):
        assert_predicted(exports_grpc[model], model, 2.0, shape=(1, 1), y=y)


# --- a model config file with two TF1 models, then reloads without polling


@pytest.fixture(scope="module")
def configured(servers: ServerPool) -> Iterator[tuple[Server, Path]]:
    """TF Serving's good_model_config: half_plus_two and half_plus_three, not polled;
    the folder of its config file. The module's own: its reloads change it."""
    config = {
        "half_plus_two": "/models/half_plus_two",
        "half_plus_three": "/models/half_plus_three",
    }
    with servers.private(model_server(models=serving(config), config=config)) as server:
        yield server, server.models


def test_good_model_config(configured: tuple[Server, Path]) -> None:
    """testGoodModelConfig: both models answer, with and without an output filter."""
    server, _ = configured
    results = server.grpc(
        verify_predict("half_plus_two"),
        verify_predict("half_plus_two", output_filter=False),
        verify_predict("half_plus_three"),
        verify_predict("half_plus_three", output_filter=False),
    )
    for result, (model, expected) in zip(
        results, [("half_plus_two", 3.0)] * 2 + [("half_plus_three", 4.0)] * 2, strict=True
    ):
        assert_predicted(result, model, expected)


def removed(server: Server, model: str) -> bool:
    response = server.post(f"/v1/models/{model}:predict", {"instances": [2.0]})
    return response.status_code == 404


def test_without_polling_reload_requests_add_and_remove_models(
    configured: tuple[Server, Path],
) -> None:
    """testModelConfigReloadWithZeroPollPeriod, then HandleReloadConfigRequest.

    The file is rewritten to name half_plus_three only; the server, which
    does not poll it, keeps serving half_plus_two after two reloads and the
    loads and unloads they caused. The first reload adds a model (another
    name for half_plus_three's export) and drops half_plus_three, the second
    drops the added one. Runs after test_good_model_config: it changes what
    the module's server serves.
    """
    server, config = configured
    write_config(config, {"half_plus_three": "/models/half_plus_three"})
    both = {"half_plus_two": "/models/half_plus_two", "added": "/models/half_plus_three"}
    add, added, kept, drop = server.grpc(
        {"op": "reload", "config": model_config(both, file=False)},
        verify_predict("added", output_filter=False),
        verify_predict("half_plus_two", output_filter=False),
        {
            "op": "reload",
            "config": model_config({"half_plus_two": "/models/half_plus_two"}, file=False),
        },
    )
    for reload in (add, drop):
        assert reload["code"] == "OK", reload
        # error_code OK: an empty (or absent) status, which proto3 reads the same.
        assert reload["response"].get("status", {}) == {}, reload
    assert_predicted(added, "added", 4.0)
    assert_predicted(kept, "half_plus_two", 3.0)
    # TF Serving unloads what a reload drops after answering it: wait for it.
    for gone in ("half_plus_three", "added"):
        assert poll(partial(removed, server, gone), 60, 0.2), server.logs()
        answer = server.post(f"/v1/models/{gone}:predict", {"instances": [2.0]})
        assert answer.json() == {"error": NOT_FOUND.format(gone)}
    still = server.post("/v1/models/half_plus_two:predict", {"instances": [2.0]})
    assert (still.status_code, still.json()) == (200, {"predictions": [3.0]}), still.text


# --- config reload with polling


def test_polling_the_config_file_swaps_models(servers: ServerPool) -> None:
    """testModelConfigReload: half_plus_two, then the file names half_plus_three
    and the server (polling every second) serves it instead."""
    spec = model_server(
        "--model_config_file_poll_wait_seconds=1",
        models=tfserving("half_plus_two", "half_plus_three"),
        config={"half_plus_two": "/models/half_plus_two"},
    )
    with servers.private(spec) as server:
        config = server.models
        before = server.post("/v1/models/half_plus_two:predict", {"instances": [2.0]})
        assert (before.status_code, before.json()) == (200, {"predictions": [3.0]}), before.text
        write_config(config, {"half_plus_three": "/models/half_plus_three"})

        def available() -> bool:
            answer = server.get("/v1/models/half_plus_three")
            states = [v["state"] for v in answer.json().get("model_version_status", [])]
            return answer.status_code == 200 and states == ["AVAILABLE"]

        assert poll(available, 120, 0.2), server.logs()
        (after,) = server.grpc(verify_predict("half_plus_three", output_filter=False))
        assert_predicted(after, "half_plus_three", 4.0)
        assert poll(partial(removed, server, "half_plus_two"), 60, 0.2), server.logs()


# --- gRPC channel arguments


def test_grpc_channel_arguments_as_tf_serving_passes_them(servers: ServerPool) -> None:
    """testGoodGrpcChannelArgs with the arguments TF Serving's harness adds to every
    server (grpc.so_reuseaddr=1). grpc.max_connection_age_ms takes effect: the
    server closes a connection after 2 s (GOAWAY), so the client's channel goes
    IDLE; a server without it keeps the channel READY (test_harness_flows)."""
    arguments = "grpc.max_connection_age_ms=2000,grpc.lb_policy_name=grpclb,grpc.so_reuseaddr=1"
    spec = model_server(
        "--model_name=default",
        "--model_base_path=/models/half_plus_two",
        f"--grpc_channel_arguments={arguments}",
        models=tfserving("half_plus_two"),
    )
    with servers.private(spec) as server:
        predicted, channel = server.grpc(
            verify_predict(output_filter=False), {"op": "channel_idle", "seconds": 60}
        )
    assert_predicted(predicted, "default", 3.0)
    assert channel["code"] == "OK", channel
    assert [state for state, _ in channel["seen"]][-1] == "IDLE", channel


@pytest.mark.parametrize(
    ("argument", "named"),
    [
        ("grpc.no_such_argument=1", "grpc.no_such_argument"),
        ("grpc.max_connection_age_ms", "key=value"),
    ],
)
def test_a_bad_grpc_channel_argument_is_refused(
    containers: Containers, argument: str, named: str
) -> None:
    """A key grpc does not know, an item without "=": exit 64 before serving,
    naming the flag and what is wrong."""
    ran = containers.run(
        [
            *HARNESS,
            "--model_name=default",
            "--model_base_path=/models/half_plus_two",
            f"--grpc_channel_arguments={argument}",
        ],
        entrypoint=[MODEL_SERVER],
        nano_cpus=1_000_000_000,
        timeout=60,
    )
    assert ran.exit_code == 64, ran.stderr
    assert "--grpc_channel_arguments" in ran.stderr
    assert named in ran.stderr
    assert "Traceback" not in ran.stderr


# --- bad config file, TF Lite


def test_a_bad_model_config_file_says_what_tf_serving_says(
    containers: Containers, tmp_path: Path
) -> None:
    """testBadModelConfig: TF Serving's words, then where in the file."""
    (tmp_path / "bad_model_config.txt").write_text("improperly formatted file")
    tmp_path.chmod(0o755)
    ran = containers.run(
        [*HARNESS, "--model_config_file=/config/bad_model_config.txt"],
        entrypoint=[MODEL_SERVER],
        volumes={str(tmp_path): {"bind": "/config", "mode": "ro"}},
        nano_cpus=1_000_000_000,
        timeout=60,
    )
    assert ran.exit_code == 78, ran.stderr
    assert "Error parsing text-format tensorflow.serving.ModelServerConfig" in ran.stderr
    assert "/config/bad_model_config.txt:1:1" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_prefer_tflite_model_is_refused_with_the_reason(containers: Containers) -> None:
    """testPredictOnTfLite's --prefer_tflite_model=true: TensorFlow Lite models are
    not served (the issue lets them stay refused), and the refusal says why."""
    ran = containers.run(
        [
            *HARNESS,
            "--model_name=default",
            "--model_base_path=/models/half_plus_two",
            "--prefer_tflite_model=true",
        ],
        entrypoint=[MODEL_SERVER],
        nano_cpus=1_000_000_000,
        timeout=60,
    )
    assert ran.exit_code == 64, ran.stderr
    assert "--prefer_tflite_model is not supported: TensorFlow Lite models are not served" in (
        ran.stderr
    )
    assert "Traceback" not in ran.stderr


# --- TF Serving's harness on the TF1 half_plus_two: --model_name default


def tensor_info(name: str, dtype: str, *sizes: int) -> dict[str, Any]:
    """A TensorInfo as TF Serving's REST metadata writes it."""
    return {
        "dtype": dtype,
        "tensor_shape": {
            "dim": [{"size": str(size), "name": ""} for size in sizes],
            "unknown_rank": False,
        },
        "name": name,
    }


def signature_def(method: str, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Any]:
    return {"inputs": inputs, "outputs": outputs, "method_name": method, "defaults": {}}


EXAMPLES = tensor_info("tf_example:0", "DT_STRING", -1)
#: GET /v1/models/default/metadata for half_plus_two, field by field as TF Serving
#: writes it (its testdata's half_plus_two_model_metadata.json has the same form).
METADATA = {
    "model_spec": {"name": "default", "signature_name": "", "version": VERSION},
    "metadata": {
        "signature_def": {
            "signature_def": {
                "serving_default": signature_def(
                    PREDICT,
                    {"x": tensor_info("x:0", "DT_FLOAT", -1, 1)},
                    {"y": tensor_info("y:0", "DT_FLOAT", -1, 1)},
                ),
                "classify_x_to_y": signature_def(
                    CLASSIFY,
                    {"inputs": EXAMPLES},
                    {"scores": tensor_info("y:0", "DT_FLOAT", -1, 1)},
                ),
                "regress_x_to_y": signature_def(
                    REGRESS,
                    {"inputs": EXAMPLES},
                    {"outputs": tensor_info("y:0", "DT_FLOAT", -1, 1)},
                ),
                "regress_x_to_y2": signature_def(
                    REGRESS,
                    {"inputs": EXAMPLES},
                    {"outputs": tensor_info("y2:0", "DT_FLOAT", -1, 1)},
                ),
                "regress_x2_to_y3": signature_def(
                    REGRESS,
                    {"inputs": tensor_info("x2:0", "DT_FLOAT", -1, 1)},
                    {"outputs": tensor_info("y3:0", "DT_FLOAT", -1, 1)},
                ),
            }
        }
    },
}


@pytest.fixture(scope="module")
def harness(servers: ServerPool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """TF Serving's RunServer('default', half_plus_two): gRPC on 8500 and on a UNIX
    socket (--grpc_socket_path), REST on 8501, Prometheus on (testPrometheusEndpoint's
    monitoring config); a folder for the profiler's traces at the same path in the
    server and the sidecars. --profile-dir=/profile is this server's own flag, not
    TF Serving's harness's: TF Serving writes a trace wherever the client's logdir
    says, this server only under --profile-dir (none without it), so the profiler's
    test names the folder the traces go to."""
    tmp = tmp_path_factory.mktemp("harness")
    monitoring = (
        'prometheus_config: {\n  enable: true,\n  path: "/monitoring/prometheus/metrics"\n}\n'
    )
    spec = model_server(
        "--model_name=default",
        "--model_base_path=/models/half_plus_two",
        f"--grpc_socket_path={SOCKET}",
        "--monitoring_config_file=/models/monitoring_config.txt",
        "--profile-dir=/profile",
        models=tfserving("half_plus_two"),
        files={"monitoring_config.txt": monitoring},
        volumes=(shared_folder(tmp, "sock", "/sock"), shared_folder(tmp, "profile", "/profile")),
    )
    # The module's own: the profiler's test writes traces in it.
    with servers.private(spec) as server:
        yield server


@pytest.fixture(scope="module")
def harness_grpc(harness: Server) -> dict[str, dict[str, Any]]:
    """Every gRPC call of the harness's flows, in one sidecar run."""
    classify, regress, multi = classify_ops("default")
    calls: dict[str, dict[str, Any]] = {
        "status": {"op": "status", "model": "default"},
        "metadata": {"op": "metadata", "model": "default"},
        "predict": verify_predict(),
        "predict_unfiltered": verify_predict(output_filter=False),
        "predict_batch": verify_predict(batch=True),
        "classify": classify,
        "regress": regress,
        "multi": multi,
        "socket": {"op": "via", "address": f"unix:{SOCKET}", "ops": [verify_predict()]},
        # Three times grpc.max_connection_age_ms of the channel arguments' test.
        "channel": {"op": "channel_idle", "seconds": 6},
    }
    return dict(zip(calls, harness.grpc(*calls.values()), strict=True))


def test_get_model_status(harness: Server, harness_grpc: dict[str, dict[str, Any]]) -> None:
    """testGetModelStatus and testGetStatusREST."""
    status = harness_grpc["status"]
    assert status["code"] == "OK", status
    assert status["response"] == {
        "model_version_status": [{"version": VERSION, "state": "AVAILABLE", "status": {}}]
    }
    rest = harness.get("/v1/models/default")
    assert rest.status_code == 200, rest.text
    assert rest.json() == {
        "model_version_status": [
            {
                "version": VERSION,
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }


def test_get_model_metadata(harness: Server, harness_grpc: dict[str, dict[str, Any]]) -> None:
    """testGetModelMetadata and testGetModelMetadataREST (field by field)."""
    metadata = harness_grpc["metadata"]
    assert metadata["code"] == "OK", metadata
    assert metadata["response"]["model_spec"] == {"name": "default", "version": VERSION}
    assert list(metadata["response"]["metadata"]) == ["signature_def"]
    defs = metadata["signature_def"]["signature_def"]
    expected = METADATA["metadata"]["signature_def"]["signature_def"]  # type: ignore[index]
    assert {name: d["method_name"] for name, d in defs.items()} == {
        name: d["method_name"] for name, d in expected.items()
    }
    rest = harness.get("/v1/models/default/metadata")
    assert rest.status_code == 200, rest.text
    assert rest.json() == METADATA


def test_predict_over_grpc(harness_grpc: dict[str, dict[str, Any]]) -> None:
    """testPredictSavedModel: x of shape [1] (the signature says [-1, 1]), with and
    without an output filter; and a batch of one, [1, 1]."""
    assert_predicted(harness_grpc["predict"], "default", 3.0)
    assert_predicted(harness_grpc["predict_unfiltered"], "default", 3.0)
    assert_predicted(harness_grpc["predict_batch"], "default", 3.0, shape=(1, 1))


def test_predict_over_rest_rows_and_columns(harness: Server) -> None:
    """testPredictREST and testPredictColumnarREST: three scalars, a batch of three."""
    rows = harness.post("/v1/models/default:predict", {"instances": [2.0, 3.0, 4.0]})
    assert rows.status_code == 200, rows.text
    assert rows.json() == {"predictions": [3.0, 3.5, 4.0]}
    columns = harness.post("/v1/models/default:predict", {"inputs": [2.0, 3.0, 4.0]})
    assert columns.status_code == 200, columns.text
    assert columns.json() == {"outputs": [3.0, 3.5, 4.0]}


def test_predict_over_the_unix_socket(harness_grpc: dict[str, dict[str, Any]]) -> None:
    """testPredictUDS: the same Predict on unix:--grpc_socket_path."""
    socket = harness_grpc["socket"]
    assert socket["code"] == "OK", socket
    (predicted,) = socket["results"]
    assert_predicted(predicted, "default", 3.0)


def test_classify_and_regress_on_a_tf1_export(
    harness: Server, harness_grpc: dict[str, dict[str, Any]]
) -> None:
    """testClassify, testRegress, testClassifyREST, testRegressREST."""
    assert_classified(harness_grpc["classify"], harness_grpc["regress"], "default")
    assert_rest_classified(harness, "default")


def test_multi_inference_on_a_tf1_export(harness_grpc: dict[str, dict[str, Any]]) -> None:
    """testMultiInference."""
    assert_multi_inferred(harness_grpc["multi"], "default")


def test_a_connection_without_channel_arguments_stays_open(
    harness_grpc: dict[str, dict[str, Any]],
) -> None:
    """The control of the channel arguments' test: no GOAWAY within three times
    the age that test sets, so the IDLE seen there is the argument's doing."""
    channel = harness_grpc["channel"]
    assert channel["code"] == "OK", channel
    assert [state for state, _ in channel["seen"]] == ["READY"], channel


def test_prometheus_endpoint(harness: Server) -> None:
    """testPrometheusEndpoint: the page at the monitoring config's path has types."""
    page = harness.get("/monitoring/prometheus/metrics")
    assert page.status_code == 200, page.text
    assert "# TYPE" in page.text


def test_without_the_profiler_its_calls_say_so(servers: ServerPool) -> None:
    """--enable_profiler=false (TF Serving's flag): the service's methods answer
    UNIMPLEMENTED naming the flag, not grpc's bare "Method not found"."""
    spec = model_server(
        "--model_name=default",
        "--model_base_path=/models/half_plus_two",
        "--enable_profiler=false",
        models=tfserving("half_plus_two"),
    )
    with servers.private(spec) as server:
        (profile,) = server.grpc({"op": "raw", "method": "/tensorflow.ProfilerService/Profile"})
    assert profile["code"] == "UNIMPLEMENTED", profile
    assert "--enable_profiler=false" in profile["message"], profile


def test_without_a_profile_dir_the_profiler_writes_nothing(
    exports: Server, exports_grpc: dict[str, dict[str, Any]]
) -> None:
    """Without --profile-dir (the default), a Profile asking the server to write its
    trace under /tmp/logs (a folder the server's user can write; TF Serving would) is
    PERMISSION_DENIED saying how to allow it, and nothing is written."""
    profile = exports_grpc["profile"]
    assert profile["code"] == "PERMISSION_DENIED", profile
    assert "'/tmp/logs/plugins/profile'" in profile["message"], profile
    assert "--profile-dir=DIR" in profile["message"], profile
    assert absent(exports.container, "/tmp/logs")


def test_a_logdir_outside_the_profile_dir_is_refused(harness: Server) -> None:
    """--profile-dir=/profile: a repository_root elsewhere, one climbing out of it with
    `..`, or a session id climbing out, is refused before any capture (PERMISSION_DENIED
    naming the path and the flag; INVALID_ARGUMENT naming the field), and nothing is
    written (the server's user could write there)."""
    results = harness.grpc(
        profile_call("/tmp/outside"),
        profile_call("/profile/../tmp/climb"),
        profile_call("/profile/logs", session_id="../../tmp/run"),
    )
    codes = [(result["code"], result["message"]) for result in results]
    assert codes[0][0] == codes[1][0] == "PERMISSION_DENIED", codes
    assert "'/tmp/outside' is not inside --profile-dir '/profile'" in codes[0][1], codes
    assert "'/profile/../tmp/climb' is not inside --profile-dir" in codes[1][1], codes
    assert codes[2][0] == "INVALID_ARGUMENT", codes
    assert "ProfileRequest.session_id '../../tmp/run' is not a plain name" in codes[2][1]
    for path in ("/tmp/outside", "/tmp/climb", "/tmp/run"):
        assert absent(harness.container, path), path


def profile_call(root: str, session_id: str = "run") -> dict[str, Any]:
    """A raw ProfileRequest (100 ms, host "server") writing under `root`: TensorFlow's
    profiler client does not pass the server's refusal on (it says no trace was
    collected), so the call is made as it makes it, with the answer's code and message."""
    request = profiler_proto.ProfileRequest(
        duration_ms=100, repository_root=root, session_id=session_id, host_name="server"
    )
    request.opts.duration_ms = 100
    body = request.SerializeToString()
    assert body.isascii()  # the raw op sends its body as text
    return {"op": "raw", "method": "/tensorflow.ProfilerService/Profile", "body": body.decode()}


def absent(container: Container, path: str) -> bool:
    """Whether `path` does not exist in the container (its file system, not a volume's)."""
    ran = container.exec_run(["ls", "-d", path])
    return bool(ran.exit_code != 0 and b"No such file" in ran.output)


def test_the_profiler_traces_the_server_while_it_predicts(harness: Server) -> None:
    """test_profiler_service_with_valid_trace_request, and what it is for: TensorFlow's
    own profiler client (profiler_client.trace, which TensorBoard's profile plugin
    calls) against the gRPC port takes a 1 s trace while predicts run, and the
    server writes it under the logdir the client names (TF Serving's
    ProfilerService does; here the logdir is inside --profile-dir, the harness's
    /profile; the folder is at the same path in both containers). No TCP
    port but gRPC's and REST's listens in the server, before or after.

    Last in this file: if the server refuses the profiler instead, with a clear
    message at start-up naming how to profile, this test becomes that refusal's.
    """
    assert listening_ports(harness.container) == {8500, 8501}
    host = Path(next(host for host, bind, _ in harness.spec.volumes if bind == "/profile"))
    logs = host / "logs"
    logs.mkdir(mode=0o777)  # as TF Serving's test makes it before tracing
    logs.chmod(0o777)
    (profile,) = harness.grpc(
        {
            "op": "profile",
            "logdir": "/profile/logs",
            "duration_ms": 1000,
            "attempts": 10,
            "predict": verify_predict(batch=True),
        }
    )
    assert (profile["code"], profile["message"]) == ("OK", ""), profile
    assert set(profile["predicts"]) == {"OK"}, profile
    traces = profile["traces"]
    assert traces, profile
    assert any(planes.get("/host:CPU", 0) > 0 for planes in traces.values()), traces
    written = sorted(str(p.relative_to(logs)) for p in logs.glob("plugins/profile/*/*.xplane.pb"))
    assert written == sorted(traces)
    assert "tensorflow.ProfilerService calls on the gRPC port are captured in this process" in (
        harness.logs()
    )
    # TensorFlow's profiler server, which listened on every interface on a port of its
    # own, is never started: not at start-up (above), not by a profile.
    assert listening_ports(harness.container) == {8500, 8501}


def listening_ports(container: Container) -> set[int]:
    """The TCP ports listening in the container's network namespace (/proc/net/tcp, tcp6:
    state 0A is LISTEN; the local address is HEX_IP:HEX_PORT)."""
    ran = container.exec_run(["cat", "/proc/net/tcp", "/proc/net/tcp6"])
    output = ran.output
    assert ran.exit_code == 0, output
    assert isinstance(output, bytes)
    ports = set()
    for line in output.decode().splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A" and ":" in fields[1]:
            ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports
