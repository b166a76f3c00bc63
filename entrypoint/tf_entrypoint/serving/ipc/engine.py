"""The engine's operations: what a front-end's call runs in the engine process.

One handler (:class:`EngineOps`, ipc/service.py's ``Handler``) over the
engine's models (core/models.py): the front-end sends an operation's name,
its small arguments and its tensors; this leases the version, runs, and
answers. Every operation is a few lines over what the single process does,
so both modes answer alike:

- ``describe``: a route's version as the front-end needs it to decode and
  check a request (signatures and their texts, the SignatureDef map, which
  signatures run) and to answer metadata;
- ``run`` / ``run_many``: one predict, classify or regress (or
  MultiInference's signatures) on the version the front-end decoded for. The
  version is leased here, for the run, so a swap fails no request: when the
  route now names another version, the answer says so (``stale``, with the
  new description) and nothing runs; the front-end retries on it (ipc/remote.py);
- ``status``, ``readiness``, ``models``: the model table's answers;
- ``submit``: a HandleReloadConfigRequest's configuration, to the manager;
- ``report`` / ``metrics``: a front-end's metrics, every second; the pages of
  every process merged, for a scrape (core/metrics_merge.py);
- ``profile_start``, ``profile_stop``, ``profile_empty``, ``profile_save``:
  TF Serving's profiler service, recording in the engine (ipc/profiler.py).
"""

from __future__ import annotations

import marshal
import pickle
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.deadlines import run_with_deadline
from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.metrics_merge import merge
from tf_entrypoint.serving.core.models import Leased, ModelTable
from tf_entrypoint.serving.core.servable import Profiler, Servable
from tf_entrypoint.serving.core.types import Signature, Tensor, TensorSpec
from tf_entrypoint.serving.ipc.board import Board
from tf_entrypoint.serving.ipc.profiler import EngineProfiles

#: A Signature as plain data: ((alias, dtype, shape, tensor name), ...) twice, and the method.
PlainSignature = tuple[
    tuple[tuple[str, str, Any, str], ...], tuple[tuple[str, str, Any, str], ...], str
]

STALE = "stale"
#: The longest a scrape waits for the other front-ends' metrics.
FRESH_REPORTS = 0.5
#: A front-end whose last report is older than this is not waited for (it died).
LIVE = 3.0
#: The tensors of the metrics operations: a snapshot in, the two pages out.
SNAPSHOT, OURS, TF_SERVING = "snapshot", "ours", "tfserving"


def plain_signature(signature: Signature) -> PlainSignature:
    def specs(table: Mapping[str, TensorSpec]) -> tuple[tuple[str, str, Any, str], ...]:
        return tuple((alias, s.dtype, s.shape, s.tensor_name) for alias, s in table.items())

    return specs(signature.inputs), specs(signature.outputs), signature.method_name


def signature_of(plain: PlainSignature) -> Signature:
    inputs, outputs, method = plain

    def specs(rows: tuple[tuple[str, str, Any, str], ...]) -> dict[str, TensorSpec]:
        return {
            alias: TensorSpec(dtype, None if shape is None else tuple(shape), name)
            for alias, dtype, shape, name in rows
        }

    return Signature(specs(inputs), specs(outputs), method)


def route_of(args: Sequence[Any]) -> p.Route:
    kind, model, version, label = args[:4]
    return p.Route(kind, model, version, label)


def route_args(route: p.Route) -> tuple[Any, ...]:
    return (route.kind, route.model, route.version, route.label)


def describe(version: Leased) -> tuple[Any, ...]:
    """A version as a front-end needs it (ipc/remote.py's RemoteVersion reads it back)."""
    servable = version.servable
    assert servable is not None  # noqa: S101 - leased versions are AVAILABLE
    signatures = servable.signatures
    return (
        version.number,
        version.load,
        {name: plain_signature(s) for name, s in signatures.items()},
        dict(servable.signature_texts),
        servable.signature_def_map,
        servable.warmup_records,
        servable.method_name_check,
        tuple(name for name in signatures if servable.runs(name)),
        version.metadata,
    )


