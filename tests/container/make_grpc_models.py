"""Export the gRPC tests' SavedModels (runs in the image).

    python make_grpc_models.py DIR

- DIR/dtypes/1: serving_default has an input `in_D` of shape [None] and
  dtype D for each D in grpc_dtypes.DTYPES and outputs `out_D` returning it
  unchanged, so what comes back shows how the server read and wrote each dtype.
- DIR/gated/1: serving_default takes x (float32 [None]) and gate (string [],
  a glob such as /gates/NAME) and returns y = x once a file matching gate
  exists (gates.py): a predict that stays in flight until the test opens its
  gate, however fast the CPU. An empty gate (the server's warm-up on zeros)
  is not held.
- DIR/matmul/1: serving_default takes x (float32 [None, 2]) and returns
  y = x @ [[1], [1]] (each row's sum, [None, 1]): a graph that refuses a
  shape its MatMul cannot take (InvalidArgument "Matrix size-incompatible").
- DIR/defaults/1: serving_default takes x (float32 [None]) and y (float32 [],
  default 2.0: a tf.function's default argument, which TensorFlow 2.13+
  writes into the SignatureDef's `defaults`) and returns z = x * y.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gates import after, wait_for_file  # type: ignore[import-not-found]  # run as /t/make_grpc_models.py
from grpc_dtypes import DTYPES  # type: ignore[import-not-found]


def main(directory: Path) -> int:
    import tensorflow as tf  # noqa: PLC0415

    names = list(DTYPES)
    specs = [tf.TensorSpec([None], getattr(tf, name), name=f"in_{name}") for name in names]

    def echo(*tensors: Any) -> dict[str, Any]:
        return {f"out_{n}": tf.identity(t) for n, t in zip(names, tensors, strict=True)}

    identity = tf.function(echo, input_signature=specs)

    module = tf.Module()
    module.serve = identity
    tf.saved_model.save(
        module, str(directory / "dtypes" / "1"), signatures={"serving_default": identity}
    )

    def echo_when_open(x: Any, gate: Any) -> dict[str, Any]:
        return {"y": after(wait_for_file(gate, tf.strings.length(gate) > 0), x)}

    gated = tf.function(
        echo_when_open,
        input_signature=[
            tf.TensorSpec([None], tf.float32, name="x"),
            tf.TensorSpec([], tf.string, name="gate"),
        ],
    )

    module = tf.Module()
    module.serve = gated
    tf.saved_model.save(
        module, str(directory / "gated" / "1"), signatures={"serving_default": gated}
    )

    row_sums = tf.function(
        lambda x: {"y": tf.matmul(x, tf.ones([2, 1]))},
        input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")],
    )
    module = tf.Module()
    module.serve = row_sums
    tf.saved_model.save(
        module, str(directory / "matmul" / "1"), signatures={"serving_default": row_sums}
    )

    def scaled(x: Any, y: Any = tf.constant(2.0)) -> dict[str, Any]:  # noqa: B008 - TF's default
        return {"z": x * y}

    with_default = tf.function(
        scaled,
        input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.float32)],
    )
    module = tf.Module()
    module.serve = with_default
    tf.saved_model.save(
        module, str(directory / "defaults" / "1"), signatures={"serving_default": with_default}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
