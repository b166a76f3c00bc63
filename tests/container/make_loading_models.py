"""Export the loading tests' SavedModels (runs in the image).

    python make_loading_models.py DIR

- DIR/keras_in_module/1: a tf.Module holding a Keras 3 Sequential model
  (Input(1), Dense(1) of ones and zeros: y = x), saved with
  tf.saved_model.save, signature serving_default x float32 [None] -> y
  [None]: the demo's layout. Keras 3 writes its graph so that restoring it in
  a Session leaves the model's variables unset (keras-team/keras#20095).
- DIR/outputs/1: serving_default x float32 [None] -> y0 ... y7 = x + i, eight
  outputs: 255 sets of outputs a gRPC output_filter can ask for.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

OUTPUTS = 8


def main(directory: Path) -> int:
    import tensorflow as tf  # noqa: PLC0415

    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input(shape=(1,), dtype="float32"),
            tf.keras.layers.Dense(1, kernel_initializer="ones", bias_initializer="zeros"),
        ]
    )
    module = tf.Module()
    module.model = model
    module.serve = tf.function(
        lambda x: {"y": module.model(x[:, None])[:, 0]},
        input_signature=[tf.TensorSpec([None], tf.float32, name="x")],
    )
    tf.saved_model.save(
        module,
        str(directory / "keras_in_module" / "1"),
        signatures={"serving_default": module.serve},
    )

    def plus_each(x: Any) -> dict[str, Any]:
        return {f"y{i}": x + float(i) for i in range(OUTPUTS)}

    many = tf.function(plus_each, input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    module = tf.Module()
    module.serve = many
    tf.saved_model.save(
        module, str(directory / "outputs" / "1"), signatures={"serving_default": many}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
