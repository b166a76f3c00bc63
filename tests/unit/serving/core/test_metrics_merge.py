"""core/metrics_merge.py: several processes' metrics as one page."""

from __future__ import annotations

import marshal

from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.metrics_merge import merge
from tf_entrypoint.serving.rest.metrics import RestMetrics


def sample(page: bytes, line_start: str) -> float:
    (line,) = [line for line in page.decode().splitlines() if line.startswith(line_start + " ")]
    return float(line.rsplit(" ", 1)[1])


def test_counters_histograms_and_gauges_add_up_across_processes() -> None:
    engine, front_a, front_b = Metrics(), Metrics(), Metrics()
    for metrics in (engine, front_a, front_b):
        metrics.add_model("m")
    engine.version_loaded("m", 0.3, 0)
    engine.versions_available("m", [1])
    engine.workers.set(0)
    for front in (front_a, front_b):
        front.workers.set(2)
        RestMetrics.of(front).observe("predict", 200, 0.002, "m")
    # REST's series exist in the front-ends only, not in the engine: merged all the same
    RestMetrics.of(front_a).observe("predict", 200, 0.004, "m")
    front_a.request_done("m", "predict", "REST", "OK", 0.004)
    front_b.request_done("m", "predict", "gRPC", "OK", 0.002)
    # each snapshot crosses as marshal bytes, as a front-end's report does
    crossed = [marshal.dumps(m.snapshot()) for m in (engine, front_a, front_b)]
    snapshots = [marshal.loads(data) for data in crossed]  # noqa: S302 - our own bytes
    ours, tfserving = merge(snapshots)
    labels = '{api="predict",code="200",model="m",protocol="v1"}'
    assert sample(ours, f"serving_requests_total{labels}") == 3
    assert sample(ours, 'serving_model_loads_total{model="m",result="success"}') == 1
    assert sample(ours, "serving_workers") == 4  # the front-ends' threads, summed
    assert sample(ours, 'serving_model_version{model="m"}') == 1  # the engine's, not a sum
    assert sample(ours, 'serving_request_duration_seconds_count{api="predict",model="m",'
                        'protocol="v1"}') == 3  # fmt: skip
    assert sample(tfserving, ':tensorflow:serving:request_count{model_name="m",status="OK"}') == 2
    # one # TYPE line per family: merged, not repeated
    assert ours.decode().count("# TYPE serving_requests_total counter") == 1


def test_one_process_page_is_its_own() -> None:
    metrics = Metrics()
    metrics.add_model("m")
    RestMetrics.of(metrics).observe("predict", 200, 0.002, "m")
    ours, tfserving = merge([metrics.snapshot()])
    labels = '{api="predict",code="200",model="m",protocol="v1"}'
    assert sample(ours, f"serving_requests_total{labels}") == 1
    assert tfserving == metrics.tfserving.page()


def test_a_page_made_elsewhere_is_what_exposition_serves() -> None:
    metrics = Metrics()
    metrics.pages = lambda: (b"ours\n", b"theirs\n")
    assert metrics.exposition() == b"ours\n"
    assert metrics.tfserving_page() == b"theirs\n"
