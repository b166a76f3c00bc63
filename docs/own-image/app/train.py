"""A small training job: fit a model on generated data, report what TensorFlow was given."""

import numpy as np
import tensorflow as tf
from tabulate import tabulate

rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(8,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(1),
    ]
)
model.compile(optimizer="adam", loss="mse")
history = model.fit(x, y, epochs=3, batch_size=64, verbose=0)
print(
    tabulate(
        [
            ("intra-op threads", tf.config.threading.get_intra_op_parallelism_threads()),
            ("inter-op threads", tf.config.threading.get_inter_op_parallelism_threads()),
            ("epochs", len(history.history["loss"])),
        ]
    )
)
