"""Export a model that computes until the test lets it finish (runs in the image).

    python make_gated_models.py DIR

DIR/gated/1, signature serving_default: key string [batch] -> y int32 [batch]
(each key's length). A call with first key K writes GATE/ran-K when it starts
in TensorFlow, then spins (a tf.while_loop that lists GATE/open-K on every
step) until the test creates that file; an empty key does not wait (the
server's warm-up sends one). GATE is /gate, a directory the test mounts.

So a call lasts exactly as long as the test wants, on any CPU, idle or busy,
and the test sees whether and when a call ran in TensorFlow: nothing here
depends on a CPU's speed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

GATE = "/gate"


def main(directory: Path) -> int:
    import tensorflow as tf  # noqa: PLC0415

    module = tf.Module()

    def gated(key: Any) -> dict[str, Any]:
        name = key[0]
        ran = tf.io.write_file(tf.strings.join([GATE, "/ran-", name]), "")

        def closed(step: Any) -> Any:
            # The step's empty suffix makes every listing depend on the loop
            # variable, so no optimiser can hoist it out of the loop.
            suffix = tf.strings.substr(tf.strings.as_string(step), 0, 0)
            pattern = tf.strings.join([GATE, "/open-", name, suffix])
            waiting = tf.equal(tf.size(tf.io.matching_files(pattern)), 0)
            return tf.logical_and(tf.not_equal(name, ""), waiting)

        with tf.control_dependencies([ran]):
            start = tf.constant(0, tf.int64)
        (steps,) = tf.while_loop(closed, lambda step: [step + 1], [start])
        with tf.control_dependencies([steps]):
            return {"y": tf.strings.length(key)}

    module.gated = tf.function(gated, input_signature=[tf.TensorSpec([None], tf.string, "key")])
    tf.saved_model.save(
        module, str(directory / "gated" / "1"), signatures={"serving_default": module.gated}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
