"""REST's own metrics: requests by HTTP status (the core's series are transport-neutral).

Registered on the process's registry beside the core's (core/metrics.py,
:meth:`~tf_entrypoint.serving.core.metrics.Metrics.transport`), so one page
shows both, and with several processes the pages merge as before.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from tf_entrypoint.serving.core.metrics import LATENCY_BUCKETS, Metrics

#: Values of the `api` label: a fixed set, whatever URLs clients send.
APIS = ("predict", "metadata", "status", "health", "metrics", "other")
#: Values of the `protocol` label: TF Serving's API (/v1/) and the Open Inference Protocol (/v2/).
PROTOCOLS = ("v1", "v2")


class RestMetrics:
    """serving_requests, serving_request_errors, serving_request_duration_seconds."""

    def __init__(self, registry: CollectorRegistry) -> None:
        #: The series by label values, looked up once each (prometheus_client's
        #: labels() checks and locks on every call).
        self._series: dict[tuple[str, int, str, str], tuple[Any, Any, Any]] = {}
        self.requests = Counter(
            "serving_requests",
            "HTTP requests answered, by API, status code, model and protocol.",
            ["api", "code", "model", "protocol"],
            registry=registry,
        )
        self.errors = Counter(
            "serving_request_errors",
            "Requests answered with an error: kind=client (4xx) or server (5xx).",
            ["api", "kind", "model", "protocol"],
            registry=registry,
        )
        self.latency = Histogram(
            "serving_request_duration_seconds",
            "Time from request received to response ready, by API, model and protocol.",
            ["api", "model", "protocol"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    @classmethod
    def of(cls, metrics: Metrics) -> RestMetrics:
        """The process's REST series (made once, whichever application asks first)."""
        return metrics.transport("rest", cls)

    def observe(
        self, api: str, code: int, seconds: float, model: str = "", protocol: str = "v1"
    ) -> None:
        """One HTTP request answered: `api` of APIS, `code` its HTTP status."""
        key = (api, code, model, protocol)
        series = self._series.get(key)
        if series is None:  # label values are bounded: APIS, statuses, models, PROTOCOLS
            kind = "server" if code >= 500 else "client" if code >= 400 else None
            series = self._series[key] = (
                self.requests.labels(api, str(code), model, protocol),
                None if kind is None else self.errors.labels(api, kind, model, protocol),
                self.latency.labels(api, model, protocol),
            )
        requests, errors, latency = series
        requests.inc()
        if errors is not None:
            errors.inc()
        latency.observe(seconds)
