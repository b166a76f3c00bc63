"""The memory a version's load takes for its graph (runs in the image).

    python graph_load_memory.py export DIR MIB     DIR/1: a TF1 export whose graph holds
                                                   a MIB MiB float32 constant
    python graph_load_memory.py measure DIR MODE   load DIR/1 in this process and print
                                                   its memory as JSON

MODE "server" loads as the server does (model.bundle.open_saved_model);
"tensorflow" as it did before, with TensorFlow's own
tf.compat.v1.saved_model.loader.load. The figures are the process's resident
memory (VmRSS, and VmHWM, the kernel's peak, reset through
/proc/self/clear_refs at each stage): before the load, its peak, after it,
and the peak within each stage the load goes through (reading and parsing
the file, TensorFlow's import of the GraphDef, the restore, the init op).
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


def status() -> dict[str, int]:
    """VmRSS and VmHWM in bytes."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def export(directory: Path, mib: int) -> None:
    import numpy as np  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    v1 = tf.compat.v1
    with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
        x = v1.placeholder(tf.float32, [None], name="x")
        values = np.random.default_rng(0).random(mib * MIB // 4, dtype=np.float32)
        big = tf.constant(values, name="big")
        y = tf.identity(x + big[0], name="y")
        signatures = {"serving_default": v1.saved_model.predict_signature_def({"x": x}, {"y": y})}
        builder = v1.saved_model.Builder(str(directory / "1"))
        builder.add_meta_graph_and_variables(
            session, [v1.saved_model.tag_constants.SERVING], signature_def_map=signatures
        )
        builder.save()


def measure(directory: Path, mode: str) -> dict[str, Any]:
    import numpy as np  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415
    from tensorflow.python.client import pywrap_tf_session  # noqa: PLC0415
    from tensorflow.python.framework import importer  # noqa: PLC0415
    from tensorflow.python.training import saver as tf_saver  # noqa: PLC0415

    from tf_entrypoint.serving.model import bundle, signatures  # noqa: PLC0415

    stages: list[dict[str, Any]] = []
    depth = [0]

    def staged(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """`function` with its memory recorded: the peak within it (a stage inside
        another records what it found and kept, without resetting the outer peak)."""

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            before = status()["VmRSS"]
            outer = depth[0] == 0
            if outer:
                reset_peak()
            depth[0] += 1
            try:
                return function(*args, **kwargs)
            finally:
                depth[0] -= 1
                now = status()
                stages.append(
                    {
                        "stage": name,
                        "before": before,
                        "peak": now["VmHWM"] if outer else None,
                        "after": now["VmRSS"],
                    }
                )

        return wrapper

    from tensorflow.python.saved_model import loader_impl  # noqa: PLC0415

    loader_impl.parse_saved_model = staged(
        "TensorFlow's parse_saved_model", loader_impl.parse_saved_model
    )
    bundle.read_saved_model = staged("read_saved_model", signatures.read_saved_model)  # type: ignore[attr-defined]
    tf_saver._import_meta_graph_with_return_elements = staged(
        "import_meta_graph", tf_saver._import_meta_graph_with_return_elements
    )
    # importer calls it through its alias of pywrap_tf_session.
    importer.c_api.TF_GraphImportGraphDefWithResults = staged(
        "(in import_meta_graph) the C++ import",
        pywrap_tf_session.TF_GraphImportGraphDefWithResults,
    )
    tf_saver.Saver.restore = staged("restore", tf_saver.Saver.restore)
    tf.zeros([1]).numpy()  # TensorFlow's runtime up before the baseline
    gc.collect()
    base = status()["VmRSS"]
    reset_peak()
    if mode == "server":
        loaded: Any = bundle.open_saved_model(directory / "1")
    else:
        graph = tf.Graph()
        session = tf.compat.v1.Session(graph=graph)
        with bundle.quiet():
            meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(directory / "1"))
        loaded = (session, meta)
    peak = status()["VmHWM"]
    gc.collect()
    after = status()["VmRSS"]
    # One call, as a warm-up makes: TensorFlow's Session makes its kernels then.
    if mode == "server":
        loaded[0].run_tensors({"x:0": np.array([1.0], np.float32)}, ["y:0"])
    else:
        loaded[0].run("y:0", {"x:0": np.array([1.0], np.float32)})
    gc.collect()
    called = status()
    graph_bytes = (directory / "1" / "saved_model.pb").stat().st_size
    del loaded
    return {
        "mode": mode,
        "graph_bytes": graph_bytes,
        "baseline": base,
        "peak_over_baseline": peak - base,
        "after_over_baseline": after - base,
        "peak_per_graph_byte": round((peak - base) / graph_bytes, 2),
        "after_per_graph_byte": round((after - base) / graph_bytes, 2),
        "after_a_call_per_graph_byte": round((called["VmRSS"] - base) / graph_bytes, 2),
        "peak_with_the_call_per_graph_byte": round((called["VmHWM"] - base) / graph_bytes, 2),
        "stages": [
            {
                "stage": s["stage"],
                "rss_before_mib": round((s["before"] - base) / MIB, 1),
                "peak_mib": None if s["peak"] is None else round((s["peak"] - base) / MIB, 1),
                "rss_after_mib": round((s["after"] - base) / MIB, 1),
            }
            for s in stages
        ],
    }


def main(argv: list[str]) -> int:
    if argv[0] == "export":
        export(Path(argv[1]), int(argv[2]))
        return 0
    print(json.dumps(measure(Path(argv[1]), argv[2]), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
