"""The REST application: rest/asgi.py's inference path in front of a Starlette
application (routes, exception handlers, middleware, lifespan) for the rest."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Route

from tf_entrypoint.serving.config import ServeConfig
from tf_entrypoint.serving.core.serving_core import ServingCore
from tf_entrypoint.serving.rest.asgi import RestApp
from tf_entrypoint.serving.rest.cors import CorsRestApp
from tf_entrypoint.serving.rest.cutoff import CutOffMiddleware
from tf_entrypoint.serving.rest.handlers import Endpoints
from tf_entrypoint.serving.rest.v2 import V2Endpoints

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def create_app(core: ServingCore, config: ServeConfig, *, owns_core: bool = True) -> RestApp:
    """The application over `core`, which is `app.state.serving`.

    `owns_core`: the app's lifespan starts the core's manager thread and closes
    the core when it ends (an app on its own, as the tests run it). The server
    (main) passes False: it starts the core after every transport listens and
    closes it after every transport has drained.
    """
    endpoints = Endpoints(core, config)
    probes = ["GET", "HEAD"]
    routes = [
        Route("/healthz", endpoints.healthz, methods=probes),
        Route("/readyz", endpoints.readyz, methods=probes),
        Route("/metrics", endpoints.metrics_page, methods=probes),
    ]
    page = config.monitoring.prometheus_path
    if page is not None:  # checked by monitoring.check_path: no {param}, no clash
        routes.append(Route(page, endpoints.tfserving_page, methods=probes))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if owns_core:
            core.start()
        try:
            yield
        finally:
            if owns_core:
                core.close()

    app = Starlette(
        routes=[*routes, Route("/{path:path}", endpoints.anything, methods=ALL_METHODS)],
        exception_handlers={
            HTTPException: endpoints.http_error,
            Exception: endpoints.internal_error,
        },
        lifespan=lifespan,
        middleware=[Middleware(CutOffMiddleware, cutoff=core.cutoff)],
    )
    app.state.serving = core
    # --rest_api_enable_cors_support is decided here, once: with it off no
    # request pays for it (rest/cors.py).
    kind = CorsRestApp if config.enable_cors_support else RestApp
    return kind(core, endpoints, app, V2Endpoints(core, config))
