"""A front-end's view of the engine's models: the model table the transports use,
with every call crossing to the engine (ipc/engine.py's operations).

:class:`RemoteModels` answers what core/models.py's ``Models`` answers
(lease, check, status, readiness, the model names, reload submissions), so
the transports run unchanged on it. A lease gives the version's description
(its signatures, for decoding and checking the request here, in the
front-end) and a :class:`RemoteServable` whose ``run`` is one engine call;
the engine leases the version for the run itself, and answers ``stale`` when
the route names another version by then (a swap): the call is retried on
the new version when its signatures are the same, so a swap fails no
request; a request decoded for signatures that changed is refused
UNAVAILABLE (retry). Descriptions are cached for :data:`FRESH` seconds, and
dropped at once when the engine announces a change of its model table on the
board (ipc/board.py), so metadata and leases follow a swap or a reload at the
next request.

When the engine cannot be reached, calls fail UNAVAILABLE with Retry-After
(ipc/lanes.py) and readiness says the server is not ready.
"""

from __future__ import annotations

import contextlib
import marshal
import pickle
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.deadlines import current_deadline, expired_text
from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.model_specs import ServingConfig
from tf_entrypoint.serving.core.servable import Call, Done, Pending
from tf_entrypoint.serving.core.submission import Submission
from tf_entrypoint.serving.core.types import Signature, Tensor
from tf_entrypoint.serving.ipc.board import Board
from tf_entrypoint.serving.ipc.engine import (
    OURS,
    SNAPSHOT,
    STALE,
    TF_SERVING,
    route_args,
    signature_of,
)
from tf_entrypoint.serving.ipc.lanes import Lanes

#: Seconds a version's description is used before it is asked for again.
FRESH = 0.5
#: The longest a call with no deadline of its own waits for the engine (status, readiness).
CONTROL_TIMEOUT = 2.0
#: Seconds between a front-end's reports of its metrics to the engine.
REPORT_EVERY = 1.0
#: The readiness answer while the engine cannot be reached.
ENGINE_DOWN = "(the model engine is restarting)"


class Description:
    """One loaded version as the engine described it (ipc/engine.py's ``describe``)."""

    __slots__ = (
        "load",
        "metadata",
        "method_name_check",
        "number",
        "runnable",
        "signature_def_map",
        "signature_texts",
        "signatures",
        "warmup_records",
    )

    def __init__(self, plain: Sequence[Any]) -> None:
        self.number: int = plain[0]
        #: Which load of the version (core/models.py's Version.load).
        self.load: int = plain[1]
        self.signatures: dict[str, Signature] = {
            name: signature_of(s) for name, s in plain[2].items()
        }
        self.signature_texts: dict[str, str] = plain[3]
        self.signature_def_map: bytes = plain[4]
        self.warmup_records: int = plain[5]
        self.method_name_check: bool = plain[6]
        self.runnable = frozenset(plain[7])
        self.metadata: bytes = plain[8]


def _deadline() -> float:
    return current_deadline() or time.monotonic() + CONTROL_TIMEOUT


