"""Export the models of TF Serving's end-to-end flows (runs in the image).

    python make_tfserving_models.py DIR

Each model is DIR/NAME/123 (TF Serving's testdata uses version 00000123; the
number is what a client sees). Known answers, so a test can check them:

- half_plus_two (TF1: tf.compat.v1 graph, SavedModelBuilder, tag serve):
  variables a = 0.5, b and c = 3; b is 0 in the checkpoint and set to 2 by
  the main op from the asset file assets/offset.txt ("2"), so y = 0.5x + 2
  only when the loader rewires the asset and runs the main op. A placeholder
  tf_example (string [None]) is parsed (features x, required, and x2, default
  0, both float [1]); x = identity(parsed x), "x:0", shape [-1, 1], is what
  the predict signature feeds: as in TF Serving's testdata, the fed tensor
  is not a placeholder. Signatures: serving_default (predict x -> y),
  classify_x_to_y (inputs: tf_example -> scores: y), regress_x_to_y
  (inputs -> outputs: y), regress_x_to_y2 (y2 = 0.5x + c) and
  regress_x2_to_y3 (inputs: x2 -> outputs: y3 = 0.5 x2 + 3, float input).
- half_plus_three (TF1, Estimator style): a placeholder x, float [None, 1],
  and y = a*x + offset with a = 0.5 a variable and offset = 3 read from a
  lookup table that the legacy init op fills from the asset
  assets/vocabulary.txt (the line number of "three"). Signatures
  serving_default (x -> y), classify_x_to_y and regress_x_to_y (tf_example
  -> the same y from the parsed feature x).
- half_plus_two_tf2 (TF2: tf.Module, tf.saved_model.save): y = a*x + b with
  a = 0.5 and b = 2 from a lookup table on an asset (TF2's init op);
  serving_default (x, float [None, 1] -> y), classify_x_to_y (inputs:
  serialized tf.Example [None] -> scores) and regress_x_to_y (inputs ->
  outputs).
- saved_model_save: tf.saved_model.save of a tf.train.Checkpoint with
  variables v1 = 3 and v2 = 2 and f(x) = {"y": v1 * v2 * x} traced on
  tf.TensorSpec(None, tf.float32) (unknown rank) as the only signature.
- two_signatures: tf.saved_model.save of a Checkpoint whose serving_default
  answers {"y": 1.0} and custom_signature_key {"y": 2.0}, both on
  TensorSpec(None, tf.float32).
- keras: a Keras Sequential model, Input(shape=(1,), name="x") then an
  identity Lambda named "y", saved with tf.saved_model.save(model) as TF
  Serving's test does. Keras 3 (the image's) names the signature's input
  "inputs" and its output "output_0", not x and y as Keras 2 did.
- keras_export: the same model saved with Keras 3's model.export(): input
  "x" (the Input layer's name), output "output_0".
- keras_distributed: the same with a Dense(1) of ones and zeros (y = x)
  built under a MirroredStrategy over two virtual CPUs, saved with
  tf.saved_model.save.

The original asset files are written to a temporary directory that is
removed before this program ends: a loader that read them from where they
were at export time, instead of the SavedModel's assets/, fails.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

VERSION = "123"


def main(directory: Path) -> int:
    import tensorflow as tf  # noqa: PLC0415

    # Two virtual CPUs for the MirroredStrategy export; before anything runs.
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    with tempfile.TemporaryDirectory() as originals:
        half_plus_two_tf1(directory / "half_plus_two" / VERSION, Path(originals))
        half_plus_three_tf1(directory / "half_plus_three" / VERSION, Path(originals))
        half_plus_two_tf2(directory / "half_plus_two_tf2" / VERSION, Path(originals))
    saved_model_save(directory / "saved_model_save" / VERSION)
    two_signatures(directory / "two_signatures" / VERSION)
    tf.saved_model.save(keras_sequential(), str(directory / "keras" / VERSION))
    keras_sequential().export(str(directory / "keras_export" / VERSION), verbose=False)
    with tf.distribute.MirroredStrategy(devices=["/cpu:0", "/cpu:1"]).scope():
        distributed = keras_sequential(dense=True)
    tf.saved_model.save(distributed, str(directory / "keras_distributed" / VERSION))
    return 0


def _features() -> dict[str, Any]:
    import tensorflow as tf  # noqa: PLC0415

    return {
        "x": tf.io.FixedLenFeature([1], tf.float32),
        "x2": tf.io.FixedLenFeature([1], tf.float32, default_value=[0.0]),
    }


def half_plus_two_tf1(export: Path, originals: Path) -> None:
    import tensorflow as tf  # noqa: PLC0415

    v1 = tf.compat.v1
    info = v1.saved_model.build_tensor_info
    build = v1.saved_model.build_signature_def
    constants = v1.saved_model.signature_constants
    asset = originals / "offset.txt"
    asset.write_text("2")
    with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
        # TF1 variables (VariableV2, not resource variables), as TF1 exports have.
        a = v1.Variable(0.5, name="a", use_resource=False)
        b = v1.Variable(0.0, name="b", use_resource=False)  # the main op sets 2
        c = v1.Variable(3.0, name="c", use_resource=False)
        serialized = v1.placeholder(tf.string, [None], name="tf_example")
        parsed = v1.io.parse_example(serialized, _features())
        x = tf.identity(parsed["x"], name="x")
        x2 = tf.identity(parsed["x2"], name="x2")
        y = tf.add(a * x, b, name="y")
        y2 = tf.add(a * x, c, name="y2")
        y3 = tf.identity(a * x2 + 3.0, name="y3")
        asset_path = tf.constant(str(asset), name="asset_path")
        v1.add_to_collection(v1.GraphKeys.ASSET_FILEPATHS, asset_path)
        main_op = tf.group(b.assign(tf.strings.to_number(tf.io.read_file(asset_path))))

        def regression(inputs: Any, outputs: Any) -> Any:
            return build(
                {constants.REGRESS_INPUTS: info(inputs)},
                {constants.REGRESS_OUTPUTS: info(outputs)},
                constants.REGRESS_METHOD_NAME,
            )

        signatures = {
            "serving_default": build({"x": info(x)}, {"y": info(y)}, constants.PREDICT_METHOD_NAME),
            "classify_x_to_y": build(
                {constants.CLASSIFY_INPUTS: info(serialized)},
                {constants.CLASSIFY_OUTPUT_SCORES: info(y)},
                constants.CLASSIFY_METHOD_NAME,
            ),
            "regress_x_to_y": regression(serialized, y),
            "regress_x_to_y2": regression(serialized, y2),
            "regress_x2_to_y3": regression(x2, y3),
        }
        session.run(v1.global_variables_initializer())
        builder = v1.saved_model.Builder(str(export))
        builder.add_meta_graph_and_variables(
            session,
            [v1.saved_model.tag_constants.SERVING],
            signature_def_map=signatures,
            assets_collection=v1.get_collection(v1.GraphKeys.ASSET_FILEPATHS),
            main_op=main_op,
        )
        builder.save()


def half_plus_three_tf1(export: Path, originals: Path) -> None:
    """An Estimator-era export: what TensorFlow 1.0 to 1.x wrote.

    Reference variables; signature
    TensorInfos without a tensor_shape (TensorFlow 1.0's build_tensor_info
    recorded none, as TF Serving's saved_model_half_plus_three shows); the
    table initialiser in the legacy_init_op collection, where the loaders of
    that time looked for it.
    """
    import tensorflow as tf  # noqa: PLC0415

    v1 = tf.compat.v1
    constants = v1.saved_model.signature_constants

    def info(tensor: Any) -> Any:
        described = v1.saved_model.build_tensor_info(tensor)
        described.ClearField("tensor_shape")
        return described

    vocabulary = originals / "vocabulary.txt"
    vocabulary.write_text("zero\none\ntwo\nthree\nfour\n")
    with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
        a = v1.Variable(0.5, name="a", use_resource=False)
        asset_path = tf.constant(str(vocabulary), name="asset_path")
        v1.add_to_collection(v1.GraphKeys.ASSET_FILEPATHS, asset_path)
        table = v1.lookup.StaticHashTable(
            v1.lookup.TextFileInitializer(
                asset_path,
                tf.string,
                v1.lookup.TextFileIndex.WHOLE_LINE,
                tf.int64,
                v1.lookup.TextFileIndex.LINE_NUMBER,
            ),
            default_value=-1,
        )
        # A scalar: the outputs have a static shape, [None, 1].
        offset = tf.reshape(tf.cast(table.lookup(tf.constant("three")), tf.float32), [])
        x = v1.placeholder(tf.float32, [None, 1], name="x")
        y = tf.add(a * x, offset, name="y")
        serialized = v1.placeholder(tf.string, [None], name="tf_example")
        parsed = v1.io.parse_example(serialized, _features())["x"]
        from_examples = tf.add(a * parsed, offset, name="y_from_examples")
        v1.add_to_collection(v1.saved_model.constants.LEGACY_INIT_OP_KEY, v1.tables_initializer())
        signatures = {
            "serving_default": v1.saved_model.build_signature_def(
                {"x": info(x)}, {"y": info(y)}, constants.PREDICT_METHOD_NAME
            ),
            "classify_x_to_y": v1.saved_model.build_signature_def(
                {constants.CLASSIFY_INPUTS: info(serialized)},
                {constants.CLASSIFY_OUTPUT_SCORES: info(from_examples)},
                constants.CLASSIFY_METHOD_NAME,
            ),
            "regress_x_to_y": v1.saved_model.build_signature_def(
                {constants.REGRESS_INPUTS: info(serialized)},
                {constants.REGRESS_OUTPUTS: info(from_examples)},
                constants.REGRESS_METHOD_NAME,
            ),
        }
        session.run(v1.global_variables_initializer())
        builder = v1.saved_model.Builder(str(export))
        builder.add_meta_graph_and_variables(
            session,
            [v1.saved_model.tag_constants.SERVING],
            signature_def_map=signatures,
            assets_collection=v1.get_collection(v1.GraphKeys.ASSET_FILEPATHS),
        )
        builder.save()


def half_plus_two_tf2(export: Path, originals: Path) -> None:
    import tensorflow as tf  # noqa: PLC0415

    vocabulary = originals / "tf2_vocabulary.txt"
    vocabulary.write_text("zero\none\ntwo\n")

    module = tf.Module()
    module.a = tf.Variable(0.5, name="a")
    module.table = tf.lookup.StaticHashTable(
        tf.lookup.TextFileInitializer(
            str(vocabulary),
            tf.string,
            tf.lookup.TextFileIndex.WHOLE_LINE,
            tf.int64,
            tf.lookup.TextFileIndex.LINE_NUMBER,
        ),
        default_value=-1,
    )

    def half_plus_two(x: Any) -> Any:
        return module.a * x + tf.cast(module.table.lookup(tf.constant("two")), tf.float32)

    def parsed(serialized: Any) -> Any:
        return tf.io.parse_example(serialized, _features())["x"]

    examples = [tf.TensorSpec([None], tf.string, name="inputs")]
    module.predict = tf.function(
        lambda x: {"y": half_plus_two(x)},
        input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")],
    )
    module.classify = tf.function(
        lambda serialized: {"scores": half_plus_two(parsed(serialized))},
        input_signature=examples,
    )
    module.regress = tf.function(
        lambda serialized: {"outputs": half_plus_two(parsed(serialized))},
        input_signature=examples,
    )
    tf.saved_model.save(
        module,
        str(export),
        signatures={
            "serving_default": module.predict,
            "classify_x_to_y": module.classify,
            "regress_x_to_y": module.regress,
        },
    )


def saved_model_save(export: Path) -> None:
    import tensorflow as tf  # noqa: PLC0415

    root = tf.train.Checkpoint()
    root.v1 = tf.Variable(3.0)
    root.v2 = tf.Variable(2.0)
    root.f = tf.function(lambda x: {"y": root.v1 * root.v2 * x})
    tf.saved_model.save(root, str(export), root.f.get_concrete_function(tf.TensorSpec(None)))


def two_signatures(export: Path) -> None:
    import tensorflow as tf  # noqa: PLC0415

    root = tf.train.Checkpoint()
    unknown_rank = [tf.TensorSpec(None, tf.float32)]
    root.f = tf.function(lambda x: {"y": 1.0}, input_signature=unknown_rank)
    root.g = tf.function(lambda x: {"y": 2.0}, input_signature=unknown_rank)
    tf.saved_model.save(
        root, str(export), signatures={"serving_default": root.f, "custom_signature_key": root.g}
    )


def keras_sequential(dense: bool = False) -> Any:
    import tensorflow as tf  # noqa: PLC0415

    model = tf.keras.Sequential()
    model.add(tf.keras.layers.Input(shape=(1,), dtype="float32", name="x"))
    if dense:
        model.add(tf.keras.layers.Dense(1, kernel_initializer="ones", bias_initializer="zeros"))
    model.add(tf.keras.layers.Lambda(lambda x: x, name="y"))
    return model


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
