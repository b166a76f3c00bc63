"""TF Serving's monitoring: `--monitoring_config_file` and its Prometheus page.

The config file is TF Serving's text-format `MonitoringConfig`
(tensorflow_serving/config/monitoring_config.proto). `tensorflow-serving-api`
ships no `monitoring_config_pb2`, so its two messages are built here from a
FileDescriptorProto and the file is parsed with protobuf's `text_format`, as
TF Serving's `ParseProtoTextFile` does: an unknown field or a syntax error is
refused with the file, line and column.

The page is written the way TF Serving's PrometheusExporter writes
TensorFlow's monitoring registry (tensorflow_serving/util/prometheus_exporter.cc):
metric names with `/` turned into `:`, a `# TYPE` line and no `# HELP`,
counters without `_total`, integer counter values, histograms (TensorFlow
"samplers") with TensorFlow's bucket limits printed with six significant
digits and the last one `+Inf`, and latencies in microseconds. Only the
metrics this server really measures are exported (README: "Monitoring like
TF Serving").
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tf_entrypoint.serving.config import textproto
from tf_entrypoint.serving.config.textproto import ConfigError
from tf_entrypoint.serving.core import types as p

#: PrometheusExporter::kPrometheusPath: the page's path when `path` is empty.
DEFAULT_PATH = "/monitoring/prometheus/metrics"
#: The page's Content-Type in TF Serving (http_server.cc ProcessPrometheusRequest).
CONTENT_TYPE = "text/plain"
#: Paths of this server's own routes, which the page may not take.
RESERVED_PATHS = ("/healthz", "/readyz", "/metrics")

#: Values of the `entrypoint` label of request_latency.
ENTRYPOINT_REST = "REST"
ENTRYPOINT_GRPC = "GRPC"
#: Values of the `API` label of request_latency for gRPC calls, as TF Serving's
#: PredictionServiceImpl records them. TF Serving records no request metric for
#: GetModelMetadata, GetModelStatus, MultiInference or ReloadConfig.
API_GRPC_PREDICT = "Predict"
API_GRPC_CLASSIFY = "Classify"
API_GRPC_REGRESS = "Regress"
#: REST: the verb of POST /v1/models/NAME:VERB; "" for every GET (status,
#: metadata) and for a path that names no verb (TF Serving's `method` stays empty).
API_REST_PREDICT = "predict"
API_REST_CLASSIFY = "classify"
API_REST_REGRESS = "regress"
API_REST_OTHER = ""
#: Values of the `API` label of runtime_latency (the TensorFlow call), whatever
#: the entrypoint: TF Serving's predict_util.cc, classifier.cc, regressor.cc.
RUNTIME_API_PREDICT = "Predict"
RUNTIME_API_CLASSIFY = "Classify"
RUNTIME_API_REGRESS = "Regress"
#: The `runtime` label: TF Serving's "TF1" is TensorFlow's standard runtime
#: (as opposed to "TFRT"), the one this server's SavedModel functions run on.
RUNTIME = "TF1"


def status_name(http_status: int) -> str:
    """The canonical status name (`OK`, `NOT_FOUND`, ...) of an HTTP answer: the
    inverse of TF Serving's mapping, shared with gRPC (protocol.status_code)."""
    return p.status_code(http_status)


# -- the config file


@dataclass(frozen=True)
class MonitoringConfig:
    """What --monitoring_config_file asks for: the page's path, or None for no page."""

    prometheus_path: str | None = None
    #: The file it was read from, for messages.
    source: Path | None = None


def _message_classes() -> Any:
    """MonitoringConfig's class, built from monitoring_config.proto's definitions."""
    from google.protobuf import descriptor_pb2  # noqa: PLC0415 - only when a file is given

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/config/monitoring_config.proto",
        package="tensorflow.serving",
        syntax="proto3",
    )
    prometheus = proto.message_type.add(name="PrometheusConfig")
    prometheus.field.add(
        name="enable", json_name="enable", number=1,
        type=field.TYPE_BOOL, label=field.LABEL_OPTIONAL,
    )  # fmt: skip
    prometheus.field.add(
        name="path", json_name="path", number=2,
        type=field.TYPE_STRING, label=field.LABEL_OPTIONAL,
    )  # fmt: skip
    monitoring = proto.message_type.add(name="MonitoringConfig")
    monitoring.field.add(
        name="prometheus_config", json_name="prometheusConfig", number=1,
        type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
        type_name=".tensorflow.serving.PrometheusConfig",
    )  # fmt: skip
    return textproto.message_class(proto, "tensorflow.serving.MonitoringConfig")


def check_path(path: str) -> str | None:
    """Why `path` cannot be the page's path on this server, or None."""
    if not path.startswith("/"):
        return 'expected an absolute URL path starting with "/"'
    if re.search(r"[\s?#{}%]", path) or not path.isascii():
        return "expected a plain URL path: ASCII, no spaces, '?', '#', '%', '{' or '}'"
    if path.lower().startswith("/v1/"):
        return "it is under /v1/, the REST API's paths"
    if path.rstrip("/") in RESERVED_PATHS:
        return "it is one of this server's own routes (/healthz, /readyz, /metrics)"
    return None


