"""TF Serving's monitoring in the real image: --monitoring_config_file, the
Prometheus page at TF Serving's path after real requests, and a bad file.

The model is the model library's "warm" (make_models.py): y = x + 1 with 5
warm-up records, so the page has load, warm-up, request and runtime metrics of
a real TensorFlow load.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from harness.docker import Containers
from harness.models import ModelLibrary
from harness.servers import ServerPool, serve

#: The images this module tests (tests/container/conftest.py): the server is
#: the same in both; what the CUDA image changes is tested by the modules that run on both.
IMAGE_FLAVORS = ("cpu",)

PAGE = "/monitoring/prometheus/metrics"
MONITORING = 'prometheus_config {\n  enable: true\n  path: "/monitoring/prometheus/metrics"\n}\n'


def test_the_page_counts_rest_requests_like_tf_serving(servers: ServerPool) -> None:
    # The page's counts are read as totals: a server of this test's own.
    spec = serve(
        "--model-name", "warm", "--monitoring_config_file", "/models/monitoring.config",
        models={"warm": "warm"}, files={"monitoring.config": MONITORING},
    )  # fmt: skip
    with servers.private(spec) as server:
        for x in (1.0, 2.0):
            assert server.predict("/v1/models/warm:predict", x) == x + 1
        assert server.post("/v1/models/warm:predict", {"instances": "x"}).status_code == 400
        assert server.post("/v1/models/nope:predict", {"instances": [1.0]}).status_code == 404
        assert server.get("/v1/models/warm").status_code == 200
        response = server.get(PAGE)
        assert response.status_code == 200, server.logs()
        assert response.headers["content-type"].startswith("text/plain")
        text = response.text
        assert server.get("/metrics").status_code == 200  # the server's own page stays
        assert server.get("/monitoring/other").status_code == 404

    lines = text.split("\n")
    assert lines[-1] == ""
    assert not [line for line in lines if line.startswith("# HELP")]
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def value(family: str, sample: str, **labels: str) -> float:
        found = [
            s.value for s in families[family].samples if s.name == sample and s.labels == labels
        ]
        assert len(found) == 1, (family, sample, labels, families[family].samples)
        return found[0]

    count = ":tensorflow:serving:request_count"
    assert families[count].type == "counter"
    # prometheus_client names a counter's samples NAME_total; TF Serving writes NAME.
    assert f'{count}{{model_name="warm",status="OK"}} 3' in lines
    assert value(count, count + "_total", model_name="warm", status="INVALID_ARGUMENT") == 1
    assert value(count, count + "_total", model_name="", status="NOT_FOUND") == 1

    latency = ":tensorflow:serving:request_latency"
    assert families[latency].type == "histogram"
    rest = {"model_name": "warm", "entrypoint": "REST"}
    assert value(latency, latency + "_count", API="predict", **rest) == 2
    assert value(latency, latency + "_count", API="", **rest) == 1
    assert value(latency, latency + "_bucket", API="predict", le="+Inf", **rest) == 2

    runtime = ":tensorflow:serving:runtime_latency"
    labels = {"model_name": "warm", "API": "Predict", "runtime": "TF1"}
    assert value(runtime, runtime + "_count", **labels) == 2
    assert value(runtime, runtime + "_sum", **labels) > 0  # microseconds in TensorFlow

    path = {"model_path": "/models/warm/1"}
    attempts = ":tensorflow:cc:saved_model:load_attempt_count"
    assert value(attempts, attempts + "_total", status="success", **path) == 1
    load = ":tensorflow:cc:saved_model:load_latency"
    assert value(load, load + "_total", **path) > 1000  # a real load takes over 1 ms
    warmup = ":tensorflow:serving:model_warmup_latency"
    assert value(warmup, warmup + "_count", status="OK", **path) == 1
    records = ":tensorflow:serving:model_warmup_records_read"
    assert value(records, records + "_total", status="OK", **path) == 5


def test_a_bad_monitoring_config_stops_the_server_with_file_and_line(
    containers: Containers, model_library: ModelLibrary, tmp_path: Path
) -> None:
    models = model_library.tree(tmp_path / "models", {"warm": "warm"})
    config = tmp_path / "config"  # 0755: pytest's tmp_path is 0700, unreadable in there
    config.mkdir()
    (config / "monitoring.config").write_text(
        'prometheus_config {\n  enable: true\n  path: "/v1/metrics"\n}\n'
    )
    ran = containers.run(
        ["serve", "--model-name", "warm", "--monitoring_config_file=/config/monitoring.config"],
        volumes={
            str(models): {"bind": "/models", "mode": "ro"},
            str(config): {"bind": "/config", "mode": "ro"},
        },
        timeout=180,
    )
    assert ran.exit_code == 78, ran.stderr
    assert (
        "/config/monitoring.config:3: prometheus_config.path '/v1/metrics' cannot be served"
        in ran.stderr
    )
    assert "Traceback" not in ran.stderr
