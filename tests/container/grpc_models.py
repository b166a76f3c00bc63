"""The models test_grpc serves (test_answers serves them too), and requests that name them.

MODELS maps each /models/NAME to its model library source (harness/models.py):
plus/1 and plus/2 (y = x + V, make_models.py), dtypes/1 (identity for every
dtype), gated/1 (answers once the test opens the gate the call names,
gates.py), matmul/1 and defaults/1 (an input with a default value), from
make_grpc_models.py, and examples/1 (classify and regress signatures,
make_models.py --kind classify_regress). MODEL_CONFIGS lists them as
model_config_list entries (plus with its labels stable -> 1, canary -> 2).
"""

from __future__ import annotations

from typing import Any

from harness.servers import ModelSource
from tests.container.gates import Gate

MODELS: dict[str, ModelSource] = {
    "plus": ("plus", (1, 2)),
    "dtypes": "grpc/dtypes",
    "gated": "grpc/gated",
    "examples": "examples",
    "matmul": "grpc/matmul",
    "defaults": "grpc/defaults",
}
MODEL_CONFIGS = """\
  config { name: "plus" base_path: "/models/plus"
           model_version_policy { all {} }
           version_labels { key: "stable" value: 1 } version_labels { key: "canary" value: 2 } }
  config { name: "dtypes" base_path: "/models/dtypes" }
  config { name: "gated" base_path: "/models/gated" }
  config { name: "examples" base_path: "/models/examples" }
  config { name: "matmul" base_path: "/models/matmul" }
  config { name: "defaults" base_path: "/models/defaults" }
"""
CONFIG = f"\nmodel_config_list {{\n{MODEL_CONFIGS}}}\n"


def x_tensor(*values: float, dtype: str = "float32") -> dict[str, Any]:
    return {"values": list(values), "dtype": dtype}


def gated(name: str, x: float = 1.0, **op: Any) -> dict[str, Any]:
    """A predict of gated/1 that stays in flight until the test opens gate `name`."""
    gate = {"values": Gate.path(name), "dtype": "bytes"}
    return {"op": "predict", "model": "gated", "inputs": {"x": x_tensor(x), "gate": gate}, **op}


def gate_volume(gate: Gate) -> tuple[tuple[str, str, str], ...]:
    """`gate`'s mount as ServerSpec.volumes."""
    return tuple((host, mount["bind"], mount["mode"]) for host, mount in gate.volume.items())
