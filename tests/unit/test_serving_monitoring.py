"""--monitoring_config_file and TF Serving's Prometheus page (no TensorFlow)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from tests.unit.serving.core.manager_helpers import Fake, Loader, manager_for, spec
from tests.unit.serving.core.manager_helpers import export as export_version
from tests.unit.serving.helpers import HalfPlusTwo, config, export, make_app, wait_ready
from tf_entrypoint.serving import main as server
from tf_entrypoint.serving.config import monitoring_config
from tf_entrypoint.serving.config.model_config import ConfigError
from tf_entrypoint.serving.core import tfs_metrics as monitoring

UPSTREAM_PROTO = Path(__file__).parent / "data" / "monitoring_config.proto"
PAGE = "/monitoring/prometheus/metrics"

# -- the message definitions


def test_the_messages_match_tf_servings_proto() -> None:
    """The runtime-built classes have upstream's package, messages, fields, numbers, types."""
    text = re.sub(r"//.*", "", UPSTREAM_PROTO.read_text())
    package = re.search(r"^package\s+([\w.]+);", text, re.MULTILINE)
    assert package is not None
    upstream: dict[str, set[tuple[str, str, int]]] = {}
    for name, body in re.findall(r"message\s+(\w+)\s*\{([^}]*)\}", text):
        fields = re.findall(r"^\s*(\w+)\s+(\w+)\s*=\s*(\d+)\s*;", body, re.MULTILINE)
        upstream[name] = {(kind, field, int(number)) for kind, field, number in fields}
    assert upstream  # the regexes found something to compare

    file = monitoring_config._message_classes().DESCRIPTOR.file
    types = {8: "bool", 9: "string"}  # FieldDescriptor.TYPE_BOOL, TYPE_STRING
    built = {
        name: {
            (f.message_type.name if f.message_type else types[f.type], f.name, f.number)
            for f in message.fields
        }
        for name, message in file.message_types_by_name.items()
    }
    assert (file.package, built) == (package.group(1), upstream)


# -- the config file


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "monitoring.config"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "page"),
    [
        ("prometheus_config { enable: true }", PAGE),
        ('prometheus_config { enable: true, path: "" }', PAGE),
        ('prometheus_config: {\n  enable: true\n  path: "/prom"\n}\n', "/prom"),
        ("# only a comment\n", None),
        ("", None),
        ('prometheus_config { enable: false path: "/prom" }', None),
        ('prometheus_config { path: "/v1/not-checked-when-off" }', None),
    ],
)
def test_config_file(tmp_path: Path, text: str, page: str | None) -> None:
    path = write(tmp_path, text)
    expected = monitoring_config.MonitoringConfig(page, path)
    assert monitoring_config.read_monitoring_config(path) == expected


#: TF Serving's words for a file protobuf cannot parse (ParseProtoTextFile).
SYNTAX = "Error parsing text-format tensorflow.serving.MonitoringConfig: "


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (
            "prometheus_config {\n  enable: true\n  port: 9090\n}",
            f"{SYNTAX}PATH:3:3:",
            'no field named "port"',
        ),
        ("prometheus_config { enable: yes }", f"{SYNTAX}PATH:1:", "enable"),
        ("prometheus_config { enable: true", f"{SYNTAX}PATH:1:", 'Expected "}"'),
        ('prometheus_config {\n enable: true\n path: "prom" }', ":3:", 'starting with "/"'),
        ('prometheus_config {\n enable: true\n path: "/v1/x" }', ":3:", "under /v1/"),
        ('prometheus_config {\n enable: true\n path: "/V1/models" }', ":3:", "under /v1/"),
        ('prometheus_config { enable: true path: "/metrics" }', ":1:", "own routes"),
        ('prometheus_config { enable: true path: "/healthz/" }', ":1:", "own routes"),
        ('prometheus_config { enable: true path: "/readyz" }', ":1:", "own routes"),
        ('prometheus_config { enable: true path: "/a?b=1" }', ":1:", "plain URL path"),
        ('prometheus_config { enable: true path: "/{name}" }', ":1:", "plain URL path"),
    ],
)
def test_config_file_errors_name_file_line_and_field(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        monitoring_config.read_monitoring_config(path)
    where = where if "PATH" in where else f"PATH{where}"
    assert str(caught.value).startswith(where.replace("PATH", str(path)))
    assert message in str(caught.value)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.config: cannot read the monitoring config"):
        monitoring_config.read_monitoring_config(tmp_path / "missing.config")


def test_a_bad_file_exits_78_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, 'prometheus_config { enable: true path: "/metrics" }')
    argv = ["--model-base-path", str(tmp_path), "--monitoring_config_file", str(path)]
    assert server.main(argv) == server.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:1: prometheus_config.path '/metrics'")
    assert "Traceback" not in err


