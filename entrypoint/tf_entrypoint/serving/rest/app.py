"""The Starlette application: routes, body limit, worker pool, metrics, health.

Nothing here blocks the event loop: JSON parsing, validation, inference and
response encoding of a predict run together on a worker thread (see
:class:`InferencePool`); the loop only reads bodies, routes, and writes
answers. Status, metadata (pre-encoded at load time), health and metrics are
answered on the loop directly. A predict is admitted before its body is
read, so at most --max-queue bodies are held at once (docs/robustness.md,
"Memory per request").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from tf_entrypoint.serving.codec import metadata
from tf_entrypoint.serving.config import ServeConfig
from tf_entrypoint.serving.config.model_config import read_model_config
from tf_entrypoint.serving.core import tfs_metrics as monitoring
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.batching import BatchHooks, BatchingParameters, run_with_deadline
from tf_entrypoint.serving.core.drain import STOPPED, TIMEOUT_ERRORS, CutOff, CutOffMiddleware
from tf_entrypoint.serving.core.limits import RequestLimits
from tf_entrypoint.serving.core.manager import Manager
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.servable import Loader, Servable
from tf_entrypoint.serving.rest import service
from tf_entrypoint.serving.rest.service import Answer, answer, error_answer

log = logging.getLogger("tf_entrypoint.serving")

T = TypeVar("T")

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
#: A REST verb -> the `API` label of TF Serving's runtime_latency.
_RUNTIME_APIS = {
    monitoring.API_REST_PREDICT: monitoring.RUNTIME_API_PREDICT,
    monitoring.API_REST_CLASSIFY: monitoring.RUNTIME_API_CLASSIFY,
    monitoring.API_REST_REGRESS: monitoring.RUNTIME_API_REGRESS,
}


def tensorflow_loader(
    directory: Path,
    version: int,
    *,
    warmup: bool = True,
    method_name_check: bool = False,
    batching: BatchingParameters | None = None,
    batch_hooks: BatchHooks | None = None,
    max_body_bytes: int | None = None,
) -> Servable:
    from tf_entrypoint.serving import model  # noqa: PLC0415 - TensorFlow only when serving

    return model.load(
        directory,
        version,
        warmup=warmup,
        method_name_check=method_name_check,
        batching=batching,
        batch_hooks=batch_hooks,
        max_body_bytes=max_body_bytes,
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


class Admission:
    """One request's place among those an InferencePool admits (InferencePool.admit)."""

    __slots__ = ("_held", "_pool", "handed")

    def __init__(self, pool: InferencePool) -> None:
        self._pool = pool
        self._held = True
        #: Set by InferencePool.run, which gives the place back when the work is done.
        self.handed = False

    def release(self) -> None:
        """Give the place back (the first call does; later ones do nothing)."""
        with self._pool._lock:
            held, self._held = self._held, False
        if held:
            self._pool._release(None)

    def close(self) -> None:
        """Give the place back unless InferencePool.run took it over."""
        if not self.handed:
            self.release()


class InferencePool:
    """A fixed set of worker threads with bounded admission, shared by REST and gRPC.

    At most `max_queue` predicts are admitted (running or waiting for one of
    the `workers` threads); the next gets 503 (REST) or RESOURCE_EXHAUSTED
    (gRPC) instead of queueing without bound. A request that is still waiting
    when its timeout expires is withdrawn; one already running in TensorFlow
    finishes (ops cannot be interrupted) but its client gets 504 or
    DEADLINE_EXCEEDED. `run` may be awaited from any event loop (REST's and
    gRPC's run on different threads): admission is counted under a lock.
    A caller that must hold its place before it reads the request (its body,
    its message) calls :meth:`admit` first and hands the Admission to `run`.
    """

    def __init__(self, workers: int, max_queue: int, metrics: Metrics) -> None:
        self.workers = workers
        self.max_queue = max_queue
        self.metrics = metrics
        self.admitted = 0
        self._lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="inference"
        )

    def admit(self) -> Admission:
        """A place among the `max_queue` admitted, or ApiError 503 / RESOURCE_EXHAUSTED."""
        with self._lock:
            full = self.admitted >= self.max_queue
            if not full:
                self.admitted += 1
            in_progress = self.admitted
        if full:
            self.metrics.rejected.inc()
            raise p.ApiError(
                503,
                f"Server is at capacity ({in_progress} predict requests in progress); retry later",
                {"Retry-After": "1"},
                code="RESOURCE_EXHAUSTED",
            )
        self.metrics.in_flight.inc()
        return Admission(self)

    async def run(
        self, work: Callable[[], T], timeout: float, admission: Admission | None = None
    ) -> T:
        """Run `work` on a worker; `admission`: the place admit() gave (else taken now)."""
        place = self.admit() if admission is None else admission
        place.handed = True
        # The deadline, for a request queued for a batch: withdrawn when it passes.
        deadline = time.monotonic() + timeout if timeout else None
        expired = f"Request timed out after {timeout:g} s (--request-timeout)"
        try:
            future = self._executor.submit(run_with_deadline, deadline, work, expired)
        except RuntimeError:  # shut down: the server is stopping
            place.release()
            raise p.ApiError(503, "Server is shutting down", code="UNAVAILABLE") from None
        future.add_done_callback(lambda _: place.release())
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout or None)
        except TIMEOUT_ERRORS:
            future.cancel()
            raise p.ApiError(504, expired) from None

    def _release(self, _: object) -> None:
        with self._lock:
            self.admitted -= 1
        self.metrics.in_flight.dec()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


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