def parse_monitoring_config(text: str, path: Path) -> MonitoringConfig:
    """A MonitoringConfig from the text of TF Serving's monitoring config file at `path`.

    Raises ConfigError naming the file, line and field for a syntax error or
    an unknown field (protobuf's message) and for a page path this server
    cannot serve. An empty file, or `enable: false`, serves no page (as in
    TF Serving); an empty `path` is TF Serving's default.
    """
    message = textproto.parse(text, _message_classes()(), path)
    prometheus = message.prometheus_config
    if not prometheus.enable:
        return MonitoringConfig(None, path)
    page = prometheus.path or DEFAULT_PATH
    problem = check_path(page)
    if problem:
        line = textproto.field_line(text, "path")
        where = f"{path}:{line}" if line else str(path)
        raise ConfigError(f"{where}: prometheus_config.path {page!r} cannot be served: {problem}")
    return MonitoringConfig(page, path)


def read_monitoring_config(path: Path) -> MonitoringConfig:
    """parse_monitoring_config() of the file at `path`; ConfigError if it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(f"{path}: cannot read the monitoring config file: {reason}") from None
    return parse_monitoring_config(text, path)


# -- TensorFlow-style metrics


def exponential_buckets(scale: float, growth_factor: float, count: int) -> tuple[float, ...]:
    """monitoring::Buckets::Exponential: `count` limits from `scale`, then DBL_MAX."""
    limits: list[float] = []
    bound = scale
    for _ in range(count):
        limits.append(bound)
        bound *= growth_factor
    return (*limits, sys.float_info.max)


#: Scale 10, power 1.8, 33 buckets (~20 minutes in microseconds): the buckets
#: of request_latency, runtime_latency and model_warmup_latency.
LATENCY_BUCKETS_US = exponential_buckets(10, 1.8, 33)
#: Scale 1, power 2, 15 buckets: request_example_counts' (1, 2, 4, ... 16384, then DBL_MAX).
EXAMPLE_COUNT_BUCKETS = exponential_buckets(1, 2, 15)


def _number(value: float) -> str:
    """absl::StrCat(double): six significant digits, like printf's %g."""
    return format(value, ".6g")


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _metric_name(name: str) -> str:
    """GetPrometheusMetricName: every character outside [a-zA-Z0-9_] becomes ':'."""
    converted = re.sub(r"[^a-zA-Z0-9_]", ":", name)
    return "_" + converted if converted[:1].isdigit() else converted


