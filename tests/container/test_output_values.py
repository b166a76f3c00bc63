"""A float32 output's values are read at C speed and are the values read before (issue 24).

model/servable.py reads a float32 output's values (the shortest text of each,
as a Python float) through orjson rather than NumPy's astype(str) and float(),
which were most of a wide REST answer's cost. check_output_values.py compares
the two readers bit for bit in the image, over the float32 values where
they could part (subnormals, the notation switch at 1e-4, the largest) and
random ones, and checks that NaN, the infinities and arrays orjson will not
read go to the general reader.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.docker import Containers

#: The server's code and NumPy are the same in both images.
IMAGE_FLAVORS = ("cpu",)

HERE = Path(__file__).resolve().parent


def test_float32_values_are_read_fast_and_the_same(containers: Containers) -> None:
    ran = containers.run(
        ["python", "/t/check_output_values.py"],
        volumes={str(HERE): {"bind": "/t", "mode": "ro"}},
        nano_cpus=1_000_000_000,
        timeout=300,
    )
    assert ran.exit_code == 0, ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result["bad"] == []
    assert result["checked"] > 4_000_000
    assert result["nonfinite_refused"] is True
    assert result["nonfinite_values"] == "[nan, inf, -inf, 1.0]"
    assert result["strided_refused"] is True
    assert result["strided_values"] == [0.0, 2.0, 4.0, 6.0]
    assert result["empty"] == []
    assert result["some"] == [0.1, -2.5, 1e-05, 3e38]
