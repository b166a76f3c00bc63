"""`python -m tf_entrypoint.serving`: settings, logging, uvicorn, signals, exit code.

One process, one event loop, `workers` inference threads: the model is
loaded once and TensorFlow's process-wide thread pools are shared, so the
whole server stays within the CPU budget the entrypoint planned for.

SIGTERM (docker stop, Kubernetes) or SIGINT: /readyz turns 503, the listening
socket closes, idle keep-alive connections close, requests in flight finish
(up to --grace-period seconds), then the process exits 0. A second SIGINT
forces an immediate stop. Exit 1 when a model has no version within
--wait-for-model seconds or loading one fails at start; 64 for a bad command
line; 78 for a model or monitoring config file that cannot be served.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

from tf_entrypoint.serving.app import ServingState, create_app
from tf_entrypoint.serving.config import ServeConfig, ShowText, UsageError, parse_config
from tf_entrypoint.serving.model_config import ConfigError, describe_policy

if TYPE_CHECKING:
    from tf_entrypoint.serving.grpc_api import GrpcServer

log = logging.getLogger("tf_entrypoint.serving")

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_USAGE = 64
EXIT_CONFIG = 78


class _Server(uvicorn.Server):
    """uvicorn's server, telling the application when shutdown starts."""

    def __init__(
        self, config: uvicorn.Config, state: ServingState, grpc_server: GrpcServer | None
    ) -> None:
        super().__init__(config)
        self.serving_state = state
        self.grpc_server = grpc_server

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        _begin_drain(self.serving_state, self.grpc_server, sig)
        super().handle_exit(sig, frame)


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _describe(config: ServeConfig) -> str:
    threads = (
        f"TensorFlow intra-op {os.environ.get('TF_NUM_INTRAOP_THREADS', 'default')}, "
        f"inter-op {os.environ.get('TF_NUM_INTEROP_THREADS', 'default')}"
    )
    models = config.models
    source = f" (from {models.path})" if models.path else ""
    listed = "; ".join(
        f"{m.name!r} from {m.base_path} ({describe_policy(m.policy)}"
        + (", labels " + ", ".join(f"{k}={v}" for k, v in sorted(m.labels.items())) if m.labels
           else "")
        + ")"
        for m in models.models
    )  # fmt: skip
    polls = (
        f"new versions looked for every {config.file_system_poll_wait:g} s"
        if config.file_system_poll_wait > 0
        else "versions loaded once"
    )
    if models.path is not None and config.model_config_file_poll_wait > 0:
        polls += f", config file re-read every {config.model_config_file_poll_wait:g} s"
    return (
        f"serving {len(models.models)} model(s){source}: {listed}; {polls}; on "
        f"{config.host} (gRPC {config.grpc_port or 'off'}, REST {config.rest_port or 'off'}): "
        f"{config.workers} inference worker(s) for a CPU budget "
        f"of {config.budget.cpus} ({config.budget.source}; {threads}), at most "
        f"{config.max_queue} predicts admitted, bodies up to {config.max_body_bytes} bytes, "
        f"{config.grace_period:g} s grace on SIGTERM"
        + ("" if config.enable_model_warmup else "; no warm-up (--enable_model_warmup=false)")
        + ("" if config.batching is None else "; " + config.batching.describe())
    )


def _read_config(argv: Sequence[str]) -> ServeConfig | int:
    """The settings, or the exit code once --help, --version or the error is printed."""
    try:
        return parse_config(argv, os.environ)
    except ShowText as shown:
        sys.stdout.write(shown.text)
        return EXIT_OK
    except UsageError as err:
        print(f"error: {err} (exit {EXIT_USAGE}; see --help)", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_CONFIG


def main(argv: Sequence[str] | None = None) -> int:
    config = _read_config(sys.argv[1:] if argv is None else argv)
    if isinstance(config, int):
        return config
    _configure_logging(config.log_level)
    log.info("%s", _describe(config))
    for note in config.notes:
        log.warning("%s", note)
    page = config.monitoring.prometheus_path
    if page is not None and config.rest_port:
        log.info("TF Serving's Prometheus metrics at %s (%s)", page, config.monitoring_config_file)

    fatal: list[str] = []
    stopping = threading.Event()

    def on_fatal(message: str) -> None:
        log.error("%s; exiting", message)
        fatal.append(message)
        stopping.set()
        if rest is not None:
            rest.should_exit = True  # read by uvicorn's main loop every 0.1 s

    rest: _Server | None = None
    app = create_app(config, on_fatal=on_fatal)
    state: ServingState = app.state.serving
    try:
        grpc_server = _start_grpc(state)
    except OSError as err:  # the port is taken, or the address invalid
        log.error("%s; exiting", err)
        return EXIT_FATAL
    if grpc_server is not None:
        state.shared_shutdown = True  # the pool outlives REST's drain until gRPC's is over
    # uvicorn re-raises the signal that stopped it once it has shut down
    # gracefully; with Python's defaults that would turn a clean drain into
    # "killed by SIGTERM" (exit 143). These handlers make it a no-op for
    # uvicorn; without REST they start the drain themselves.
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: _begin_drain(state, grpc_server, signum))
    started = True
    if config.rest_port:
        uv_config = uvicorn.Config(
            app,
            host=config.host,
            port=config.rest_port,
            lifespan="on",
            log_config=None,  # ours, above
            log_level=config.log_level,
            access_log=config.access_log,
            timeout_graceful_shutdown=math.ceil(config.grace_period),
            server_header=False,
        )
        rest = _Server(uv_config, state, grpc_server)
        rest.run()
        started = rest.started  # False: port in use, lifespan failure (uvicorn logged why)
    else:
        state.start()
        while not stopping.wait(0.1) and not state.stop.is_set():
            pass
    if grpc_server is not None:
        _begin_drain(state, grpc_server, None)
        grpc_server.join(config.grace_period + 2)
    state.close()
    if fatal or not started:
        return EXIT_FATAL
    log.info("stopped")
    return EXIT_OK


def _start_grpc(state: ServingState) -> GrpcServer | None:
    """The gRPC server, listening (OSError if it cannot); None when not asked for."""
    config = state.config
    if not (config.grpc_port or config.grpc_socket_path):
        return None
    from tf_entrypoint.serving.grpc_api import GrpcServer  # noqa: PLC0415 - imports TensorFlow

    server = GrpcServer(state)
    server.start()
    log.info("gRPC (TF Serving's PredictionService, ModelService, health) on %s",
             ", ".join(server.addresses()))  # fmt: skip
    return server


def _begin_drain(state: ServingState, grpc_server: GrpcServer | None, signum: int | None) -> None:
    """SIGTERM without REST (with REST, uvicorn's handler calls this too)."""
    if signum is not None and not state.draining:
        log.info(
            "received %s: draining (up to %g s for requests in flight)",
            signal.Signals(signum).name,
            state.config.grace_period,
        )
    state.draining = True
    state.stop.set()
    if grpc_server is not None:
        grpc_server.drain()
