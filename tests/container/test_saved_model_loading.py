"""SavedModels loaded as TF Serving loads them: Session bundles, in the real image.

TF Serving's end-to-end flows on TF1 and TF2 exports are test_tfserving_flows.py's;
these tests look at what those flows cannot see: the Sessions' threads (the
plan's counts, TensorFlow's pools shared by every version), a closed version's
Session and graph freed, the callables a version keeps, Keras 3 exports whose
variables are set from their restored copies, the one loaded with
tf.saved_model.load instead, TF1 exports through the batch queue, and
SERVE_SAVED_MODEL_LOADER.

The in-process checks run check_loading.py in the image (through the
entrypoint, so the plan and the hook apply as in the server); the exports are
make_tfserving_models.py's and make_loading_models.py's.
"""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path
from typing import Any

import pytest

from harness import web
from harness.docker import Containers, metric_value
from harness.models import ModelLibrary
from harness.servers import Server, ServerPool, cpus_of
from tests.container.keras_ways import assert_keras_ways
from tests.container.model_servers import model_server

HERE = Path(__file__).resolve().parent
#: Thread counts the tests plan (TensorFlow's own defaults on this machine would
#: be its cores; --cpus 1 plans 1 and 1): distinct, so each is recognisable.
INTRA, INTER = 3, 2


#: The model library's folders of these exports (make_tfserving_models.py, make_loading_models.py).
SOURCES = ("tfserving", "loading")
#: The CPU image; the CUDA image for how its TensorFlow build sizes a Session's pools
#: (tests/container/conftest.py).
IMAGE_FLAVORS = ("cpu",)


def exports(library: ModelLibrary, *names: str) -> dict[str, str]:
    """/models/NAME -> its library source, for each NAME (every export without names)."""
    found = {
        export.name: f"{source}/{export.name}"
        for source in SOURCES
        for export in library.path(source).iterdir()
    }
    return {name: found[name] for name in names} if names else found


