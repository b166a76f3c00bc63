"""Export a SavedModel that uses TF Text's ops, in the image (tests/container/test_op_libraries.py).

`tokens`: strings in, the number of whitespace-separated tokens of each out
(TF Text's WhitespaceTokenizer, an op TensorFlow itself does not have).
Usage: python make_text_model.py DIRECTORY (writes DIRECTORY/text/1).
"""

from __future__ import annotations

import sys
from pathlib import Path

import tensorflow as tf
import tensorflow_text as text


def main(directory: Path) -> int:
    module = tf.Module()
    module.tokenizer = text.WhitespaceTokenizer()

    def count(sentences: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"tokens": module.tokenizer.tokenize(sentences).row_lengths()}

    signature = tf.function(
        count, input_signature=[tf.TensorSpec([None], tf.string, name="sentences")]
    )
    target = directory / "text" / "1"
    tf.saved_model.save(
        module, str(target), signatures={"serving_default": signature.get_concrete_function()}
    )
    for path in directory.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    print(f"exported {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
