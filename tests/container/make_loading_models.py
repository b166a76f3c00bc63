"""Export the loading tests' SavedModels (runs in the image).

    python make_loading_models.py DIR

- DIR/keras_in_module/1: a tf.Module holding a Keras 3 Sequential model
  (Input(1), Dense(1) of ones and zeros: y = x), saved with
  tf.saved_model.save, signature serving_default x float32 [None] -> y
  [None]: the demo's layout. Keras 3 writes its graph so that restoring it in
  a Session leaves the model's variables unset (keras-team/keras#20095).
- DIR/keras_unrepairable/1: keras_in_module/1 with the nodes that say which
  restored variable each model variable was copied into (the copies'
  initializers) taken out of its graph: a Session cannot restore it, and
  nothing says how to set its variables (tf.saved_model.load, which goes by
  the object graph, still serves it). No exporter is known to write one; it
  stands for whatever Keras or TensorFlow may write next.
- DIR/outputs/1: serving_default x float32 [None] -> y0 ... y7 = x + i, eight
  outputs: 255 sets of outputs a gRPC output_filter can ask for.
- DIR/counted/1: a TF1 graph (SavedModelBuilder) whose classify and regress
  signatures share their inputs (serialized tf.Examples, feature x float
  [1]) and one node, y = x, that adds 1 to a resource variable `runs` each
  time a Session run computes it; classify's scores are [y, -y] with classes
  ["pos", "neg"], regress's outputs y; signature "count" (predict: any
  float input, unused) answers `runs`. So `runs` says how many Session runs
  computed the shared node.
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
    unrepairable(directory / "keras_in_module" / "1", directory / "keras_unrepairable" / "1")

    def plus_each(x: Any) -> dict[str, Any]:
        return {f"y{i}": x + float(i) for i in range(OUTPUTS)}

    many = tf.function(plus_each, input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    module = tf.Module()
    module.serve = many
    tf.saved_model.save(
        module, str(directory / "outputs" / "1"), signatures={"serving_default": many}
    )
    counted(directory / "counted" / "1")
    return 0


def counted(target: Path) -> None:
    """DIR/counted/1 (the module's docstring)."""
    import tensorflow as tf  # noqa: PLC0415

    v1 = tf.compat.v1
    with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
        serialized = v1.placeholder(tf.string, [None], name="tf_example")
        x = tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([1], tf.float32)})["x"]
        runs = v1.Variable(0.0, name="runs", use_resource=True)
        with tf.control_dependencies([runs.assign_add(1.0)]):
            y = tf.identity(x, name="y")
        classes = tf.tile(tf.constant([[b"pos", b"neg"]]), [tf.shape(y)[0], 1])
        unused = v1.placeholder(tf.float32, [None], name="unused")
        signatures = {
            "classify": v1.saved_model.classification_signature_def(
                serialized, classes, tf.concat([y, -y], axis=1)
            ),
            "regress": v1.saved_model.regression_signature_def(serialized, y),
            "count": v1.saved_model.predict_signature_def(
                {"unused": unused}, {"runs": runs.read_value()}
            ),
        }
        session.run(v1.global_variables_initializer())
        builder = v1.saved_model.Builder(str(target))
        builder.add_meta_graph_and_variables(
            session, [v1.saved_model.tag_constants.SERVING], signature_def_map=signatures
        )
        builder.save()


def unrepairable(source: Path, target: Path) -> None:
    """A copy of `source` without its copies' initializers (VAR/Initializer/..., VAR/Assign)."""
    import shutil  # noqa: PLC0415

    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415

    shutil.copytree(source, target)
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((source / "saved_model.pb").read_bytes())
    graph = saved.meta_graphs[0].graph_def
    kept = [
        node
        for node in graph.node
        if not ("/Initializer/" in node.name or node.name.endswith("/Assign"))
    ]
    assert len(kept) < len(graph.node), "no initializer to take out"
    del graph.node[:]
    graph.node.extend(kept)
    (target / "saved_model.pb").write_bytes(saved.SerializeToString())


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
