"""One metrics page for several processes: each process's samples as plain data, summed.

With --frontends N (serving/processes.py) every process counts what it does:
the front-ends the requests, the engine the loads, versions and batches.
Their pages are one page: each front-end sends the engine a :func:`snapshot`
of its metrics every second (and the one serving a scrape sends a fresh
one), and the engine :func:`merge`\\ s its own with the latest of each into
the two pages a scrape gets (ours and TF Serving's), rendered by the same
code as one process's. Counters and histograms are summed; so are gauges
(requests in flight, workers, resident memory and CPU seconds: totals),
except the few that say the same thing in every process
(:data:`SAME_EVERYWHERE`, the admission bound the front-ends share among
them: the largest is kept) and start times (the
earliest). A restarted front-end's counters start again from zero, which
Prometheus reads as a counter reset.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric

from tf_entrypoint.serving.core.tfs_metrics import TFServingMetrics

#: (family name, help, type, unit, ((sample name, ((label, value), ...), value), ...))
Family = tuple[str, str, str, str, tuple[tuple[str, tuple[tuple[str, str], ...], float], ...]]
#: One process's metrics: its families, and TF Serving's cells (tfs_metrics.py).
Snapshot = tuple[tuple[Family, ...], dict[str, Any]]

#: Gauges that every process sets alike: the largest value is the page's.
SAME_EVERYWHERE = frozenset({"python_info", "process_max_fds", "serving_model_version",
                             "serving_model_versions_available", "serving_max_queue"})  # fmt: skip


def snapshot(collectors: Iterable[Any], tfserving: TFServingMetrics) -> Snapshot:
    """The samples of `collectors` (a registry's collect()) and TF Serving's cells."""
    families: list[Family] = []
    for collector in collectors:
        for metric in collector.collect():
            samples = tuple(
                (s.name, tuple(sorted(s.labels.items())), float(s.value)) for s in metric.samples
            )
            families.append((metric.name, metric.documentation, metric.type, metric.unit, samples))
    return tuple(families), tfserving.cells()


def _combine(family: str, sample: str, mine: float, theirs: float, kind: str) -> float:
    if sample.endswith(("_created", "start_time_seconds")):
        return min(mine, theirs)
    if kind == "gauge" and (family in SAME_EVERYWHERE or sample in SAME_EVERYWHERE):
        return max(mine, theirs)
    if kind == "info":
        return max(mine, theirs)
    return mine + theirs


class _Merged:
    """A collector of the merged families (prometheus_client renders it)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> list[Metric]:
        return self._metrics


def merge(snapshots: Sequence[Snapshot]) -> tuple[bytes, bytes]:
    """The two pages of the processes' `snapshots`: ours (Prometheus' text) and TF Serving's."""
    order: list[str] = []
    heads: dict[str, tuple[str, str, str]] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    tfserving = TFServingMetrics()
    for families, cells in snapshots:
        tfserving.absorb(cells)
        for name, documentation, kind, unit, samples in families:
            if name not in heads:
                order.append(name)
                heads[name] = (documentation, kind, unit)
                values[name] = {}
            table = values[name]
            for sample, labels, value in samples:
                key = (sample, tuple(labels))
                known = table.get(key)
                table[key] = value if known is None else _combine(name, sample, known, value, kind)
    metrics = []
    for name in order:
        documentation, kind, unit = heads[name]
        metric = Metric(name, documentation, kind, unit)
        for (sample, labels), value in values[name].items():
            metric.add_sample(sample, dict(labels), value)
        metrics.append(metric)
    return generate_latest(_Merged(metrics)), tfserving.page()
