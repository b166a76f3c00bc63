"""A program that sets TensorFlow up the way Rasa Open Source 3.6 does.

Rasa's rasa/utils/tensorflow/environment.py (setup_tf_environment) reads
TF_INTER_OP_PARALLELISM_THREADS and TF_INTRA_OP_PARALLELISM_THREADS itself
(``int(value.strip())``, skipped when unset or empty) and calls
``tf.config.threading.set_inter_op_parallelism_threads`` then
``set_intra_op_parallelism_threads``; it reads TF_GPU_MEMORY_ALLOC (``ID:MB``
pairs split on ``,`` and ``:``, ``int()`` each, a later duplicate wins), lists
``tf.config.list_physical_devices("GPU")`` and calls
``tf.config.experimental.set_virtual_device_configuration(gpus[ID],
[tf.config.experimental.VirtualDeviceConfiguration(memory_limit=MB)])``, or
warns when no GPU is listed. This file does the same steps (written here,
not copied), then trains a little and prints what TensorFlow ended up with:

    intra inter gpus_configured

Installed as the command ``rasa`` in the stand-in of a Rasa image
(tests/matrix), where ``rasa train`` runs it; the arguments are ignored.
"""

from __future__ import annotations

import os
import sys
import warnings


def _threads(name: str) -> int | None:
    raw = os.getenv(name)
    if not raw:
        return None
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"Error parsing the environment variable '{name}'.") from None


def setup_cpu() -> None:
    inter = _threads("TF_INTER_OP_PARALLELISM_THREADS")
    intra = _threads("TF_INTRA_OP_PARALLELISM_THREADS")
    if inter is None and intra is None:
        return
    from tensorflow import config as tf_config

    if inter is not None:
        tf_config.threading.set_inter_op_parallelism_threads(inter)
    if intra is not None:
        tf_config.threading.set_intra_op_parallelism_threads(intra)


def parse_gpu_config(raw: str) -> dict[int, int]:
    parsed = {}
    try:
        for item in raw.split(","):
            gpu, mb = item.split(":")
            parsed[int(gpu)] = int(mb)
    except ValueError:
        raise ValueError("Error parsing GPU configuration.") from None
    return parsed


def setup_gpu() -> int:
    raw = os.getenv("TF_GPU_MEMORY_ALLOC")
    if not raw:
        return 0
    from tensorflow import config as tf_config

    parsed = parse_gpu_config(raw)
    gpus = tf_config.list_physical_devices("GPU")
    if not gpus:
        warnings.warn(
            "TF_GPU_MEMORY_ALLOC is set but no GPUs were detected to configure.", stacklevel=1
        )
        return 0
    for gpu, mb in parsed.items():
        tf_config.experimental.set_virtual_device_configuration(
            gpus[gpu], [tf_config.experimental.VirtualDeviceConfiguration(memory_limit=mb)]
        )
    return len(parsed)


def main() -> int:
    setup_cpu()
    configured = setup_gpu()
    import numpy as np  # type: ignore[import-not-found, unused-ignore]
    import tensorflow as tf

    x = np.linspace(-1.0, 1.0, 256, dtype="float32").reshape(-1, 1)
    model = tf.keras.Sequential(
        [tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, 2.0 * x, epochs=2, batch_size=32, verbose=0)
    print(
        tf.config.threading.get_intra_op_parallelism_threads(),
        tf.config.threading.get_inter_op_parallelism_threads(),
        configured,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
