"""The Open Inference Protocol (KServe v2) on the REST port, beside TF Serving's /v1/.

`rest/asgi.py` hands every request whose path is `/v2` or under `/v2/` to
:meth:`V2Endpoints.handle`, in raw ASGI as the /v1/ inference path: server
metadata and health, a model's metadata and readiness, and `infer` with the
JSON tensor form and Triton's binary tensor data extension
(`Inference-Header-Content-Length`). The frame is the /v1/ one: the model is
checked, the request admitted (--max-queue) before its body is read, the body
read within --max-body-bytes and --request-timeout, the call run on a worker
or inline (core/admission.py), and through the batch queue when batching is
on, so a v2 request batches with /v1/ requests of the same signature. The
wire format is codec/v2_json.py's; errors are `{"error": "..."}` with the
status of TF Serving's table (docs/v2.md).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable

from tf_entrypoint import __version__
from tf_entrypoint.serving.codec import v2_json, v2_tensor
from tf_entrypoint.serving.codec.json_values import encode
from tf_entrypoint.serving.config import ServeConfig
from tf_entrypoint.serving.core import inference as core_inference
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.calls import Ask, CoreCalls
from tf_entrypoint.serving.core.errors import Code, ServingError, invalid_argument
from tf_entrypoint.serving.core.inference import Decoded, signature_of
from tf_entrypoint.serving.core.limits import RequestLimits
from tf_entrypoint.serving.core.servable import Servable
from tf_entrypoint.serving.core.serving_core import ServingCore
from tf_entrypoint.serving.rest.body import Body, Disconnected, Receive, Scope, read_body
from tf_entrypoint.serving.rest.errors import ERRORS, Answer, error_answer
from tf_entrypoint.serving.rest.metrics import RestMetrics
from tf_entrypoint.serving.rest.routes import decoded_name, path_as_sent

#: The metrics' `protocol` label of these requests.
PROTOCOL = "v2"
#: The binary tensor data extension's header: the JSON part's length in bytes.
HEADER_LENGTH = "Inference-Header-Content-Length"
_HEADER_LENGTH = HEADER_LENGTH.lower().encode("latin-1")
#: A model's paths (matched on the path as sent; the name is decoded after).
_MODEL_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready|/infer)?", re.ASCII)
_JSON = {"Content-Type": "application/json"}
_BINARY = "application/octet-stream"


def _json(status: int, body: bytes) -> Answer:
    return Answer(status, body, _JSON)


def _error(err: ServingError) -> Answer:
    """An error as the protocol's `{"error": "..."}` (TF Serving's shape, the same)."""
    found = error_answer(err)
    return Answer(found.status, found.body, {**found.headers, **_JSON}, found.code)


def _not_found(method: str, path: str) -> Answer:
    return _error(ServingError(Code.NOT_FOUND, f"no v2 endpoint at {method} {p.quote(path)}"))


def _method_not_allowed(method: str, path: str, allowed: str) -> Answer:
    body = v2_json.error_body(f"{method} is not allowed on {p.quote(path)}; use {allowed}")
    return Answer(405, body, {**_JSON, "Allow": allowed}, "INVALID_ARGUMENT")


def _header_length(scope: Scope) -> int | None:
    """The binary extension's header, as a number of bytes (None when absent)."""
    for name, value in scope.get("headers", ()):
        if name == _HEADER_LENGTH:
            text = value.decode("latin-1").strip()
            if not text.isdigit() or len(text) > 18:
                raise invalid_argument(
                    f"{HEADER_LENGTH} must be the JSON part's length in bytes (a non-negative "
                    f"integer), not {p.quote(text)}"
                )
            return int(text)
    return None


def infer(
    call: CoreCalls,
    route: p.Route,
    body: Body,
    header_length: int | None,
    *,
    limits: RequestLimits,
) -> Answer:
    """POST /v2/models/NAME[/versions/N]/infer. Blocking: on a worker, or inline.

    The body is parsed for the version the core leases (a request queued
    during a swap runs on the newest version, as for /v1/), and the answer
    written, while holding a JSON conversion slot (docs/robustness.md).
    """

    def decode(servable: Servable) -> Ask[v2_json.InferRequest]:
        signatures = servable.signatures
        with limits.slot():
            request = v2_json.parse_infer_request(
                body.take(),
                header_length,
                lambda parameters: signatures[signature_of(parameters, servable)].inputs,
                limits.expansion,
            )
        name = signature_of(request.parameters, servable)
        wanted = [output.name for output in request.outputs]
        v2_tensor.check_outputs(signatures[name].outputs, wanted)
        return Ask(name, Decoded(request.inputs), request, wanted)

    try:
        predicted = call.predict(route, "ModelInfer", decode)
        request = predicted.note
        with limits.slot():
            data, json_length = v2_json.infer_response(
                route.model,
                str(predicted.version),
                request.id,
                predicted.outputs,
                requested=request.outputs,
                binary_data_output=request.binary_data_output,
            )
    except ERRORS as err:
        return _error(err)
    if json_length is None:
        return _json(200, data)
    return Answer(200, data, {"Content-Type": _BINARY, HEADER_LENGTH: str(json_length)})


