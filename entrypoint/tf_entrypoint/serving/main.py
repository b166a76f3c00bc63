"""`python -m tf_entrypoint.serving`: settings, logging, uvicorn, signals, exit code.

One process, one event loop, `workers` inference threads: the model is
loaded once and TensorFlow's process-wide thread pools are shared, so the
whole server stays within the CPU budget the entrypoint planned for.

SIGTERM (docker stop, Kubernetes) or SIGINT: /readyz turns 503, the listening
sockets close, idle keep-alive connections close, requests in flight get
--grace-period seconds to finish. Those still running then are answered 503 /
UNAVAILABLE by the server (drain.CutOff; TensorFlow cannot interrupt them),
and the process exits 0 without waiting for their threads, at most
drain.EXIT_MARGIN seconds after the grace period ended. A second SIGTERM or
SIGINT ends the grace period at once. Exit 1 when a model has no version
within --wait-for-model seconds or loading one fails at start; 64 for a bad
command line; 78 for a model or monitoring config file that cannot be served.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from tf_entrypoint.serving.config import ServeConfig, ShowText, UsageError, parse_config
from tf_entrypoint.serving.config.model_config import ConfigError
from tf_entrypoint.serving.core.drain import EXIT_MARGIN
from tf_entrypoint.serving.core.limits import limit_malloc_arenas
from tf_entrypoint.serving.core.model_specs import describe_policy
from tf_entrypoint.serving.core.serving_core import ServingState
from tf_entrypoint.serving.rest.app import create_app
from tf_entrypoint.serving.rest.transport import RestServer, rest_server

if TYPE_CHECKING:
    from tf_entrypoint.serving.grpc.transport import GrpcServer

log = logging.getLogger("tf_entrypoint.serving")

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_USAGE = 64
EXIT_CONFIG = 78


class _Stop:
    """The drain: begun by a signal or a fatal error, ended by the grace period.

    :meth:`begin` turns /readyz and health NOT_SERVING, starts gRPC's drain
    (uvicorn drains REST on its own) and a timer thread: at the end of
    --grace-period it cuts off the calls still running (drain.CutOff: they
    are answered 503 / UNAVAILABLE), and EXIT_MARGIN seconds later, should
    main() not have returned yet, it exits (:func:`exit_now`). Once main()
    has returned (:meth:`finish`) the timer does nothing: its caller exits
    (``python -m``), or goes on (a test calling main() in-process).
    """

    def __init__(self, state: ServingState, exit_code: Callable[[], int]) -> None:
        self.state = state
        self.grpc_server: GrpcServer | None = None
        self.exit_code = exit_code
        self.began: float | None = None
        # Re-entrant: a signal handler runs on the main thread, which may be in begin() already.
        self._lock = threading.RLock()
        self._now = threading.Event()  # a second signal: end the grace period now
        self._finished = threading.Event()  # main() has returned: nothing left to watch
        self._wake = threading.Event()  # either of those

    def begin(self, signum: int | None) -> None:
        """Start the drain (idempotent; a second signal cuts off at once)."""
        state = self.state
        with self._lock:
            first = self.began is None
            if first:
                self.began = time.monotonic()
        if first:
            if signum is not None:
                log.info(
                    "received %s: draining (up to %g s for requests in flight)",
                    signal.Signals(signum).name,
                    state.config.grace_period,
                )
            threading.Thread(target=self._timer, name="grace-period", daemon=True).start()
        elif signum is not None and not self._now.is_set():
            log.warning("received %s again: ending the grace period now",
                        signal.Signals(signum).name)  # fmt: skip
            self._now.set()
            self._wake.set()
        state.draining = True
        state.stop.set()
        if self.grpc_server is not None:
            self.grpc_server.drain()

    def finish(self) -> None:
        """main() is returning: its caller exits (exit_now), the timer has nothing to do."""
        self._finished.set()
        self._wake.set()

    def _timer(self) -> None:
        self._wake.wait(self.state.config.grace_period)
        if self._finished.is_set():
            return
        cut = self.state.cutoff.fire()
        if cut:
            log.warning(
                "%s: %d call(s) still running were answered 503 / UNAVAILABLE "
                "(TensorFlow cannot interrupt them; the process exits without waiting "
                "for them)",
                "grace period ended" if not self._now.is_set() else "second signal",
                cut,
            )
        if self._finished.wait(EXIT_MARGIN):
            return
        log.error("still running %g s after the grace period ended: exiting now", EXIT_MARGIN)
        exit_now(self.exit_code())

    def stopped(self) -> str:
        """How long the stop took, for the last log line."""
        if self.began is None:
            return "stopped"
        took, cut = time.monotonic() - self.began, self.state.cutoff.cut
        return f"stopped {took:.2f} s after the drain began ({cut} call(s) cut off)"


def exit_now(code: int) -> NoReturn:
    """Flush the logs and streams and end the process, whatever threads still run.

    Worker threads still computing calls that were cut off (TensorFlow cannot
    interrupt them) would hold an ordinary exit: concurrent.futures joins its
    workers at exit, for as long as they compute. Nothing else is left to do.
    """
    for handler in logging.getLogger().handlers:
        handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or a broken pipe
            stream.flush()
    os._exit(code)


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
    limit_malloc_arenas(config.workers)  # before any other thread starts
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
        stop.begin(None)
        if rest is not None:
            rest.should_exit = True  # read by uvicorn's main loop every 0.1 s

    rest: RestServer | None = None
    app = create_app(config, on_fatal=on_fatal)
    _freeze_the_loaded()
    state: ServingState = app.state.serving
    stop = _Stop(state, lambda: EXIT_FATAL if fatal else EXIT_OK)
    try:
        grpc_server = stop.grpc_server = _start_grpc(state)
    except OSError as err:  # the port is taken, or the address invalid
        log.error("%s; exiting", err)
        return EXIT_FATAL
    if grpc_server is not None:
        state.shared_shutdown = True  # the pool outlives REST's drain until gRPC's is over
    try:  # until main() returns, a drain that takes too long ends the process (_Stop)
        started = True
        if config.rest_port:
            rest = rest_server(app, config, stop.begin)
            _handle_signals(rest.handle_exit)
            rest.run()
            started = rest.started  # False: port in use, lifespan failure (uvicorn logged why)
        else:
            _handle_signals(lambda signum, frame: stop.begin(signum))
            state.start()
            while not stopping.wait(0.1) and not state.stop.is_set():
                pass
        if grpc_server is not None:
            stop.begin(None)
            grpc_server.join(config.grace_period + EXIT_MARGIN)
        state.close()
        if fatal or not started:
            return EXIT_FATAL
        log.info("%s", stop.stopped())
        return EXIT_OK
    finally:
        stop.finish()


def _freeze_the_loaded() -> None:
    """Import the model layer (TensorFlow), then freeze what is loaded.

    TensorFlow's ~270,000 Python objects (and the server's) live as long as the
    process: out of the cyclic garbage collector's sight, a collection (after a
    version is unloaded, or any full one) walks only the models' objects.
    Measured under --cpus 1: 4 ms instead of 0.35-0.57 s with every thread
    stalled on the GIL (docs/benchmarks.md).
    """
    from tf_entrypoint.serving import model  # noqa: F401, PLC0415 - TensorFlow

    gc.freeze()


def _handle_signals(handler: Callable[[int, FrameType | None], None]) -> None:
    """SIGTERM and SIGINT start the drain (a second one ends the grace period)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, handler)


def _start_grpc(state: ServingState) -> GrpcServer | None:
    """The gRPC server, listening (OSError if it cannot); None when not asked for."""
    config = state.config
    if not (config.grpc_port or config.grpc_socket_path):
        return None
    from tf_entrypoint.serving.grpc.transport import GrpcServer  # noqa: PLC0415 - imports TensorFlow

    server = GrpcServer(state)
    server.start()
    log.info("gRPC (TF Serving's PredictionService, ModelService, health) on %s",
             ", ".join(server.addresses()))  # fmt: skip
    return server
