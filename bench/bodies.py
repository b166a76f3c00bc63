"""The body of the benchmarks' predict request for each model (REST's row format).

Its own module, stdlib only: the model library's export records each model's
answer to it (bench/answers.py, in the image), and the load clients send it.
"""

from __future__ import annotations

import json

#: The file beside a benchmark model's versions that holds its answer to the request.
ANSWER = "answer.json"


def request_body(model: str) -> bytes:
    if model == "half_plus_two":
        return json.dumps({"instances": [1.0, 2.0, 5.0]}).encode()
    if model == "cnn":  # bench/session_probe.py's CNN: one 32x32x3 image
        flat = [i % 13 / 13.0 for i in range(32 * 32 * 3)]
        pixels = [flat[i : i + 3] for i in range(0, len(flat), 3)]
        image = [pixels[row : row + 32] for row in range(0, len(pixels), 32)]
        return json.dumps({"instances": [image]}).encode()
    rows = [[((i * 7 + j) % 13) / 13.0 for j in range(32)] for i in range(8)]
    return json.dumps({"instances": rows}).encode()
