"""TF Serving's metrics (core/tfs_metrics.py): the Prometheus page's format and what is counted."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.unit.serving.core.manager_helpers import Fake, Loader, manager_for, spec
from tests.unit.serving.core.manager_helpers import export as export_version
from tf_entrypoint.serving.core import tfs_metrics as monitoring

PAGE = "/monitoring/prometheus/metrics"

# -- the message definitions


# -- the config file


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
