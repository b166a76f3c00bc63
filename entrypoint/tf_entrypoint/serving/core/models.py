"""The request side of the served models: the model table, leases on versions, status.

:class:`Models` holds every configured model and the versions each serves;
the manager (``manager.py``, a subclass) changes them on its one control
thread. A request takes one short lock here and never waits on a load:
:meth:`Models.lease` keeps the version it addresses loaded until the request
is done, so a version the manager retires is dropped only once the last
request running on it finishes, and a swap fails no request. A version's
states are TF Serving's (``types.py``: START, LOADING, AVAILABLE,
UNLOADING, END; README: "Model versions: policies, swaps, labels").
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from tf_entrypoint.serving.core import repository
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.model_specs import ModelPath, ModelSpec, ServingConfig
from tf_entrypoint.serving.core.servable import Servable
from tf_entrypoint.serving.core.submission import Submission
from tf_entrypoint.serving.core.types import AVAILABLE, END, LOADING, START, UNLOADING

log = logging.getLogger("tf_entrypoint.serving")

#: Seconds after which a request refused while a model loads may be retried (Retry-After).
RETRY_AFTER = 1


class Events(Protocol):
    """What the manager reports (the server's Metrics implements it)."""

    def version_loaded(self, model: str, seconds: float, warmup_records: int) -> None: ...

    def version_load_failed(self, model: str, seconds: float) -> None: ...

    def version_unloaded(self, model: str) -> None: ...

    def versions_available(self, model: str, versions: list[int]) -> None: ...

    def config_reloaded(self, result: str) -> None: ...

    def saved_model_loaded(
        self,
        path: ModelPath,
        ok: bool,
        load_seconds: float,
        warmup_seconds: float | None,
        warmup_records: int,
    ) -> None:
        """One load attempt of a version directory (TF Serving's load and warm-up metrics)."""
        ...


class Leased(Protocol):
    """What a request reads of the version it leased (a :class:`Version` here; in a
    front-end of several processes, ipc/remote.py's RemoteVersion)."""

    @property
    def number(self) -> int: ...

    @property
    def metadata(self) -> bytes: ...

    @property
    def servable(self) -> Servable | None: ...

    @property
    def load(self) -> int: ...


class ModelTable(Protocol):
    """What the transports ask of the models (:class:`Models` and the manager here;
    ipc/remote.py's RemoteModels in a front-end of several processes)."""

    def models(self) -> Collection[str]: ...

    def lease(self, route: p.Route) -> AbstractContextManager[Leased]: ...

    def check(self, route: p.Route) -> None: ...

    def status(self, route: p.Route) -> list[p.VersionStatus]: ...

    def readiness(self) -> tuple[list[str], dict[str, list[int]]]: ...

    def submit(self, config: ServingConfig) -> Submission: ...

    def close(self) -> None: ...


#: Numbers every successful load of the process (Version.load): unlike id(), never reused.
LOADS = itertools.count(1)


class Version:
    """One version of one model, in one of the five states."""

    __slots__ = (
        "attempts",
        "code",
        "error",
        "identity",
        "in_flight",
        "load",
        "local",
        "metadata",
        "model",
        "number",
        "path",
        "retry_at",
        "servable",
        "state",
    )

    def __init__(
        self, model: str, number: int, path: ModelPath, identity: repository.Identity | None
    ) -> None:
        self.model = model
        self.number = number
        self.path = path
        #: Where a version from object storage was copied to load it (deleted once it ends).
        self.local: Path | None = None
        self.identity = identity
        self.state = START
        self.error = ""
        #: The error's canonical code for the status API (with `error`).
        self.code = Code.UNKNOWN
        self.servable: Servable | None = None
        #: Which load this is, unique in the process (LOADS); 0 until it is AVAILABLE. A
        #: front-end's description of a version names it (ipc/engine.py).
        self.load = 0
        #: GET .../metadata's answer, encoded once at load time.
        self.metadata = b""
        #: Requests running on it; it is dropped when this reaches 0 after retirement.
        self.in_flight = 0
        #: Load retries done (--max_num_load_retries counts them).
        self.attempts = 0
        #: When (the manager's clock) its failed load is retried; None: no retry pending.
        #: While one is, the state stays LOADING and `error` is the last attempt's.
        self.retry_at: float | None = None

    def available(self, servable: Servable, metadata: bytes) -> None:
        """Loaded: serving `servable` (a retry that succeeded drops its last error)."""
        self.servable, self.metadata, self.state = servable, metadata, AVAILABLE
        self.error, self.load = "", next(LOADS)

    def status(self) -> p.VersionStatus:
        if self.error:
            return p.VersionStatus(self.number, self.state, self.code.name, self.error)
        return p.VersionStatus(self.number, self.state)


class Model:
    """A configured model: its spec, every version seen, and the ones serving."""

    def __init__(self, spec: ModelSpec, *, counts_for_readiness: bool) -> None:
        self.spec = spec
        self.versions: dict[int, Version] = {}
        #: The AVAILABLE versions, ascending; replaced (never mutated) under the lock.
        self.serving: tuple[Version, ...] = ()
        #: A model added by a live reload does not make the server unready
        #: until it has been available once (the others keep serving).
        self.counts_for_readiness = counts_for_readiness
        self.warned_unlistable = False
        #: Directories ignored for a version number beyond int64 (logged once each).
        self.too_large: tuple[str, ...] = ()
        #: The versions its last listing found (empty: none, or it could not be listed).
        self.listed: frozenset[int] = frozenset()


class Models:
    """Every configured model and the versions it serves; what requests see."""

    def __init__(self, events: Events) -> None:
        self._events = events
        self._lock = threading.Lock()
        #: Name -> Model; replaced (never mutated) under the lock.
        self._models: dict[str, Model] = {}
        #: A version was dropped: the control thread collects garbage on its next sync.
        self._collect = False
        #: Every model of the start-up configuration has served a version (see _starting).
        self._up = False
        #: Bumped on every change a request can see (a version available or unloading, a
        #: new configuration); `changed` is told the new value (the engine of several
        #: processes announces it to the front-ends: ipc/board.py).
        self.generation = 0
        self.changed: Callable[[int], None] | None = None

    def _bump(self) -> None:
        """The table changed: a new generation (called with the lock held, or after)."""
        self.generation += 1
        changed = self.changed
        if changed is not None:
            changed(self.generation)

    # ------------------------------------------------------------------
    # The request side

    def models(self) -> dict[str, Model]:
        return self._models

    def lease(self, route: p.Route) -> _Lease:
        """The version `route` addresses, kept loaded until the block ends (else ServingError)."""
        return _Lease(self, route)

    def _take(self, route: p.Route) -> Version:
        """The start of a lease (:class:`_Lease`)."""
        with self._lock:
            version = self._find(route)
            version.in_flight += 1
        return version

    def _give_back(self, version: Version) -> None:
        """The end of a lease (:class:`_Lease`): the last one of a version being unloaded
        finishes its unload."""
        with self._lock:
            version.in_flight -= 1
            done = version.state == UNLOADING and version.in_flight == 0
        if done:
            self._finish_unload(version)

    def check(self, route: p.Route) -> None:
        """ServingError now if `route` addresses nothing servable (before queueing a predict)."""
        with self._lock:
            self._find(route)

    def _find(self, route: p.Route) -> Version:
        try:
            return self._lookup(route)
        except ServingError as err:
            if err.code == Code.NOT_FOUND and not self._started():
                raise self._starting() from None
            raise

    def _started(self) -> bool:
        """Whether every model of the start-up configuration has served a version
        (then for good: TF Serving opens its ports at that moment)."""
        if not self._up:
            self._up = not self._pending()
        return self._up

    def _starting(self) -> ServingError:
        """What a request that would be NOT_FOUND gets while the start-up models load.

        TF Serving builds its gRPC and HTTP servers only once the start-up
        configuration's models are loaded (server.cc: ServerCore::Create waits
        for them), so its clients see UNAVAILABLE (connection refused) until
        then, and take any answer naming a servable, such as "Servable not
        found" for a model it does not serve, as the sign that the models are
        loaded: TF Serving's own test harness waits exactly so. Here the ports
        open at once (for health and status); a request that would be NOT_FOUND
        is answered UNAVAILABLE until the start-up models are loaded.
        """
        return ServingError(
            Code.UNAVAILABLE,
            f"The server is starting: model(s) {', '.join(sorted(self._pending()))} of its "
            "configuration are not available yet; retry later",
            retry_after=RETRY_AFTER,
        )

    def _lookup(self, route: p.Route) -> Version:
        model = self._models.get(route.model)
        if model is None:
            raise ServingError(
                Code.NOT_FOUND, f"Servable not found for request: {p.servable_request(route)}"
            )
        serving = model.serving
        wanted = route.version
        if route.label is not None:
            labelled = model.spec.labels.get(route.label)
            if labelled is None:
                raise ServingError(
                    Code.INVALID_ARGUMENT, f"Unrecognized servable version label: {route.label}"
                )
            wanted = labelled
        if not serving:
            raise self._unavailable(model)
        if wanted is None:
            return serving[-1]
        for version in serving:
            if version.number == wanted:
                return version
        raise ServingError(
            Code.NOT_FOUND, f"Servable not found for request: Specific({model.spec.name}, {wanted})"
        )

    @staticmethod
    def _unavailable(model: Model) -> ServingError:
        name = model.spec.name
        versions = sorted(model.versions.values(), key=lambda v: v.number)
        retrying = [v for v in versions if v.retry_at is not None]
        if retrying:
            reason = f"its load failed and is retried: {retrying[-1].error}"
        elif any(v.state in (START, LOADING) for v in versions):
            reason = "loading"
        elif versions and versions[-1].error:
            return ServingError(
                Code.UNAVAILABLE,
                f"Model {name} has no available version: {versions[-1].error}",
                retry_after=RETRY_AFTER,
            )
        else:
            reason = f"waiting for a version in {model.spec.base_path}"
        return ServingError(
            Code.UNAVAILABLE,
            f"Model {name} is not available yet ({reason}); retry later",
            retry_after=RETRY_AFTER,
        )

    def status(self, route: p.Route) -> list[p.VersionStatus]:
        """Every version's state, newest first (one with route.version), or ServingError(NOT_FOUND).

        As in TF Serving, a label in the request is ignored: all versions are listed.
        """
        model = self._models.get(route.model)
        with self._lock:
            known = [] if model is None else [v.status() for v in model.versions.values()]
        if route.version is not None:
            known = [s for s in known if s.version == route.version]
            if not known:
                raise ServingError(
                    Code.NOT_FOUND, f"Could not find version {route.version} of model {route.model}"
                )
        if not known:
            raise ServingError(
                Code.NOT_FOUND, f"Could not find any versions of model {route.model}"
            )
        return sorted(known, key=lambda s: s.version, reverse=True)

    def next_retry(self) -> float:
        """When (the manager's clock) the next failed load is retried; inf when none is."""
        with self._lock:
            return min(
                (
                    v.retry_at
                    for m in self._models.values()
                    for v in m.versions.values()
                    if v.retry_at is not None
                ),
                default=float("inf"),
            )

    def readiness(self) -> tuple[list[str], dict[str, list[int]]]:
        """(models that keep the server unready, name -> versions serving)."""
        models = self._models
        serving = {name: [v.number for v in m.serving] for name, m in models.items()}
        return self._pending(models), serving

    def _pending(self, models: Mapping[str, Model] | None = None) -> list[str]:
        """The models that keep the server unready: counted, and no version serving."""
        models = self._models if models is None else models
        return [name for name, m in models.items() if m.counts_for_readiness and not m.serving]

    def local_copies(self) -> list[Path]:
        """The local copies of store versions still loading or loaded (the rest are deleted)."""
        with self._lock:
            return [
                v.local
                for m in self._models.values()
                for v in m.versions.values()
                if v.local is not None and v.state != END
            ]

    def _finish_unload(self, version: Version) -> None:
        with self._lock:
            if version.state != UNLOADING:
                return
            servable = version.servable
            version.state, version.servable, version.metadata = END, None, b""
        close = getattr(servable, "close", None)  # the TensorFlow servable's batch threads
        if close is not None:
            close()
        self._collect = True
        self._events.version_unloaded(version.model)
        log.info("model %r version %d unloaded", version.model, version.number)


def warn_unavailable_labels(models: Iterable[Model]) -> None:
    """Log each version label whose version is not available (requests for it get 404)."""
    for model in models:
        serving = {v.number for v in model.serving}
        for label, number in sorted(model.spec.labels.items()):
            if number not in serving:
                log.warning(
                    "%s: version_labels %r -> %d: version %d of model %r is not available; "
                    "requests for the label get 404 until it is",
                    model.spec.origin,
                    label,
                    number,
                    number,
                    model.spec.name,
                )


class _Lease:
    """`with models.lease(route) as version:` (a class, not a generator: on every request)."""

    __slots__ = ("_models", "_route", "_version")

    def __init__(self, models: Models, route: p.Route) -> None:
        self._models = models
        self._route = route
        self._version: Version | None = None

    def __enter__(self) -> Version:
        self._version = version = self._models._take(self._route)
        return version

    def __exit__(self, *exc: object) -> None:
        version, self._version = self._version, None
        if version is not None:
            self._models._give_back(version)
