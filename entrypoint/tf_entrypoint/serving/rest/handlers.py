"""The REST handlers: decode, call the core (core/calls.py), encode; the health and metrics pages.

Nothing here blocks the event loop for long: JSON parsing, validation,
inference and response encoding of a predict run together on a worker thread,
or inline on the loop when they take under 2 ms (see
:class:`~tf_entrypoint.serving.core.admission.InferencePool`), or, with
batching or in a front-end, parsed on the loop and queued for the batch or
the engine (core/queued.py); the loop reads bodies, routes, and writes
answers. Status, metadata (pre-encoded at
load time), health and metrics are answered on the loop directly. A predict
is admitted before its body is read, so at most --max-queue bodies are held
at once (docs/robustness.md, "Memory per request").
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from tf_entrypoint.serving.codec import json_examples, json_tensor, json_values
from tf_entrypoint.serving.codec import metadata as metadata_json
from tf_entrypoint.serving.config import ServeConfig
from tf_entrypoint.serving.core import tfs_metrics as monitoring
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.admission import (
    INLINE_MAX_REQUEST_BYTES,
    Admission,
)
from tf_entrypoint.serving.core.calls import Ask, CoreCalls
from tf_entrypoint.serving.core.inference import Decoded
from tf_entrypoint.serving.core.limits import RequestLimits
from tf_entrypoint.serving.core.models import ModelTable
from tf_entrypoint.serving.core.queued import queued_start
from tf_entrypoint.serving.core.servable import Servable
from tf_entrypoint.serving.core.serving_core import ServingCore
from tf_entrypoint.serving.rest.body import Body, Disconnected, Receive, Scope, read_body
from tf_entrypoint.serving.rest.errors import (
    ERRORS,
    Answer,
    answer,
    error_answer,
    error_body,
    respond,
)
from tf_entrypoint.serving.rest.metrics import RestMetrics
from tf_entrypoint.serving.rest.routes import parse_route, path_as_sent

log = logging.getLogger("tf_entrypoint.serving")


#: A REST verb -> TF Serving's `API` label of request_count and request_latency.
_TFS_APIS = {
    "predict": monitoring.API_REST_PREDICT,
    "classify": monitoring.API_REST_CLASSIFY,
    "regress": monitoring.API_REST_REGRESS,
}


def status(manager: ModelTable, route: p.Route) -> Answer:
    """GET /v1/models/NAME[/versions/N|/labels/L]."""
    try:
        return answer(200, metadata_json.status_body(manager.status(route)))
    except ERRORS as err:
        return error_answer(err)


def metadata(call: CoreCalls, route: p.Route) -> Answer:
    """GET /v1/models/NAME[/versions/N|/labels/L]/metadata (encoded when the version loaded)."""
    try:
        return Answer(200, call.signatures(route, lambda version, _: version.metadata), {})
    except ERRORS as err:
        return error_answer(err)


def inference(call: CoreCalls, route: p.Route, body: Body, limits: RequestLimits) -> Answer:
    """POST ...:predict, :classify or :regress (by route.kind). Blocking: run it on a worker.

    The JSON body is parsed, and the JSON answer written, while holding one
    of `limits.converting`'s slots (docs/robustness.md, "Memory per request"),
    taken before the request's deadline.
    """
    run = _classify_or_regress if route.kind in ("classify", "regress") else _predict
    try:
        return run(call, route, body, limits)
    except ERRORS as err:
        return error_answer(err)


def _decoder(
    body: Body, limits: RequestLimits
) -> Callable[[Servable], Ask[json_tensor.RequestFormat]]:
    """A predict's JSON body parsed for the leased version's signatures (a request that
    waited in the queue during a swap is read for the version that runs it)."""

    def decode(servable: Servable) -> Ask[json_tensor.RequestFormat]:
        with limits.slot():
            request = json_tensor.parse_predict_request(
                json_values.parse_json_object(body.take()), servable.signatures
            )
        return Ask(request.signature_name, Decoded(request.inputs), request.format, rest=True)

    return decode


def _predict(call: CoreCalls, route: p.Route, body: Body, limits: RequestLimits) -> Answer:
    """POST /v1/models/NAME[/versions/N|/labels/L]:predict. Blocking: run it on a worker."""
    predicted = call.predict(route, "Predict", _decoder(body, limits))
    with limits.slot():
        return Answer(200, json_tensor.predict_json(predicted.note, predicted.outputs), {})


def _classify_or_regress(
    call: CoreCalls, route: p.Route, body: Body, limits: RequestLimits
) -> Answer:
    """POST /v1/models/NAME[/versions/N|/labels/L]:classify or :regress. Blocking.

    The body is read before a version is leased, as TF Serving does (a bad
    body is a 400 whichever version would have run it).
    """
    with limits.slot():
        request = json_examples.parse_examples_request(body.take(), limit=limits.expansion)
    name, examples = request.signature_name, request.examples
    del request
    if route.kind == "classify":
        _, classes = call.classify(route, name, examples)
        del examples
        with limits.slot():
            return Answer(200, json_examples.classify_json(classes), {})
    _, values = call.regress(route, name, examples)
    del examples
    with limits.slot():
        return answer(200, json_examples.regress_response(values))


#: A predict with batching on is parsed on the event loop up to this size (a
#: larger one is parsed on a thread): core/admission.py's bound for inline calls.
QUEUED_MAX_BYTES = INLINE_MAX_REQUEST_BYTES


async def _encoded(limits: RequestLimits, encode: Callable[[], bytes]) -> Answer:
    """The answer written on the loop when a JSON conversion slot is free, else on a
    thread that waits for one (the loop never waits for a slot)."""
    if limits.converting.acquire(blocking=False):
        try:
            return Answer(200, encode(), {})
        finally:
            limits.converting.release()
    return await asyncio.to_thread(_in_slot, limits, encode)


def _in_slot(limits: RequestLimits, encode: Callable[[], bytes]) -> Answer:
    with limits.slot():
        return Answer(200, encode(), {})


class Endpoints:
    """The request handlers of one application, around its ServingCore."""

    def __init__(self, state: ServingCore, config: ServeConfig) -> None:
        self.state = state
        self.config = config
        #: REST's own series (by HTTP status); the core counts the rest.
        self.metrics = RestMetrics.of(state.metrics)

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
            if route.kind == "status":
                result = status(manager, route)
            else:
                result = metadata(self.state.call, route)
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
            if (
                state.queued
                and route.kind == "predict"
                and body.size <= QUEUED_MAX_BYTES
                and state.limits.converting.acquire(blocking=False)  # never waits on the loop
            ):
                try:
                    result = await self._queued_predict(route, body, admission)
                finally:
                    admission.close()
            else:
                work = functools.partial(inference, state.call, route, body, state.limits)
                result = await state.pool.run(
                    work, config.request_timeout, admission, model=route.model, size=body.size
                )
        except ERRORS as err:
            result = error_answer(err)
        except Disconnected:
            result = Answer(499, b"", {}, "CANCELLED")
        self.finish(api, route, result, started)
        return result

    async def _queued_predict(self, route: p.Route, body: Body, admission: Admission) -> Answer:
        """A predict queued from the event loop (core/queued.py): parsed here, queued
        for its batch (--enable_batching) or for the engine (a front-end, --frontends),
        answered here when the batch thread or the engine has run it.

        No thread waits for the answer: with --enable_batching every admitted
        request used to hold a thread that parsed it, waited for its batch and
        wrote its answer, and waking those threads cost what batching saved
        (issue 24). The body is at most QUEUED_MAX_BYTES, so parsing it here
        holds the loop briefly (larger ones go the thread's way); the caller
        took a JSON conversion slot for it without waiting (none free: the
        thread's way too), and the answer is written here when a slot is free,
        else on a thread that waits for one, so the memory bound holds
        (docs/robustness.md, "Memory per request"). A call that cannot be
        queued runs on a worker as before.
        """
        state = self.state
        held = True  # the JSON conversion slot the caller took, until the body is parsed

        def decode(servable: Servable) -> Ask[json_tensor.RequestFormat]:
            nonlocal held
            try:
                request = json_tensor.parse_predict_request(
                    json_values.parse_json_object(body.take()), servable.signatures
                )
            finally:
                held = False
                state.limits.converting.release()
            return Ask(request.signature_name, Decoded(request.inputs), request.format, rest=True)

        start = queued_start(state.pool, self.config.request_timeout, admission)
        try:
            predicted = await state.call.predict_started(route, "Predict", decode, start)
        finally:
            if held:  # the version was gone before its body was parsed
                state.limits.converting.release()
        return await _encoded(
            state.limits,
            functools.partial(json_tensor.predict_json, predicted.note, predicted.outputs),
        )

    def finish(self, api: str, route: p.Route | None, result: Answer, started: float) -> None:
        """Count one /v1/ request: by HTTP status here, by canonical code in the core."""
        seconds = time.perf_counter() - started
        self.metrics.observe(api, result.status, seconds, self.state.model_label(route))
        self.state.call.answered(
            route,
            # TF Serving's `method`: the verb of a POST, "" for GETs and bad paths.
            _TFS_APIS.get(route.kind, "") if route is not None else "",
            monitoring.ENTRYPOINT_REST,
            result.code,
            seconds,
        )

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
        page = await self._page(self.state.metrics.exposition)
        self.metrics.observe("metrics", 200, time.perf_counter() - started)
        return Response(page, media_type=self.state.metrics.content_type)

    async def tfserving_page(self, request: Request) -> Response:
        """TF Serving's Prometheus page (--monitoring_config_file)."""
        started = time.perf_counter()
        page = await self._page(self.state.metrics.tfserving_page)
        self.metrics.observe("metrics", 200, time.perf_counter() - started)
        return Response(page, media_type=monitoring.CONTENT_TYPE)

    async def _page(self, make: Callable[[], bytes]) -> bytes:
        """A metrics page: made here, or on a thread when it asks the other processes
        for theirs (--frontends: a call to the engine never holds the loop)."""
        if self.state.metrics.pages is None:
            return make()
        return await asyncio.to_thread(make)

    def _timed(self, api: str, result: Answer) -> Response:
        self.metrics.observe(api, result.status, 0.0)
        return respond(result)

    async def http_error(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        message = f"{status}: {request.method} {p.quote(request.url.path)}"
        return self._timed("other", answer(status, error_body(message)))

    async def internal_error(self, request: Request, exc: Exception) -> Response:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return self._timed(
            "other", answer(500, error_body(f"Internal error: {type(exc).__name__}"))
        )
