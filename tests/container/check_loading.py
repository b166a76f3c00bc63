"""What the loading tests look at inside the server's process (runs in the image).

    python check_loading.py CHECK MODELS

Loads versions with tf_entrypoint.serving.model, as the server does, and
prints one JSON object on its last line:

- threads: four versions (two TF1 exports, two TF2) loaded one after the
  other, each answering a predict; each Session's config (intra, inter),
  the threads of the process after the first and after all four, the
  threads named tf_Compute (TensorFlow's inter-op pools), and whether the
  eager context was ever started (it would start a pool of its own).
- close: a version loaded, answering, then closed as an unload does: is its
  Session closed, and are its graph and Session gone once nothing refers to
  the version.
- callables: 100 gRPC predicts with 100 different output filters on
  outputs/1 (eight outputs): every answer right, and the callables kept.
- loader: the loader option (SERVE_SAVED_MODEL_LOADER's) tf2 and bogus.
- repair: the Keras 3 exports whose variables are set from their restored
  copies: which variables are set once loaded, and the answers of both loaders.
- multi: MultiInference of classify and regress on counted/1: how many
  Session runs it makes, and its results.
- keras: a Keras model with variables saved the four ways of its Keras
  version (3 in the image, 2 in TensorFlow 2.12's matrix cell), loaded both
  ways.
- where: the trial of where a Session callable runs (model/bundle.py's
  SessionCallable) on half_plus_two: the timed runs of each way after each
  run, the way chosen, the answers, and the CPU time TensorFlow's tf_Compute
  threads spent over 2,000 runs of each way.
"""

from __future__ import annotations

import collections
import gc
import itertools
import json
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def thread_names() -> collections.Counter[str]:
    tasks = Path("/proc/self/task")
    return collections.Counter((task / "comm").read_text().strip() for task in tasks.iterdir())


def bundle(servable: Any) -> Any:
    """The servable's loaded SavedModel (its Session bundle, or the tf.saved_model.load one)."""
    return servable._bundle


