"""What the control thread is handed: reload submissions and the load-retry settings.

:class:`Submission` carries a HandleReloadConfigRequest's configuration to
the manager's thread (``manager.py``) and its outcome back; :class:`LoadRetries`
is TF Serving's retry policy for failed loads.
"""

from __future__ import annotations

import concurrent.futures
import threading
from dataclasses import dataclass

from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.model_specs import ServingConfig

__all__ = ["NO_RETRIES", "LoadRetries", "Submission"]


@dataclass(frozen=True)
class LoadRetries:
    """TF Serving's --max_num_load_retries and --load_retry_interval_micros.

    A failed load is tried again `retries` times, `interval` seconds apart
    (TF Serving's util/retrier.cc); the version stays LOADING meanwhile, its
    status carrying the last error. The server's defaults are TF Serving's
    (server_flags); this class's, like TF Serving's LoaderHarness's, are none.
    """

    retries: int = 0
    interval: float = 0.0


#: No retry: a failed load ends at once (TF Serving's LoaderHarness default).
NO_RETRIES = LoadRetries()


class Submission:
    """A configuration handed to the control thread by HandleReloadConfigRequest.

    Once accepted it is applied whatever becomes of the call that sent it (a
    deadline that passes, a client that cancels): cancelling `done` only
    says that nobody waits for the answer. `applied` is set once the models
    are switched to it; `done` then carries the load errors of the sync that
    follows (empty: every wanted version loaded), or RuntimeError when it
    was never applied (the server stopped or failed first).
    """

    def __init__(self, config: ServingConfig) -> None:
        self.config = config
        self.applied = threading.Event()
        self.done: concurrent.futures.Future[list[str]] = concurrent.futures.Future()

    def late(self, seconds: float) -> ServingError:
        """The answer (DEADLINE_EXCEEDED) when `seconds` passed before `done`: truthfully,
        whether the configuration is applied or still queued."""
        if self.applied.is_set():
            return ServingError(
                Code.DEADLINE_EXCEEDED,
                "The new configuration is applied, but its versions did not finish loading "
                f"within {seconds:g} s; GetModelStatus shows their progress",
            )
        return ServingError(
            Code.DEADLINE_EXCEEDED,
            f"The new configuration is not applied yet: within {seconds:g} s the model "
            "manager did not get to it (it is busy loading versions or reading the model "
            "store); it stays queued and is applied when the manager is free; "
            "GetModelStatus shows when",
        )