def _respond(result: Answer) -> Response:
    return Response(
        result.body,
        status_code=result.status,
        media_type="application/json",
        headers=dict(result.headers),
    )


async def read_body(request: Request, limit: int, timeout: float = 0.0) -> bytes:
    """The whole body, or ApiError(413) as soon as it is known to exceed `limit`.

    ApiError(408) when it has not all arrived within `timeout` seconds (0: no
    limit): an admitted request holds its place while it is read.
    """
    if timeout:
        try:
            return await asyncio.wait_for(read_body(request, limit), timeout)
        except TIMEOUT_ERRORS:
            raise p.ApiError(
                408,
                f"Request body not received within {timeout:g} s (--request-timeout)",
                {"Connection": "close"},
            ) from None
    too_large = f"Request body exceeds the limit of {limit} bytes (--max-body-bytes)"
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise p.bad_request(f"Invalid Content-Length: {p.quote(declared)}")
        if int(declared) > limit:
            raise p.ApiError(413, too_large)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise p.ApiError(413, too_large)
        chunks.append(chunk)
    return b"".join(chunks)


def _path_as_sent(request: Request) -> str:
    """The URL path as the client sent it, percent-encoded (TF Serving matches routes on it)."""
    raw = request.scope.get("raw_path")
    if isinstance(raw, bytes):
        return raw.decode("latin-1")
    return urllib.parse.quote(request.scope["path"], safe="/:")


