"""The serving core that the transports receive: models, workers, metrics, limits, the drain."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from tf_entrypoint.serving.config import ServeConfig
from tf_entrypoint.serving.config.model_config import read_model_config
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.admission import InferencePool
from tf_entrypoint.serving.core.drain import CutOff
from tf_entrypoint.serving.core.limits import RequestLimits
from tf_entrypoint.serving.core.manager import Manager
from tf_entrypoint.serving.core.metrics import Metrics

log = logging.getLogger("tf_entrypoint.serving")

T = TypeVar("T")


@dataclass
class ServingState:
    config: ServeConfig
    manager: Manager
    metrics: Metrics
    pool: InferencePool
    #: --max-body-bytes and the JSON conversion slots, for every request handler.
    limits: RequestLimits
    #: Called (from any thread) when the server cannot go on: no model, load failed.
    on_fatal: Callable[[str], None]
    draining: bool = False
    stop: threading.Event = field(default_factory=threading.Event)
    #: True when gRPC shares the pool: the server closes it after both drains,
    #: not REST's lifespan.
    shared_shutdown: bool = False
    #: The end of the grace period: requests still handled then are answered 503.
    cutoff: CutOff = field(default_factory=CutOff)
    _manager_thread: threading.Thread | None = field(default=None, repr=False)

    def manage_models(self) -> None:
        """The manager thread: first loads, then new versions and config changes."""
        config = self.config
        path = config.models.path
        self.manager.run(
            wait=config.wait_for_model,
            file_system_poll=config.file_system_poll_wait,
            config_poll=config.model_config_file_poll_wait,
            reload=None if path is None else functools.partial(read_model_config, path),
            stop=self.stop,
            on_fatal=self.on_fatal,
        )

    def start(self) -> None:
        """Start the manager thread (once; REST's lifespan or, without REST, the server)."""
        if self._manager_thread is None:
            self._manager_thread = threading.Thread(
                target=self.manage_models, name="model-manager", daemon=True
            )
            self._manager_thread.start()

    def close(self) -> None:
        """Stop polling and the worker threads (after the drain)."""
        self.stop.set()
        self.pool.shutdown()

    def model_label(self, route: p.Route | None) -> str:
        """The metrics' `model` label: a configured model's name, else ""."""
        if route is not None and route.model in self.manager.models():
            return route.model
        return ""
