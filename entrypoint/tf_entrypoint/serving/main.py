"""`python -m tf_entrypoint.serving`: the composition root (docs/architecture.md).

It parses the settings, sizes the process, builds the loader and the serving
core (core/serving_core.py), then imports and builds only the transports the
configuration turns on, from one table (TRANSPORTS: a third protocol joins by
one row), freezes the garbage collector's view of what is loaded, starts
them (gRPC first, so a taken port exits 1 before REST listens), then the
core's manager thread, and waits for a signal; logging, signals, exit code.

One process, one event loop, `workers` inference threads: the model is
loaded once and TensorFlow's process-wide thread pools are shared, so the
whole server stays within the CPU budget the entrypoint planned for. With
--frontends N > 1 it is a supervisor instead (serving/processes.py), whose
children run the same serving loop (`_serve`): one engine (`engine_main`:
the core, no transport) and N front-ends (`frontend_main`: the transports
over the engine's models, ipc/remote.py).

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
import functools
import gc
import importlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from tf_entrypoint.serving.codec import metadata
from tf_entrypoint.serving.config import ServeConfig, ShowText, UsageError, parse_config
from tf_entrypoint.serving.config.model_config import (
    ConfigError,
    read_model_config,
)
from tf_entrypoint.serving.core.admission import InferencePool
from tf_entrypoint.serving.core.batching import BatchHooks
from tf_entrypoint.serving.core.drain import EXIT_MARGIN, STOPPED, CutOff, Transport
from tf_entrypoint.serving.core.limits import RequestLimits, limit_malloc_arenas
from tf_entrypoint.serving.core.manager import Manager
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.model_cache import ModelCache
from tf_entrypoint.serving.core.model_specs import describe_policy
from tf_entrypoint.serving.core.object_store import ObjectStores
from tf_entrypoint.serving.core.servable import Capture, Loader, Profiler, Servable
from tf_entrypoint.serving.core.serving_core import ServingCore

if TYPE_CHECKING:
    from tf_entrypoint.serving.ipc.board import Board

log = logging.getLogger("tf_entrypoint.serving")

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_USAGE = 64
EXIT_CONFIG = 78


@dataclass(frozen=True)
class TransportRow:
    """One protocol: its module and class (`cls(core, config, ended)`), imported only when
    the configuration turns it on; `ended` is called should it stop on its own."""

    name: str
    module: str
    cls: str
    wanted: Callable[[ServeConfig], bool]

    def build(self, core: ServingCore, config: ServeConfig, ended: Callable[[], None]) -> Transport:
        factory = getattr(importlib.import_module(self.module), self.cls)
        transport: Transport = factory(core, config, ended)
        return transport


#: The transports, in the order they start: gRPC first, so that a taken port
#: exits 1 before REST listens. Importing gRPC's imports TensorFlow's protos;
#: with --rest_api_port=0 Starlette and uvicorn are never imported.
TRANSPORTS = (
    TransportRow(
        "gRPC",
        "tf_entrypoint.serving.grpc.transport",
        "GrpcServer",
        lambda config: bool(config.grpc_port or config.grpc_socket_path),
    ),
    TransportRow(
        "REST",
        "tf_entrypoint.serving.rest.transport",
        "RestTransport",
        lambda config: bool(config.rest_port),
    ),
)


def request_threads(config: ServeConfig) -> int:
    """Threads that parse, validate and answer predicts.

    Without batching, --workers: each runs its request in TensorFlow. With
    batching, --max-queue: every admitted request gets a thread, which parses
    and validates it, then waits in the batch queue while num_batch_threads
    threads run the batches; so the queue sees every admitted request, and
    max_enqueued_batches, not the thread count, bounds it.
    """
    return config.workers if config.batching is None else config.max_queue


def runs_inline(config: ServeConfig) -> bool:
    """Whether short calls may run on their transport's event loop (core/admission.py).

    With one worker and no batching: the one worker would run them one at a
    time anyway, and the hand-off to it and back costs more than a short
    call. With more workers they run side by side on their threads; with
    batching a request waits for its batch, which it must never do on a loop.
    """
    return config.workers == 1 and config.batching is None


class TensorFlowProfiler:
    """TensorFlow's profiler in this process (model/profiler.py), for gRPC's ProfilerService;
    the backend's package (and TensorFlow) is imported when a profile is first asked for."""

    def __init__(self) -> None:
        self._inner: Profiler | None = None

    def _profiler(self) -> Profiler:
        if self._inner is None:
            from tf_entrypoint.serving.model import profiler  # noqa: PLC0415 - on demand

            self._inner = profiler.TensorFlowProfiler()
        return self._inner

    def start(self, options: Mapping[str, int], scratch: str, seconds: float) -> Capture:
        return self._profiler().start(options, scratch, seconds)

    def save(self, root: str, run: str, host: str, xspace: bytes) -> str:
        return self._profiler().save(root, run, host, xspace)

    def empty(self, xspace: bytes) -> bool:
        return self._profiler().empty(xspace)