def predict(servable: Any, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """A REST predict's run: decoded tensors in, every output out (core/inference.py)."""
    from tf_entrypoint.serving.core import inference  # noqa: PLC0415

    return inference.predict(servable, name, inference.Decoded(inputs), rest=True)[1]


def values_list(values: Any) -> list[Any]:
    from tf_entrypoint.serving.core import types as p  # noqa: PLC0415

    return p.values_list(values)


def rest_x(*values: float) -> Any:
    from tf_entrypoint.serving.core import types as p  # noqa: PLC0415

    return p.Tensor("DT_FLOAT", (len(values), 1), list(values))


def threads(models: Path) -> dict[str, Any]:
    from tensorflow.python.eager import context  # noqa: PLC0415

    from tf_entrypoint.serving import model  # noqa: PLC0415

    loaded, answers = [], []
    census: list[int] = []
    for name in ("half_plus_two", "half_plus_three", "half_plus_two_tf2", "saved_model_save"):
        servable = model.load(models / name / "123", 123)
        signature = servable.signatures["serving_default"]
        (alias,) = signature.inputs
        (output,) = predict(servable, "serving_default", {alias: rest_x(2.0)}).values()
        answers.append(values_list(output.values))
        loaded.append(servable)
        census.append(sum(thread_names().values()))
    configs = [
        [bundle(s)._session._config.intra_op_parallelism_threads,
         bundle(s)._session._config.inter_op_parallelism_threads]
        for s in loaded
    ]  # fmt: skip
    return {
        "bundles": [type(bundle(s)).__name__ for s in loaded],
        "answers": answers,
        "configs": configs,
        "threads": census,
        "tf_compute": thread_names()["tf_Compute"],
        "eager_started": context.context()._context_handle is not None,
    }


def close(models: Path) -> dict[str, Any]:
    from tf_entrypoint.serving import model  # noqa: PLC0415

    servable = model.load(models / "half_plus_two_tf2" / "123", 123)
    (output,) = predict(servable, "serving_default", {"x": rest_x(2.0)}).values()
    session = bundle(servable)._session
    graph, session_ref = weakref.ref(bundle(servable)._graph), weakref.ref(session)
    servable.close()
    closed = bool(session._closed)
    del servable, session
    gc.collect()
    return {
        "answer": values_list(output.values),
        "closed": closed,
        "graph_freed": graph() is None,
        "session_freed": session_ref() is None,
    }


def callables(models: Path) -> dict[str, Any]:
    import tensorflow as tf  # noqa: PLC0415

    from tf_entrypoint.serving import model  # noqa: PLC0415
    from tf_entrypoint.serving.codec import tensor_proto  # noqa: PLC0415
    from tf_entrypoint.serving.core import inference  # noqa: PLC0415

    servable = model.load(models / "outputs" / "1", 1, warmup=False)
    aliases = sorted(servable.signatures["serving_default"].outputs)
    filters = [
        list(subset)
        for size in range(1, len(aliases) + 1)
        for subset in itertools.combinations(aliases, size)
    ][:100]
    x = {"x": tf.make_tensor_proto(np.array([1.0, 2.0], np.float32))}
    wrong = []
    for wanted in filters:
        inputs = tensor_proto.ProtoInputs(x, 1 << 30)
        _, tensors = inference.predict(servable, "serving_default", inputs, wanted)
        outputs = {alias: tensor_proto.as_proto_field(alias, t) for alias, t in tensors.items()}
        got = {alias: list(proto.float_val) for alias, proto in outputs.items()}
        expected = {alias: [1.0 + int(alias[1:]), 2.0 + int(alias[1:])] for alias in wanted}
        if got != expected:
            wrong.append([wanted, got])
    return {
        "filters": len({tuple(f) for f in filters}),
        "wrong": wrong,
        "kept": len(bundle(servable)._callables),
        "limit": model.MAX_CALLABLES,
    }


def loader(models: Path) -> dict[str, Any]:
    from tf_entrypoint.serving import model  # noqa: PLC0415

    servable = model.load(models / "keras" / "123", 123, loader="tf2")
    (output,) = predict(servable, "serving_default", {"inputs": rest_x(2.0)}).values()
    try:
        model.load(models / "keras" / "123", 123, loader="bogus")
        refused = ""
    except ValueError as err:
        refused = str(err)
    return {
        "bundle": type(bundle(servable)).__name__,
        "answer": values_list(output.values),
        "refused": refused,
    }


def repair(models: Path) -> dict[str, Any]:
    """Keras 3 exports a Session cannot restore as they stand: loaded, their
    variables' state in the Session (the model's own set, the restored copies
    destroyed), and their answers next to tf.saved_model.load's."""
    import tensorflow as tf  # noqa: PLC0415

    from tf_entrypoint.serving import model  # noqa: PLC0415
    from tf_entrypoint.serving.core import types as p  # noqa: PLC0415

    found: dict[str, Any] = {}
    for name, alias, shape in (
        ("keras_distributed/123", "inputs", (2, 1)),
        ("keras_in_module/1", "x", (2,)),
    ):
        answers = {}
        for chosen in model.LOADERS:
            servable = model.load(models / name, 1, loader=chosen)
            x = p.Tensor("DT_FLOAT", shape, [2.0, 3.0])
            (output,) = predict(servable, "serving_default", {alias: x}).values()
            answers[chosen] = [type(bundle(servable)).__name__, values_list(output.values)]
            if chosen == "session":
                graph, session = bundle(servable)._graph, bundle(servable)._session
                handles = [op for op in graph.get_operations() if op.type == "VarHandleOp"]
                with graph.as_default():
                    checks = [tf.raw_ops.VarIsInitializedOp(resource=h.outputs[0]) for h in handles]
                state = dict(zip([h.name for h in handles], session.run(checks), strict=True))
        found[name] = {"answers": answers, "set": {k: bool(v) for k, v in state.items()}}
    return found


def keras(models: Path) -> dict[str, Any]:
    """A Keras Sequential with variables (Dense, BatchNormalization, Dense) saved
    the four usual ways of its Keras (Keras 3 in the image, Keras 2 in
    TensorFlow 2.15 and older), each loaded with both loaders: the kind of
    bundle, the answers for two rows, and whether the Session bundle had
    variables set from their restored copies (its log line). (`models` is not
    used: the exports are made here.)"""
    import logging  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    import keras as keras_package  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    from tf_entrypoint.serving import model  # noqa: PLC0415
    from tf_entrypoint.serving.core import types as p  # noqa: PLC0415

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    layers = tf.keras.layers
    spec = [tf.TensorSpec([None, 4], tf.float32, name="x")]
    major = int(keras_package.__version__.split(".")[0])

    def sequential() -> Any:
        tf.keras.utils.set_random_seed(0)
        return tf.keras.Sequential(
            [
                layers.Input((4,), dtype="float32", name="x"),
                layers.Dense(8, activation="relu"),
                layers.BatchNormalization(),
                layers.Dense(3),
            ]
        )

    def in_module(path: str) -> None:
        module = tf.Module()
        module.model = sequential()
        module.serve = tf.function(lambda x: {"y": module.model(x)}, input_signature=spec)
        tf.saved_model.save(module, path, signatures={"serving_default": module.serve})

    def under_strategy(path: str) -> None:
        with tf.distribute.MirroredStrategy(devices=["/cpu:0", "/cpu:1"]).scope():
            built = sequential()
        tf.saved_model.save(built, path)

    ways: dict[str, Callable[[str], None]] = {
        "tf.saved_model.save(model)": lambda path: tf.saved_model.save(sequential(), path)
    }
    if major >= 3:
        ways["model.export()"] = lambda path: sequential().export(path, verbose=False)
    else:  # Keras 2's own SavedModel format
        ways["model.save(dir)"] = lambda path: sequential().save(path)
    ways["tf.Module holding the model"] = in_module
    ways["under MirroredStrategy"] = under_strategy

    class Lines(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.INFO)
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(record.getMessage())

    lines = Lines()
    server_log = logging.getLogger("tf_entrypoint.serving")
    server_log.addHandler(lines)
    server_log.setLevel(logging.INFO)
    found: dict[str, Any] = {"keras": major, "ways": {}}
    with tempfile.TemporaryDirectory() as root:
        for index, (way, save) in enumerate(ways.items()):
            path = Path(root) / str(index)
            save(str(path))
            answers: dict[str, Any] = {}
            for chosen in model.LOADERS:
                lines.lines.clear()
                servable = model.load(path, 1, loader=chosen)
                (alias,) = servable.signatures["serving_default"].inputs
                x = p.Tensor("DT_FLOAT", (2, 4), [0.5, 1.0, 1.5, 2.0, -1.0, 0.0, 1.0, 3.0])
                (output,) = predict(servable, "serving_default", {alias: x}).values()
                answers[chosen] = [type(bundle(servable)).__name__, values_list(output.values)]
                if chosen == "session":
                    answers["set_from_copies"] = any(
                        "set from the copies" in line for line in lines.lines
                    )
            found["ways"][way] = answers
    return found


def multi(models: Path) -> dict[str, Any]:
    """counted/1: how many Session runs a MultiInference of classify and regress
    makes (the shared node's `runs` before and after), against Classify and
    Regress alone, and the answers."""
    from tf_entrypoint.serving import model  # noqa: PLC0415
    from tf_entrypoint.serving.core import inference  # noqa: PLC0415
    from tf_entrypoint.serving.core import types as p  # noqa: PLC0415

    example_pb2 = __import__("tensorflow.core.example.example_pb2", fromlist=["x"])
    examples = []
    for value in (1.5, -2.0):
        example = example_pb2.Example()
        example.features.feature["x"].float_list.value.append(value)
        examples.append(example.SerializeToString())
    servable = model.load(models / "counted" / "1", 1, warmup=False)

    def runs() -> float:
        (value,) = predict(servable, "count", {"unused": p.Tensor("DT_FLOAT", (1,), [0.0])})[
            "runs"
        ].values
        return float(value)

    found: dict[str, Any] = {"bundle": type(bundle(servable)).__name__}
    before = runs()
    results = inference.multi_inference(
        servable,
        [
            inference.Task("counted", "classify", p.CLASSIFY_METHOD),
            inference.Task("counted", "regress", p.REGRESS_METHOD),
        ],
        examples,
    )
    found["multi_inference_runs"] = runs() - before
    classified: Any = results[0]  # Classifications: per example, (label, score) pairs
    found["results"] = [
        [[[label.decode(), score] for label, score in row] for row in classified],
        results[1],
    ]
    before = runs()
    inference.classify(servable, "classify", examples)
    inference.regress(servable, "regress", examples)
    found["classify_then_regress_runs"] = runs() - before
    return found


def compute_ns() -> int:
    """CPU time (ns) of the process's tf_Compute threads (the inter-op pool)."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        if (task / "comm").read_text().strip() == "tf_Compute":
            total += int((task / "schedstat").read_text().split()[0])
    return total


def where(models: Path) -> dict[str, Any]:
    from tf_entrypoint.serving import model  # noqa: PLC0415
    from tf_entrypoint.serving.model import bundle as bundles  # noqa: PLC0415

    servable = model.load(models / "half_plus_two" / "123", 123, warmup=False)
    answers, timed = [], []
    for x in range(2 * bundles.TRIAL_RUNS + 2):
        (output,) = predict(servable, "serving_default", {"x": rest_x(float(x))}).values()
        answers.append(values_list(output.values)[0])
        (made,) = bundle(servable)._callables.values()
        timed.append([len(made.times[0]), len(made.times[1])])
    session = bundle(servable)._session
    x = np.array([1.0], np.float32)
    cpu = {}
    for name, inline in (("pooled", False), ("inline", True)):
        run = bundles.SessionCallable(session, made._feeds, made._fetches, made.dtypes)
        call = run._make(inline=True) if inline else run.pooled
        call(x)
        before = compute_ns()
        for _ in range(2000):
            call(x)
        cpu[name] = compute_ns() - before
    return {
        "trial_runs": bundles.TRIAL_RUNS,
        "timed": timed,
        "chosen": made.chosen is not None,
        "in_calling_thread": made.in_calling_thread,
        "answers": answers,
        "compute_ns": cpu,
        "rule": [
            bundles.runs_inline([3.0, 2.0, 9.0], [1.0, 9.0, 1.0]),
            bundles.runs_inline([1.0, 1.0, 1.0], [2.0, 2.0, 0.5]),
            bundles.runs_inline([1.0], [1.0]),
        ],
    }


CHECKS = {
    "threads": threads,
    "close": close,
    "callables": callables,
    "loader": loader,
    "repair": repair,
    "keras": keras,
    "multi": multi,
    "where": where,
}

if __name__ == "__main__":
    print(json.dumps(CHECKS[sys.argv[1]](Path(sys.argv[2]))))
