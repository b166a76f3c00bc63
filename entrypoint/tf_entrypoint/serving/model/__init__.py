"""The TensorFlow backend's loader: open a SavedModel version, warm it up,
wrap it with batching (docs/architecture.md, ``model/``).

The only package of the server that imports TensorFlow's Python API:
``bundle.py`` (the SavedModel as a Session bundle), ``signatures.py``,
``servable.py`` (``TensorFlowServable``, its one ``run()``), ``warmup.py`` and
``batching.py`` beside it, ``profiler.py``. Importing it does not touch the
garbage collector: ``main`` freezes it once the server is built.
"""

from __future__ import annotations

from pathlib import Path

from tf_entrypoint.server_flags import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_GRAPH_BYTES
from tf_entrypoint.serving.core import limits
from tf_entrypoint.serving.core.batching import BatchHooks, BatchingParameters
from tf_entrypoint.serving.model.batching import Batching
from tf_entrypoint.serving.model.bundle import (
    LOADER_VARIABLE,
    LOADERS,
    MAX_CALLABLES,
    OP_LIBRARIES,
    open_saved_model,
    register_op_libraries,
)
from tf_entrypoint.serving.model.servable import TensorFlowServable
from tf_entrypoint.serving.model.signatures import read_signatures
from tf_entrypoint.serving.model.warmup import MAX_WARMUP_RECORDS, WARMUP_FILE, warm_up

__all__ = [
    "LOADERS",
    "LOADER_VARIABLE",
    "MAX_CALLABLES",
    "MAX_WARMUP_RECORDS",
    "OP_LIBRARIES",
    "WARMUP_FILE",
    "TensorFlowServable",
    "load",
    "open_saved_model",
    "read_signatures",
    "register_op_libraries",
]


def load(
    directory: Path,
    version: int,
    *,
    warmup: bool = True,
    warmup_iterations: int = 1,
    method_name_check: bool = False,
    batching: BatchingParameters | None = None,
    batch_hooks: BatchHooks | None = None,
    max_body_bytes: int | None = None,
    loader: str = LOADERS[0],
    max_graph_bytes: int = DEFAULT_MAX_GRAPH_BYTES,
) -> TensorFlowServable:
    """Load a version; warm it up unless `warmup` is False (--enable_model_warmup=false).

    `warmup_iterations`: --num_request_iterations_for_warmup, replays of each record.
    `method_name_check`: TF Serving's --enable_signature_method_name_check
    (classify/regress then need the signature's method_name to say so).
    `batching`: --enable_batching's parameters (warm-up runs unbatched).
    `max_body_bytes`: --max-body-bytes, which bounds what a warm-up record may
    decode to (limits.py; default: the flag's default).
    `loader`: SERVE_SAVED_MODEL_LOADER, "session" or "tf2" (open_saved_model).
    `max_graph_bytes`: --max-graph-bytes: a larger graph file fails the load
    (DATA_LOSS) before it is read.
    A version whose warm-up fails is closed before the error is raised.
    """
    servable = TensorFlowServable(
        directory,
        version,
        method_name_check=method_name_check,
        loader=loader,
        max_graph_bytes=max_graph_bytes,
    )
    body = DEFAULT_MAX_BODY_BYTES if max_body_bytes is None else max_body_bytes
    try:
        if warmup:
            warm_up(servable, limit=limits.expansion_limit(body), iterations=warmup_iterations)
    except BaseException:
        servable.close()
        raise
    if batching is not None:
        servable.runner = Batching(
            servable.direct,
            servable.signatures,
            batching,
            batch_hooks or BatchHooks(),
            version=version,
        )
    return servable