class _Metric:
    """One TensorFlow metric: name, label names, a cell per label-value tuple."""

    kind = ""

    def __init__(self, name: str, labels: Sequence[str]) -> None:
        self.name = name
        self.labels = tuple(labels)
        self._lock = threading.Lock()

    def _labels(self, values: tuple[str, ...], extra: str = "") -> str:
        parts = [f'{n}="{_label_value(v)}"' for n, v in zip(self.labels, values, strict=True)]
        if extra:
            parts.append(extra)
        return "{" + ",".join(parts) + "}"

    def lines(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    """monitoring::Counter: an int64 per label-value tuple."""

    kind = "counter"

    def __init__(self, name: str, labels: Sequence[str]) -> None:
        super().__init__(name, labels)
        self._cells: dict[tuple[str, ...], int] = {}

    def increment(self, values: Sequence[str], by: int = 1) -> None:
        key = tuple(values)
        with self._lock:
            self._cells[key] = self._cells.get(key, 0) + by

    def value(self, values: Sequence[str]) -> int:
        with self._lock:
            return self._cells.get(tuple(values), 0)

    def lines(self) -> list[str]:
        name = _metric_name(self.name)
        with self._lock:
            cells = sorted(self._cells.items())
        return [f"# TYPE {name} counter"] + [
            f"{name}{self._labels(values)} {count}" for values, count in cells
        ]


class _Histogram:
    __slots__ = ("buckets", "sum")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size
        self.sum = 0.0


class Sampler(_Metric):
    """monitoring::Sampler: a histogram per label-value tuple.

    As TensorFlow's Histogram, a value goes to the first bucket whose limit
    is above it (limits are exclusive upper bounds).
    """

    kind = "histogram"

    def __init__(self, name: str, labels: Sequence[str], limits: Sequence[float]) -> None:
        super().__init__(name, labels)
        self.limits = tuple(limits)
        self._cells: dict[tuple[str, ...], _Histogram] = {}

    def add(self, values: Sequence[str], value: float) -> None:
        key = tuple(values)
        index = next((i for i, limit in enumerate(self.limits) if value < limit), -1)
        with self._lock:
            cell = self._cells.get(key)
            if cell is None:
                cell = self._cells[key] = _Histogram(len(self.limits))
            cell.buckets[index] += 1
            cell.sum += value

    def count(self, values: Sequence[str]) -> int:
        with self._lock:
            cell = self._cells.get(tuple(values))
            return 0 if cell is None else sum(cell.buckets)

    def lines(self) -> list[str]:
        name = _metric_name(self.name)
        with self._lock:
            cells = [(k, list(c.buckets), c.sum) for k, c in sorted(self._cells.items())]
        lines = [f"# TYPE {name} histogram"]
        last = len(self.limits) - 1
        for values, buckets, total in cells:
            cumulative = 0
            for i, count in enumerate(buckets):
                cumulative += count
                le = "+Inf" if i == last else _number(self.limits[i])
                bucket = self._labels(values, f'le="{le}"')
                lines.append(f"{name}_bucket{bucket} {cumulative}")
            lines.append(f"{name}_sum{self._labels(values)} {_number(total)}")
            lines.append(f"{name}_count{self._labels(values)} {cumulative}")
        return lines


def _microseconds(seconds: float) -> int:
    """TF Serving measures with Env::NowMicros(): whole microseconds, never negative."""
    return max(0, round(seconds * 1_000_000))


class TFServingMetrics:
    """The TF Serving metrics this server measures, and their Prometheus page."""

    def __init__(self) -> None:
        # TensorFlow's SavedModel loader (tensorflow/cc/saved_model/loader.cc).
        self.load_attempt_count = Counter(
            "/tensorflow/cc/saved_model/load_attempt_count", ["model_path", "status"]
        )
        self.load_latency = Counter("/tensorflow/cc/saved_model/load_latency", ["model_path"])
        # TF Serving (servables/tensorflow/util.cc, saved_model_warmup_util.cc).
        self.request_count = Counter("/tensorflow/serving/request_count", ["model_name", "status"])
        self.request_latency = Sampler(
            "/tensorflow/serving/request_latency",
            ["model_name", "API", "entrypoint"],
            LATENCY_BUCKETS_US,
        )
        self.runtime_latency = Sampler(
            "/tensorflow/serving/runtime_latency",
            ["model_name", "API", "runtime"],
            LATENCY_BUCKETS_US,
        )
        self.model_warmup_latency = Sampler(
            "/tensorflow/serving/model_warmup_latency",
            ["model_path", "status"],
            LATENCY_BUCKETS_US,
        )
        self.model_warmup_records_read = Counter(
            "/tensorflow/serving/model_warmup_records_read", ["model_path", "status"]
        )
        # Recorded by MultiInference only (multi_inference.cc RecordRequestExampleCount).
        self.request_example_counts = Sampler(
            "/tensorflow/serving/request_example_counts", ["model"], EXAMPLE_COUNT_BUCKETS
        )
        self.request_example_count_total = Counter(
            "/tensorflow/serving/request_example_count_total", ["model"]
        )
        self._all: list[_Metric] = sorted(
            (
                self.load_attempt_count,
                self.load_latency,
                self.request_count,
                self.request_latency,
                self.runtime_latency,
                self.model_warmup_latency,
                self.model_warmup_records_read,
                self.request_example_counts,
                self.request_example_count_total,
            ),
            key=lambda m: m.name,  # TensorFlow's registry is a std::map by name
        )

    def request_done(
        self, model_name: str, api: str, entrypoint: str, status: str, seconds: float
    ) -> None:
        """As TF Serving: every request counts; only a successful one's latency is kept."""
        self.request_count.increment((model_name, status))
        if status == "OK":
            self.request_latency.add((model_name, api, entrypoint), _microseconds(seconds))

    def runtime_done(self, model_name: str, api: str, seconds: float) -> None:
        self.runtime_latency.add((model_name, api, RUNTIME), _microseconds(seconds))

    def examples_counted(self, model_name: str, count: int) -> None:
        """One MultiInference request's examples (TF Serving's RecordRequestExampleCount)."""
        self.request_example_counts.add((model_name,), count)
        self.request_example_count_total.increment((model_name,), count)

    def saved_model_loaded(
        self,
        path: Path,
        ok: bool,
        load_seconds: float,
        warmup_seconds: float | None,
        warmup_records: int,
    ) -> None:
        """One load attempt of the version directory `path`.

        `warmup_seconds` is None when the version has no warm-up file (TF
        Serving then records no warm-up metric); `load_seconds` excludes warm-up.
        """
        model_path = str(path)
        self.load_attempt_count.increment((model_path, "success" if ok else "fail"))
        if not ok:
            return
        self.load_latency.increment((model_path,), _microseconds(load_seconds))
        if warmup_seconds is not None:
            self.model_warmup_latency.add((model_path, "OK"), _microseconds(warmup_seconds))
            self.model_warmup_records_read.increment((model_path, "OK"), warmup_records)

    def page(self) -> bytes:
        """PrometheusExporter::GeneratePage: lines joined by newlines, one at the end."""
        lines = [line for metric in self._all for line in metric.lines()]
        return ("\n".join(lines) + "\n").encode()
