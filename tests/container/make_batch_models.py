"""Export the batching tests' model (runs in the image): python make_batch_models.py DIR.

DIR/mlp/1 has two signatures:

- serving_default: x float32 [batch, 4] -> y = tanh(x W1) W2 + b [batch, 3] and
  total = sum of each row [batch]; a value of 1e6 or more fails the call in
  TensorFlow (INVALID_ARGUMENT), after the request has passed validation;
- gated: x float32 [batch] -> y = x + 1, once the file /gates/open exists
  (gates.py): it runs until the test opens the gate of the server's /gates
  mount, whatever the batch size and however fast the CPU. A batch of zeros
  (the server's warm-up) is not held.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gates import OPEN, Gate, after, wait_for_file  # type: ignore[import-not-found]  # in /t


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

    def gated(x: Any) -> dict[str, Any]:
        held = tf.reduce_any(tf.not_equal(x, 0.0))  # zeros: the server's warm-up
        return {"y": after(wait_for_file(Gate.path(OPEN), held), x + 1.0)}

    module.mlp = tf.function(mlp, input_signature=[tf.TensorSpec([None, 4], tf.float32, "x")])
    module.gated = tf.function(gated, input_signature=[tf.TensorSpec([None], tf.float32, "x")])
    tf.saved_model.save(
        module,
        str(directory / "mlp" / "1"),
        signatures={"serving_default": module.mlp, "gated": module.gated},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
