"""The Starlette application: routes, exception handlers, middleware, lifespan."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Route

from tf_entrypoint.serving.codec import metadata
from tf_entrypoint.serving.config import ServeConfig
from tf_entrypoint.serving.core.admission import InferencePool, request_threads
from tf_entrypoint.serving.core.batching import BatchHooks, BatchingParameters
from tf_entrypoint.serving.core.drain import STOPPED, CutOff
from tf_entrypoint.serving.core.limits import RequestLimits
from tf_entrypoint.serving.core.manager import Manager
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.servable import Loader, Servable
from tf_entrypoint.serving.core.serving_core import ServingState
from tf_entrypoint.serving.rest.cutoff import CutOffMiddleware
from tf_entrypoint.serving.rest.handlers import Endpoints

log = logging.getLogger("tf_entrypoint.serving")

T = TypeVar("T")

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def tensorflow_loader(
    directory: Path,
    version: int,
    *,
    warmup: bool = True,
    method_name_check: bool = False,
    batching: BatchingParameters | None = None,
    batch_hooks: BatchHooks | None = None,
    max_body_bytes: int | None = None,
    loader: str = "session",
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
        loader=loader,
    )


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
            loader=config.saved_model_loader,
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
    endpoints = Endpoints(state)
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
