"""The REST transport: uvicorn serving the Starlette app (rest/app.py).

uvicorn drains on its own when :meth:`RestServer.handle_exit` is called (a
signal): it stops accepting, closes idle keep-alive connections and waits for
the requests in flight; those still running at the end of the grace period
are answered 503 by the cut-off (rest/cutoff.py).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from tf_entrypoint.serving.config import ServeConfig
from tf_entrypoint.serving.core.drain import EXIT_MARGIN
from tf_entrypoint.serving.rest.http_limits import uvicorn_options


class RestServer(uvicorn.Server):
    """uvicorn's server, telling the server when shutdown starts (`begin`, with the signal)."""

    def __init__(self, config: uvicorn.Config, begin: Callable[[int | None], None]) -> None:
        super().__init__(config)
        self.begin = begin

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """The server's own handlers (main) stay and call handle_exit.

        uvicorn's would re-raise the signal that stopped it once it has shut
        down, which with Python's defaults turns a clean drain into "killed
        by SIGTERM" (exit 143), and with ours would read as a second signal.
        """
        yield

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.begin(sig)
        # A second signal ends the grace period now (main's drain): the calls
        # still running are answered 503, and uvicorn's own answer to a second
        # SIGINT (force_exit: drop them unanswered) is not wanted.
        if not self.should_exit:
            super().handle_exit(sig, frame)


def rest_server(
    app: Starlette, config: ServeConfig, begin: Callable[[int | None], None]
) -> RestServer:
    """uvicorn on --rest_api_port, serving `app`; `begin` starts the drain on a signal."""
    uv_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.rest_port,
        lifespan="on",
        log_config=None,  # the server's own (main)
        log_level=config.log_level,
        access_log=config.access_log,
        # A backstop never reached: requests still running when the
        # grace period ends are answered 503 by the cut-off (drain.py)
        # before uvicorn would cancel them (a 500 and a traceback).
        timeout_graceful_shutdown=math.ceil(config.grace_period + EXIT_MARGIN) + 1,
        server_header=False,
        **uvicorn_options(),  # a request's line and headers are bounded too
    )
    return RestServer(uv_config, begin)
