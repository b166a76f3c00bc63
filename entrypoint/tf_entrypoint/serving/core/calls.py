"""The one call a transport makes into the core for each request (docs/architecture.md).

A transport decodes what its client sent, makes one call here, and encodes
what comes back: :meth:`CoreCalls.predict` (TF Serving's Predict over REST
and gRPC, and the Open Inference Protocol's infer over both),
:meth:`~CoreCalls.classify`, :meth:`~CoreCalls.regress`,
:meth:`~CoreCalls.multi_inference` and :meth:`~CoreCalls.signatures`
(metadata). Behind the call, once for every transport:

- the **version lease**: the version is chosen when the call runs (a request
  that waited in the queue during a swap runs on the newest version) and stays
  loaded until the call returns;
- the **decoding against that version**: a predict's `decode` is called with
  the leased servable, so the transport parses its body for that version's
  signatures (REST's JSON takes each input's dtype from them);
- the **checks** of core/inference.py (TF Serving's predict_util.cc,
  classifier.cc, regressor.cc, multi_inference.cc);
- the **run** (through the batch queue when batching is on), and
- its **timing and metrics**: ``serving_inference_duration_seconds`` and TF
  Serving's ``runtime_latency``, by model, whatever the transport.

When the transport has answered, it reports the outcome once with
:meth:`CoreCalls.answered`: a canonical code (``OK``, ``NOT_FOUND``, ...),
never an HTTP status, for TF Serving's ``request_count`` and
``request_latency``. What only one transport has (HTTP statuses, gRPC
methods) it counts in its own series (rest/metrics.py, grpc/metrics.py).

In a front-end of several processes the manager is ipc/remote.py's: the
lease describes the engine's version, and the run crosses to the engine
(tensors in shared memory); nothing here changes.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from tf_entrypoint.serving.core import inference
from tf_entrypoint.serving.core import tfs_metrics as monitoring
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.inference import Classifications, Inputs, Task, TaskResult
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.models import Leased, ModelTable
from tf_entrypoint.serving.core.servable import Servable

N = TypeVar("N")
R = TypeVar("R")

#: TF Serving's runtime_latency `API` of each kind of inference (no Open Inference
#: Protocol call, and no MultiInference, is counted there: TF Serving has neither).
RUNTIME_APIS = {
    "Predict": monitoring.RUNTIME_API_PREDICT,
    "Classify": monitoring.RUNTIME_API_CLASSIFY,
    "Regress": monitoring.RUNTIME_API_REGRESS,
}


@dataclass(frozen=True, slots=True)
class Ask(Generic[N]):
    """A predict as the transport decoded it, for the leased version.

    `rest`: in REST's words (codec/json_tensor.py has checked the signature
    name already; see :func:`inference.checked_predict`). `note`: what the
    transport keeps for its answer (REST's row or column format, the Open
    Inference Protocol's request id and output options); given back unread.
    """

    signature_name: str
    inputs: Inputs
    note: N
    output_filter: Sequence[str] = ()
    rest: bool = False


@dataclass(frozen=True, slots=True)
class Predicted(Generic[N]):
    """A predict's result: the version that ran it, the signature, the outputs by alias."""

    version: int
    signature_name: str
    outputs: dict[str, p.Tensor]
    note: N


#: How a predict runs once checked: (servable, signature, inputs, outputs to fetch) -> outputs.
Run = Callable[[Servable, str, Mapping[str, p.Tensor], tuple[str, ...]], dict[str, p.Tensor]]
#: The same, awaited on an event loop (REST's predict queued for its batch from the loop).
Start = Callable[
    [Servable, str, Mapping[str, p.Tensor], tuple[str, ...]], Awaitable[dict[str, p.Tensor]]
]


def _run(
    servable: Servable, name: str, tensors: Mapping[str, p.Tensor], wanted: tuple[str, ...]
) -> dict[str, p.Tensor]:
    return servable.run(name, tensors, wanted, batch=True)


def _servable(version: Leased) -> Servable:
    servable = version.servable
    assert servable is not None  # noqa: S101 - a lease gives an AVAILABLE version, which has one
    return servable


def _checked(
    version: Leased, decode: Callable[[Servable], Ask[N]]
) -> tuple[Servable, Ask[N], str, Mapping[str, p.Tensor], tuple[str, ...]]:
    """A predict decoded for the leased version and checked (core/inference.py):
    (the servable, what the transport decoded, the signature, the inputs, the outputs)."""
    servable = _servable(version)
    ask = decode(servable)
    name, tensors, wanted = inference.checked_predict(
        servable, ask.signature_name, ask.inputs, ask.output_filter, rest=ask.rest
    )
    return servable, ask, name, tensors, wanted


class CoreCalls:
    """The calls into the core, over the models and the metrics of one process."""

    def __init__(self, manager: ModelTable, metrics: Metrics) -> None:
        self.manager = manager
        self.metrics = metrics

    def model_label(self, route: p.Route | None) -> str:
        """The metrics' `model` label: a configured model's name, else "" (bounded values)."""
        if route is not None and route.model in self.manager.models():
            return route.model
        return ""

    # -- the calls

    def predict(
        self, route: p.Route, api: str, decode: Callable[[Servable], Ask[N]], run: Run = _run
    ) -> Predicted[N]:
        """One predict: the version leased, `decode(servable)`, the checks, the run, timed.

        `api`: "Predict" (TF Serving's) or "ModelInfer" (the Open Inference
        Protocol's), for the metrics. `run`: how the checked call runs (the
        servable's run through the batch queue, by default). Blocking: a
        transport calls it on a worker, or inline (core/admission.py).
        """
        with self.manager.lease(route) as version:
            servable, ask, name, tensors, wanted = _checked(version, decode)
            started = time.perf_counter()
            outputs = run(servable, name, tensors, wanted)
            self._ran(route, api, time.perf_counter() - started)
            return Predicted(version.number, name, outputs, ask.note)

    async def predict_started(
        self, route: p.Route, api: str, decode: Callable[[Servable], Ask[N]], start: Start
    ) -> Predicted[N]:
        """:meth:`predict`, where the run is awaited on the transport's event loop
        (`start` queues it for its batch and waits for the batch's answer), so that
        no thread waits for the batch. The version stays leased until it answers."""
        with self.manager.lease(route) as version:
            servable, ask, name, tensors, wanted = _checked(version, decode)
            started = time.perf_counter()
            outputs = await start(servable, name, tensors, wanted)
            self._ran(route, api, time.perf_counter() - started)
            return Predicted(version.number, name, outputs, ask.note)

    def classify(
        self, route: p.Route, signature_name: str, examples: Sequence[bytes]
    ) -> tuple[int, Classifications]:
        """TF Serving's Classify: (the version, per example its (label, score) pairs)."""
        with self.manager.lease(route) as version:
            servable = _servable(version)
            started = time.perf_counter()
            classes = inference.classify(servable, signature_name, examples)
            self._ran(route, "Classify", time.perf_counter() - started)
            return version.number, classes

    def regress(
        self, route: p.Route, signature_name: str, examples: Sequence[bytes]
    ) -> tuple[int, list[float]]:
        """TF Serving's Regress: (the version, one value per example)."""
        with self.manager.lease(route) as version:
            servable = _servable(version)
            started = time.perf_counter()
            values = inference.regress(servable, signature_name, examples)
            self._ran(route, "Regress", time.perf_counter() - started)
            return version.number, values

    def multi_inference(
        self, route: p.Route, tasks: Sequence[Task], examples: Sequence[bytes]
    ) -> tuple[int, list[TaskResult]]:
        """TF Serving's MultiInference: (the version, one result per task); its examples are
        counted as TF Serving counts them (request_example_counts)."""
        with self.manager.lease(route) as version:
            servable = _servable(version)
            started = time.perf_counter()
            results = inference.multi_inference(servable, tasks, examples)
            self._ran(route, "MultiInference", time.perf_counter() - started)
            self.metrics.examples_counted(self.model_label(route), len(examples))
            return version.number, results

    def signatures(self, route: p.Route, read: Callable[[Leased, Servable], R]) -> R:
        """Metadata: `read(version, servable)` of the version the route addresses, leased
        while it reads (the version's number, its signatures, what was encoded at load)."""
        with self.manager.lease(route) as version:
            return read(version, _servable(version))

    # -- the outcome

    def answered(
        self, route: p.Route | None, api: str, entrypoint: str, code: str, seconds: float
    ) -> None:
        """One request answered, whatever its outcome: TF Serving's request_count and
        request_latency. `api`: TF Serving's API label (monitoring.API_*), "" for a
        request it does not count by API; `entrypoint`: monitoring.ENTRYPOINT_*;
        `code`: the canonical code's name ("OK", "NOT_FOUND", ...)."""
        self.metrics.request_done(self.model_label(route), api, entrypoint, code, seconds)

    def _ran(self, route: p.Route, api: str, seconds: float) -> None:
        model = self.model_label(route)
        self.metrics.observe_inference(model, seconds)
        runtime = RUNTIME_APIS.get(api)
        if runtime is not None:
            self.metrics.runtime_done(model, runtime, seconds)
