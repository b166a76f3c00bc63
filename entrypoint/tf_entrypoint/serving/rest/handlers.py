"""The REST handlers: decode, call the core, encode; the health and metrics pages.

Nothing here blocks the event loop for long: JSON parsing, validation,
inference and response encoding of a predict run together on a worker thread,
or inline on the loop when they take under 2 ms (see
:class:`~tf_entrypoint.serving.core.admission.InferencePool`); the loop
reads bodies, routes, and writes answers. Status, metadata (pre-encoded at
load time), health and metrics are answered on the loop directly. A predict
is admitted before its body is read, so at most --max-queue bodies are held
at once (docs/robustness.md, "Memory per request").
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from tf_entrypoint.serving.codec import json_examples, json_tensor, json_values
from tf_entrypoint.serving.config import ServeConfig
from tf_entrypoint.serving.core import inference as core_inference
from tf_entrypoint.serving.core import tfs_metrics as monitoring
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.inference import Decoded
from tf_entrypoint.serving.core.limits import RequestLimits
from tf_entrypoint.serving.core.manager import Manager
from tf_entrypoint.serving.core.serving_core import ServingCore
from tf_entrypoint.serving.rest.body import Body, Disconnected, Receive, Scope, read_body
from tf_entrypoint.serving.rest.errors import ERRORS, Answer, answer, error_answer, respond
from tf_entrypoint.serving.rest.routes import parse_route, path_as_sent

log = logging.getLogger("tf_entrypoint.serving")


#: A REST verb -> the `API` label of TF Serving's runtime_latency.
_RUNTIME_APIS = {
    monitoring.API_REST_PREDICT: monitoring.RUNTIME_API_PREDICT,
    monitoring.API_REST_CLASSIFY: monitoring.RUNTIME_API_CLASSIFY,
    monitoring.API_REST_REGRESS: monitoring.RUNTIME_API_REGRESS,
}


def status(manager: Manager, route: p.Route) -> Answer:
    """GET /v1/models/NAME[/versions/N|/labels/L]."""
    try:
        return answer(200, p.status_body(manager.status(route)))
    except ERRORS as err:
        return error_answer(err)


def metadata(manager: Manager, route: p.Route) -> Answer:
    """GET /v1/models/NAME[/versions/N|/labels/L]/metadata."""
    try:
        with manager.lease(route) as version:
            return Answer(200, version.metadata, {})
    except ERRORS as err:
        return error_answer(err)


def inference(
    manager: Manager,
    route: p.Route,
    body: Body,
    observe_inference: Callable[[float], None],
    limits: RequestLimits,
) -> Answer:
    """POST ...:predict, :classify or :regress (by route.kind). Blocking: run it on a worker.

    The JSON body is parsed, and the JSON answer written, while holding one
    of `limits.converting`'s slots (docs/robustness.md, "Memory per request"),
    taken before the request's deadline.
    """
    run = _classify_or_regress if route.kind in ("classify", "regress") else _predict
    try:
        return run(manager, route, body, observe_inference, limits)
    except ERRORS as err:
        return error_answer(err)


def _predict(
    manager: Manager,
    route: p.Route,
    body: Body,
    observe_inference: Callable[[float], None],
    limits: RequestLimits,
) -> Answer:
    """POST /v1/models/NAME[/versions/N|/labels/L]:predict. Blocking: run it on a worker.

    The version is chosen here, on the worker, so a request that waited in
    the queue during a swap runs on the newest version; the lease keeps that
    version loaded until the answer is ready.
    """
    with manager.lease(route) as version:
        servable = version.servable
        assert servable is not None  # noqa: S101 - AVAILABLE versions have one
        with limits.slot():
            request = json_tensor.parse_predict_request(
                json_values.parse_json_object(body.take()), servable.signatures
            )
        name, request_format, inputs = request.signature_name, request.format, request.inputs
        del request
        started = time.perf_counter()
        name, outputs = core_inference.predict(servable, name, Decoded(inputs), rest=True)
        observe_inference(time.perf_counter() - started)
        del inputs
    with limits.slot():
        return Answer(200, json_tensor.predict_json(request_format, outputs), {})


def _classify_or_regress(
    manager: Manager,
    route: p.Route,
    body: Body,
    observe_inference: Callable[[float], None],
    limits: RequestLimits,
) -> Answer:
    """POST /v1/models/NAME[/versions/N|/labels/L]:classify or :regress. Blocking.

    The body is read before a version is leased, as TF Serving does (a bad
    body is a 400 whichever version would have run it).
    """
    with limits.slot():
        request = json_examples.parse_examples_request(body.take(), limit=limits.expansion)
    with manager.lease(route) as version:
        servable = version.servable
        assert servable is not None  # noqa: S101 - AVAILABLE versions have one
        started = time.perf_counter()
        if route.kind == "classify":
            classes = core_inference.classify(servable, request.signature_name, request.examples)
        else:
            values = core_inference.regress(servable, request.signature_name, request.examples)
        observe_inference(time.perf_counter() - started)
    del request
    with limits.slot():
        if route.kind == "classify":
            return Answer(200, json_examples.classify_json(classes), {})
        return answer(200, json_examples.regress_response(values))


class Endpoints:
    """The request handlers of one application, around its ServingCore."""

    def __init__(self, state: ServingCore, config: ServeConfig) -> None:
        self.state = state
        self.config = config
        self.metrics = state.metrics

    async def anything(self, request: Request) -> Response:
        # TF Serving matches /v1/ case-insensitively, so it is routed here by hand.
        # (A POST to /v1/ never comes here: rest/asgi.py answers it with `post`.)
        if request.url.path.lower().startswith("/v1/"):
            return await self.v1(request)
        raise HTTPException(404)

    async def v1(self, request: Request) -> Response:
        """GET (or HEAD) a model's status or metadata; any other method is malformed."""
        manager = self.state.manager
        started = time.perf_counter()
        api = "other"
        route: p.Route | None = None
        try:
            route = parse_route(request.method, path_as_sent(request.scope))
            api = route.kind
            result = (status if route.kind == "status" else metadata)(manager, route)
        except ERRORS as err:
            result = error_answer(err)
        self.finish(api, route, result, started)
        return respond(result)

    async def post(self, scope: Scope, receive: Receive) -> Answer:
        """POST /v1/...:predict, :classify or :regress: TF Serving's inference, in raw ASGI.

        The hot path (rest/asgi.py calls it without Starlette): the route, the
        admission place before the body is read, the body, then the call on a
        worker (or inline: core/admission.py), and the metrics.
        """
        state, config = self.state, self.config
        started = time.perf_counter()
        api = "other"
        route: p.Route | None = None
        try:
            route = parse_route("POST", path_as_sent(scope))
            api = "predict"
            state.manager.check(route)  # unknown model or not loaded: no worker needed
            # Admitted before the body is read: at most --max-queue bodies are
            # held; a refused request's body is never read (uvicorn discards it).
            admission = state.pool.admit()
            try:
                body = Body(
                    await read_body(scope, receive, config.max_body_bytes, config.request_timeout)
                )
            except BaseException:
                admission.release()
                raise
            model = state.model_label(route)
            work = functools.partial(
                inference,
                state.manager,
                route,
                body,
                functools.partial(self._inference_done, model, _RUNTIME_APIS[route.kind]),
                state.limits,
            )
            result = await state.pool.run(
                work, config.request_timeout, admission, model=route.model, size=body.size
            )
        except ERRORS as err:
            result = error_answer(err)
        except Disconnected:
            result = Answer(499, b"", {}, "CANCELLED")
        self.finish(api, route, result, started)
        return result

    def finish(self, api: str, route: p.Route | None, result: Answer, started: float) -> None:
        """Count one /v1/ request in the server's and TF Serving's metrics."""
        seconds = time.perf_counter() - started
        model = self.state.model_label(route)
        self.metrics.observe(api, result.status, seconds, model)
        self.metrics.request_done(
            model,
            # TF Serving's `method`: the verb of a POST, "" for GETs and bad paths.
            route.kind if route is not None and route.kind in _RUNTIME_APIS else "",
            monitoring.ENTRYPOINT_REST,
            result.code,
            seconds,
        )

    def _inference_done(self, model: str, runtime_api: str, seconds: float) -> None:
        self.metrics.observe_inference(model, seconds)
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
                except ERRORS as err:
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
        return respond(result)

    async def http_error(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        message = f"{status}: {request.method} {p.quote(request.url.path)}"
        return self._timed("other", answer(status, p.error_body(message)))

    async def internal_error(self, request: Request, exc: Exception) -> Response:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return self._timed(
            "other", answer(500, p.error_body(f"Internal error: {type(exc).__name__}"))
        )
