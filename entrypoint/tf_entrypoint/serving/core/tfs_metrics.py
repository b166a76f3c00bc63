"""TF Serving's monitoring: its Prometheus page (the file that turns it on,
`--monitoring_config_file`, is config/monitoring_config.py's).

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

import bisect
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from tf_entrypoint.serving.core.model_specs import ModelPath

#: The page's Content-Type in TF Serving (http_server.cc ProcessPrometheusRequest).
CONTENT_TYPE = "text/plain"

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

    def cells(self) -> Any:
        """The cells as plain data (core/metrics_merge.py)."""
        raise NotImplementedError

    def absorb(self, cells: Any) -> None:
        """Add another process's :meth:`cells`."""
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

    def cells(self) -> dict[tuple[str, ...], int]:
        with self._lock:
            return dict(self._cells)

    def absorb(self, cells: Mapping[tuple[str, ...], int]) -> None:
        for key, count in cells.items():
            self.increment(key, count)

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
        index = bisect.bisect_right(self.limits, value)  # the first limit above it
        if index == len(self.limits):
            index = -1
        with self._lock:
            cell = self._cells.get(key)
            if cell is None:
                cell = self._cells[key] = _Histogram(len(self.limits))
            cell.buckets[index] += 1
            cell.sum += value

    def cells(self) -> dict[tuple[str, ...], tuple[list[int], float]]:
        with self._lock:
            return {key: (list(c.buckets), c.sum) for key, c in self._cells.items()}

    def absorb(self, cells: Mapping[tuple[str, ...], tuple[list[int], float]]) -> None:
        with self._lock:
            for key, (buckets, total) in cells.items():
                cell = self._cells.get(tuple(key))
                if cell is None:
                    cell = self._cells[tuple(key)] = _Histogram(len(self.limits))
                for index, count in enumerate(buckets[: len(cell.buckets)]):
                    cell.buckets[index] += count
                cell.sum += total

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
        path: ModelPath,
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

    def cells(self) -> dict[str, Any]:
        """Every metric's cells as plain data, by name (core/metrics_merge.py)."""
        return {metric.name: metric.cells() for metric in self._all}

    def absorb(self, cells: Mapping[str, Any]) -> None:
        """Add another process's :meth:`cells` to these (the sums of a page for several)."""
        for metric in self._all:
            given = cells.get(metric.name)
            if given is not None:
                metric.absorb(given)

    def page(self) -> bytes:
        """PrometheusExporter::GeneratePage: lines joined by newlines, one at the end."""
        lines = [line for metric in self._all for line in metric.lines()]
        return ("\n".join(lines) + "\n").encode()
