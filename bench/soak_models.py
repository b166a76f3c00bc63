"""Export the soak benchmark's SavedModels (runs in the image): each answer names its version.

    python soak_models.py DIR --versions N [--poison OFFSET]

Writes, in TF Serving's layout under DIR:

- staging/plus/V for V in 1..N: serving_default takes x (float32 [batch])
  and answers y = x + V;
- staging/cr/V for V in 1..N: a TF1-style export whose signatures read
  tf.Example features x (float, required) and y (float, default 0):
  classify (classes ["sum", "difference"], scores [x + y, x - y]), regress
  (2x + y + V, [batch, 1]) and serving_default (float x [batch] -> 2x + V);
- models/slow/1: serving_default takes x (float32 [batch]) and n (int64
  [batch]) and answers y = x after counting to max(n): a predict that runs
  as long as the caller asks, and batches with its like;
- models/extra/1: as plus version 1 (the model the config reloads add and
  remove);
- poison/plus, poison/cr: as plus and cr with version OFFSET (default
  1000000, in no pool), copied in under version names beyond int64: a
  server that served one would answer with an offset no good request accepts.

Every version is written beside its target and renamed into place. The
harness renames staging/MODEL/V into models/MODEL/V while the server runs,
so a request's answer tells which version served it, and a swap in the
middle of a request still gives a consistent answer.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

POISON = 1_000_000


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--versions", type=int, required=True)
    parser.add_argument("--poison", type=int, default=POISON)
    args = parser.parse_args(argv)

    import tensorflow as tf  # noqa: PLC0415

    v1 = tf.compat.v1
    started = time.perf_counter()
    root = args.directory

    def save(builder_target: Path, build: Any) -> None:
        staging = builder_target.parent / f".staging-{builder_target.name}"
        with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
            signatures = build()
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(str(staging))
            builder.add_meta_graph_and_variables(
                session, [v1.saved_model.tag_constants.SERVING], signature_def_map=signatures
            )
            builder.save()
        builder_target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging, builder_target)

    def plus(version: int) -> Any:
        def build() -> Any:
            x = v1.placeholder(tf.float32, [None], name="x")
            offset = v1.Variable(float(version), name="offset")
            return {
                "serving_default": v1.saved_model.predict_signature_def({"x": x}, {"y": x + offset})
            }

        return build

    def classify_regress(version: int) -> Any:
        def build() -> Any:
            serialized = v1.placeholder(tf.string, [None], name="tf_example")
            features = tf.io.parse_example(
                serialized,
                {
                    "x": tf.io.FixedLenFeature([1], tf.float32),
                    "y": tf.io.FixedLenFeature([1], tf.float32, default_value=[0.0]),
                },
            )
            x, y = features["x"], features["y"]
            offset = v1.Variable(float(version), name="offset")
            batch = tf.shape(x)[0]
            classes = tf.tile(tf.constant([[b"sum", b"difference"]]), [batch, 1])
            plain_x = v1.placeholder(tf.float32, [None], name="x")
            return {
                "classify": v1.saved_model.classification_signature_def(
                    serialized, classes, tf.concat([x + y, x - y], axis=1)
                ),
                "regress": v1.saved_model.regression_signature_def(
                    serialized, 2.0 * x + y + offset
                ),
                "serving_default": v1.saved_model.predict_signature_def(
                    {"x": plain_x}, {"y": 2.0 * plain_x + offset}
                ),
            }

        return build

    def slow() -> Any:
        x = v1.placeholder(tf.float32, [None], name="x")
        n = v1.placeholder(tf.int64, [None], name="n")
        steps = tf.reduce_max(n)
        counted = tf.while_loop(lambda i: i < steps, lambda i: i + 1, [tf.constant(0, tf.int64)])
        y = x + tf.cast(counted - steps, tf.float32)
        return {"serving_default": v1.saved_model.predict_signature_def({"x": x, "n": n}, {"y": y})}

    for version in range(1, args.versions + 1):
        save(root / "staging" / "plus" / str(version), plus(version))
        save(root / "staging" / "cr" / str(version), classify_regress(version))
    save(root / "models" / "slow" / "1", slow)
    save(root / "models" / "extra" / "1", plus(1))
    save(root / "poison" / "plus", plus(args.poison))
    save(root / "poison" / "cr", classify_regress(args.poison))
    print(
        f"exported {args.versions} versions of plus and cr, slow, extra and the poison "
        f"versions in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
