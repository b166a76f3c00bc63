"""core/calls.py: the one call a transport makes into the core, whatever the transport.

A fake model table records when a version is leased and given back, so each
test checks that the transport's decoding and the run happen inside the lease,
and that the timing and the metrics are recorded once, here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from tests.unit.serving.fake_servable import FakeServable
from tf_entrypoint.serving.core import tfs_metrics as monitoring
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.calls import Ask, CoreCalls
from tf_entrypoint.serving.core.errors import Code, ServingError, invalid_argument
from tf_entrypoint.serving.core.inference import Decoded, Task
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.servable import Servable

F32 = p.TensorSpec("DT_FLOAT", (-1,))
F32_2D = p.TensorSpec("DT_FLOAT", (-1, 1))
STR = p.TensorSpec("DT_STRING", (-1,))
STR_2D = p.TensorSpec("DT_STRING", (-1, 1))


class Doubler(FakeServable):
    """y = 2x; classify gives one class "double" scored 2x per example; regress gives 2x."""

    signatures: Mapping[str, p.Signature] = {
        "serving_default": p.Signature({"x": F32}, {"y": F32}),
        "classify": p.Signature(
            {"inputs": STR}, {"classes": STR_2D, "scores": F32_2D}, p.CLASSIFY_METHOD
        ),
        "regress": p.Signature({"inputs": STR}, {"outputs": F32}, p.REGRESS_METHOD),
    }

    version = 7

    def __init__(self, table: Table) -> None:
        self.table = table

    def run(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, p.Tensor]:
        self.table.seen.append(("run", self.table.leased))
        if name == "serving_default":
            x = inputs["x"]
            return {"y": p.Tensor("DT_FLOAT", x.shape, [2 * v for v in x.values])}
        count = len(inputs["inputs"].values)
        if name == "classify":
            return {
                "classes": p.Tensor("DT_STRING", (count, 1), [b"double"] * count),
                "scores": p.Tensor("DT_FLOAT", (count, 1), [2.0] * count),
            }
        return {"outputs": p.Tensor("DT_FLOAT", (count,), [2.0] * count)}


class Version:
    def __init__(self, number: int, servable: Servable) -> None:
        self.number = number
        self.servable = servable
        self.metadata = b'{"described": "at load"}'
        self.load = 1


class Table:
    """A model table of one model "m" at version 7 that records its leases."""

    def __init__(self) -> None:
        self.leased = 0  # leases held now
        self.seen: list[tuple[str, int]] = []  # (what happened, leases held then)
        self.version = Version(7, Doubler(self))

    def models(self) -> list[str]:
        return ["m"]

    @contextmanager
    def lease(self, route: p.Route) -> Iterator[Version]:
        if route.model != "m":
            raise ServingError(Code.NOT_FOUND, f"Servable not found for request: {route.model}")
        self.leased += 1
        try:
            yield self.version
        finally:
            self.leased -= 1


def make() -> tuple[CoreCalls, Table, Metrics]:
    table, metrics = Table(), Metrics()
    return CoreCalls(table, metrics), table, metrics  # type: ignore[arg-type]


def inference_count(metrics: Metrics, model: str = "m") -> float:
    value = metrics.registry.get_sample_value(
        "serving_inference_duration_seconds_count", {"model": model}
    )
    return 0.0 if value is None else value


def runtime_count(metrics: Metrics, api: str, model: str = "m") -> int:
    return metrics.tfserving.runtime_latency.count((model, api, monitoring.RUNTIME))


ROUTE = p.Route("predict", "m")


def asked(table: Table, note: Any = "kept") -> Any:
    def decode(servable: Servable) -> Ask[Any]:
        table.seen.append(("decode", table.leased))
        assert servable is table.version.servable
        return Ask("", Decoded({"x": p.Tensor("DT_FLOAT", (2,), [1.0, 3.0])}), note)

    return decode


def test_a_predict_decodes_and_runs_inside_its_lease_and_is_timed_once() -> None:
    call, table, metrics = make()
    predicted = call.predict(ROUTE, "Predict", asked(table))
    assert (predicted.version, predicted.signature_name, predicted.note) == (
        7,
        "serving_default",
        "kept",
    )
    assert list(predicted.outputs["y"].values) == [2.0, 6.0]
    assert table.seen == [("decode", 1), ("run", 1)]
    assert table.leased == 0  # given back
    assert inference_count(metrics) == 1
    assert runtime_count(metrics, monitoring.RUNTIME_API_PREDICT) == 1


def test_an_open_inference_protocol_call_is_timed_but_not_in_tf_servings_runtime_latency() -> None:
    call, table, metrics = make()
    call.predict(ROUTE, "ModelInfer", asked(table))
    assert inference_count(metrics) == 1
    assert runtime_count(metrics, monitoring.RUNTIME_API_PREDICT) == 0


def test_a_request_that_fails_its_decoding_or_checks_runs_nothing_and_gives_back_its_lease() -> (
    None
):
    call, table, metrics = make()

    def bad(servable: Servable) -> Ask[None]:
        raise invalid_argument("not JSON")

    with pytest.raises(ServingError, match="not JSON"):
        call.predict(ROUTE, "Predict", bad)

    def wrong_input(servable: Servable) -> Ask[None]:
        return Ask("", Decoded({"z": p.Tensor("DT_FLOAT", (1,), [1.0])}), None)

    with pytest.raises(ServingError, match="input size does not match signature"):
        call.predict(ROUTE, "Predict", wrong_input)
    assert table.leased == 0
    assert [what for what, _ in table.seen] == []
    assert inference_count(metrics) == 0


def test_a_predict_awaited_on_a_loop_keeps_its_lease_until_its_batch_answers() -> None:
    call, table, metrics = make()

    async def start(
        servable: Servable, name: str, tensors: Mapping[str, p.Tensor], wanted: tuple[str, ...]
    ) -> dict[str, p.Tensor]:
        await asyncio.sleep(0)
        table.seen.append(("batch answered", table.leased))
        return servable.run(name, tensors, wanted)

    predicted = asyncio.run(call.predict_started(ROUTE, "Predict", asked(table), start))
    assert list(predicted.outputs["y"].values) == [2.0, 6.0]
    assert table.seen == [("decode", 1), ("batch answered", 1), ("run", 1)]
    assert table.leased == 0
    assert inference_count(metrics) == 1


def test_classify_regress_and_multi_inference_are_counted_under_their_own_apis() -> None:
    call, table, metrics = make()
    examples = [b"", b""]
    number, classes = call.classify(ROUTE, "classify", examples)
    assert (number, classes) == (7, [[(b"double", 2.0)], [(b"double", 2.0)]])
    assert call.regress(ROUTE, "regress", examples) == (7, [2.0, 2.0])
    tasks = [Task("m", "classify", p.CLASSIFY_METHOD), Task("m", "regress", p.REGRESS_METHOD)]
    number, results = call.multi_inference(ROUTE, tasks, examples)
    assert (number, results[1]) == (7, [2.0, 2.0])
    assert table.leased == 0
    assert inference_count(metrics) == 3
    assert runtime_count(metrics, monitoring.RUNTIME_API_CLASSIFY) == 1
    assert runtime_count(metrics, monitoring.RUNTIME_API_REGRESS) == 1
    assert metrics.tfserving.request_example_count_total.value(("m",)) == 2


def test_metadata_is_read_inside_the_lease() -> None:
    call, table, _ = make()

    def read(version: Any, servable: Servable) -> tuple[int, bytes, int]:
        return version.number, version.metadata, table.leased

    assert call.signatures(ROUTE, read) == (7, b'{"described": "at load"}', 1)
    assert table.leased == 0


def test_answers_are_counted_by_canonical_code_and_unknown_models_share_one_label() -> None:
    call, _, metrics = make()
    call.answered(ROUTE, "predict", monitoring.ENTRYPOINT_REST, "OK", 0.001)
    call.answered(ROUTE, "Predict", monitoring.ENTRYPOINT_GRPC, "INVALID_ARGUMENT", 0.001)
    call.answered(p.Route("predict", "made-up"), "predict", "REST", "NOT_FOUND", 0.001)
    call.answered(None, "", monitoring.ENTRYPOINT_REST, "INVALID_ARGUMENT", 0.001)
    count = metrics.tfserving.request_count
    assert count.value(("m", "OK")) == 1
    assert count.value(("m", "INVALID_ARGUMENT")) == 1
    assert count.value(("", "NOT_FOUND")) == 1
    assert count.value(("", "INVALID_ARGUMENT")) == 1


def test_the_cores_metrics_have_no_transports_series() -> None:
    """HTTP statuses and gRPC methods are counted by the transports (rest/metrics.py,
    grpc/metrics.py), on the same registry, not by the core."""
    names = {family.name for family in Metrics().registry.collect()}
    assert "serving_inference_duration_seconds" in names
    assert not names & {"serving_requests", "serving_request_errors", "serving_grpc_requests"}
    assert not any(name.startswith(("serving_request_duration", "serving_grpc")) for name in names)