def tensorflow_loader(config: ServeConfig, metrics: Metrics) -> Loader:
    """TensorFlow's loader (model.load) with `config`'s flags; it imports TensorFlow on first use.

    It warms versions up unless --enable_model_warmup=false and checks
    Classify/Regress signatures' method names with
    --enable_signature_method_name_check.
    """
    return functools.partial(_tensorflow_load, config, metrics.batch_hooks())


def _tensorflow_load(
    config: ServeConfig, batch_hooks: BatchHooks, directory: Path, version: int
) -> Servable:
    from tf_entrypoint.serving import model  # noqa: PLC0415 - TensorFlow only when serving

    return model.load(
        directory,
        version,
        warmup=config.enable_model_warmup,
        warmup_iterations=config.warmup_iterations,
        method_name_check=config.enable_signature_method_name_check,
        batching=config.batching,
        batch_hooks=batch_hooks,
        max_body_bytes=config.max_body_bytes,
        loader=config.saved_model_loader,
        max_graph_bytes=config.max_graph_bytes,
    )


def build_core(
    config: ServeConfig,
    *,
    loader: Loader | None = None,
    on_fatal: Callable[[str], None] = lambda message: None,
) -> ServingCore:
    """The serving core for `config`: metrics, the models' manager, workers, limits.

    `loader` defaults to TensorFlow's (tensorflow_loader).
    """
    metrics = Metrics()
    if loader is None:
        loader = tensorflow_loader(config, metrics)
    metrics.workers.set(config.workers)
    metrics.max_queue.set(config.max_queue)
    for name in config.models.names():
        metrics.add_model(name)
    stores = ObjectStores(
        ModelCache(config.model_cache_dir, config.model_cache_bytes),
        max_graph_bytes=config.max_graph_bytes,
    )
    manager = Manager(
        loader, metrics, metadata.rest_answer, retries=config.load_retries, stores=stores
    )
    manager.apply(config.models, initial=True)
    path = config.models.path

    def manage_models(stop: threading.Event, on_fatal: Callable[[str], None]) -> None:
        """The manager thread: first loads, then new versions and config changes."""
        manager.run(
            wait=config.wait_for_model,
            file_system_poll=config.file_system_poll_wait,
            config_poll=config.model_config_file_poll_wait,
            reload=None if path is None else functools.partial(read_model_config, path),
            stop=stop,
            on_fatal=on_fatal,
        )

    return ServingCore(
        manager,
        metrics,
        InferencePool(
            request_threads(config), config.max_queue, metrics, inline=runs_inline(config)
        ),
        RequestLimits.of(config.max_body_bytes, config.workers),
        manage_models=manage_models,
        on_fatal=on_fatal,
        cutoff=CutOff(STOPPED.format(grace=config.grace_period)),
        profiler=TensorFlowProfiler() if config.enable_profiler else None,
        queued=config.batching is not None,
    )