def test_the_variable_reads_the_file_too(tmp_path: Path) -> None:
    path = write(tmp_path, "prometheus_config { enable: true }")
    from tf_entrypoint.serving.config import PlannedCpus, parse_config  # noqa: PLC0415

    conf = parse_config(
        ["--model-base-path", str(tmp_path)],
        {"SERVE_MONITORING_CONFIG_FILE": str(path)},
        budget=PlannedCpus(1, "test"),
    )
    assert conf.monitoring == monitoring_config.MonitoringConfig(PAGE, path)


# -- the page's format, line by line

#: What TF Serving's exporter writes for one sample line (prometheus_exporter.cc).
SAMPLE = re.compile(
    r'(:[a-z_:]+)\{((?:[A-Za-z_]+="(?:[^"\\]|\\.)*")(?:,[A-Za-z_]+="(?:[^"\\]|\\.)*")*)?\} (\S+)'
)


def tf_bucket_limits() -> list[str]:
    """Buckets::Exponential(10, 1.8, 33), printed as absl::StrCat(double) does."""
    return [f"{10 * 1.8**i:.6g}" for i in range(33)] + ["+Inf"]


def test_page_format_is_tf_servings() -> None:
    metrics = monitoring.TFServingMetrics()
    metrics.request_done("m", "predict", "REST", "OK", 0.012345)  # 12345 us
    metrics.request_done("m", "predict", "REST", "OK", 0.000010)  # on a limit: the next bucket
    metrics.request_done("m", "predict", "REST", "NOT_FOUND", 0.5)  # counted, no latency
    metrics.request_done('a"b\\c', "Predict", "GRPC", "INVALID_ARGUMENT", 0.1)
    lines = metrics.page().decode().split("\n")

    assert lines[-1] == ""  # ends with one newline
    assert not [line for line in lines if line.startswith("# HELP")]
    for line in lines[:-1]:
        assert line.startswith("# TYPE ") or SAMPLE.fullmatch(line), line
    types = [line.split()[2:] for line in lines if line.startswith("# TYPE")]
    assert types == [  # TensorFlow's registry is ordered by the metric's name
        [":tensorflow:cc:saved_model:load_attempt_count", "counter"],
        [":tensorflow:cc:saved_model:load_latency", "counter"],
        [":tensorflow:serving:model_warmup_latency", "histogram"],
        [":tensorflow:serving:model_warmup_records_read", "counter"],
        [":tensorflow:serving:request_count", "counter"],
        [":tensorflow:serving:request_example_count_total", "counter"],
        [":tensorflow:serving:request_example_counts", "histogram"],
        [":tensorflow:serving:request_latency", "histogram"],
        [":tensorflow:serving:runtime_latency", "histogram"],
    ]
    count = lines.index("# TYPE :tensorflow:serving:request_count counter")
    assert lines[count + 1 : count + 5] == [  # cells sorted by label values
        ':tensorflow:serving:request_count{model_name="a\\"b\\\\c",status="INVALID_ARGUMENT"} 1',
        ':tensorflow:serving:request_count{model_name="m",status="NOT_FOUND"} 1',
        ':tensorflow:serving:request_count{model_name="m",status="OK"} 2',
        "# TYPE :tensorflow:serving:request_example_count_total counter",
    ]
    labels = 'model_name="m",API="predict",entrypoint="REST"'
    start = lines.index("# TYPE :tensorflow:serving:request_latency histogram") + 1
    buckets = lines[start : start + 34]
    limits = tf_bucket_limits()
    # 10 us is not below the first limit (10): TensorFlow's buckets are [lower, upper).
    expected = [0] + [1] * 12 + [2] * 21
    assert buckets == [
        f':tensorflow:serving:request_latency_bucket{{{labels},le="{le}"}} {n}'
        for le, n in zip(limits, expected, strict=True)
    ]
    assert lines[start + 34 : start + 37] == [
        f":tensorflow:serving:request_latency_sum{{{labels}}} 12355",
        f":tensorflow:serving:request_latency_count{{{labels}}} 2",
        "# TYPE :tensorflow:serving:runtime_latency histogram",
    ]


