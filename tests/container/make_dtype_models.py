"""Export the dtype sweep's SavedModel (runs in the image) and what it answers.

    python make_dtype_models.py DIR

- DIR/dtypes/1: for every TensorFlow dtype D a signature can be built with
  (SWEEP), two signatures:
  - `to_D`: x (float32 [None]) -> y (D [None]), y = x converted to D
    (tf.cast; tf.strings.as_string for string; tf.quantization.quantize
    over [0, 10] for the quantized types; a TensorList for variant): D as an
    output, whatever the protocol can carry as input;
  - `echo_D`: x (D [None]) -> y = x: D as an input (and its output).
- DIR/walk/1 and /2: serving_default takes x (float32 [None, 2]) and n (int64
  [None]) and returns y = 2x (float32 [None, 2]) and m = n + 1 (int64 [None]):
  the Open Inference Protocol's error walk sends it every mistake.
- DIR/dtypes.json: per dtype, `to` and `echo` (whether each signature was
  built, else why not), and `expected`: y of to_D for X as TensorFlow
  computes it, made JSON (dtype_client.plain: floats as floats, complex as
  [re, im], quantized as their integers, strings as text), which echo_D is
  sent and must give back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dtype_client import SWEEP, X, plain, tf_dtype  # type: ignore[import-not-found]


def convert(tf: Any, name: str, x: Any, through_int: bool = False) -> Any:
    """x (float32) as dtype `name`, as to_NAME returns it (`through_int`: cast to int32
    first, for the types TensorFlow casts only integers to, such as int4)."""
    dtype = tf_dtype(tf, name)
    if through_int:
        return tf.cast(tf.cast(x, tf.int32), dtype)
    if name == "string":
        return tf.strings.as_string(x, precision=1)
    if name.startswith(("qint", "quint")):
        return tf.quantization.quantize(x, 0.0, 10.0, dtype).output
    if name == "variant":
        return tf.raw_ops.TensorListFromTensor(tensor=x, element_shape=tf.constant([], tf.int32))
    if name == "resource":
        return tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name="v")
    return tf.cast(x, dtype)


def main(directory: Path) -> int:
    import tensorflow as tf  # noqa: PLC0415

    module = tf.Module()
    signatures: dict[str, Any] = {}
    report: dict[str, Any] = {}
    for name in SWEEP:
        entry: dict[str, Any] = {}
        report[name] = entry
        dtype = tf_dtype(tf, name)
        if dtype is None:
            entry["to"] = entry["echo"] = f"this TensorFlow has no tf.{name}"
            continue

        def echo(x: Any) -> dict[str, Any]:
            return {"y": tf.identity(x)}

        for through_int in (False, True):

            def to(x: Any, name: str = name, through_int: bool = through_int) -> dict[str, Any]:
                return {"y": convert(tf, name, x, through_int)}

            spec = tf.TensorSpec([None], tf.float32, name="x")
            try:
                to_fn = tf.function(to, input_signature=[spec])
                result = to_fn(tf.constant(X, tf.float32))["y"]
                opaque = name in ("variant", "resource")
                entry["expected"] = None if opaque else plain(result.numpy())
                signatures[f"to_{name}"] = to_fn
                entry["to"] = True
                break
            except Exception as err:  # noqa: BLE001 - reported: the test says which were left out
                entry["to"] = f"{type(err).__name__}: {str(err)[:300]}"
        try:
            echo_fn = tf.function(echo, input_signature=[tf.TensorSpec([None], dtype, name="x")])
            echo_fn.get_concrete_function()
            signatures[f"echo_{name}"] = echo_fn
            entry["echo"] = True
        except Exception as err:  # noqa: BLE001
            entry["echo"] = f"{type(err).__name__}: {str(err)[:300]}"
    for key, function in signatures.items():
        setattr(module, key, function)
    try:
        tf.saved_model.save(module, str(directory / "dtypes" / "1"), signatures=signatures)
    except Exception:  # noqa: BLE001 - which one: found below
        # Save the signatures one at a time to find the ones a SavedModel refuses.
        kept = {}
        for key, function in signatures.items():
            probe = tf.Module()
            setattr(probe, key, function)
            try:
                tf.saved_model.save(probe, str(directory / "probe"), signatures={key: function})
                kept[key] = function
            except Exception as err:  # noqa: BLE001
                kind, name = key.split("_", 1)
                report[name][kind] = f"not saved: {type(err).__name__}: {str(err)[:300]}"
        module = tf.Module()
        for key, function in kept.items():
            setattr(module, key, function)
        tf.saved_model.save(module, str(directory / "dtypes" / "1"), signatures=kept)
    walk = tf.function(
        lambda x, n: {"y": x * 2.0, "m": n + 1},
        input_signature=[
            tf.TensorSpec([None, 2], tf.float32, name="x"),
            tf.TensorSpec([None], tf.int64, name="n"),
        ],
    )
    for version in ("1", "2"):
        holder = tf.Module()
        holder.serve = walk
        tf.saved_model.save(
            holder, str(directory / "walk" / version), signatures={"serving_default": walk}
        )
    (directory / "dtypes.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