class _Stop:
    """The drain: begun by a signal or a fatal error, ended by the grace period.

    :meth:`begin` turns /readyz and health NOT_SERVING, drains every
    transport (core/drain.py's Transport) and starts a timer thread: at the end of
    --grace-period it cuts off the calls still running (drain.CutOff: they
    are answered 503 / UNAVAILABLE), and EXIT_MARGIN seconds later, should
    main() not have returned yet, it exits (:func:`exit_now`). Once main()
    has returned (:meth:`finish`) the timer does nothing: its caller exits
    (``python -m``), or goes on (a test calling main() in-process).
    """

    def __init__(self, core: ServingCore, grace: float, exit_code: Callable[[], int]) -> None:
        self.core = core
        self.grace = grace
        self.transports: list[Transport] = []
        #: Set by the first begin(): main stops waiting.
        self.begun = threading.Event()
        self.exit_code = exit_code
        self.began: float | None = None
        # Re-entrant: a signal handler runs on the main thread, which may be in begin() already.
        self._lock = threading.RLock()
        self._now = threading.Event()  # a second signal: end the grace period now
        self._finished = threading.Event()  # main() has returned: nothing left to watch
        self._wake = threading.Event()  # either of those

    def begin(self, signum: int | None) -> None:
        """Start the drain (idempotent; a second signal cuts off at once)."""
        with self._lock:
            first = self.began is None
            if first:
                self.began = time.monotonic()
        if first:
            if signum is not None:
                log.info(
                    "received %s: draining (up to %g s for requests in flight)",
                    signal.Signals(signum).name,
                    self.grace,
                )
            threading.Thread(target=self._timer, name="grace-period", daemon=True).start()
        elif signum is not None and not self._now.is_set():
            log.warning("received %s again: ending the grace period now",
                        signal.Signals(signum).name)  # fmt: skip
            self._now.set()
            self._wake.set()
        self.core.begin_drain()
        for transport in self.transports:
            transport.drain()
        self.begun.set()

    def finish(self) -> None:
        """main() is returning: its caller exits (exit_now), the timer has nothing to do."""
        self._finished.set()
        self._wake.set()

    def _timer(self) -> None:
        self._wake.wait(self.grace)
        if self._finished.is_set():
            return
        cut = self.core.cutoff.fire()
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
        took, cut = time.monotonic() - self.began, self.core.cutoff.cut
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
    if config.frontends > 1:
        from tf_entrypoint.serving import processes  # noqa: PLC0415 - only with --frontends

        _import_for_children(config)
        return processes.supervise(config, engine_main, frontend_main)
    return _serve(config, lambda on_fatal: build_core(config, on_fatal=on_fatal), _transports)


#: Builds the transports of a process: (core, config, on_fatal) -> transports, not started.
BuildTransports = Callable[[ServingCore, ServeConfig, Callable[[str], None]], list[Transport]]


def _transports(
    core: ServingCore, config: ServeConfig, on_fatal: Callable[[str], None]
) -> list[Transport]:
    """REST and gRPC, as the configuration turns them on (TRANSPORTS)."""
    return [
        row.build(core, config, functools.partial(on_fatal, f"the {row.name} server stopped"))
        for row in TRANSPORTS
        if row.wanted(config)
    ]


def _serve(
    config: ServeConfig,
    make_core: Callable[[Callable[[str], None]], ServingCore],
    transports: BuildTransports,
) -> int:
    """Build the core and the transports, serve until a signal or a fatal error, drain."""
    fatal: list[str] = []

    def on_fatal(message: str) -> None:
        log.error("%s; exiting", message)
        fatal.append(message)
        stop.begin(None)

    core = make_core(on_fatal)
    stop = _Stop(core, config.grace_period, lambda: EXIT_FATAL if fatal else EXIT_OK)
    try:  # until main() returns, a drain that takes too long ends the process (_Stop)
        stop.transports.extend(transports(core, config, on_fatal))
        _freeze_the_loaded()
        for transport in stop.transports:
            try:
                transport.start()
            except OSError as err:  # the port is taken, or the address invalid
                log.error("%s; exiting", err)
                fatal.append(str(err))
                stop.begin(None)
                break
        else:
            _handle_signals(lambda signum, frame: stop.begin(signum))
            core.start()
        while not stop.begun.wait(0.1):  # signals are handled between waits
            pass
        deadline = time.monotonic() + config.grace_period + EXIT_MARGIN
        for transport in stop.transports:
            transport.join(max(0.0, deadline - time.monotonic()))
        core.close()
        if fatal:
            return EXIT_FATAL
        log.info("%s", stop.stopped())
        return EXIT_OK
    finally:
        stop.finish()


def _import_for_children(config: ServeConfig) -> None:
    """What every child needs, imported once here and shared copy-on-write: TensorFlow and
    the model layer (which runs nothing), the transports' modules; then frozen."""
    from tf_entrypoint.serving import model  # noqa: F401, PLC0415 - TensorFlow, no Session

    for row in TRANSPORTS:
        if row.wanted(config):
            importlib.import_module(row.module)
    importlib.import_module("tf_entrypoint.serving.ipc.remote")
    importlib.import_module("tf_entrypoint.serving.ipc.service")
    gc.freeze()


