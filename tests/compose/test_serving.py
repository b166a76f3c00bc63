"""compose.yaml for real: train, serve, and talk to it as TF Serving's clients do.

All traffic goes to 127.0.0.1 (the ports compose publishes for this project),
every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
import subprocess
import threading
import time
from typing import Any

import httpx2
import pytest
from pytest_docker.plugin import DockerComposeExecutor

from harness import web
from tests.compose.conftest import is_ready
from tests.tf_text import NODE, NOT_A_MATRIX, tf_text

MAX_BODY_BYTES = 8 * 1024 * 1024


def f32(value: float) -> float:
    """`value` rounded to float32, as the model's float32 output is."""
    rounded: float = struct.unpack("f", struct.pack("f", value))[0]
    return rounded


def half_plus_two(x: float) -> float:
    return f32(0.5 * f32(x) + 2.0)


def predict(client: httpx2.Client, body: Any, path: str = "/v1/models/model:predict") -> Any:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


# -- answers


def test_the_issue_example(client: httpx2.Client) -> None:
    assert predict(client, {"instances": [1.0, 2.0]}) == {"predictions": [2.5, 3.0]}


def test_any_number_is_a_float_input_rounded_as_tf_serving_rounds_it(
    client: httpx2.Client,
) -> None:
    # api_rest.md's 1435774380 is float32's 1435774336; beyond float32 is an infinity.
    answer = predict(client, {"instances": [1435774380, 1e39]})
    # Compared as float32: the answer is the shortest text of each (717887170 for
    # float32's 717887168), as TF Serving writes them.
    assert as_f32(answer["predictions"]) == [half_plus_two(1435774380.0), float("inf")]


def as_f32(values: list[float]) -> list[float]:
    # The server writes float32 as TF Serving does, in the fewest digits that
    # read back as the same float32 (2.05, not 2.049999952316284).
    return [f32(v) for v in values]


def test_predictions_equal_the_models_known_outputs(client: httpx2.Client) -> None:
    xs = [i / 8 for i in range(-400, 401)] + [0.1, 1e-3, 123456.789, -7.25e5]
    expected = [half_plus_two(x) for x in xs]
    assert as_f32(predict(client, {"instances": xs})["predictions"]) == expected
    assert as_f32(predict(client, {"inputs": xs})["outputs"]) == expected
    assert as_f32(predict(client, {"inputs": {"x": xs}})["outputs"]) == expected
    rows = predict(client, {"instances": [{"x": x} for x in xs]})["predictions"]
    assert as_f32(rows) == expected
    assert predict(client, {"instances": [0.1]}) == {"predictions": [2.05]}
    assert predict(client, {"instances": [3.0]}, "/v1/models/model/versions/1:predict") == {
        "predictions": [3.5]
    }


def test_a_signature_with_two_inputs_and_two_outputs(client: httpx2.Client) -> None:
    body = {
        "signature_name": "two_inputs",
        "instances": [{"x": 1, "scale": 2}, {"x": 2, "scale": 3}],
    }
    assert predict(client, body) == {
        "predictions": [{"scaled": 5.0, "y": 2.5}, {"scaled": 9.0, "y": 3.0}]
    }
    columns = {"signature_name": "two_inputs", "inputs": {"x": [1, 2], "scale": [2, 3]}}
    assert predict(client, columns) == {"outputs": {"scaled": [5.0, 9.0], "y": [2.5, 3.0]}}