def test_multi_inference_counts_its_examples_as_tf_serving() -> None:
    """request_example_counts (Buckets::Exponential(1, 2, 15)) and
    request_example_count_total, labelled by model: only MultiInference records them."""
    metrics = monitoring.TFServingMetrics()
    metrics.examples_counted("m", 3)
    metrics.examples_counted("m", 1)
    lines = metrics.page().decode().split("\n")
    assert ':tensorflow:serving:request_example_count_total{model="m"} 4' in lines
    at = lines.index("# TYPE :tensorflow:serving:request_example_counts histogram")
    limits = [str(2**i) for i in range(15)] + ["+Inf"]
    expected = [0, 1] + [2] * 14  # cumulative: 1 is in [1, 2), 3 in [2, 4)
    assert lines[at + 1 : at + 17] == [
        f':tensorflow:serving:request_example_counts_bucket{{model="m",le="{le}"}} {n}'
        for le, n in zip(limits, expected, strict=True)
    ]
    assert lines[at + 17 : at + 19] == [
        ':tensorflow:serving:request_example_counts_sum{model="m"} 4',
        ':tensorflow:serving:request_example_counts_count{model="m"} 2',
    ]


def test_sums_print_six_significant_digits() -> None:
    metrics = monitoring.TFServingMetrics()
    metrics.runtime_done("m", "Predict", 1.2345678)
    page = metrics.page().decode()
    labels = 'model_name="m",API="Predict",runtime="TF1"'
    assert f":tensorflow:serving:runtime_latency_sum{{{labels}}} 1.23457e+06\n" in page
    assert 'le="1.27482e+06"} 1\n' in page
    assert 'le="708235"} 0\n' in page


def test_prometheus_parses_the_page() -> None:
    metrics = monitoring.TFServingMetrics()
    metrics.request_done("m", "predict", "REST", "OK", 0.002)
    metrics.saved_model_loaded(Path("/models/m/1"), True, 1.5, 0.25, 3)
    families = {f.name: f for f in text_string_to_metric_families(metrics.page().decode())}
    latency = families[":tensorflow:serving:request_latency"]
    assert latency.type == "histogram"
    values = {s.name: s.value for s in latency.samples if "le" not in s.labels}
    assert values == {
        ":tensorflow:serving:request_latency_sum": 2000,
        ":tensorflow:serving:request_latency_count": 1,
    }
    loads = families[":tensorflow:cc:saved_model:load_latency"]
    assert [(s.labels, s.value) for s in loads.samples] == [
        ({"model_path": "/models/m/1"}, 1500000)
    ]


# -- load and warm-up metrics from the lifecycle manager


class WarmedFake(Fake):
    warmup_seconds = 0.25


class WarmedLoader(Loader):
    def __call__(self, directory: Path, version: int) -> Fake:
        super().__call__(directory, version)
        return WarmedFake(version, self.warmup_records)


def test_loads_are_counted_per_version_directory(tmp_path: Path) -> None:
    good = export_version(tmp_path, 1)
    loader = WarmedLoader(warmup_records=4)
    manager, metrics = manager_for(spec(tmp_path), loader=loader)
    assert manager.initial_load(1, lambda: False) == ""
    broken = export_version(tmp_path, 2)
    loader.broken.add(broken)
    manager.sync()
    tf = metrics.tfserving
    assert tf.load_attempt_count.value((str(good), "success")) == 1
    assert tf.load_attempt_count.value((str(broken), "fail")) == 1
    assert tf.load_attempt_count.value((str(broken), "success")) == 0
    assert tf.model_warmup_latency.count((str(good), "OK")) == 1
    assert tf.model_warmup_records_read.value((str(good), "OK")) == 4
    assert tf.load_latency.value((str(broken),)) == 0  # TensorFlow times successful loads only


def test_no_warmup_file_no_warmup_metric(tmp_path: Path) -> None:
    directory = export_version(tmp_path, 1)
    manager, metrics = manager_for(spec(tmp_path))  # Fake has no warmup_seconds
    assert manager.initial_load(1, lambda: False) == ""
    assert metrics.tfserving.load_attempt_count.value((str(directory), "success")) == 1
    assert metrics.tfserving.model_warmup_latency.count((str(directory), "OK")) == 0


# -- through the application


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