class RemoteServable:
    """The Servable protocol (core/servable.py) over one lease's description."""

    __slots__ = ("_lease",)

    def __init__(self, lease: RemoteVersion) -> None:
        self._lease = lease

    @property
    def version(self) -> int:
        return self._lease.number

    @property
    def signatures(self) -> Mapping[str, Signature]:
        return self._lease.description.signatures

    @property
    def signature_texts(self) -> Mapping[str, str]:
        return self._lease.description.signature_texts

    @property
    def signature_def_map(self) -> bytes:
        return self._lease.description.signature_def_map

    @property
    def warmup_records(self) -> int:
        return self._lease.description.warmup_records

    @property
    def method_name_check(self) -> bool:
        return self._lease.description.method_name_check

    def runs(self, name: str) -> bool:
        return name in self._lease.description.runnable

    def run(
        self,
        name: str,
        inputs: Mapping[str, Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, Tensor]:
        _, tensors = self._lease.call("run", (name, tuple(outputs), batch), inputs)
        return tensors

    def run_many(self, calls: Sequence[Call]) -> list[dict[str, Tensor]]:
        sent: dict[str, Tensor] = {}
        plain = []
        for index, (name, inputs, wanted) in enumerate(calls):
            aliases = []
            for alias, tensor in inputs.items():
                key = alias if sent.get(alias, tensor) is tensor else f"{index}/{alias}"
                sent[key] = tensor
                aliases.append(key)
            plain.append((name, tuple(aliases), tuple(wanted)))
        counts, tensors = self._lease.call("run_many", (tuple(plain),), sent)
        results: list[dict[str, Tensor]] = [{} for _ in counts]
        for key, tensor in tensors.items():
            position, _, alias = key.partition("/")
            results[int(position)][alias] = tensor
        return results

    def start(
        self,
        name: str,
        inputs: Mapping[str, Tensor],
        outputs: Sequence[str],
        *,
        deadline: float | None,
        expired: str,
        done: Done,
    ) -> Pending | None:
        """A predict sent to the engine on the running loop's own lane, answered on the
        loop (core/queued.py; the engine queues it for its batch when batching is on);
        None: no lane free for it, so it runs the blocking way."""
        return self._lease.start(
            (name, tuple(outputs), True), inputs, deadline=deadline, expired=expired, done=done
        )


class RemoteVersion:
    """One request's lease on a version: its number, metadata and servable."""

    __slots__ = ("description", "models", "number", "route", "servable")

    def __init__(self, models: RemoteModels, route: p.Route, description: Description) -> None:
        self.models = models
        self.route = route
        self.description = description
        #: The version that answers: changes when a swap made the first try stale.
        self.number = description.number
        self.servable: RemoteServable | None = RemoteServable(self)

    def __enter__(self) -> RemoteVersion:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @property
    def metadata(self) -> bytes:
        return self.description.metadata

    @property
    def load(self) -> int:
        return self.description.load

    def call(
        self, op: str, args: tuple[Any, ...], inputs: Mapping[str, Tensor]
    ) -> tuple[Any, dict[str, Tensor]]:
        deadline = current_deadline()
        for _ in range(3):
            described = self.description
            result, tensors = self.models.lanes.call(
                op,
                # the request's own words for its timeout, for the engine's batch queue
                (
                    *route_args(self.route),
                    described.number,
                    described.load,
                    expired_text(""),
                    *args,
                ),
                inputs,
                deadline,
                patient=True,  # a run holds its worker until it ends, as in one process
            )
            if not (isinstance(result, tuple) and result[:1] == (STALE,)):
                return result, tensors
            self._stale(described, result[1], 3)
        raise _changing(self.route)

    def start(
        self,
        args: tuple[Any, ...],
        inputs: Mapping[str, Tensor],
        *,
        deadline: float | None,
        expired: str,
        done: Done,
        tries: int = 3,
    ) -> Pending | None:
        """:meth:`call`'s "run", sent from the running loop (ipc/lanes.py's LoopLanes): `done`
        gets its outputs on the loop; a stale answer is sent again on the new version."""
        described = self.description
        full = (*route_args(self.route), described.number, described.load, expired, *args)

        def answered(
            result: Any, tensors: dict[str, Tensor] | None, error: ServingError | None
        ) -> None:
            if error is not None:
                done(None, error)
            elif not (isinstance(result, tuple) and result[:1] == (STALE,)):
                done(tensors, None)
            else:
                try:
                    self._stale(described, result[1], tries)
                except ServingError as err:
                    done(None, err)
                    return
                again = self.start(
                    args, inputs, deadline=deadline, expired=expired, done=done, tries=tries - 1
                )
                if again is None:
                    done(None, _changing(self.route))

        return self.models.lanes.start("run", full, inputs, deadline, answered)

    def _stale(self, described: Description, plain: Sequence[Any], tries: int) -> None:
        """The engine answered that the route now names another version (`plain`): run on
        it when its signatures are those the request was decoded for, else UNAVAILABLE."""
        fresh = self.models.learn(self.route, plain)
        if fresh.signatures != described.signatures:
            raise ServingError(
                Code.UNAVAILABLE,
                f"model {self.route.model} changed from version {described.number} to "
                f"{fresh.number}, with other signatures, while this request was read: retry",
                retry_after=1.0,
            )
        if tries <= 1:
            raise _changing(self.route)
        self.description, self.number = fresh, fresh.number


def _changing(route: p.Route) -> ServingError:
    return ServingError(
        Code.UNAVAILABLE, f"model {route.model} is changing versions: retry", retry_after=1.0
    )


class RemoteModels:
    """What the transports ask of the model table, answered by the engine over `lanes`."""

    def __init__(self, lanes: Lanes, board: Board | None = None) -> None:
        self.lanes = lanes
        #: The engine's announcements (ipc/board.py): its model table's generation.
        self.board = board
        self._lock = threading.Lock()
        #: (model, version, label) -> (when learnt, description)
        self._known: dict[tuple[str, int | None, str | None], tuple[float, Description]] = {}
        #: The generation the descriptions in _known were learnt in.
        self._generation = -1
        self._names: tuple[float, frozenset[str]] = (0.0, frozenset())

    def _control(self, op: str, args: tuple[Any, ...] = ()) -> Any:
        result, _ = self.lanes.call(op, args, {}, _deadline())
        return result

    def learn(self, route: p.Route, plain: Sequence[Any]) -> Description:
        description = Description(plain)
        with self._lock:
            self._known[(route.model, route.version, route.label)] = (time.monotonic(), description)
        return description

    def _describe(self, route: p.Route) -> Description:
        if self.board is not None:
            generation = self.board.generation()
            if generation != self._generation:  # a swap, a reload: forget what was learnt
                with self._lock:
                    self._known, self._generation = {}, generation
                    self._names = (0.0, self._names[1])
        key = (route.model, route.version, route.label)
        known = self._known.get(key)
        if known is not None and time.monotonic() - known[0] < FRESH:
            return known[1]
        return self.learn(route, self._control("describe", route_args(route)))

    def lease(self, route: p.Route) -> RemoteVersion:
        """`with models.lease(route) as version:` (the engine leases for each run: a
        RemoteVersion is its own context manager, nothing to give back)."""
        return RemoteVersion(self, route, self._describe(route))

    def check(self, route: p.Route) -> None:
        self._describe(route)

    def status(self, route: p.Route) -> list[p.VersionStatus]:
        return [p.VersionStatus(*row) for row in self._control("status", route_args(route))]

    def readiness(self) -> tuple[list[str], dict[str, list[int]]]:
        try:
            pending, serving = self._control("readiness")
        except ServingError:
            return [ENGINE_DOWN], {}
        return list(pending), dict(serving)

    def models(self) -> frozenset[str]:
        """The configured models' names (the metrics' `model` label), asked for once a second."""
        when, names = self._names
        if time.monotonic() - when > 1.0:
            try:
                names = frozenset(self._control("models"))
            except ServingError:
                return names
            self._names = (time.monotonic(), names)
        return names

    def submit(self, config: ServingConfig) -> Submission:
        """Hand `config` to the engine's manager; the submission completes when it has."""
        submission = Submission(config)
        data = pickle.dumps(config)

        def send() -> None:
            try:
                result, _ = self.lanes.call("submit", (data,), {}, None)
            except ServingError as err:
                submission.done.set_exception(RuntimeError(err.message))
                return
            applied, outcome = result
            if applied:
                submission.applied.set()
            if isinstance(outcome, str):
                submission.done.set_exception(RuntimeError(outcome))
            else:
                submission.done.set_result(list(outcome))

        threading.Thread(target=send, name="reload-config", daemon=True).start()
        return submission

    def close(self) -> None:
        self.lanes.close()


class SharedMetrics:
    """A front-end's side of the one metrics page: its snapshot to the engine every
    :data:`REPORT_EVERY` seconds and whenever the engine asks (a scrape served by
    another front-end: ipc/board.py), and on a scrape the pages of every process."""

    def __init__(
        self, lanes: Lanes, metrics: Metrics, index: int, board: Board | None = None
    ) -> None:
        self.lanes = lanes
        self.metrics = metrics
        self.index = index
        self.board = board
        self._stop = threading.Event()

    def _snapshot(self) -> dict[str, Tensor]:
        data = marshal.dumps(self.metrics.snapshot())
        return {SNAPSHOT: Tensor("DT_STRING", (1,), [data])}

    def pages(self) -> tuple[bytes, bytes]:
        """(ours, TF Serving's): every process's metrics as of now (the engine asks the
        other front-ends for theirs and waits for them, briefly)."""
        _, pages = self.lanes.call(
            "metrics", (self.index, self._asked()), self._snapshot(), _deadline()
        )
        return bytes(pages[OURS].values[0]), bytes(pages[TF_SERVING].values[0])

    def _asked(self) -> int:
        return -1 if self.board is None else self.board.asked()

    def start(self) -> None:
        threading.Thread(target=self._report, name="metrics-report", daemon=True).start()

    def _report(self) -> None:
        """Report at once (so the engine knows to wait for this front-end), then every
        REPORT_EVERY seconds, and at once when the engine asks (it wakes this thread:
        ipc/board.py; between reports the thread sleeps)."""
        board = self.board
        if board is not None:
            board.forget_asks(self.index)
        last, answered = 0.0, None
        while not self._stop.is_set():
            asked = self._asked()
            if asked != answered or time.monotonic() - last >= REPORT_EVERY:
                with contextlib.suppress(ServingError):  # the engine restarts: next time
                    self.lanes.call("report", (self.index, asked), self._snapshot(), _deadline())
                answered, last = asked, time.monotonic()
            wait = last + REPORT_EVERY - time.monotonic()
            if board is None:
                self._stop.wait(wait)
            else:
                board.wait_asked(self.index, wait)

    def stop(self) -> None:
        self._stop.set()
        if self.board is not None:
            self.board.wake(self.index)
