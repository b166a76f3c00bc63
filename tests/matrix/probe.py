"""What the matrix asks each TensorFlow version; mounted read-only at /probe in the containers.

    python3 /probe/probe.py getters   intra inter (tf.config.threading getters)
    python3 /probe/probe.py threads   threads in this process after a few matmuls, intra, inter
    python3 /probe/probe.py report    TensorFlow, Python, Keras major, backend, fit ok, intra,
                                      inter: a Keras fit, importing keras only (not tensorflow)

The last line of stdout is the answer. It must run on every Python the matrix
has (3.10 and 3.11) and every TensorFlow (2.11-2.21).
"""

import math
import os
import sys


def getters() -> tuple[object, ...]:
    import tensorflow as tf

    tf.constant(1)
    return (
        tf.config.threading.get_intra_op_parallelism_threads(),
        tf.config.threading.get_inter_op_parallelism_threads(),
    )


def threads() -> tuple[object, ...]:
    import tensorflow as tf

    x = tf.random.uniform((256, 256))
    for _ in range(8):
        x = tf.matmul(x, x) / 256.0
    x.numpy()
    return (len(os.listdir("/proc/self/task")), *getters())


def report() -> tuple[object, ...]:
    # Keras 2 (TensorFlow 2.12-2.15: the keras package is tf.keras) or Keras 3
    # (2.16+: standalone, TensorFlow backend). Either imports TensorFlow itself.
    import keras
    import numpy as np  # type: ignore[import-not-found, unused-ignore]

    x = np.linspace(-1.0, 1.0, 512, dtype="float32").reshape(-1, 1)
    model = keras.Sequential(
        [keras.Input(shape=(1,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    history = model.fit(x, 3.0 * x, epochs=3, batch_size=64, verbose=0)
    losses = history.history["loss"]
    ok = len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    backend = keras.backend.backend() if hasattr(keras.backend, "backend") else "tensorflow"
    tf = sys.modules["tensorflow"]
    return (
        tf.__version__,
        "{}.{}".format(*sys.version_info[:2]),
        keras.__version__.split(".")[0],
        backend,
        "fit-ok" if ok else f"fit-bad:{losses}",
        tf.config.threading.get_intra_op_parallelism_threads(),
        tf.config.threading.get_inter_op_parallelism_threads(),
    )


if __name__ == "__main__":
    print(*{"getters": getters, "threads": threads, "report": report}[sys.argv[1]]())
