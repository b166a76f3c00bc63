"""The dtypes grpc_client.py sends in a Predict, and make_grpc_models.py's echo model takes.

Its own module, so that the model library (harness/models.py, which hashes
what its export scripts import) is not exported again when the client changes.
"""

from __future__ import annotations

from typing import Any

#: Every dtype TF Serving takes in a Predict, with values that survive the trip.
DTYPES: dict[str, list[Any]] = {
    "float16": [0.5, -2.0, 1024.0],
    "bfloat16": [0.5, -2.0, 256.0],
    "float32": [0.1, -2.5, 3.4e38],
    "float64": [0.1, -2.5, 1e300],
    "int8": [-128, 0, 127],
    "int16": [-32768, 1, 32767],
    "int32": [-(2**31), 2, 2**31 - 1],
    "int64": [-(2**63), 3, 2**63 - 1],
    "uint8": [0, 1, 255],
    "uint16": [0, 2, 65535],
    "uint32": [0, 3, 2**32 - 1],
    "uint64": [0, 4, 2**64 - 1],
    "bool": [True, False, True],
    "string": [b"a", b"\xff\x00binary", "\u00e9t\u00e9".encode()],
    "complex64": [1 + 2j, -0.5j, 3.0],
    "complex128": [1e-300 + 2j, -0.5j, 3.0],
}