class EngineOps:
    """The engine's one handler over its manager (ipc/service.py calls it on a lane's thread)."""

    def __init__(
        self,
        manager: ModelTable,
        metrics: Metrics | None = None,
        board: Board | None = None,
        profiler: Profiler | None = None,
        *,
        batching: bool = False,
    ) -> None:
        self.manager = manager
        #: Predicts may wait in a batch queue (--enable_batching): never on the dispatcher.
        self.batching = batching
        #: The profiler service's operations (ipc/profiler.py).
        self.profiles = EngineProfiles(profiler)
        #: The engine's own metrics, merged with the front-ends' on a scrape.
        self.metrics = metrics
        #: Where it asks the front-ends for their metrics (ipc/board.py).
        self.board = board
        #: Each front-end's latest metrics: index -> (the ask it answered, when, marshal
        #: bytes of a snapshot).
        self._reports: dict[int, tuple[int, float, bytes]] = {}
        self._reported = threading.Condition()

    def short(self, op: str, args: tuple[Any, ...]) -> str | None:
        """ipc/service.py's Short: a predict's model (its runs are timed, and run on the
        dispatcher while they take under 2 ms), unless it may wait for a batch; None for
        every other operation."""
        if op != "run":
            return None
        try:
            if self.batching and args[9]:
                return None
            return str(args[1])
        except (IndexError, TypeError):
            return None

    def __call__(  # noqa: PLR0911 - one return per operation
        self, op: str, args: tuple[Any, ...], inputs: Mapping[str, Tensor], deadline: float | None
    ) -> tuple[Any, Mapping[str, Tensor]]:
        if op == "run":
            return self._run(args, inputs, deadline)
        if op == "run_many":
            return self._run_many(args, inputs, deadline)
        if op == "describe":
            with self.manager.lease(route_of(args)) as version:
                return describe(version), {}
        if op == "status":
            statuses = self.manager.status(route_of(args))
            return tuple((s.version, s.state, s.error_code, s.error_message) for s in statuses), {}
        if op == "readiness":
            return self.manager.readiness(), {}
        if op == "models":
            return tuple(self.manager.models()), {}
        if op == "submit":
            return self._submit(args[0]), {}
        if op in ("report", "metrics"):
            return self._metrics(op, args, inputs)
        if op.startswith("profile_"):
            return self.profiles(op, args, inputs)
        raise ServingError(Code.UNIMPLEMENTED, f"the engine has no operation {op!r}")

    def _leased_run(
        self, args: tuple[Any, ...], deadline: float | None, work: Any
    ) -> tuple[Any, Mapping[str, Tensor]]:
        number, load, expired = args[4], args[5], args[6]
        with self.manager.lease(route_of(args)) as version:
            if (version.number, version.load) != (number, load):
                return (STALE, describe(version)), {}
            servable = version.servable
            assert servable is not None  # noqa: S101 - leased versions are AVAILABLE
            answer: tuple[Any, Mapping[str, Tensor]] = run_with_deadline(
                deadline, lambda: work(servable), expired
            )
            return answer

    def _run(
        self, args: tuple[Any, ...], inputs: Mapping[str, Tensor], deadline: float | None
    ) -> tuple[Any, Mapping[str, Tensor]]:
        name, wanted, batch = args[7], args[8], args[9]

        def work(servable: Servable) -> tuple[Any, Mapping[str, Tensor]]:
            return None, servable.run(name, inputs, wanted, batch=batch)

        return self._leased_run(args, deadline, work)

    def _run_many(
        self, args: tuple[Any, ...], inputs: Mapping[str, Tensor], deadline: float | None
    ) -> tuple[Any, Mapping[str, Tensor]]:
        calls = args[7]  # ((name, (input alias, ...), (output alias, ...)), ...)
        shared = {alias: inputs[alias] for alias in inputs}

        def work(servable: Servable) -> tuple[Any, Mapping[str, Tensor]]:
            results = servable.run_many(
                [(name, {a: shared[a] for a in aliases}, wanted) for name, aliases, wanted in calls]
            )
            outputs: dict[str, Tensor] = {}
            for index, result in enumerate(results):
                for alias, tensor in result.items():
                    outputs[f"{index}/{alias}"] = tensor
            return tuple(len(result) for result in results), outputs

        return self._leased_run(args, deadline, work)

    def _metrics(
        self, op: str, args: tuple[Any, ...], inputs: Mapping[str, Tensor]
    ) -> tuple[Any, Mapping[str, Tensor]]:
        """A front-end's report of its metrics; on "metrics", the pages of every process:
        the other front-ends are asked for theirs (ipc/board.py) and waited for up to
        FRESH_REPORTS seconds (one that does not answer counts with its last report)."""
        index, answered = int(args[0]), int(args[1])
        (report,) = inputs[SNAPSHOT].values
        with self._reported:
            self._reports[index] = (answered, time.monotonic(), bytes(report))
            self._reported.notify_all()
        if op == "report":
            return None, {}
        if self.board is not None:
            asked = self.board.ask()
            until = time.monotonic() + FRESH_REPORTS
            with self._reported:
                while time.monotonic() < until and any(
                    seen != asked and i != index and time.monotonic() - when < LIVE
                    for i, (seen, when, _) in self._reports.items()
                ):
                    self._reported.wait(until - time.monotonic())
        with self._reported:
            reports = [data for _, _, data in self._reports.values()]
        own = [] if self.metrics is None else [self.metrics.snapshot()]
        ours, tfserving = merge([*own, *(marshal.loads(r) for r in reports)])  # noqa: S302
        return None, {
            OURS: Tensor("DT_STRING", (1,), [ours]),
            TF_SERVING: Tensor("DT_STRING", (1,), [tfserving]),
        }

    def _submit(self, config: bytes) -> tuple[bool, list[str] | str]:
        """Apply a configuration; (applied, the load errors, or why it was not applied)."""
        submission = self.manager.submit(pickle.loads(config))  # noqa: S301 - our own front-end
        try:
            return True, submission.done.result()
        except RuntimeError as err:
            return submission.applied.is_set(), str(err)
