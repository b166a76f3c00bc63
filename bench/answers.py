"""Record each benchmark model's answer to the load client's request (runs in the image).

    python bench/answers.py ROOT

The model library's last export (harness/models.py): for each folder of
FOLDERS under the library's ROOT, the newest version's `serving_default` run
by TensorFlow on bench/bodies.py's request for that model, written as
FOLDER/answer.json ({"y": the output as nested lists}). A benchmark copies
the folder with its answer; bench/protocol_load.py compares the first answer
of every window with it, so the load client needs no TensorFlow. Servers
ignore the file: a model's versions are its numbered folders.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, in the image

from bench.bodies import ANSWER, request_body

#: Library folder -> the model whose request it answers.
FOLDERS = {
    "half_plus_two/half_plus_two": "half_plus_two",
    "mlp": "mlp",
    "session/half_plus_two": "half_plus_two",
    "session/mlp": "mlp",
    "session/cnn": "cnn",
}


def main(argv: list[str]) -> int:
    import tensorflow as tf  # noqa: PLC0415 - in the image only

    (root,) = argv
    for folder, model in FOLDERS.items():
        base = Path(root) / folder
        newest = max((p for p in base.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        rows = json.loads(request_body(model))["instances"]
        loaded = tf.saved_model.load(str(newest))
        out = loaded.signatures["serving_default"](x=tf.constant(rows, tf.float32))
        (base / ANSWER).write_text(json.dumps({"y": out["y"].numpy().tolist()}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
