"""The Open Inference Protocol server that test_v2_clients and test_every_answer share.

One spec, so that the pool (harness/servers.py) starts it once for both
modules where they run in one session (one pytest worker). It serves, from
the model library:

- for test_v2_clients: plus/1 and plus/2 (y = x + V, every version served),
  mixed/1, complex/1 and datatypes/1 (make_v2_models.py's dtypes/1: every
  datatype the protocol and TensorFlow share, returned unchanged);
- for test_every_answer: dtypes/1 (make_dtype_models.py's dtype sweep, under
  the name its client, dtype_client.py, calls) and walk/1-2 (the error walk's
  model, every version served).

Under --cpus 1, with REST (8501) and gRPC (8500) published on 127.0.0.1,
--max-body-bytes 65536. The tests only read it (ServerPool.shared): each
counts what it needs as deltas and changes no state.
"""

from __future__ import annotations

from harness.servers import ModelSource, ServerSpec

MAX_BODY = 65536
CONFIG = """
model_config_list {
  config { name: "plus" base_path: "/models/plus" model_version_policy { all {} } }
  config { name: "mixed" base_path: "/models/mixed" }
  config { name: "complex" base_path: "/models/complex" }
  config { name: "datatypes" base_path: "/models/datatypes" }
  config { name: "dtypes" base_path: "/models/dtypes" }
  config { name: "walk" base_path: "/models/walk" model_version_policy { all {} } }
}
"""
MODELS: dict[str, ModelSource] = {
    "plus": ("plus", (1, 2)),
    "mixed": "v2/mixed",
    "complex": "v2/complex",
    "datatypes": "v2/dtypes",
    "dtypes": "dtype/dtypes",
    "walk": "dtype/walk",
}
SPEC = ServerSpec(
    args=(
        "serve", "--wait-for-model", "120", "--model_config_file=/models/models.config",
        f"--max-body-bytes={MAX_BODY}",
    ),
    models=tuple(sorted(MODELS.items())),
    files=(("models.config", CONFIG),),
    publish_grpc=True,
)  # fmt: skip
