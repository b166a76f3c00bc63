"""gRPC's own metrics: calls by method and status code (the core's series are
transport-neutral; see rest/metrics.py for REST's)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from tf_entrypoint.serving.core.metrics import LATENCY_BUCKETS, Metrics


class GrpcMetrics:
    """serving_grpc_requests, serving_grpc_request_duration_seconds."""

    def __init__(self, registry: CollectorRegistry) -> None:
        #: The series by label values, looked up once each.
        self._series: dict[tuple[str, str, str, str], tuple[Any, Any]] = {}
        self.requests = Counter(
            "serving_grpc_requests",
            "gRPC calls answered, by method, status code, model and protocol.",
            ["method", "code", "model", "protocol"],
            registry=registry,
        )
        self.latency = Histogram(
            "serving_grpc_request_duration_seconds",
            "Time from gRPC call received to response ready, by method, model and protocol.",
            ["method", "model", "protocol"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    @classmethod
    def of(cls, metrics: Metrics) -> GrpcMetrics:
        """The process's gRPC series (made once)."""
        return metrics.transport("grpc", cls)

    def observe(
        self, method: str, code: str, seconds: float, model: str = "", protocol: str = "v1"
    ) -> None:
        """One call answered: its method's name, its status code's name."""
        key = (method, code, model, protocol)
        series = self._series.get(key)
        if series is None:  # bounded: calls.METHODS, the codes, models, two protocols
            series = self._series[key] = (
                self.requests.labels(method, code, model, protocol),
                self.latency.labels(method, model, protocol),
            )
        series[0].inc()
        series[1].observe(seconds)
