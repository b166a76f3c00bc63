"""Export a model that computes until the test lets it finish (runs in the image).

    python make_gated_models.py DIR

DIR/gated/1, signature serving_default: key string [batch] -> y int32 [batch]
(each key's length). A call with first key K writes GATE/ran-K when it starts
in TensorFlow, then spins (a tf.while_loop that lists GATE/open-K on every
step, gates.wait_for_file) until the test creates that file; an empty key does not wait (the
server's warm-up sends one). GATE is /gate, a directory the test mounts.

So a call lasts exactly as long as the test wants, on any CPU, idle or busy,
and the test sees whether and when a call ran in TensorFlow: nothing here
depends on a CPU's speed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gates import wait_for_file  # type: ignore[import-not-found]  # run as /t/make_gated_models.py

GATE = "/gate"


def main(directory: Path) -> int:
    import tensorflow as tf  # noqa: PLC0415

    module = tf.Module()

    def gated(key: Any) -> dict[str, Any]:
        name = key[0]
        ran = tf.io.write_file(tf.strings.join([GATE, "/ran-", name]), "")

        with tf.control_dependencies([ran]):
            pattern = tf.strings.join([GATE, "/open-", name])
        checks = wait_for_file(pattern, held=tf.not_equal(name, ""))
        with tf.control_dependencies([checks]):
            return {"y": tf.strings.length(key)}

    module.gated = tf.function(gated, input_signature=[tf.TensorSpec([None], tf.string, "key")])
    tf.saved_model.save(
        module, str(directory / "gated" / "1"), signatures={"serving_default": module.gated}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