@pytest.fixture(scope="module")
def models(model_library: ModelLibrary, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """make_tfserving_models.py's exports and make_loading_models.py's, in one folder."""
    return model_library.tree(tmp_path_factory.mktemp("loading-models"), exports(model_library))


def check(
    containers: Containers, models: Path, name: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    ran = containers.run(
        ["python", "/t/check_loading.py", name, "/models"],
        volumes={
            str(models): {"bind": "/models", "mode": "ro"},
            str(HERE): {"bind": "/t", "mode": "ro"},
        },
        environment=env or {},
        nano_cpus=1_000_000_000,
        timeout=300,
    )
    assert ran.exit_code == 0, ran.stderr
    result: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.flavors("cpu", "gpu")
def test_sessions_take_the_planned_threads_and_share_the_pools(
    containers: Containers, models: Path
) -> None:
    """Four versions (TF1 and TF2 exports), each a Session: each Session's config
    has the threads the entrypoint planned (here the user's
    TF_INTRA/INTER_OP_PARALLELISM_THREADS, applied by the hook to the eager
    context, which a Session made without a config takes), and loading the
    second, third and fourth adds no thread: TensorFlow's inter-op pool
    (INTER threads named tf_Compute) and the CPU device's intra-op pool are
    the process's, shared. No eager op runs, so the eager context's own
    inter-op pool never starts."""
    result = check(
        containers,
        models,
        "threads",
        {
            "TF_INTRA_OP_PARALLELISM_THREADS": str(INTRA),
            "TF_INTER_OP_PARALLELISM_THREADS": str(INTER),
        },
    )
    assert result["bundles"] == ["SessionBundle"] * 4, result
    assert result["answers"] == [[3.0], [4.0], [3.0], [12.0]], result
    assert result["configs"] == [[INTRA, INTER]] * 4, result
    first = result["threads"][0]
    assert result["threads"] == [first] * 4, result
    assert result["tf_compute"] == INTER, result
    assert result["eager_started"] is False, result


def test_a_closed_version_frees_its_session_and_graph(containers: Containers, models: Path) -> None:
    """What an unload does (close, then the last reference dropped): the
    Session is closed, and the graph and the Session are freed."""
    result = check(containers, models, "close")
    assert result == {
        "answer": [3.0],
        "closed": True,
        "graph_freed": True,
        "session_freed": True,
    }


def test_callables_per_output_set_are_bounded(containers: Containers, models: Path) -> None:
    """gRPC's output_filter picks any of 255 sets of outputs here; each gets its
    own Session callable (only the outputs asked for are computed, as TF
    Serving's Session::Run fetches only those), and a version keeps at most
    MAX_CALLABLES of them."""
    result = check(containers, models, "callables")
    assert result["wrong"] == [], result
    assert result["filters"] == 100
    assert result["kept"] == result["limit"] == 64, result


def test_a_callable_runs_where_its_trial_says(containers: Containers, models: Path) -> None:
    """A Session callable's first runs alternate between TensorFlow's inter-op
    pool and the calling thread, TRIAL_RUNS each, timed; then it keeps one way
    (which one depends on this host's timings, so it is not asserted), with
    the same answers throughout. Run in the calling thread, 2,000 runs give
    TensorFlow's tf_Compute threads (the pool) no work; through the pool they
    do: the hand-off the calling thread saves. The rule: the calling thread
    when its median wall time is no longer than the pool's."""
    result = check(containers, models, "where")
    trial = result["trial_runs"]
    timed = result["timed"]
    assert timed[: 2 * trial] == [[(n + 2) // 2, (n + 1) // 2] for n in range(2 * trial)], result
    assert timed[-1] == [trial, trial], result
    assert result["chosen"] is True, result
    assert isinstance(result["in_calling_thread"], bool), result
    assert result["answers"] == [x / 2 + 2 for x in range(2 * trial + 2)], result
    assert result["compute_ns"]["pooled"] > 0, result
    assert result["compute_ns"]["inline"] < result["compute_ns"]["pooled"] / 20, result
    assert result["rule"] == [True, False, True], result


def test_the_loader_variable(containers: Containers, models: Path) -> None:
    """SERVE_SAVED_MODEL_LOADER=tf2 loads with tf.saved_model.load (the previous
    path, for benchmarks and diagnosis); another value fails the load, naming it
    (the server refuses it at start already: test_serving_flags.py)."""
    result = check(containers, models, "loader")
    assert result["bundle"] == "FunctionBundle", result
    assert result["answer"] == [2.0], result
    assert result["refused"] == (
        "SERVE_SAVED_MODEL_LOADER='bogus': expected one of session, tf2"
    ), result


def test_keras_3_variables_are_set_from_their_restored_copies(
    containers: Containers, models: Path
) -> None:
    """In the Session of a Keras 3 export, the model's variables (which the
    signatures read) hold the restored values, and the copies the checkpoint
    restored into are destroyed (the weights are not kept twice); the answers
    are tf.saved_model.load's."""
    result = check(containers, models, "repair")
    distributed = result["keras_distributed/123"]
    assert distributed["answers"] == {
        "session": ["SessionBundle", [2.0, 3.0]],
        "tf2": ["FunctionBundle", [2.0, 3.0]],
    }
    module = result["keras_in_module/1"]
    assert module["answers"] == {
        "session": ["SessionBundle", [2.0, 3.0]],
        "tf2": ["FunctionBundle", [2.0, 3.0]],
    }
    for found in (distributed, module):
        model_variables = {k: v for k, v in found["set"].items() if not k.startswith("Variable")}
        copies = {k: v for k, v in found["set"].items() if k.startswith("Variable")}
        assert sorted(name.rsplit("/", 1)[1] for name in model_variables) == ["bias", "kernel"]
        assert set(model_variables.values()) == {True}, found
        assert len(copies) == 2, found
        assert set(copies.values()) == {False}, found


def test_keras_3_models_saved_four_ways_answer_as_tf_saved_model_load_answers(
    containers: Containers, models: Path
) -> None:
    """A Sequential with Dense and BatchNormalization layers saved with
    tf.saved_model.save, with model.export(), inside a tf.Module and under a
    MirroredStrategy: each is a Session bundle and answers what
    tf.saved_model.load's signature answers (to float32 rounding: the two
    run differently optimised graphs). All but model.export() need their
    variables set from their restored copies."""
    result = check(containers, models, "keras")
    assert result["keras"] == 3, result
    assert_keras_ways(
        result["ways"],
        {
            "tf.saved_model.save(model)": True,
            "model.export()": False,
            "tf.Module holding the model": True,
            "under MirroredStrategy": True,
        },
    )


def test_multi_inference_is_one_session_run(containers: Containers, models: Path) -> None:
    """TF Serving runs a MultiInference's tasks in one Session::Run, so a node
    its signatures share runs once: counted/1's shared node adds 1 to `runs`
    per Session run that computes it. Classify then Regress make two runs."""
    result = check(containers, models, "multi")
    assert result["bundle"] == "SessionBundle", result
    assert result["results"] == [
        [[["pos", 1.5], ["neg", -1.5]], [["pos", -2.0], ["neg", 2.0]]],
        [1.5, -2.0],
    ], result
    assert result["multi_inference_runs"] == 1, result
    assert result["classify_then_regress_runs"] == 2, result


# --- servers


@pytest.fixture(scope="module")
def keras_server(servers: ServerPool, model_library: ModelLibrary) -> Server:
    """The Keras 3 exports, from a model config file; read only: the pool's."""
    names = ("keras", "keras_export", "keras_distributed", "keras_in_module", "keras_unrepairable")
    return servers.shared(
        model_server(
            models=exports(model_library, *names),
            config={name: f"/models/{name}" for name in names},
        )
    )


def test_keras_3_exports_are_served_as_session_bundles(keras_server: Server) -> None:
    """Keras 3 under a MirroredStrategy, and a Keras 3 model held by a tf.Module:
    once restored in a Session their graphs leave the model's variables unset
    (TF Serving answers FAILED_PRECONDITION "Could not find variable"); each is
    set from the restored copy the graph made of it, and the version served as
    a Session bundle, with one line in the log. An export whose graph does not
    say which copy (keras_unrepairable) is loaded with tf.saved_model.load, with
    a warning. All answer y = x."""
    for model in ("keras", "keras_export", "keras_distributed"):
        answer = keras_server.post(f"/v1/models/{model}:predict", {"instances": [[2.0]]})
        assert (answer.status_code, answer.json()) == (200, {"predictions": [[2.0]]}), model
    for model in ("keras_in_module", "keras_unrepairable"):
        answer = keras_server.post(f"/v1/models/{model}:predict", {"instances": [2.0, 3.0]})
        assert (answer.status_code, answer.json()) == (200, {"predictions": [2.0, 3.0]}), model
    logs = keras_server.logs()
    repaired = [line for line in logs.splitlines() if "were set from the copies" in line]
    assert len(repaired) == 2, repaired
    assert any("/models/keras_distributed/123:" in line for line in repaired), repaired
    assert any("/models/keras_in_module/1:" in line for line in repaired), repaired
    warned = [line for line in logs.splitlines() if "loaded with tf.saved_model.load" in line]
    assert len(warned) == 1, warned
    assert "/models/keras_unrepairable/1:" in warned[0], warned
    assert "Traceback" not in logs


@pytest.fixture(scope="module")
def sessions_server(servers: ServerPool, model_library: ModelLibrary) -> Server:
    """Six Session bundles (two TF1 exports, four TF2), --enable_batching; read only
    (the batch count is read as more than none): the pool's."""
    names = (
        "half_plus_two",
        "half_plus_three",
        "half_plus_two_tf2",
        "saved_model_save",
        "keras",
        "keras_export",
    )
    return servers.shared(
        model_server(
            "--enable_batching",
            models=exports(model_library, *names),
            config={name: f"/models/{name}" for name in names},
        )
    )


def test_the_servers_versions_share_one_inter_op_pool(sessions_server: Server) -> None:
    """The server itself, six versions loaded and each answering: one inter-op
    pool of the planned size (--cpus 1: one thread named tf_Compute) in the
    server's process (the engine, where the server runs several). (An export
    loaded with tf.saved_model.load starts the eager context, which adds a pool
    of its own of the same size.)"""
    for name, body in (
        ("half_plus_two", {"instances": [1.0]}),
        ("half_plus_three", {"instances": [[1.0]]}),
        ("half_plus_two_tf2", {"instances": [[1.0]]}),
        ("saved_model_save", {"instances": [1.0]}),
        ("keras", {"instances": [[1.0]]}),
        ("keras_export", {"instances": [[1.0]]}),
    ):
        answer = sessions_server.post(f"/v1/models/{name}:predict", body)
        assert answer.status_code == 200, (name, answer.text)
    find = 'for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = python3 ] && echo ${p#/proc/}; done'
    found = sessions_server.container.exec_run(["sh", "-c", find]).output
    assert isinstance(found, bytes)
    pools = {}
    for pid in found.decode().split():  # one server process, or a supervisor, engine, front-ends
        names = sessions_server.container.exec_run(["sh", "-c", f"cat /proc/{pid}/task/*/comm"])
        assert isinstance(names.output, bytes)
        pools[pid] = names.output.decode().split("\n").count("tf_Compute")
    # Only the process that runs the models has TensorFlow's pool (a supervisor and
    # front-ends import TensorFlow but never make a Session); its size is the plan's.
    planned = int(cpus_of(sessions_server.spec))
    assert sorted(pools.values())[-1] == sum(pools.values()) == planned, pools
    assert "loaded with tf.saved_model.load" not in sessions_server.logs()


def test_a_tf1_export_through_the_batch_queue(sessions_server: Server) -> None:
    """The TF1 half_plus_two ([-1, 1]) with --enable_batching: requests of rows
    [n] and [n, 1] at once go through the batch queue (a batch holds requests
    whose dimensions agree but the first) and each is answered as it would be
    alone."""
    bodies = [
        {"instances": [float(i), float(i + 1)]} if i % 2 else {"instances": [[float(i)], [i + 1.0]]}
        for i in range(40)
    ]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(
                lambda body: sessions_server.post("/v1/models/half_plus_two:predict", body), bodies
            )
        )
    for i, answer in enumerate(answers):
        rows = [0.5 * i + 2.0, 0.5 * (i + 1) + 2.0]
        expected = rows if i % 2 else [[row] for row in rows]
        assert (answer.status_code, answer.json()) == (200, {"predictions": expected}), i
    page = web.get(sessions_server.rest + "/metrics", timeout=30).text
    assert metric_value(page, "serving_batches_total") > 0
