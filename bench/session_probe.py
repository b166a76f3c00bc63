"""The in-container side of bench/session_call.py (runs in the image).

    python session_probe.py export DIR          # the three models, TF Serving's layout
    python session_probe.py calls DIR ROUNDS WINDOW
    python session_probe.py profile DIR CALLS

export writes, with tf.saved_model.save, three models that load as Session
bundles, each x -> y:

- half_plus_two/1: x float32 [None] -> y = 0.5 x + 2 (a and b tf.Variables):
  almost no compute, the call's overhead is all there is;
- mlp/1: bench/workload.py's 32-512-512-10 Keras MLP (same seed), x [None,
  32] -> y [None, 10], about 280 k multiply-adds a row; its module tracks
  the Keras variables' own tf.Variables, so its graph restores as it stands;
- cnn/1: a Keras convolutional net (32x32x3 images, three 3x3 convolutions
  of 32, 64 and 128 channels, the last two of stride 2, global average
  pooling, 10 classes), about 10 M multiply-adds a row, held by a tf.Module
  as the compose demo holds its model: the kind of Keras 3 export whose
  variables the server sets from their restored copies
  (keras-team/keras#20095).

calls loads each model both ways, as tf_entrypoint.serving.model does: a
Session bundle (TF Serving's way, the server's default) and
tf.saved_model.load's signature function (the server's previous path), in
one process, and times one call of each, batch 1 and batch 64, in windows
that take turns (A B, then B A) so both see the same stretch of machine:

- run: what a predict costs in TensorFlow, as the server calls it: the
  inputs as NumPy arrays in, the outputs as NumPy arrays out
  (SessionBundle.run / FunctionBundle.run in model/bundle.py);
- predict: gRPC's Predict in process (core/inference.predict on the servable):
  TensorProtos decoded, run, outputs written as TensorProtos.

It prints one JSON line: per model, batch, level and path, the median of the
windows' median call (µs), their p99, and calls per CPU second; and whether
both paths gave the same answer.

profile runs CALLS batch-1 calls of half_plus_two's run level on each path
under cProfile and prints one JSON line: per path, the wall time per call
and the functions that took most of it (their own time, per call), to say
where a call's time goes.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (the model library's export): harness/ is
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # beside bench/

from harness.stats import percentile

INPUT, HIDDEN, CLASSES = 32, 512, 10
IMAGE = (32, 32, 3)
MODELS = ("half_plus_two", "mlp", "cnn")
BATCHES = (1, 64)


def export(directory: Path) -> None:
    import tensorflow as tf  # noqa: PLC0415

    module = tf.Module()
    module.a, module.b = tf.Variable(0.5), tf.Variable(2.0)
    module.serve = tf.function(
        lambda x: {"y": module.a * x + module.b},
        input_signature=[tf.TensorSpec([None], tf.float32, name="x")],
    )
    tf.saved_model.save(
        module, str(directory / "half_plus_two" / "1"), signatures={"serving_default": module.serve}
    )

    keras = tf.keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((INPUT,), dtype="float32"),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )
    module = tf.Module()
    module.weights_ = [weight.value for weight in model.weights]  # the tf.Variables
    module.serve = tf.function(
        lambda x: {"y": model(x, training=False)},
        input_signature=[tf.TensorSpec([None, INPUT], tf.float32, name="x")],
    )
    tf.saved_model.save(
        module, str(directory / "mlp" / "1"), signatures={"serving_default": module.serve}
    )

    keras.utils.set_random_seed(0)
    layers = keras.layers
    cnn = keras.Sequential(
        [
            keras.Input(IMAGE, dtype="float32"),
            layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.Conv2D(64, 3, strides=2, padding="same", activation="relu"),
            layers.Conv2D(128, 3, strides=2, padding="same", activation="relu"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(CLASSES),
        ]
    )
    holder = tf.Module()
    holder.model = cnn  # the Keras model itself: its variables are set from restored copies
    holder.serve = tf.function(
        lambda x: {"y": holder.model(x, training=False)},
        input_signature=[tf.TensorSpec([None, *IMAGE], tf.float32, name="x")],
    )
    tf.saved_model.save(
        holder, str(directory / "cnn" / "1"), signatures={"serving_default": holder.serve}
    )


def inputs(model: str, batch: int) -> Any:
    import numpy as np  # noqa: PLC0415

    if model == "half_plus_two":
        return np.arange(batch, dtype=np.float32)
    width = INPUT if model == "mlp" else IMAGE[0] * IMAGE[1] * IMAGE[2]
    rows = (np.arange(batch)[:, None] * 7 + np.arange(width)[None, :]) % 13 / 13.0
    shape = (batch, INPUT) if model == "mlp" else (batch, *IMAGE)
    return rows.astype(np.float32).reshape(shape)


def window(call: Any, seconds: float) -> dict[str, Any]:
    """Calls for `seconds`: per-call wall times, and CPU seconds of the process."""
    times: list[float] = []
    cpu = time.process_time()
    end = time.perf_counter() + seconds
    while True:
        started = time.perf_counter()
        call()
        finished = time.perf_counter()
        times.append(finished - started)
        if finished >= end:
            break
    cpu = time.process_time() - cpu
    times.sort()
    return {
        "calls": len(times),
        "median_us": times[len(times) // 2] * 1e6,
        "p99_us": percentile(times, 99) * 1e6,
        "calls_per_cpu_s": len(times) / cpu if cpu > 0 else None,
    }


def one_call(level: str, servable: Any, bundle: Any, *, signature: Any, x: Any, proto: Any) -> Any:
    """A no-argument callable making one call at `level` (run or predict)."""
    if level == "run":
        return lambda: bundle.run("serving_default", signature, {"x": x}, ["y"])
    from tf_entrypoint.serving.codec import tensor_proto  # noqa: PLC0415
    from tf_entrypoint.serving.core import inference  # noqa: PLC0415

    def predict() -> Any:
        inputs = tensor_proto.ProtoInputs(proto, 1 << 30)
        _, outputs = inference.predict(servable, "serving_default", inputs)
        return {alias: tensor_proto.as_proto_field(alias, t) for alias, t in outputs.items()}

    return predict


def calls(directory: Path, rounds: int, seconds: float) -> dict[str, Any]:
    import numpy as np  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    from tf_entrypoint.serving import model  # noqa: PLC0415

    paths: dict[str, dict[str, Any]] = {}
    for name in MODELS:
        export_dir = directory / name / "1"
        session = model.load(export_dir, 1, loader="session")
        function = model.load(export_dir, 1, loader="tf2")
        paths[name] = {"session": session, "tf.saved_model.load": function}
    bundles = {
        name: {path: servable._bundle for path, servable in servables.items()}
        for name, servables in paths.items()
    }
    kinds = {
        name: [type(bundle).__name__ for bundle in by_path.values()]
        for name, by_path in bundles.items()
    }
    cells: list[dict[str, Any]] = []
    same: dict[str, bool] = {}
    largest: dict[str, float] = {}
    for name, servables in paths.items():
        signature = servables["session"].signatures["serving_default"]
        for batch in BATCHES:
            x = inputs(name, batch)
            proto = {"x": tf.make_tensor_proto(x)}
            answers = {
                path: bundles[name][path].run("serving_default", signature, {"x": x}, ["y"])
                for path in servables
            }
            a, b = (answer["y"].numpy() for answer in answers.values())
            # float32 rounding apart: the two paths run differently optimised graphs
            same[f"{name} batch {batch}"] = bool(np.allclose(a, b, rtol=1e-4, atol=1e-5))
            largest[f"{name} batch {batch}"] = float(np.max(np.abs(a - b)))
            for level in ("run", "predict"):
                calls_of = {
                    path: one_call(
                        level, servable, bundles[name][path], signature=signature, x=x, proto=proto
                    )
                    for path, servable in servables.items()
                }
                windows: dict[str, list[dict[str, Any]]] = {path: [] for path in calls_of}
                order = list(calls_of)
                for call in calls_of.values():
                    window(call, seconds / 2)  # warm: callables made, memory allocated
                for index in range(rounds):
                    for path in order if index % 2 == 0 else order[::-1]:
                        windows[path].append(window(calls_of[path], seconds))
                cells.append(
                    {
                        "model": name,
                        "batch": batch,
                        "level": level,
                        "paths": {
                            path: {
                                "median_us": round(
                                    statistics.median(w["median_us"] for w in runs), 2
                                ),
                                "p99_us": round(statistics.median(w["p99_us"] for w in runs), 2),
                                "calls_per_cpu_s": round(
                                    statistics.median(w["calls_per_cpu_s"] or 0 for w in runs), 1
                                ),
                                "calls": sum(w["calls"] for w in runs),
                                "windows_median_us": [round(w["median_us"], 2) for w in runs],
                            }
                            for path, runs in windows.items()
                        },
                    }
                )
    return {"bundles": kinds, "same_answers": same, "largest_difference": largest, "cells": cells}


def where(file: str, line: int, function: str) -> str:
    """A profile row's name: file:line(function), or a C function's own name."""
    if file == "~":  # a built-in: "<built-in method module.NAME>"
        return function.strip("<>").rsplit(".", 1)[-1].removeprefix("built-in method ")
    return f"{Path(file).name}:{line}({function})"


def profile(directory: Path, count: int) -> dict[str, Any]:
    """Where a batch-1 call of half_plus_two spends its time, on each path."""
    import cProfile  # noqa: PLC0415
    import pstats  # noqa: PLC0415

    from tf_entrypoint.serving import model  # noqa: PLC0415

    export_dir = directory / "half_plus_two" / "1"
    x = inputs("half_plus_two", 1)
    found: dict[str, Any] = {}
    for path, loader in (("session", "session"), ("tf.saved_model.load", "tf2")):
        servable = model.load(export_dir, 1, loader=loader)
        signature = servable.signatures["serving_default"]
        bundle = servable._bundle

        def call(bundle: Any = bundle, signature: Any = signature) -> None:
            bundle.run("serving_default", signature, {"x": x}, ["y"])

        window(call, 0.5)  # warm
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        for _ in range(count):
            call()
        profiler.disable()
        wall = time.perf_counter() - started
        stats = pstats.Stats(profiler)
        rows = sorted(
            (
                (own, calls, where(file, line, function))
                for (file, line, function), (_, calls, own, _, _) in stats.stats.items()  # type: ignore[attr-defined]
            ),
            reverse=True,
        )[:12]
        found[path] = {
            "calls": count,
            "profiled_us_per_call": round(wall / count * 1e6, 2),
            "top_own_time": [
                {"function": where, "us_per_call": round(own / count * 1e6, 2), "calls": n}
                for own, n, where in rows
            ],
        }
        servable.close()
    return found


def main(argv: list[str]) -> int:
    if argv[0] == "export":
        export(Path(argv[1]))
        return 0
    if argv[0] == "profile":
        print(json.dumps(profile(Path(argv[1]), int(argv[2]))))
        return 0
    result = calls(Path(argv[1]), int(argv[2]), float(argv[3]))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
