"""--num_request_iterations_for_warmup in the real image: each warm-up record replayed N times.

A model exported with 3 warm-up records (make_models.py --warmup 3 --counting)
returns, beside y = x + 1, how many times it has been called in the server's
process. With the flag at 4 the first request after start-up is its 13th call
(3 records x 4 iterations, then this one); with the flag absent (TF Serving's
default, 1) its 4th. The server counts records, not calls, in
serving_model_warmup_records_total, as TF Serving counts them.
"""

from __future__ import annotations

import pytest

from harness.servers import ServerPool, ServerSpec

IMAGE_FLAVORS = ("cpu",)


@pytest.mark.parametrize(
    ("flags", "calls"), [([], 4.0), (["--num_request_iterations_for_warmup=4"], 13.0)]
)
def test_each_record_is_replayed_the_number_of_times_asked(
    servers: ServerPool, flags: list[str], calls: float
) -> None:
    # A fresh server: the count is of calls since its start.
    spec = ServerSpec(
        args=("serve", "--model_name=model", "--model_base_path=/models/model", *flags),
        models=(("model", "counting"),),
    )
    with servers.private(spec) as server:
        answer = server.post("/v1/models/model:predict", {"inputs": {"x": [1.0]}}, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"] == {"y": [2.0], "calls": calls}
        assert server.metric("serving_model_warmup_records_total", model="model") == 3
