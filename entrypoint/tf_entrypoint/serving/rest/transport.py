"""The REST transport: uvicorn serving the Starlette app (rest/app.py) on its own thread.

:meth:`RestTransport.start` returns once uvicorn listens (OSError when it
cannot: the port is taken, the lifespan failed; uvicorn has logged why).
:meth:`RestTransport.drain` makes uvicorn stop accepting, close idle
keep-alive connections and wait for the requests in flight; those still
running at the end of the grace period are answered 503 by the cut-off
(rest/cutoff.py). Signals are the server's (main): uvicorn installs none.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from tf_entrypoint.serving.config import ServeConfig
from tf_entrypoint.serving.core.drain import EXIT_MARGIN
from tf_entrypoint.serving.core.serving_core import ServingCore
from tf_entrypoint.serving.rest.app import create_app
from tf_entrypoint.serving.rest.http_limits import uvicorn_options

log = logging.getLogger("tf_entrypoint.serving")


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, without signal handlers, telling when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        #: Set once it listens, or once it has given up starting.
        self.settled = threading.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """The server's own handlers (main) start the drain, which calls drain().

        uvicorn's would re-raise the signal that stopped it once it has shut
        down, which with Python's defaults turns a clean drain into "killed
        by SIGTERM" (exit 143), and with ours would read as a second signal.
        """
        yield

    async def startup(self, sockets: Any = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.settled.set()


def shared_port_socket(host: str, port: int) -> socket.socket:
    """A listening socket on `port` with SO_REUSEPORT, so that each front-end of several
    (serving/processes.py) has its own accept queue and the kernel spreads connections."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


class RestTransport:
    """TF Serving's REST API (and /healthz, /readyz, /metrics) on --rest_api_port."""

    name = "REST"

    def __init__(
        self, core: ServingCore, config: ServeConfig, ended: Callable[[], None] = lambda: None
    ) -> None:
        self.config = config
        self.app = create_app(core, config, owns_core=False)
        self._server = _Uvicorn(
            uvicorn.Config(
                self.app,
                host=config.host,
                port=config.rest_port,
                lifespan="on",
                log_config=None,  # the server's own (main)
                log_level=config.log_level,
                access_log=config.access_log,
                # X-Forwarded-For from a proxy on 127.0.0.1 (a mesh sidecar) names
                # the client in the access log; with no access log it would only
                # cost a middleware layer on every request (issue 24).
                proxy_headers=config.access_log,
                # A backstop never reached: requests still running when the
                # grace period ends are answered 503 by the cut-off (drain.py)
                # before uvicorn would cancel them (a 500 and a traceback).
                timeout_graceful_shutdown=math.ceil(config.grace_period + EXIT_MARGIN) + 1,
                server_header=False,
                **uvicorn_options(),  # a request's line and headers are bounded too
            )
        )
        #: Called when uvicorn stops on its own, not drained: the server stops too.
        self._ended = ended
        self._draining = False
        self._thread: threading.Thread | None = None
        #: Our own listening socket (one of several front-ends' on the port), else None: uvicorn's.
        self._sockets: list[socket.socket] | None = None

    def addresses(self) -> list[str]:
        return [f"{self.config.host}:{self.config.rest_port}"]

    def start(self) -> None:
        if self.config.reuse_port:
            self._sockets = [shared_port_socket(self.config.host, self.config.rest_port)]
        self._thread = threading.Thread(target=self._run, name="rest", daemon=True)
        self._thread.start()
        self._server.settled.wait()
        if not self._server.started:
            self._thread.join()
            raise OSError(f"cannot serve REST on {', '.join(self.addresses())}")

    def _run(self) -> None:
        try:
            self._server.run(sockets=self._sockets)
        except BaseException as err:
            if self._server.started:
                log.error("the REST server stopped: %s", err, exc_info=err)
        finally:
            self._server.settled.set()
            if self._server.started and not self._draining:
                self._ended()

    def drain(self) -> None:
        self._draining = True
        self._server.should_exit = True  # read by uvicorn's main loop every 0.1 s

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def stopped(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()
