"""Export the Open Inference Protocol tests' SavedModels (runs in the image).

    python make_v2_models.py DIR

- DIR/mixed/1: serving_default takes x (float32 [None, 3]), n (int64 [None]),
  k (int32 [None]), s (string [None]) and b (bool [None]) and returns
  y = 2x + 0.5 (float32 [None, 3]), total = each row's sum of x (float32 [None]),
  n_next = n + 1 (int64), k_twice = 2k (int32), s_tagged = s + b"!" (string)
  and b_not = not b (bool): one output per v2 datatype family, each a known
  function of its input, so a client sees how the server read and wrote it.
- DIR/complex/1: serving_default takes z (complex64 [None]) and returns
  re = real(z) (float32 [None]): a datatype with no Open Inference Protocol
  equivalent.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def main(directory: Path) -> int:
    import tensorflow as tf  # noqa: PLC0415

    def mixed(x: Any, n: Any, k: Any, s: Any, b: Any) -> dict[str, Any]:
        return {
            "y": x * 2.0 + 0.5,
            "total": tf.reduce_sum(x, axis=1),
            "n_next": n + 1,
            "k_twice": k * 2,
            "s_tagged": tf.strings.join([s, tf.fill(tf.shape(s), "!")]),
            "b_not": tf.logical_not(b),
        }

    serve = tf.function(
        mixed,
        input_signature=[
            tf.TensorSpec([None, 3], tf.float32, name="x"),
            tf.TensorSpec([None], tf.int64, name="n"),
            tf.TensorSpec([None], tf.int32, name="k"),
            tf.TensorSpec([None], tf.string, name="s"),
            tf.TensorSpec([None], tf.bool, name="b"),
        ],
    )
    module = tf.Module()
    module.serve = serve
    tf.saved_model.save(
        module, str(directory / "mixed" / "1"), signatures={"serving_default": serve}
    )

    real = tf.function(
        lambda z: {"re": tf.math.real(z)},
        input_signature=[tf.TensorSpec([None], tf.complex64, name="z")],
    )
    module = tf.Module()
    module.serve = real
    tf.saved_model.save(
        module, str(directory / "complex" / "1"), signatures={"serving_default": real}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