def engine_main(config: ServeConfig, path: str, board: Board) -> int:
    """The engine process (serving/processes.py): the core, answering the front-ends on `path`."""
    return _serve(
        replace(config, rest_port=0, grpc_port=0, grpc_socket_path=None),
        lambda on_fatal: build_core(config, on_fatal=on_fatal),
        lambda core, config, on_fatal: [engine_service(core, config, path, board)],
    )


def engine_service(
    core: ServingCore, config: ServeConfig, path: str, board: Board | None = None
) -> Transport:
    """The engine's side of the engine call (ipc/service.py) over `core`, on `path`;
    it announces its model table's generation on `board` (ipc/board.py)."""
    from tf_entrypoint.serving.ipc.engine import EngineOps  # noqa: PLC0415
    from tf_entrypoint.serving.ipc.service import EngineService  # noqa: PLC0415

    manager, pid = core.manager, os.getpid()
    if board is not None and isinstance(manager, Manager):
        manager.changed = lambda generation: board.publish(pid, generation)
        board.publish(pid, manager.generation)
    from tf_entrypoint.serving.ipc.lanes import engine_lanes  # noqa: PLC0415

    lanes = engine_lanes(request_threads(config), config.frontends)
    # The server's request threads and admission are the front-ends' (their gauges add up).
    core.metrics.workers.set(0)
    core.metrics.max_queue.set(0)
    ops = EngineOps(
        manager, core.metrics, board, core.profiler, batching=config.batching is not None
    )
    return EngineService(path, ops, max_lanes=lanes, short=ops.short)


def frontend_main(config: ServeConfig, path: str, index: int, board: Board) -> int:
    """One front-end process (serving/processes.py): REST and gRPC over the engine at `path`."""
    from tf_entrypoint.serving.model.servable import output_values  # noqa: PLC0415

    return _serve(
        config,
        lambda on_fatal: frontend_core(
            config, path, index, on_fatal, wrap=output_values, board=board
        ),
        _transports,
    )


def frontend_core(
    config: ServeConfig,
    path: str,
    index: int,
    on_fatal: Callable[[str], None],
    *,
    wrap: Callable[[str, tuple[int, ...], memoryview], object] | None = None,
    board: Board | None = None,
) -> ServingCore:
    """A front-end's core: its own metrics, workers and limits over the engine's models.

    `wrap` makes an output's values from its bytes (the model layer's arrays);
    `board` is where the engine announces (ipc/board.py).
    """
    from tf_entrypoint.serving.ipc.lanes import Lanes, lane_counts  # noqa: PLC0415
    from tf_entrypoint.serving.ipc.profiler import RemoteProfiler  # noqa: PLC0415
    from tf_entrypoint.serving.ipc.remote import RemoteModels, SharedMetrics  # noqa: PLC0415

    metrics = Metrics()
    metrics.workers.set(config.workers)
    metrics.max_queue.set(config.max_queue)
    for name in config.models.names():
        metrics.add_model(name)
    threads = request_threads(config)
    blocking, per_loop = lane_counts(threads)
    lanes = Lanes(path, blocking, wrap=wrap, loop_lanes=per_loop)
    shared = SharedMetrics(lanes, metrics, index, board)
    metrics.pages = shared.pages
    shared.start()
    return ServingCore(
        RemoteModels(lanes, board),
        metrics,
        # Short calls run on the transport's loop (core/admission.py): a front-end's
        # engine call is a blocking round trip, and a hop to a worker thread and back
        # cost as much again (p50 at one connection: docs/benchmarks.md).
        InferencePool(
            threads,
            config.max_queue,
            metrics,
            inline=True,
            places=None if board is None else board.places(index, config.frontends),
        ),
        RequestLimits.of(config.max_body_bytes, config.workers),
        manage_models=lambda stop, on_fatal: None,
        on_fatal=on_fatal,
        cutoff=CutOff(STOPPED.format(grace=config.grace_period)),
        profiler=RemoteProfiler(lanes) if config.enable_profiler else None,
        queued=True,  # for the engine, over this loop's lanes (ipc/remote.py)
    )


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
