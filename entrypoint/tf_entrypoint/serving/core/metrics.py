"""Prometheus metrics of the model server (one registry per process).

The core's series are transport-neutral: inference time by model, admission,
batching, the models' lifecycle, and TF Serving's own metrics (tfs_metrics.py,
with canonical codes). Each transport adds its own on the same registry
(:meth:`Metrics.transport`): REST's by HTTP status (rest/metrics.py), gRPC's
by method and code (grpc/metrics.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from tf_entrypoint.serving.core.batching import BatchHooks
from tf_entrypoint.serving.core.metrics_merge import Snapshot, snapshot
from tf_entrypoint.serving.core.model_specs import ModelPath
from tf_entrypoint.serving.core.tfs_metrics import TFServingMetrics

T = TypeVar("T")

#: Seconds; from a cache-hot tiny model to a request that hits the timeout.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
#: Seconds to load (and warm up) a version: from a tiny model to a large one.
LOAD_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: Rows in one batched TensorFlow call (padding included).
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Metrics:
    """The server's metrics; also the model manager's Events (core/models.py).

    The `model` label is a configured model's name, or "" for a request that
    names none (so clients cannot create label values by inventing URLs).
    """

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        #: The inference series by model, looked up once each (prometheus_client's
        #: labels() checks and locks on every call).
        self._inference_series: dict[str, Any] = {}
        #: With several processes (serving/processes.py): makes the two pages of all of
        #: them, (ours, TF Serving's); None: this process's own.
        self.pages: Callable[[], tuple[bytes, bytes]] | None = None
        self.registry = CollectorRegistry()
        #: Each transport's own series (rest/metrics.py, grpc/metrics.py), made once.
        self._transports: dict[str, object] = {}
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        r = self.registry
        self.inference = Histogram(
            "serving_inference_duration_seconds",
            "Time inside TensorFlow per successful predict, by model.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "serving_predict_in_flight",
            "Predict requests admitted: running on a worker or waiting for one.",
            registry=r,
        )
        self.rejected = Counter(
            "serving_predict_rejected",
            "Predict requests refused with 503 because the queue was full.",
            registry=r,
        )
        self.workers = Gauge(
            "serving_workers", "Inference threads (requests run at once).", registry=r
        )
        self.max_queue = Gauge(
            "serving_max_queue", "Predict requests admitted before 503.", registry=r
        )
        self.batch_size = Histogram(
            "serving_batch_size",
            "Rows per batched TensorFlow call (--enable_batching), padding included.",
            buckets=BATCH_SIZE_BUCKETS,
            registry=r,
        )
        self.batch_requests = Histogram(
            "serving_batch_requests",
            "Requests per batched TensorFlow call (--enable_batching).",
            buckets=BATCH_SIZE_BUCKETS,
            registry=r,
        )
        self.batch_queue_delay = Histogram(
            "serving_batch_queue_delay_seconds",
            "Time a request waited in the batch queue before its batch ran.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batches = Counter("serving_batches", "Batches run (--enable_batching).", registry=r)
        self.batch_padded_rows = Counter(
            "serving_batch_padded_rows",
            "Rows added to batches to reach an allowed_batch_sizes size.",
            registry=r,
        )
        self.model_version = Gauge(
            "serving_model_version",
            "Newest version of the model serving requests (0 while none is available).",
            ["model"],
            registry=r,
        )
        self.available_versions = Gauge(
            "serving_model_versions_available",
            "Versions of the model available for requests.",
            ["model"],
            registry=r,
        )
        self.loads = Counter(
            "serving_model_loads",
            "Version loads (warm-up included), by model and result (success, failure).",
            ["model", "result"],
            registry=r,
        )
        self.unloads = Counter(
            "serving_model_unloads",
            "Versions unloaded (after their last request finished), by model and result.",
            ["model", "result"],
            registry=r,
        )
        self.load_duration = Histogram(
            "serving_model_load_duration_seconds",
            "Time to load and warm up one version, by model.",
            ["model"],
            buckets=LOAD_BUCKETS,
            registry=r,
        )
        self.warmup_records = Counter(
            "serving_model_warmup_records",
            "Warm-up records (assets.extra/tf_serving_warmup_requests) replayed, by model.",
            ["model"],
            registry=r,
        )
        #: TF Serving's own metrics, for the --monitoring_config_file page.
        self.tfserving = TFServingMetrics()
        self.config_reloads = Counter(
            "serving_model_config_reloads",
            "Changed model config files applied (success) or refused (failure).",
            ["result"],
            registry=r,
        )

    def add_model(self, model: str) -> None:
        """Create a configured model's series at 0, so dashboards see it before traffic."""
        self.model_version.labels(model)
        self.available_versions.labels(model)
        for result in ("success", "failure"):
            self.loads.labels(model, result)
        self.unloads.labels(model, "success")

    def transport(self, name: str, make: Callable[[CollectorRegistry], T]) -> T:
        """Transport `name`'s own series on this registry, made by `make` the first time.

        What only one transport has (HTTP statuses, gRPC methods) is counted
        there, not here: the core's series are transport-neutral."""
        found = self._transports.get(name)
        if found is None:
            found = self._transports[name] = make(self.registry)
        return cast("T", found)

    def observe_inference(self, model: str, seconds: float) -> None:
        """Seconds inside TensorFlow for one successful predict (serving_inference_duration)."""
        series = self._inference_series.get(model)
        if series is None:
            series = self._inference_series[model] = self.inference.labels(model)
        series.observe(seconds)

    # -- TF Serving's metrics (core/calls.py records these for every transport)

    def request_done(
        self, model_name: str, api: str, entrypoint: str, status: str, seconds: float
    ) -> None:
        """One answered request, for TF Serving's request_count and request_latency.

        Call it for every request, whatever its outcome (TF Serving counts them
        all and keeps the latency of successful ones only). `model_name`: a
        configured model's name, else "" (bounded label values); `api`: one of
        monitoring's API_GRPC_* / API_REST_* values; `entrypoint`:
        ENTRYPOINT_GRPC or ENTRYPOINT_REST; `status`: the canonical status name
        ("OK", "NOT_FOUND", "INVALID_ARGUMENT", ...; `grpc.StatusCode.X.name`
        gives it); `seconds`: from request received to answer ready.
        """
        self.tfserving.request_done(model_name, api, entrypoint, status, seconds)

    def runtime_done(self, model_name: str, api: str, seconds: float) -> None:
        """Seconds inside TensorFlow for one successful call (TF Serving's runtime_latency).

        `api`: one of monitoring's RUNTIME_API_* values ("Predict", "Classify",
        "Regress"), whatever the entrypoint.
        """
        self.tfserving.runtime_done(model_name, api, seconds)

    def examples_counted(self, model_name: str, count: int) -> None:
        """The examples of one MultiInference request (TF Serving's
        request_example_counts and request_example_count_total, which only
        MultiInference records)."""
        self.tfserving.examples_counted(model_name, count)

    # -- models.Events (the manager reports these)

    def version_loaded(self, model: str, seconds: float, warmup_records: int) -> None:
        self.loads.labels(model, "success").inc()
        self.load_duration.labels(model).observe(seconds)
        self.warmup_records.labels(model).inc(warmup_records)

    def version_load_failed(self, model: str, seconds: float) -> None:
        self.loads.labels(model, "failure").inc()
        self.load_duration.labels(model).observe(seconds)

    def version_unloaded(self, model: str) -> None:
        self.unloads.labels(model, "success").inc()

    def versions_available(self, model: str, versions: list[int]) -> None:
        self.available_versions.labels(model).set(len(versions))
        self.model_version.labels(model).set(max(versions, default=0))

    def config_reloaded(self, result: str) -> None:
        self.config_reloads.labels(result).inc()

    def saved_model_loaded(
        self,
        path: ModelPath,
        ok: bool,
        load_seconds: float,
        warmup_seconds: float | None,
        warmup_records: int,
    ) -> None:
        self.tfserving.saved_model_loaded(path, ok, load_seconds, warmup_seconds, warmup_records)

    def batch_hooks(self) -> BatchHooks:
        """What the batchers report to."""

        def batch_run(rows: int, padded: int, tasks: int) -> None:
            self.batches.inc()
            self.batch_size.observe(rows)
            self.batch_requests.observe(tasks)
            if padded:
                self.batch_padded_rows.inc(padded)

        return BatchHooks(batch_run=batch_run, queued=self.batch_queue_delay.observe)

    def exposition(self) -> bytes:
        """The /metrics page: this process's, or with several processes all of theirs."""
        if self.pages is not None:
            return self.pages()[0]
        return generate_latest(self.registry)

    def tfserving_page(self) -> bytes:
        """TF Serving's Prometheus page (--monitoring_config_file), likewise."""
        if self.pages is not None:
            return self.pages()[1]
        return self.tfserving.page()

    def snapshot(self) -> Snapshot:
        """This process's samples as plain data (core/metrics_merge.py)."""
        return snapshot([self.registry], self.tfserving)
