"""Export tiny SavedModels with known answers, in TF Serving's layout (runs in the image).

    python make_models.py DIR VERSION [VERSION ...] [--warmup N [--bad-warmup|--huge-warmup]]
                          [--staged]
    python make_models.py DIR VERSION [VERSION ...] --kind classify_regress [--warmup N]

Version V of the model at DIR answers y = x + V (float32 [batch] -> [batch]),
so a client can tell which version answered. DIR/V is written beside its
target and renamed into place, as the README recommends; with --staged it
stays at DIR/.staged-V for the test to rename. --warmup N adds N warm-up
records (assets.extra/tf_serving_warmup_requests, TF Serving's PredictionLog
TFRecord) that each predict x = [i]; with --bad-warmup they name an input
the signature does not have, so replaying them fails the load; with
--huge-warmup their x is a TensorProto of one value whose shape says 2**31
floats (8 GiB once filled in). With --counting the signature also returns
"calls", how many times the model has been called in this process (this call
included), so a test can count the warm-up's calls.

With --kind classify_regress version V is a TF1-style export
(SavedModelBuilder) whose signatures read tf.Example features "x" (float,
required) and "y" (float, default 0):

- classify (method tensorflow/serving/classify): classes ["sum", "difference"],
  scores [x + y, x - y];
- regress (method tensorflow/serving/regress): outputs 2x + y + V, [batch, 1];
- regress_native (method tensorflow/serving/predict, as TF2 exports say, with
  the regress keys inputs/outputs): 2x + y + V, [batch];
- scores_only (classify, no classes output): scores [x, y];
- bad_scores (classify): scores x + y of shape [batch], which TF Serving rejects;
- serving_default (predict): float "x" [batch] -> "y" = 2x + V.

Its --warmup N records are N classify requests, N regress requests, then N
multi_inference requests (a classify and a regress task), each of one example
x = i.
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
    parser.add_argument("--huge-warmup", action="store_true")
    parser.add_argument("--counting", action="store_true")
    parser.add_argument("--staged", action="store_true")
    parser.add_argument("--kind", choices=["plus", "classify_regress"], default="plus")
    args = parser.parse_args(argv)
    if args.kind == "classify_regress":
        return classify_regress(args.directory, args.versions, args.warmup)

    import tensorflow as tf  # noqa: PLC0415
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2  # noqa: PLC0415

    def plus(version: int) -> Any:
        module = tf.Module()
        module.offset = tf.Variable(float(version))
        module.calls = tf.Variable(0.0)

        def serve(x: Any) -> dict[str, Any]:
            if not args.counting:
                return {"y": x + module.offset}
            return {"y": x + module.offset, "calls": module.calls.assign_add(1.0)}

        module.serve = tf.function(
            serve, input_signature=[tf.TensorSpec([None], tf.float32, name="x")]
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
                    if args.huge_warmup:
                        request.inputs[key].tensor_shape.dim[0].size = 2**31
                    log = prediction_log_pb2.PredictionLog()
                    log.predict_log.request.CopyFrom(request)
                    writer.write(log.SerializeToString())
        if not args.staged:
            os.rename(staging, args.directory / str(version))
    return 0


def classify_regress(directory: Path, versions: list[int], warmup: int) -> int:
    import tensorflow as tf  # noqa: PLC0415
    from tensorflow_serving.apis import (  # noqa: PLC0415
        classification_pb2,
        inference_pb2,
        prediction_log_pb2,
        regression_pb2,
    )

    v1 = tf.compat.v1
    build = v1.saved_model.build_signature_def
    info = v1.saved_model.build_tensor_info
    directory.mkdir(parents=True, exist_ok=True)
    for version in versions:
        staging = directory / f".staged-{version}"
        with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
            serialized = v1.placeholder(tf.string, [None], name="tf_example")
            features = tf.io.parse_example(
                serialized,
                {
                    "x": tf.io.FixedLenFeature([1], tf.float32),
                    "y": tf.io.FixedLenFeature([1], tf.float32, default_value=[0.0]),
                },
            )
            x, y = features["x"], features["y"]  # [batch, 1]
            offset = v1.Variable(float(version), name="offset")
            batch = tf.shape(x)[0]
            classes = tf.tile(tf.constant([[b"sum", b"difference"]]), [batch, 1])
            scores = tf.concat([x + y, x - y], axis=1)
            outputs = 2.0 * x + y + offset
            plain_x = v1.placeholder(tf.float32, [None], name="x")
            signatures = {
                "classify": v1.saved_model.classification_signature_def(
                    serialized, classes, scores
                ),
                "regress": v1.saved_model.regression_signature_def(serialized, outputs),
                "regress_native": build(
                    {"inputs": info(serialized)},
                    {"outputs": info(tf.squeeze(outputs, 1))},
                    "tensorflow/serving/predict",
                ),
                "scores_only": build(
                    {"inputs": info(serialized)},
                    {"scores": info(tf.concat([x, y], axis=1))},
                    "tensorflow/serving/classify",
                ),
                "bad_scores": build(
                    {"inputs": info(serialized)},
                    {"scores": info(tf.squeeze(x + y, 1))},
                    "tensorflow/serving/classify",
                ),
                "serving_default": v1.saved_model.predict_signature_def(
                    {"x": plain_x}, {"y": 2.0 * plain_x + offset}
                ),
            }
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(str(staging))
            builder.add_meta_graph_and_variables(
                session, [v1.saved_model.tag_constants.SERVING], signature_def_map=signatures
            )
            builder.save()
        if warmup:
            extra = staging / "assets.extra"
            extra.mkdir()
            with tf.io.TFRecordWriter(str(extra / "tf_serving_warmup_requests")) as writer:
                for kind in ("classify", "regress"):
                    for i in range(warmup):
                        log = prediction_log_pb2.PredictionLog()
                        if kind == "classify":
                            request: Any = classification_pb2.ClassificationRequest()
                            target = log.classify_log.request
                        else:
                            request = regression_pb2.RegressionRequest()
                            target = log.regress_log.request
                        request.model_spec.name = "model"
                        request.model_spec.signature_name = kind
                        example = request.input.example_list.examples.add()
                        example.features.feature["x"].float_list.value.append(float(i))
                        target.CopyFrom(request)
                        writer.write(log.SerializeToString())
                for i in range(warmup):
                    multi = inference_pb2.MultiInferenceRequest()
                    for method in ("classify", "regress"):
                        task = multi.tasks.add()
                        task.model_spec.name = "model"
                        task.model_spec.signature_name = method
                        task.method_name = f"tensorflow/serving/{method}"
                    example = multi.input.example_list.examples.add()
                    example.features.feature["x"].float_list.value.append(float(i))
                    log = prediction_log_pb2.PredictionLog()
                    log.multi_inference_log.request.CopyFrom(multi)
                    writer.write(log.SerializeToString())
        os.rename(staging, directory / str(version))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
