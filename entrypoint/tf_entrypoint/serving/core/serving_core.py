"""`ServingCore`: what every transport receives (docs/architecture.md, "The model server").

It holds the models (the manager), the one call a transport makes per request
(`call`: core/calls.py), the inference workers and their admission
(--max-queue), the metrics, the memory limits per request and the drain's
state (draining, the cut-off). `main` builds it from the configuration, then
builds each enabled transport on top of it; the transports never build one.
Nothing here knows a wire format, a web framework or TensorFlow.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.admission import InferencePool
from tf_entrypoint.serving.core.calls import CoreCalls
from tf_entrypoint.serving.core.drain import CutOff
from tf_entrypoint.serving.core.limits import RequestLimits
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.models import ModelTable
from tf_entrypoint.serving.core.servable import Profiler

#: The manager thread's loop: runs until `stop` is set, calls `on_fatal` when
#: the server cannot go on (no model, a load failed at start).
ManageModels = Callable[[threading.Event, Callable[[str], None]], None]


class ServingCore:
    """The models, the workers and their admission, metrics, limits, the drain's state."""

    def __init__(
        self,
        manager: ModelTable,
        metrics: Metrics,
        pool: InferencePool,
        limits: RequestLimits,
        *,
        manage_models: ManageModels,
        on_fatal: Callable[[str], None] = lambda message: None,
        cutoff: CutOff | None = None,
        profiler: Profiler | None = None,
        queued: bool = False,
    ) -> None:
        self.manager = manager
        self.metrics = metrics
        #: The one call a transport makes per request (core/calls.py).
        self.call = CoreCalls(manager, metrics)
        self.pool = pool
        #: --max-body-bytes and the JSON conversion slots, for every request handler.
        self.limits = limits
        #: Called (from any thread) when the server cannot go on: no model, load failed.
        self.on_fatal = on_fatal
        #: The end of the grace period: requests still handled then are answered 503.
        self.cutoff = cutoff if cutoff is not None else CutOff()
        #: The backend's profiler, in this process (TF Serving's ProfilerService, answered
        #: by gRPC); None: the backend has none.
        self.profiler = profiler
        #: A predict is queued from the transport's event loop (Servable.start, core/queued.py),
        #: not run from a thread: for its batch (--enable_batching), or for the engine
        #: (a front-end of several processes: ipc/remote.py).
        self.queued = queued
        #: Set by the drain: readiness and health say so, new gRPC calls are refused.
        self.draining = False
        #: Set when the server stops: the manager thread ends.
        self.stop = threading.Event()
        self._manage_models = manage_models
        self._manager_thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the manager thread: first loads, then new versions and config changes (once)."""
        if self._manager_thread is None:
            self._manager_thread = threading.Thread(
                target=self._manage_models,
                args=(self.stop, self.on_fatal),
                name="model-manager",
                daemon=True,
            )
            self._manager_thread.start()

    def begin_drain(self) -> None:
        """The drain has begun: not ready any more, no more polling."""
        self.draining = True
        self.stop.set()

    def close(self) -> None:
        """Stop polling and the worker threads (after the drain)."""
        self.stop.set()
        self.pool.shutdown()
        self.manager.close()

    def model_label(self, route: p.Route | None) -> str:
        """The metrics' `model` label: a configured model's name, else ""."""
        return self.call.model_label(route)
