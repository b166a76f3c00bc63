"""Export the gRPC tests' SavedModels (runs in the image).

    python make_grpc_models.py DIR

- DIR/dtypes/1: serving_default has an input `in_D` of shape [None] and
  dtype D for each D in grpc_client.DTYPES and outputs `out_D` returning it
  unchanged, so what comes back shows how the server read and wrote each dtype.
- DIR/slow/1: serving_default takes x (float32 [None]) and n (int64 []) and
  returns y = x after counting to n in a graph loop: a predict that stays in
  flight as long as the test needs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from grpc_client import DTYPES  # type: ignore[import-not-found]  # run as /t/make_grpc_models.py


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

    def count_then_echo(x: Any, n: Any) -> dict[str, Any]:
        counted = tf.while_loop(lambda i: i < n, lambda i: i + 1, [tf.constant(0, tf.int64)])
        return {"y": x + tf.cast(counted[0] - n, tf.float32)}

    slow = tf.function(
        count_then_echo,
        input_signature=[
            tf.TensorSpec([None], tf.float32, name="x"),
            tf.TensorSpec([], tf.int64, name="n"),
        ],
    )

    module = tf.Module()
    module.serve = slow
    tf.saved_model.save(module, str(directory / "slow" / "1"), signatures={"serving_default": slow})
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
