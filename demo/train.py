"""Train the demo model and export it as a SavedModel, TF Serving's layout.

    python demo/train.py [--model-base-path /models] [--model-name model] [--version 1]
                         [--intercept 2]

The model is the linear y = 0.5 x + 2 (TF Serving's "half_plus_two"), learnt
by a one-unit Keras Dense layer from generated, noise-free data, so every
answer is known: {"instances": [1.0, 2.0]} -> {"predictions": [2.5, 3.0]}.
Training runs in float64 and must reach the line within 1e-9 (checked before
export); the export serves the learnt weights in float32, where they are
exactly 0.5 and 2, so answers are exact float32 values. No downloads, a few
seconds on one CPU. The compose demo's retrain step exports version 2 from
data on the line y = 0.5 x + 3 (`--version 2 --intercept 3`), so clients see
the swap: {"instances": [1.0, 2.0]} -> {"predictions": [3.5, 4.0]}.

Signatures of the export (MODEL_BASE_PATH/MODEL_NAME/VERSION):

* serving_default: x float32 [batch] -> y float32 [batch]
* two_inputs: x, scale float32 [batch] -> y, scaled (= y * scale) float32 [batch]

The export is written beside the target and renamed into place, so a server
polling the directory never sees half a model. An existing version is kept
(the job is safe to re-run); --force replaces it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

SLOPE, INTERCEPT = 0.5, 2.0
TOLERANCE = 1e-9


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-base-path", default=os.environ.get("MODEL_BASE_PATH") or "/models")
    parser.add_argument("--model-name", default=os.environ.get("MODEL_NAME") or "model")
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument(
        "--intercept",
        type=float,
        default=INTERCEPT,
        help="the line's intercept in the generated data (the retrain step uses 3: y = 0.5 x + 3)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing version")
    return parser.parse_args(argv)


def train(steps: int, intercept: float = INTERCEPT):
    import keras  # noqa: PLC0415 - heavy; only once the arguments are good
    import numpy as np  # noqa: PLC0415

    # float64 throughout (weights, loss, gradients), so the exact line is reachable.
    keras.config.set_floatx("float64")
    keras.utils.set_random_seed(0)
    x = np.linspace(-4.0, 4.0, 256).reshape(-1, 1)
    y = SLOPE * x + intercept
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.5), loss="mse")
    # One epoch of `steps` full-batch steps: Keras' per-epoch overhead is paid once.
    model.fit(np.tile(x, (steps, 1)), np.tile(y, (steps, 1)), batch_size=len(x), verbose=0)
    kernel, bias = (float(w.reshape(-1)[0]) for w in model.get_weights())
    error = max(abs(kernel - SLOPE), abs(bias - intercept))
    print(f"train: learnt y = {kernel!r} x + {bias!r} ({steps} steps)", flush=True)
    if error > TOLERANCE:
        sys.exit(f"train: did not converge (error {error:.3g} > {TOLERANCE}); raise --steps")
    # Served in float32, like most models: the same layer with the learnt
    # weights rounded to float32 (exactly 0.5 and 2.0 here).
    served = keras.Sequential(
        [keras.Input((1,), dtype="float32"), keras.layers.Dense(1, dtype="float32")]
    )
    served.set_weights([w.astype("float32") for w in model.get_weights()])
    return served


def export(model, target: Path) -> None:
    import tensorflow as tf  # noqa: PLC0415

    class HalfPlusTwo(tf.Module):
        def __init__(self, model) -> None:
            super().__init__()
            self.model = model

        def _line(self, x):
            return self.model(x[:, None])[:, 0]

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x):
            return {"y": self._line(x)}

        @tf.function(
            input_signature=[
                tf.TensorSpec([None], tf.float32, name="x"),
                tf.TensorSpec([None], tf.float32, name="scale"),
            ]
        )
        def two_inputs(self, x, scale):
            y = self._line(x)
            return {"y": y, "scaled": y * scale}

    module = HalfPlusTwo(model)
    staging = target.with_name(f".tmp-{target.name}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    tf.saved_model.save(
        module,
        str(staging),
        signatures={"serving_default": module.serve, "two_inputs": module.two_inputs},
    )
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    target = Path(args.model_base_path) / args.model_name / str(args.version)
    if (target / "saved_model.pb").is_file() and not args.force:
        print(f"train: {target} already exists; keeping it (--force replaces it)", flush=True)
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    model = train(args.steps, args.intercept)
    export(model, target)
    print(f"train: exported {target} in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
