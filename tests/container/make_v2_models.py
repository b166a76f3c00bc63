"""Export the Open Inference Protocol tests' SavedModels (runs in the image).

    python make_v2_models.py DIR

- DIR/mixed/1: serving_default takes x (float32 [None, 3]), n (int64 [None]),
  k (int32 [None]), s (string [None]) and b (bool [None]) and returns
  y = 2x + 0.5 (float32 [None, 3]), total = each row's sum of x (float32 [None]),
  n_next = n + 1 (int64), k_twice = 2k (int32), s_tagged = s + b"!" (string)
  and b_not = not b (bool): one output per v2 datatype family, each a known
  function of its input, so a client sees how the server read and wrote it.
- DIR/complex/1: serving_default takes z (complex64 [None]) and returns
  re = real(z) (float32 [None]): a datatype with no Open Inference Protocol
  equivalent.
- DIR/dtypes/1: serving_default takes one input [None] per datatype the protocol
  and TensorFlow share, named after it in lower case (bool, uint8, uint16,
  uint32, uint64, int8, int16, int32, int64, fp16, fp32, fp64, bytes, bf16),
  and returns each unchanged as NAME_out: whatever the server made of an
  input's JSON or bytes comes back for the client to compare. Its signature
  "typed" is the same without fp16 and bf16 (which have no typed contents
  over gRPC).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def main(directory: Path) -> int:
    import tensorflow as tf  # noqa: PLC0415

    def mixed(x: Any, n: Any, k: Any, s: Any, b: Any) -> dict[str, Any]:
        return {
            "y": x * 2.0 + 0.5,
            "total": tf.reduce_sum(x, axis=1),
            "n_next": n + 1,
            "k_twice": k * 2,
            "s_tagged": tf.strings.join([s, tf.fill(tf.shape(s), "!")]),
            "b_not": tf.logical_not(b),
        }

    serve = tf.function(
        mixed,
        input_signature=[
            tf.TensorSpec([None, 3], tf.float32, name="x"),
            tf.TensorSpec([None], tf.int64, name="n"),
            tf.TensorSpec([None], tf.int32, name="k"),
            tf.TensorSpec([None], tf.string, name="s"),
            tf.TensorSpec([None], tf.bool, name="b"),
        ],
    )
    module = tf.Module()
    module.serve = serve
    tf.saved_model.save(
        module, str(directory / "mixed" / "1"), signatures={"serving_default": serve}
    )

    real = tf.function(
        lambda z: {"re": tf.math.real(z)},
        input_signature=[tf.TensorSpec([None], tf.complex64, name="z")],
    )
    module = tf.Module()
    module.serve = real
    tf.saved_model.save(
        module, str(directory / "complex" / "1"), signatures={"serving_default": real}
    )
    dtypes = {
        "bool": tf.bool, "uint8": tf.uint8, "uint16": tf.uint16, "uint32": tf.uint32,
        "uint64": tf.uint64, "int8": tf.int8, "int16": tf.int16, "int32": tf.int32,
        "int64": tf.int64, "fp16": tf.float16, "fp32": tf.float32, "fp64": tf.float64,
        "bytes": tf.string, "bf16": tf.bfloat16,
    }  # fmt: skip
    specs = [tf.TensorSpec([None], dtype, name=name) for name, dtype in dtypes.items()]

    def echo(*tensors: Any) -> dict[str, Any]:
        return {f"{name}_out": tf.identity(t) for name, t in zip(dtypes, tensors, strict=True)}

    typed_names = [name for name in dtypes if name not in ("fp16", "bf16")]

    def echo_typed(*tensors: Any) -> dict[str, Any]:
        return {f"{name}_out": tf.identity(t) for name, t in zip(typed_names, tensors, strict=True)}

    serve = tf.function(echo, input_signature=specs)
    typed = tf.function(echo_typed, input_signature=[s for s in specs if s.name in typed_names])
    module = tf.Module()
    module.serve, module.typed = serve, typed
    tf.saved_model.save(
        module,
        str(directory / "dtypes" / "1"),
        signatures={"serving_default": serve, "typed": typed},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