class _Endpoints:
    """The request handlers of one application, around its ServingState."""

    def __init__(self, state: ServingState) -> None:
        self.state = state
        self.metrics = state.metrics

    async def anything(self, request: Request) -> Response:
        # TF Serving matches /v1/ case-insensitively, so it is routed here by hand.
        if request.url.path.lower().startswith("/v1/"):
            return await self.v1(request)
        raise HTTPException(404)

    async def v1(self, request: Request) -> Response:
        state, config, manager = self.state, self.state.config, self.state.manager
        started = time.perf_counter()
        api = "other"
        route: p.Route | None = None
        try:
            route = p.parse_route(request.method, _path_as_sent(request))
            api = "predict" if route.kind in ("predict", "classify", "regress") else route.kind
            model = state.model_label(route)
            if route.kind == "status":
                result = service.status(manager, route)
            elif route.kind == "metadata":
                result = service.metadata(manager, route)
            else:
                manager.check(route)  # unknown model or not loaded: no worker needed
                # Admitted before the body is read: at most --max-queue bodies are
                # held; a refused request's body is never read (uvicorn discards it).
                admission = state.pool.admit()
                try:
                    body = service.Body(
                        await read_body(request, config.max_body_bytes, config.request_timeout)
                    )
                except BaseException:
                    admission.release()
                    raise
                work = functools.partial(
                    service.inference,
                    manager,
                    route,
                    body,
                    functools.partial(self._inference_done, model, _RUNTIME_APIS[route.kind]),
                    state.limits,
                )
                result = await state.pool.run(work, config.request_timeout, admission)
        except p.ApiError as err:
            result = error_answer(err)
        except ClientDisconnect:
            result = Answer(499, b"", {})
        seconds = time.perf_counter() - started
        model = state.model_label(route)
        self.metrics.observe(api, result.status, seconds, model)
        self.metrics.request_done(
            model,
            # TF Serving's `method`: the verb of a POST, "" for GETs and bad paths.
            route.kind if route is not None and route.kind in _RUNTIME_APIS else "",
            monitoring.ENTRYPOINT_REST,
            monitoring.status_name(result.status),
            seconds,
        )
        return _respond(result)

    def _inference_done(self, model: str, runtime_api: str, seconds: float) -> None:
        self.metrics.inference.labels(model).observe(seconds)
        self.metrics.runtime_done(model, runtime_api, seconds)

    async def healthz(self, request: Request) -> Response:
        return self._timed("health", answer(200, {"status": "alive"}))

    async def readyz(self, request: Request) -> Response:
        """200 when every configured model serves a version; 503 while not, or draining."""
        state = self.state
        pending, serving = state.manager.readiness()
        body: dict[str, object] = {"models": serving}
        if state.draining:
            return self._timed("health", answer(503, {"status": "shutting down", **body}))
        if pending:
            reasons = {}
            for name in pending:
                try:
                    state.manager.check(p.Route("predict", name))
                except p.ApiError as err:
                    reasons[name] = err.message
            return self._timed(
                "health", answer(503, {"status": "loading", "waiting_for": reasons, **body})
            )
        return self._timed("health", answer(200, {"status": "ready", **body}))

    async def metrics_page(self, request: Request) -> Response:
        started = time.perf_counter()
        page = self.metrics.exposition()
        self.metrics.observe("metrics", 200, time.perf_counter() - started)
        return Response(page, media_type=self.metrics.content_type)

    async def tfserving_page(self, request: Request) -> Response:
        """TF Serving's Prometheus page (--monitoring_config_file)."""
        started = time.perf_counter()
        page = self.metrics.tfserving.page()
        self.metrics.observe("metrics", 200, time.perf_counter() - started)
        return Response(page, media_type=monitoring.CONTENT_TYPE)

    def _timed(self, api: str, result: Answer) -> Response:
        self.metrics.observe(api, result.status, 0.0)
        return _respond(result)

    async def http_error(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        message = f"{status}: {request.method} {p.quote(request.url.path)}"
        return self._timed("other", answer(status, p.error_body(message)))

    async def internal_error(self, request: Request, exc: Exception) -> Response:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return self._timed(
            "other", answer(500, p.error_body(f"Internal error: {type(exc).__name__}"))
        )

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.state.start()
        try:
            yield
        finally:
            self.state.stop.set()
            if not self.state.shared_shutdown:
                self.state.close()


def create_app(
    config: ServeConfig,
    *,
    loader: Loader | None = None,
    on_fatal: Callable[[str], None] = lambda message: None,
) -> Starlette:
    """The application; its ServingState is `app.state.serving`.

    `loader` defaults to TensorFlow's, warming versions up unless
    --enable_model_warmup=false, checking Classify/Regress signatures' method
    names with --enable_signature_method_name_check.
    """
    metrics = Metrics()
    if loader is None:
        loader = functools.partial(
            tensorflow_loader,
            warmup=config.enable_model_warmup,
            method_name_check=config.enable_signature_method_name_check,
            batching=config.batching,
            batch_hooks=metrics.batch_hooks(),
            max_body_bytes=config.max_body_bytes,
        )
    metrics.workers.set(config.workers)
    metrics.max_queue.set(config.max_queue)
    for name in config.models.names():
        metrics.add_model(name)
    manager = Manager(loader, metrics, metadata.rest_answer)
    manager.apply(config.models, initial=True)
    state = ServingState(
        config=config,
        manager=manager,
        metrics=metrics,
        pool=InferencePool(request_threads(config), config.max_queue, metrics),
        limits=RequestLimits.of(config.max_body_bytes, config.workers),
        on_fatal=on_fatal,
        cutoff=CutOff(STOPPED.format(grace=config.grace_period)),
    )
    endpoints = _Endpoints(state)
    probes = ["GET", "HEAD"]
    routes = [
        Route("/healthz", endpoints.healthz, methods=probes),
        Route("/readyz", endpoints.readyz, methods=probes),
        Route("/metrics", endpoints.metrics_page, methods=probes),
    ]
    page = config.monitoring.prometheus_path
    if page is not None:  # checked by monitoring.check_path: no {param}, no clash
        routes.append(Route(page, endpoints.tfserving_page, methods=probes))
    app = Starlette(
        routes=[*routes, Route("/{path:path}", endpoints.anything, methods=ALL_METHODS)],
        exception_handlers={
            HTTPException: endpoints.http_error,
            Exception: endpoints.internal_error,
        },
        lifespan=endpoints.lifespan,
        middleware=[Middleware(CutOffMiddleware, cutoff=state.cutoff)],
    )
    app.state.serving = state
    return app