class V2Endpoints:
    """The /v2/ handlers of one application, around its ServingCore."""

    def __init__(self, state: ServingCore, config: ServeConfig) -> None:
        self.state = state
        self.config = config
        #: REST's own series (by HTTP status, protocol="v2").
        self.metrics = RestMetrics.of(state.metrics)
        self._server_metadata = v2_json.server_metadata(__version__)

    async def handle(self, scope: Scope, receive: Receive) -> Answer:
        """Any request under /v2 (rest/asgi.py routes it here, cut-off tracked)."""
        started = time.perf_counter()
        method, path = scope["method"], path_as_sent(scope)
        api, route = "other", None
        try:
            if path in ("/v2", "/v2/"):
                api, result = "metadata", self._get(method, path, self._metadata)
            elif path == "/v2/health/live":
                api, result = "health", self._get(method, path, self._live)
            elif path == "/v2/health/ready":
                api, result = "health", self._get(method, path, self._ready)
            else:
                match = _MODEL_PATH.fullmatch(path)
                if match is None:
                    result = _not_found(method, path)
                else:
                    route, api, result = await self._model(scope, receive, match)
        except ERRORS as err:
            result = _error(err)
        except Disconnected:
            result = Answer(499, b"", {}, "CANCELLED")
        self.finish(api, route, result, started)
        return result

    def _get(self, method: str, path: str, answer: Callable[[], Answer]) -> Answer:
        if method not in ("GET", "HEAD"):
            return _method_not_allowed(method, path, "GET")
        return answer()

    def _metadata(self) -> Answer:
        return _json(200, self._server_metadata)

    def _live(self) -> Answer:
        return _json(200, encode({"live": True}))

    def _ready(self) -> Answer:
        """200 {"ready": true} once every configured model serves; 503 {"ready": false, ...}
        while not, or draining (KServe's server answers 503; the spec says any 4xx)."""
        pending, _ = self.state.manager.readiness()
        if self.state.draining:
            return _json(503, encode({"ready": False, "error": "the server is shutting down"}))
        if pending:
            waiting = ", ".join(sorted(pending))
            return _json(
                503, encode({"ready": False, "error": f"model(s) {waiting} not available yet"})
            )
        return _json(200, encode({"ready": True}))

    async def _model(
        self, scope: Scope, receive: Receive, match: re.Match[str]
    ) -> tuple[p.Route, str, Answer]:
        method, path = scope["method"], path_as_sent(scope)
        name, version_text, action = match.groups()
        version = p.version_number(version_text)
        model = decoded_name(name) or ""
        if action == "/infer":
            route = p.Route("predict", model, version)
            if method != "POST":
                return route, "predict", _method_not_allowed(method, path, "POST")
            return route, "predict", await self._infer(scope, receive, route)
        route = p.Route("metadata" if action is None else "status", model, version)
        if method not in ("GET", "HEAD"):
            return route, route.kind, _method_not_allowed(method, path, "GET")
        if action is None:
            return route, "metadata", self._model_metadata(route)
        return route, "status", self._model_ready(route)

    def _model_metadata(self, route: p.Route) -> Answer:
        """The default signature of the version the route names; `versions` lists every
        version that may be asked for (the model's available ones)."""
        signature = self.state.call.signatures(
            route,
            lambda _, servable: servable.signatures[
                core_inference.unnamed_signature(None, servable)
            ],
        )
        versions = self.state.manager.readiness()[1].get(route.model, [])
        return _json(200, v2_json.model_metadata(route.model, versions, signature))

    def _model_ready(self, route: p.Route) -> Answer:
        """200 {"name", "ready": true}; 503 with ready false while the model has no version
        it can serve; 404 for a model or version it does not know."""
        try:
            self.state.manager.check(route)
        except ERRORS as err:
            if err.code == Code.NOT_FOUND:
                return _error(err)
            body = {"name": route.model, "ready": False, "error": err.message}
            return _json(503, encode(body))
        return _json(200, encode({"name": route.model, "ready": True}))

    async def _infer(self, scope: Scope, receive: Receive, route: p.Route) -> Answer:
        state, config = self.state, self.config
        header_length = _header_length(scope)
        state.manager.check(route)  # unknown model or not loaded: no worker needed
        admission = state.pool.admit()  # before the body is read, as /v1/
        try:
            body = Body(
                await read_body(scope, receive, config.max_body_bytes, config.request_timeout)
            )
        except BaseException:
            admission.release()
            raise
        work = functools.partial(infer, state.call, route, body, header_length, limits=state.limits)
        return await state.pool.run(
            work, config.request_timeout, admission, model=route.model, size=body.size
        )

    def finish(self, api: str, route: p.Route | None, result: Answer, started: float) -> None:
        """Count one /v2/ request in the server's metrics (protocol="v2")."""
        model = self.state.model_label(route)
        self.metrics.observe(api, result.status, time.perf_counter() - started, model, PROTOCOL)
