"""--num_request_iterations_for_warmup in the real image: each warm-up record replayed N times.

A model exported with 3 warm-up records (make_models.py --warmup 3 --counting)
returns, beside y = x + 1, how many times it has been called in the server's
process. With the flag at 4 the first request after start-up is its 13th call
(3 records x 4 iterations, then this one); with the flag absent (TF Serving's
default, 1) its 4th. The server counts records, not calls, in
serving_model_warmup_records_total, as TF Serving counts them.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from harness.docker import Containers, metric_value, remove
from tests.container.test_grpc import Server, wait_ready

IMAGE_FLAVORS = ("cpu",)
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def counting(containers: Containers, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("warmup-iterations")
    root.chmod(0o777)
    ran = containers.run(
        ["python", "/t/make_models.py", "/models/model", "1", "--warmup", "3", "--counting"],
        volumes={
            str(root): {"bind": "/models", "mode": "rw"},
            str(HERE): {"bind": "/t", "mode": "ro"},
        },
        timeout=300,
    )
    assert ran.exit_code == 0, ran.stderr
    return root


@pytest.mark.parametrize(
    ("flags", "calls"), [([], 4.0), (["--num_request_iterations_for_warmup=4"], 13.0)]
)
def test_each_record_is_replayed_the_number_of_times_asked(
    containers: Containers, counting: Path, flags: list[str], calls: float
) -> None:
    container = containers.start(
        ["serve", "--model_name=model", "--model_base_path=/models/model", *flags],
        volumes={str(counting): {"bind": "/models", "mode": "ro"}},
        ports={"8501/tcp": ("127.0.0.1", None)},
    )
    try:
        container.reload()
        port = container.attrs["NetworkSettings"]["Ports"]["8501/tcp"][0]["HostPort"]
        server = Server(containers, container, f"http://127.0.0.1:{port}")
        wait_ready(server)
        answer = httpx2.post(
            f"{server.rest}/v1/models/model:predict", json={"inputs": {"x": [1.0]}}, timeout=60
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"] == {"y": [2.0], "calls": calls}
        page = httpx2.get(f"{server.rest}/metrics", timeout=60).text
        assert metric_value(page, "serving_model_warmup_records_total", model="model") == 3
    finally:
        remove(container)
