"""TF Serving's Prometheus page served by the REST app: where it is, when, and what it counts."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.unit.serving.helpers import HalfPlusTwo, config, export, make_app, wait_ready

PAGE = "/monitoring/prometheus/metrics"
SAMPLE = re.compile(
    r'(:[a-z_:]+)\{((?:[A-Za-z_]+="(?:[^"\\]|\\.)*")(?:,[A-Za-z_]+="(?:[^"\\]|\\.)*")*)?\} (\S+)'
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "monitoring.config"
    path.write_text(text)
    return path


@pytest.fixture
def monitored(tmp_path: Path) -> Iterator[TestClient]:
    export(tmp_path)
    path = write(tmp_path, "prometheus_config { enable: true }")
    conf = config(tmp_path, "--monitoring_config_file", str(path))
    app = make_app(conf, loader=lambda directory, version: HalfPlusTwo())
    with TestClient(app) as client:
        wait_ready(client)
        yield client


def samples(client: TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get(PAGE)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    found = {}
    for line in response.text.splitlines():
        if line.startswith("#"):
            continue
        match = SAMPLE.fullmatch(line)
        assert match, line
        name, labels, value = match.groups()
        pairs = frozenset(re.findall(r'([A-Za-z_]+)="((?:[^"\\]|\\.)*)"', labels or ""))
        found[name, pairs] = float(value)
    return found


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return f":tensorflow:serving:{name}", frozenset(labels.items())


def test_rest_requests_are_counted_like_tf_serving(monitored: TestClient) -> None:
    assert monitored.post("/v1/models/model:predict", json={"instances": [1.0]}).status_code == 200
    assert monitored.post("/v1/models/model:predict", json={"instances": [2.0]}).status_code == 200
    assert monitored.post("/v1/models/model:predict", content=b"{").status_code == 400
    assert monitored.post("/v1/models/nope:predict", json={"instances": [1]}).status_code == 404
    assert monitored.get("/v1/models/model/metadata").status_code == 200
    assert monitored.post("/v1/models/model:frobnicate", json={}).status_code == 400
    found = samples(monitored)

    assert found[key("request_count", model_name="model", status="OK")] == 3
    assert found[key("request_count", model_name="model", status="INVALID_ARGUMENT")] == 1
    # An unknown model (or no model: a malformed path) is "", so URLs cannot add series.
    assert found[key("request_count", model_name="", status="NOT_FOUND")] == 1
    assert found[key("request_count", model_name="", status="INVALID_ARGUMENT")] == 1
    rest = {"entrypoint": "REST"}
    assert found[key("request_latency_count", model_name="model", API="predict", **rest)] == 2
    assert found[key("request_latency_count", model_name="model", API="", **rest)] == 1
    latency = {k for k in found if k[0].endswith("request_latency_count")}
    assert len(latency) == 2  # failed requests have no latency, as in TF Serving
    runtime = key("runtime_latency_count", model_name="model", API="Predict", runtime="TF1")
    assert found[runtime] == 2
    assert monitored.get("/metrics").status_code == 200  # the server's own page stays


def test_the_page_follows_the_configured_path(tmp_path: Path) -> None:
    export(tmp_path)
    path = write(tmp_path, 'prometheus_config { enable: true path: "/prom/tf" }')
    app = make_app(
        config(tmp_path, "--monitoring_config_file", str(path)),
        loader=lambda directory, version: HalfPlusTwo(),
    )
    with TestClient(app) as client:
        wait_ready(client)
        assert client.get("/prom/tf").text.startswith("# TYPE :tensorflow:cc:saved_model:")
        assert client.get(PAGE).status_code == 404


@pytest.mark.parametrize("text", [None, "prometheus_config { enable: false }"])
def test_no_page_unless_enabled(tmp_path: Path, text: str | None) -> None:
    export(tmp_path)
    args = [] if text is None else ["--monitoring_config_file", str(write(tmp_path, text))]
    app = make_app(config(tmp_path, *args), loader=lambda directory, version: HalfPlusTwo())
    with TestClient(app) as client:
        wait_ready(client)
        assert client.get(PAGE).status_code == 404
        assert client.get("/metrics").status_code == 200
