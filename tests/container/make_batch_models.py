"""Export the batching tests' model (runs in the image): python make_batch_models.py DIR.

DIR/mlp/1 has two signatures:

- serving_default: x float32 [batch, 4] -> y = tanh(x W1) W2 + b [batch, 3] and
  total = sum of each row [batch]; a value of 1e6 or more fails the call in
  TensorFlow (INVALID_ARGUMENT), after the request has passed validation;
- slow: x float32 [batch] -> y = x + 1, after counting to STEPS (2-4 s under
  --cpus 1 on the 2-core CI machines, idle or busy) whatever the batch size.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

STEPS = 600_000


def main(directory: Path) -> int:
    import tensorflow as tf  # noqa: PLC0415

    rng = tf.random.Generator.from_seed(15)
    module = tf.Module()
    module.w1 = tf.Variable(rng.normal([4, 16]))
    module.w2 = tf.Variable(rng.normal([16, 3]))
    module.b = tf.Variable(rng.normal([3]))

    def mlp(x: Any) -> dict[str, Any]:
        checked = tf.debugging.assert_less(x, 1e6, message="input too large")
        with tf.control_dependencies([checked]):
            hidden = tf.tanh(tf.matmul(x, module.w1))
        return {"y": tf.matmul(hidden, module.w2) + module.b, "total": tf.reduce_sum(x, axis=1)}

    def slow(x: Any) -> dict[str, Any]:
        counted = tf.while_loop(lambda i: i < STEPS, lambda i: i + 1, [tf.constant(0, tf.int64)])
        return {"y": x + 1.0 + tf.cast(counted[0] - STEPS, tf.float32)}

    module.mlp = tf.function(mlp, input_signature=[tf.TensorSpec([None, 4], tf.float32, "x")])
    module.slow = tf.function(slow, input_signature=[tf.TensorSpec([None], tf.float32, "x")])
    tf.saved_model.save(
        module,
        str(directory / "mlp" / "1"),
        signatures={"serving_default": module.mlp, "slow": module.slow},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