def test_model_status(client: httpx2.Client) -> None:
    available = {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    assert client.get("/v1/models/model").json() == available
    assert client.get("/v1/models/model/versions/1").json() == available


def test_metadata(client: httpx2.Client) -> None:
    body = client.get("/v1/models/model/metadata").json()
    assert body["model_spec"] == {"name": "model", "signature_name": "", "version": "1"}
    signatures = body["metadata"]["signature_def"]["signature_def"]
    vector = {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False}
    default = signatures["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    assert default["inputs"] == {
        "x": {"dtype": "DT_FLOAT", "tensor_shape": vector, "name": "serving_default_x:0"}
    }
    assert list(default["outputs"]) == ["y"]
    assert default["outputs"]["y"]["dtype"] == "DT_FLOAT"
    assert default["outputs"]["y"]["tensor_shape"] == vector
    assert sorted(signatures["two_inputs"]["inputs"]) == ["scale", "x"]
    assert sorted(signatures["two_inputs"]["outputs"]) == ["scaled", "y"]
    assert client.get("/v1/models/model/versions/1/metadata").json() == body


# -- bad requests: a 4xx with TF Serving's {"error": ...}, never a 500


def long_body() -> bytes:
    return b'{"instances": [' + b"1.0," * (MAX_BODY_BYTES // 4) + b"1.0]}"


# The last field is text the error holds, TensorFlow's own words normalized
# (tests/tf_text.py: what the host decides, its kernel library's words and the
# node annotation, as placeholders).
BAD_REQUESTS: list[tuple[str, str, bytes | None, int, str]] = [
    ("POST", "/v1/models/model:predict", b'{"instances": [1.0', 400, "JSON Parse error"),
    ("POST", "/v1/models/model:predict", b"not json", 400, "JSON Parse error"),
    ("POST", "/v1/models/model:predict", b"[1.0]", 400, "Is not object"),
    # Shapes the demo's graph cannot take (x is [batch]): TensorFlow's own errors,
    # as TF Serving's Session::Run gives them; no shape is checked before the graph.
    (
        "POST",
        "/v1/models/model:predict",
        b'{"instances": [[1.0, 2.0]]}',
        400,
        f"{NOT_A_MATRIX}\n\t {NODE}",
    ),
    ("POST", "/v1/models/model:predict", b'{"inputs": 1.0}', 400, "slice scalar input"),
    ("POST", "/v1/models/model:predict", b'{"instances": [1.0, [2.0]]}', 400, "Expecting shape"),
    ("POST", "/v1/models/model:predict", b'{"instances": ["one"]}', 400, "expected type: float"),
    ("POST", "/v1/models/model:predict", b'{"instances": [true]}', 400, "expected type: float"),
    (
        "POST",
        "/v1/models/model:predict",
        b'{"instances": [1' + b"0" * 400 + b"]}",
        400,
        "too big to be stored in a double",
    ),
    ("POST", "/v1/models/nope:predict", b'{"instances": [1.0]}', 404, "Latest(nope)"),
    ("POST", "/v1/models/model/versions/9:predict", b"{}", 404, "Specific(model, 9)"),
    ("GET", "/v1/models/nope", None, 404, "Could not find any versions of model nope"),
    ("GET", "/v1/models/model/versions/9", None, 404, "Could not find version 9"),
    ("GET", "/v1/models/nope/metadata", None, 404, "Servable not found"),
    (
        "POST",
        "/v1/models/model:predict",
        b'{"signature_name": "nope", "instances": [1.0]}',
        400,
        'Serving signature name: "nope" not found',
    ),
    (
        "POST",
        "/v1/models/model:predict",
        b'{"instances": [1.0], "inputs": [1.0]}',
        400,
        "expecting only one of 'inputs' or 'instances'",
    ),
    ("POST", "/v1/models/model:predict", b'{"signature_name": ""}', 400, "Missing 'inputs'"),
    ("POST", "/v1/models/model:predict", b'{"instances": []}', 400, "No values in 'instances'"),
    ("POST", "/v1/models/model:predict", long_body(), 413, "exceeds the limit of 8388608 bytes"),
    # TF Serving's text, "classify" even for :regress (json_tensor.cc shares it).
    (
        "POST",
        "/v1/models/model:regress",
        b"{}",
        400,
        "When method is classify, key 'examples' is expected and was not found",
    ),
    ("DELETE", "/v1/models/model", None, 400, "Malformed request: DELETE"),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    BAD_REQUESTS,
    ids=[f"{m} {p} {msg[:30]}" for m, p, _, _, msg in BAD_REQUESTS],
)
def test_bad_requests(  # noqa: PLR0917 - one argument per parameter
    client: httpx2.Client,
    method: str,
    path: str,
    body: bytes | None,
    status: int,
    message: str,
) -> None:
    response = client.request(method, path, content=body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert message in tf_text(response.json()["error"]), response.text
    assert list(response.json()) == ["error"]


def test_a_body_over_the_limit_without_content_length(client: httpx2.Client) -> None:
    def chunks() -> Any:
        body = long_body()
        for start in range(0, len(body), 1 << 20):
            yield body[start : start + (1 << 20)]

    response = client.post("/v1/models/model:predict", content=chunks())
    assert response.status_code == 413


def test_the_server_survives_bad_requests(client: httpx2.Client) -> None:
    for method, path, body, _, _ in BAD_REQUESTS[:8]:
        client.request(method, path, content=body)
    assert client.get("/healthz").status_code == 200
    assert predict(client, {"instances": [0.0]}) == {"predictions": [2.0]}
    page = client.get("/metrics").text
    for api in ("predict", "status", "metadata", "other"):
        assert f'serving_request_errors_total{{api="{api}",kind="server"' not in page, api


# -- operations


def test_health_endpoints(client: httpx2.Client) -> None:
    assert client.get("/healthz").json() == {"status": "alive"}
    assert client.get("/readyz").json() == {"status": "ready", "models": {"model": [1]}}


def test_metrics(client: httpx2.Client) -> None:
    ok = 'serving_requests_total{api="predict",code="200",model="model",protocol="v1"}'
    before = metric(client.get("/metrics").text, ok)
    predict(client, {"instances": [1.0]})
    page = client.get("/metrics")
    assert page.headers["content-type"].startswith("text/plain")
    text = page.text
    assert metric(text, ok) == before + 1
    latency = 'serving_request_duration_seconds_count{api="predict",model="model",protocol="v1"}'
    assert metric(text, latency) >= before + 1
    inference = 'serving_inference_duration_seconds_count{model="model"}'
    assert metric(text, inference) >= before + 1
    assert metric(text, 'serving_model_version{model="model"}') == 1
    assert metric(text, 'serving_model_versions_available{model="model"}') == 1
    assert metric(text, 'serving_model_loads_total{model="model",result="success"}') == 1
    assert "process_cpu_seconds_total" in text


def test_workers_are_sized_from_the_cpu_limit(
    client: httpx2.Client, compose: DockerComposeExecutor
) -> None:
    # compose.yaml gives `serve` cpus: 1.0: one inference worker, one TF thread per pool.
    assert metric(client.get("/metrics").text, "serving_workers") == 1
    logs = compose.execute("logs --no-color serve").decode(errors="replace")
    assert "1 inference worker(s) for a CPU budget of 1 (" in logs
    assert "TensorFlow intra-op 1, inter-op 1" in logs


def test_docker_healthcheck_turns_healthy(compose: DockerComposeExecutor, server_url: str) -> None:
    container = compose.execute("ps -q serve").decode().split()[-1]
    deadline = time.monotonic() + 60
    status = ""
    while time.monotonic() < deadline:
        status = docker("inspect", "-f", "{{.State.Health.Status}}", container).strip()
        if status == "healthy":
            return
        time.sleep(1)
    raise AssertionError(f"health status stayed {status!r}")


def test_the_gpu_service_is_not_started_by_default(compose: DockerComposeExecutor) -> None:
    assert compose.execute("ps -q serve-gpu").strip() == b""
    assert compose.execute("ps -q serve").strip() != b""


def test_bounded_concurrent_load_has_zero_errors(server_url: str) -> None:
    """2,000 predicts, 16 at a time, to 127.0.0.1: every answer 200 and exact."""
    total, concurrency = 2000, 16
    answers: list[tuple[int, Any]] = []

    async def run() -> None:
        limits = httpx2.Limits(max_connections=concurrency)
        async with web.async_client(
            base_url=server_url, timeout=30, limits=limits, trust_env=False
        ) as http:
            gate = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                x = float(i % 97)
                async with gate:
                    response = await http.post(
                        "/v1/models/model:predict", json={"instances": [x, -x]}
                    )
                answers.append((response.status_code, (response.json(), x)))

            await asyncio.gather(*(one(i) for i in range(total)))

    started = time.monotonic()
    asyncio.run(asyncio.wait_for(run(), timeout=300))
    elapsed = time.monotonic() - started
    failures = [a for a in answers if a[0] != 200]
    assert not failures, failures[:5]
    wrong = [
        (body, x)
        for _, (body, x) in answers
        if as_f32(body["predictions"]) != [half_plus_two(x), half_plus_two(-x)]
    ]
    assert not wrong, wrong[:5]
    assert len(answers) == total
    print(f"\n{total} requests, {concurrency} at a time: {total / elapsed:.0f} req/s")


# -- shutdown


def docker(*args: str) -> str:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=True, timeout=120
    ).stdout


def instances_body(count: int) -> bytes:
    return json.dumps({"instances": [float(i % 1000) for i in range(count)]}).encode()


def sized_for(url: str, seconds: float) -> int:
    """Instances for a predict that takes about `seconds` on this machine, now.

    Calibrated, not assumed: a predict of 100,000 instances is timed (the
    median of three: the machine's load comes and goes, and the fastest would
    oversize the requests), and the count scales with the time (JSON in and
    out is most of it); at least 1,000, and within the body limit.
    """
    sample = 100_000
    body = instances_body(sample)
    took = []
    with web.client(base_url=url, timeout=60, trust_env=False) as http:
        for _ in range(3):
            started = time.perf_counter()
            assert http.post("/v1/models/model:predict", content=body).status_code == 200
            took.append(time.perf_counter() - started)
    fits = (MAX_BODY_BYTES - 100) // len(b"999.0, ")
    return max(1000, min(fits, int(sample * seconds / sorted(took)[1])))


def test_sigterm_finishes_requests_in_flight_and_exits_0(
    compose: DockerComposeExecutor, server_url: str
) -> None:
    """A second server of the project (compose run), stopped while it works.

    Each request is sized to take about 1 s on this machine (calibrated
    first), so the four (one worker) are still at work when SIGTERM comes on
    a fast CPU, and end well within the 20 s grace period on a loaded one
    (seen: 13 s for requests sized for 1.5 s by the fastest of three samples,
    under two busy loops; hence the median and 1 s).
    """
    name = f"{compose._compose_project_name}-drain"
    compose.execute(f"run -d --no-deps --service-ports --name {name} serve")
    try:
        port = docker("port", name, "8501/tcp").split(":")[-1].strip()
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not is_ready(url):
            time.sleep(0.5)
        assert is_ready(url), docker("logs", name)

        count = sized_for(url, 1.0)
        body = instances_body(count)
        assert len(body) < MAX_BODY_BYTES
        expected = [half_plus_two(float(i)) for i in range(1000)]
        results: list[Any] = []
        answered_at: list[float] = []

        def send() -> None:
            try:
                with web.client(base_url=url, timeout=60, trust_env=False) as http:
                    response = http.post("/v1/models/model:predict", content=body)
                    answered_at.append(time.monotonic())
                    results.append((response.status_code, response.json()["predictions"]))
            except Exception as err:  # noqa: BLE001 - reported by the assertion below
                results.append(err)

        senders = [threading.Thread(target=send) for _ in range(4)]
        for thread in senders:
            thread.start()
        in_flight = 0.0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and in_flight < 3:
            page = web.get(f"{url}/metrics", trust_env=False).text
            in_flight = metric(page, "serving_predict_in_flight")
        assert in_flight >= 3, "requests did not reach the server"

        started = time.monotonic()
        docker("stop", "-t", "30", name)  # SIGTERM, then SIGKILL after 30 s
        stopped_in = time.monotonic() - started
        for thread in senders:
            thread.join(60)

        assert len(results) == 4
        for result in results:
            assert not isinstance(result, Exception), result
            status, predictions = result
            assert status == 200
            assert len(predictions) == count
            assert as_f32(predictions[:1000]) == expected
        # Some request was still at work when SIGTERM was sent: the drain waited for it.
        assert max(answered_at) > started, (count, stopped_in)
        assert docker("inspect", "-f", "{{.State.ExitCode}}", name).strip() == "0"
        assert stopped_in < 20, f"stop took {stopped_in:.1f} s (grace period is 20 s)"
        print(f"\ndrain: 4 x {count} instances (sized for 1 s each), stopped in {stopped_in:.1f} s")
        logs = subprocess.run(
            ["docker", "logs", name], capture_output=True, text=True, check=False
        ).stderr
        assert "received SIGTERM: draining" in logs
        assert "Traceback" not in logs
        with pytest.raises(httpx2.TransportError):
            web.get(f"{url}/healthz", timeout=2, trust_env=False)
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True, check=False)
    # The project's own server is untouched.
    with web.client(base_url=server_url, timeout=10, trust_env=False) as http:
        assert predict(http, {"instances": [2.0]}) == {"predictions": [3.0]}
