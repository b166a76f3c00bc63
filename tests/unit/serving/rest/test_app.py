"""The REST app (rest/app.py, asgi.py, handlers.py) on a pure-Python model (no TensorFlow)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.unit.serving.helpers import (
    HalfPlusTwo,
    config,
    export,
    make_app,
    wait_ready,
)
from tf_entrypoint.serving.config import PlannedCpus, parse_config


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    export(tmp_path)
    app = make_app(config(tmp_path), loader=lambda directory, version: HalfPlusTwo())
    with TestClient(app) as test_client:
        wait_ready(test_client)
        yield test_client


def test_predict_row_format(client: TestClient) -> None:
    response = client.post("/v1/models/model:predict", json={"instances": [1.0, 2.0]})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"predictions": [2.5, 3.0]}


def test_predict_columnar_and_versions(client: TestClient) -> None:
    response = client.post("/v1/models/model/versions/1:predict", json={"inputs": [4.0]})
    assert response.json() == {"outputs": [4.0]}


def test_predict_with_signature(client: TestClient) -> None:
    body = {"signature_name": "two_inputs", "instances": [{"x": 2.0, "scale": 3.0}]}
    response = client.post("/v1/models/model:predict", json=body)
    assert response.json() == {"predictions": [{"scaled": 9.0, "y": 3.0}]}


def test_status(client: TestClient) -> None:
    expected = {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    assert client.get("/v1/models/model").json() == expected
    assert client.get("/v1/models/model/versions/1").json() == expected


def test_metadata(client: TestClient) -> None:
    body = client.get("/v1/models/model/metadata").json()
    assert body["model_spec"] == {"name": "model", "signature_name": "", "version": "1"}
    assert set(body["metadata"]["signature_def"]["signature_def"]) == {
        "serving_default",
        "two_inputs",
        "broken",
        "classify",
        "regress",
    }
    assert client.get("/v1/models/model/versions/1/metadata").json() == body


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("GET", "/v1/models/other", None, 404, "Could not find any versions of model other"),
        ("GET", "/v1/models/model/versions/2", None, 404, "Could not find version 2 of model"),
        ("GET", "/v1/models/other/metadata", None, 404, "Servable not found for request: Latest"),
        ("POST", "/v1/models/other:predict", b"{}", 404, "Latest(other)"),
        ("POST", "/v1/models/model/versions/7:predict", b"{}", 404, "Specific(model, 7)"),
        (
            "POST",
            "/v1/models/model/labels/x:predict",
            b"{}",
            400,
            "Unrecognized servable version label: x",
        ),
        ("POST", "/v1/models/model:predict", b"{", 400, "JSON Parse error"),
        ("POST", "/v1/models/model:predict", b"", 400, "The document is empty"),
        ("POST", "/v1/models/model:predict", b"{}", 400, "Missing 'inputs' or 'instances'"),
        ("POST", "/v1/models/model:classify", b"{}", 400, "key 'examples' is expected"),
        ("POST", "/v1/models/other:regress", b"{}", 404, "Latest(other)"),
        (
            "POST",
            "/v1/models/model:classify",
            b'{"examples":[{"x":1.0}]}',
            400,
            "No classification inputs found in SignatureDef: serving_default",
        ),
        ("POST", "/v1/models/model:predict", b'{"instances":["a"]}', 400, "expected type: float"),
        (
            "POST",
            "/v1/models/model:predict",
            b'{"signature_name":"broken","instances":[1]}',
            400,
            "the model says no",
        ),
        ("PUT", "/v1/models/model:predict", b"{}", 400, "Malformed request: PUT"),
        ("GET", "/v1/nothing", None, 400, "Malformed request: GET"),
        ("GET", "/nothing", None, 404, "404: GET"),
        ("POST", "/healthz", None, 404, "404: POST"),
    ],
)
def test_errors_are_tf_serving_json(  # noqa: PLR0917 - one per parameter
    client: TestClient, method: str, path: str, body: bytes | None, status: int, message: str
) -> None:
    response = client.request(method, path, content=body)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert message in response.json()["error"]
    assert set(response.json()) == {"error"}


def test_paths_are_case_insensitive_like_tf_serving(client: TestClient) -> None:
    response = client.post("/V1/Models/model:PREDICT", json={"instances": [0.0]})
    assert response.json() == {"predictions": [2.0]}


def test_body_limit(tmp_path: Path) -> None:
    export(tmp_path)
    app = make_app(config(tmp_path, "--max-body-bytes", "100"), loader=lambda d, v: HalfPlusTwo())
    with TestClient(app) as client:
        wait_ready(client)
        ok = client.post("/v1/models/model:predict", json={"instances": [1.0] * 10})
        assert ok.status_code == 200
        big = client.post("/v1/models/model:predict", json={"instances": [1.0] * 100})
        assert big.status_code == 413
        assert "exceeds the limit of 100 bytes" in big.json()["error"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
            yield b'{"instances": ['
            yield b"1.0, " * 50
            yield b"1.0]}"

        streamed = client.post("/v1/models/model:predict", content=chunks())
        assert streamed.status_code == 413


def test_health_and_metrics(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "alive"}
    assert client.get("/readyz").json() == {"status": "ready", "models": {"model": [1]}}
    client.post("/v1/models/model:predict", json={"instances": [1.0]})
    client.post("/v1/models/model:predict", content=b"{")
    page = client.get("/metrics")
    assert page.status_code == 200
    text = page.text
    assert (
        'serving_requests_total{api="predict",code="200",model="model",protocol="v1"} 1.0' in text
    )
    assert (
        'serving_requests_total{api="predict",code="400",model="model",protocol="v1"} 1.0' in text
    )
    assert (
        'serving_request_errors_total{api="predict",kind="client",model="model",protocol="v1"} 1.0'
        in text
    )
    assert (
        'serving_request_duration_seconds_count{api="predict",model="model",protocol="v1"} 2.0'
        in text
    )
    assert 'serving_inference_duration_seconds_count{model="model"} 1.0' in text
    assert 'serving_model_version{model="model"} 1.0' in text
    assert "serving_workers 2.0" in text


def test_unknown_urls_do_not_create_metric_labels(client: TestClient) -> None:
    for i in range(5):
        client.get(f"/v1/models/m{i}")
        client.get(f"/x{i}")
    text = client.get("/metrics").text
    assert "m3" not in text
    assert "x3" not in text


def test_not_ready_while_loading(tmp_path: Path) -> None:
    export(tmp_path)
    release = threading.Event()

    def slow_loader(directory: Path, version: int) -> HalfPlusTwo:
        release.wait(10)
        return HalfPlusTwo()

    app = make_app(config(tmp_path), loader=slow_loader)
    with TestClient(app) as client:
        deadline = time.monotonic() + 5
        while client.get("/v1/models/model").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.get("/v1/models/model").json()["model_version_status"][0]["state"] == (
            "LOADING"
        )
        ready = client.get("/readyz")
        assert (ready.status_code, ready.json()["status"]) == (503, "loading")
        predict = client.post("/v1/models/model:predict", json={"instances": [1.0]})
        assert predict.status_code == 503
        assert predict.headers["retry-after"] == "1"
        release.set()
        wait_ready(client)


def test_a_failed_load_is_fatal(tmp_path: Path) -> None:
    export(tmp_path)
    fatal: list[str] = []

    def broken(directory: Path, version: int) -> HalfPlusTwo:
        raise OSError("saved_model.pb is truncated")

    # No retries: with TF Serving's default (5, a minute apart) the failure is
    # fatal only after them (test_serving_lifecycle tests the retries).
    app = make_app(config(tmp_path, "--max_num_load_retries=0"), loader=broken,
                   on_fatal=fatal.append)  # fmt: skip
    with TestClient(app) as client:
        deadline = time.monotonic() + 5
        while not fatal and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fatal
        assert "saved_model.pb is truncated" in fatal[0]
        status = client.get("/v1/models/model").json()["model_version_status"][0]
        assert status["state"] == "END"
        assert status["status"]["error_code"] == "UNKNOWN"
        assert client.get("/readyz").status_code == 503


def test_no_model_within_the_wait_is_fatal(tmp_path: Path) -> None:
    fatal: list[str] = []
    app = make_app(
        config(tmp_path, "--wait-for-model", "0.2"), loader=lambda d, v: HalfPlusTwo(),
        on_fatal=fatal.append,
    )  # fmt: skip
    with TestClient(app) as client:
        deadline = time.monotonic() + 5
        while not fatal and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "no version of model 'model' appeared" in fatal[0]
        assert client.get("/v1/models/model").status_code == 404


def test_the_highest_version_is_served(tmp_path: Path) -> None:
    for version in (1, 10, 9):
        export(tmp_path, version)
    (tmp_path / "model" / "11").mkdir()  # no saved_model.pb: not a version
    loaded: list[int] = []

    def loader(directory: Path, version: int) -> HalfPlusTwo:
        loaded.append(version)
        assert directory == tmp_path / "model" / str(version)
        servable = HalfPlusTwo()
        servable.version = version
        return servable

    with TestClient(make_app(config(tmp_path), loader=loader)) as client:
        wait_ready(client)
        assert loaded == [10]
        assert client.get("/v1/models/model/versions/10").status_code == 200
        assert client.get("/v1/models/model/versions/1").status_code == 404


# -- the worker pool


def test_classify(client: TestClient) -> None:
    body = {"signature_name": "classify", "examples": [{"x": 1.0}, {"x": -4.0}]}
    response = client.post("/v1/models/model:classify", json=body)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "results": [
            [["half", 0.5], ["plus_two", 3.0]],
            [["half", -2.0], ["plus_two", -2.0]],
        ]
    }


def test_regress_with_context_and_version(client: TestClient) -> None:
    body = {"signature_name": "regress", "context": {"x": 2.0}, "examples": [{}, {"x": 6.0}]}
    response = client.post("/v1/models/model/versions/1:regress", json=body)
    assert response.status_code == 200, response.text
    assert response.json() == {"results": [3.0, 5.0]}


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (
            "/v1/models/model:regress",
            {"signature_name": "classify", "examples": [{"x": 1.0}]},
            "Expected one output Tensor.",
        ),
        (
            "/v1/models/model:classify",
            {"signature_name": "nope", "examples": [{"x": 1.0}]},
            "No signature was found with the name: nope",
        ),
        (
            "/v1/models/model:classify",
            {"signature_name": "classify", "examples": [{"y": 1.0}]},
            "Feature: x (data type: float) is required",
        ),
        (
            "/v1/models/model:classify",
            {"signature_name": "classify", "examples": [{"x": [1.0, 2]}]},
            "Unexpected element type in feature: x expecting type: float",
        ),
    ],
)
def test_classify_and_regress_errors(
    client: TestClient, path: str, body: object, message: str
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 400
    assert message in response.json()["error"]


# -- the control thread and the model store (docs/robustness.md)


def test_every_model_name_is_reachable_percent_encoded(tmp_path: Path) -> None:
    # Starlette hands the application a decoded path; routes are matched on
    # the path as sent, then the name decoded, as TF Serving does.
    name = "a?b#c\\d%e f/g:h"
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "saved_model.pb").write_bytes(b"")
    conf = parse_config(
        ["--model_name", name, "--model_base_path", str(tmp_path), "--wait-for-model", "5"],
        {},
        budget=PlannedCpus(2, "test"),
    )
    app = make_app(conf, loader=lambda directory, version: HalfPlusTwo())
    encoded = "a%3Fb%23c%5Cd%25e%20f%2Fg%3Ah"
    with TestClient(app) as client:
        wait_ready(client)
        predict = client.post(f"/v1/models/{encoded}:predict", json={"instances": [1.0]})
        assert (predict.status_code, predict.json()) == (200, {"predictions": [2.5]})
        status = client.get(f"/v1/models/{encoded}/versions/1")
        assert status.status_code == 200
        assert client.get(f"/v1/models/{encoded}/metadata").json()["model_spec"]["name"] == name
        assert client.get("/readyz").json()["models"] == {name: [1]}


def test_a_version_of_5000_digits_is_400_without_a_traceback(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    digits = "1" * 5000
    for response in (
        client.get(f"/v1/models/model/versions/{digits}"),
        client.post(f"/v1/models/model/versions/{digits}:predict", json={"instances": [1.0]}),
    ):
        assert response.status_code == 400
        error = response.json()["error"]
        assert error.startswith("Failed to convert version: 1111")
        assert error.endswith("... to numeric.")
    assert "Traceback" not in caplog.text
    assert "internal error" not in caplog.text
