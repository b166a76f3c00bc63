"""Export tiny SavedModels with known answers, in TF Serving's layout (runs in the image).

    python make_models.py DIR VERSION [VERSION ...] [--warmup N [--bad-warmup]] [--staged]

Version V of the model at DIR answers y = x + V (float32 [batch] -> [batch]),
so a client can tell which version answered. DIR/V is written beside its
target and renamed into place, as the README recommends; with --staged it
stays at DIR/.staged-V for the test to rename. --warmup N adds N warm-up
records (assets.extra/tf_serving_warmup_requests, TF Serving's PredictionLog
TFRecord) that each predict x = [i]; with --bad-warmup they name an input
the signature does not have, so replaying them fails the load.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("versions", type=int, nargs="+")
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--bad-warmup", action="store_true")
    parser.add_argument("--staged", action="store_true")
    args = parser.parse_args(argv)

    import tensorflow as tf  # noqa: PLC0415
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2  # noqa: PLC0415

    def plus(version: int) -> Any:
        module = tf.Module()
        module.offset = tf.Variable(float(version))
        module.serve = tf.function(
            lambda x: {"y": x + module.offset},
            input_signature=[tf.TensorSpec([None], tf.float32, name="x")],
        )
        return module

    args.directory.mkdir(parents=True, exist_ok=True)
    for version in args.versions:
        staging = args.directory / f".staged-{version}"
        module = plus(version)
        tf.saved_model.save(module, str(staging), signatures={"serving_default": module.serve})
        if args.warmup:
            extra = staging / "assets.extra"
            extra.mkdir()
            with tf.io.TFRecordWriter(str(extra / "tf_serving_warmup_requests")) as writer:
                for i in range(args.warmup):
                    request = predict_pb2.PredictRequest()
                    request.model_spec.name = "model"
                    request.model_spec.signature_name = "serving_default"
                    key = "not_an_input" if args.bad_warmup else "x"
                    request.inputs[key].CopyFrom(tf.make_tensor_proto([float(i)], tf.float32))
                    log = prediction_log_pb2.PredictionLog()
                    log.predict_log.request.CopyFrom(request)
                    writer.write(log.SerializeToString())
        if not args.staged:
            os.rename(staging, args.directory / str(version))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
