"""TF Serving's gRPC API on --port: PredictionService, ModelService, grpc.health.v1.

The services are TF Serving's own, from `tensorflow-serving-api`'s stubs, so
a client written for TF Serving (Python, Java, Go, KServe's `grpc-v1`) works
unchanged. They run on a grpc.aio server with its own event loop on its own
thread, next to REST's, and share with REST everything that matters: the
models (:class:`~tf_entrypoint.serving.core.manager.Manager`), the inference
workers and their admission limit
(:class:`~tf_entrypoint.serving.rest.app.InferencePool`), the request timeout,
the message size limit and the drain on SIGTERM.

Predict, Classify, Regress and MultiInference take their admission place
(--max-queue) before their message is read, as REST requests do before
their body: at most --max-queue inference messages are held at once, and a
refused call's message is never read (docs/robustness.md, "Memory per
request").

MultiInference runs classify and regress tasks over one set of examples, as
TF Serving's multi_inference.cc (docs/tf-serving.md). TensorFlow's profiler
service (`tensorflow.ProfilerService`) is forwarded to TensorFlow's own
profiler server in this process (profiler.py), unless --enable_profiler=false.

Errors carry TF Serving's codes and messages: NOT_FOUND for an unknown
model, version or label, INVALID_ARGUMENT for a bad tensor or signature,
FAILED_PRECONDITION for a missing signature key, UNAVAILABLE while a model
loads or the server drains, RESOURCE_EXHAUSTED when the admission limit is
reached or a message is too large, DEADLINE_EXCEEDED past the client's
deadline or --request-timeout (README: "gRPC").

Health (`grpc.health.v1.Health`, Kubernetes' `grpc:` probes): service ""
is SERVING once every model of the start-up configuration serves a version
and NOT_SERVING while loading or draining; a service named after a model is
SERVING while that model has an available version; TF Serving's own names
"PredictionService" and "ModelService" are SERVING until the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    regression_pb2,
)

from tf_entrypoint.serving.codec import metadata
from tf_entrypoint.serving.config import ServeConfig, channel_args
from tf_entrypoint.serving.config.model_config import ConfigError, config_from_message
from tf_entrypoint.serving.core import tfs_metrics as monitoring
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.drain import EXIT_MARGIN, TIMEOUT_ERRORS
from tf_entrypoint.serving.core.models import Version
from tf_entrypoint.serving.grpc import profiler
from tf_entrypoint.serving.rest.app import Admission, ServingState

log = logging.getLogger("tf_entrypoint.serving")

R = TypeVar("R")
#: A call's context (requests and responses are protobuf messages, untyped here).
Context = aio.ServicerContext[Any, Any]

#: The gRPC method names, the `method` label of the gRPC metrics.
METHODS = (
    "Predict",
    "Classify",
    "Regress",
    "MultiInference",
    "GetModelMetadata",
    "GetModelStatus",
    "HandleReloadConfigRequest",
    *profiler.METHODS,
    "ProfilerService",
)
#: gRPC method -> TF Serving's runtime_latency `API` (request_count/latency use the method).
_INFERENCE_METHODS = {
    monitoring.API_GRPC_PREDICT: monitoring.RUNTIME_API_PREDICT,
    monitoring.API_GRPC_CLASSIFY: monitoring.RUNTIME_API_CLASSIFY,
    monitoring.API_GRPC_REGRESS: monitoring.RUNTIME_API_REGRESS,
}
#: Health service names TF Serving itself sets (model_servers/server.cc).
TF_SERVING_SERVICES = ("PredictionService", "ModelService")
#: How often model readiness is copied into the health service.
HEALTH_EVERY = 0.2
_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


#: Bytes a status message may take on the wire. grpc percent-encodes the
#: message in the trailers (every byte outside printable ASCII, and "%", takes
#: three), and its clients refuse a call whose trailers pass 8 kB (soft) to
#: 16 kB (hard): an error quoting a request's 100 kB model name, or 2,000
#: non-ASCII characters (12 bytes each encoded), reached the client as
#: "received metadata size exceeds ... limit" instead of its own code.
MAX_STATUS_MESSAGE_BYTES = 6000


def _wire_bytes(char: str) -> int:
    if " " <= char <= "~" and char != "%":
        return 1
    return 3 * len(char.encode("utf-8", "surrogatepass"))


def status_message(message: str) -> str:
    """`message`, cut (ending in "...") so that it takes at most
    MAX_STATUS_MESSAGE_BYTES percent-encoded."""
    if len(message) * 12 <= MAX_STATUS_MESSAGE_BYTES:  # fits whatever its characters
        return message
    budget = MAX_STATUS_MESSAGE_BYTES - 3
    used = 0
    for index, char in enumerate(message):
        used += _wire_bytes(char)
        if used > budget:
            return message[:index] + "..."
    return message


async def abort(context: Context, code: str, message: str) -> NoReturn:
    """End the call with `code` and `message` (cut to fit the trailers).

    A call whose client has already gone (its deadline passed a moment before
    the server's own timer, or it cancelled) cannot take a status any more:
    grpc's abort then fails inside its C core with ExecuteBatchError, which
    grpc would log with a traceback; the call ends as cancelled instead.
    """
    if not context.done():
        try:
            await context.abort(grpc.StatusCode[code], status_message(message))
        except aio.AbortError:
            raise
        except Exception as err:  # noqa: BLE001 - the status could not be sent: the call is gone
            log.debug("gRPC call ended before its %s status could be sent: %s", code, err)
    raise asyncio.CancelledError


def route_of(kind: p.Kind, request: Any) -> p.Route:
    """The model, version or label a request's ModelSpec addresses."""
    if not request.HasField("model_spec"):
        raise p.bad_request("Missing ModelSpec")
    return _route_of_spec(kind, request.model_spec)


def _route_of_spec(kind: p.Kind, spec: Any) -> p.Route:
    choice = spec.WhichOneof("version_choice")
    version = int(spec.version.value) if choice == "version" else None
    label = spec.version_label if choice == "version_label" else None
    return p.Route(kind, spec.name, version, label)


def _code_number(name: str) -> int:
    number: int = grpc.StatusCode[name].value[0]
    return number


def signature_def_map(signatures: Mapping[str, p.Signature]) -> Any:
    """The servable's signatures as TF Serving's SignatureDefMap message."""
    out = get_model_metadata_pb2.SignatureDefMap()
    for name, signature in sorted(signatures.items()):
        definition = out.signature_def[name]
        definition.method_name = signature.method_name
        for target, specs in ((definition.inputs, signature.inputs),
                              (definition.outputs, signature.outputs)):  # fmt: skip
            for key, spec in specs.items():
                info = target[key]
                info.name = spec.tensor_name
                info.dtype = _dtype_number(spec.dtype)
                if spec.shape is None:
                    info.tensor_shape.unknown_rank = True
                else:
                    for size in spec.shape:
                        info.tensor_shape.dim.add(size=size)
    return out


def _dtype_number(name: str) -> int:
    from tensorflow.core.framework import types_pb2  # noqa: PLC0415 - with the stubs already

    value: int = types_pb2.DataType.Value(name)
    return value


class _Handlers:
    """What both services share: admission, timeouts, errors, metrics."""

    def __init__(self, state: ServingState) -> None:
        self.state = state
        self.manager = state.manager
        self.metrics = state.metrics

    def timeout(self, context: Context) -> float:
        """Seconds the request may wait and run: --request-timeout or the deadline."""
        limits = [self.state.config.request_timeout or float("inf")]
        remaining = context.time_remaining()
        if remaining is not None:
            limits.append(max(remaining, 0.001))
        limit = min(limits)
        return 0.0 if limit == float("inf") else limit

    async def call(
        self,
        method: str,
        route: Callable[[], p.Route | None],
        context: Context,
        answer: Callable[[p.Route | None], Any],
    ) -> Any:
        """Run one RPC: `answer` gives the response or raises ApiError."""
        started = time.perf_counter()
        target: p.Route | None = None
        cutoff = self.state.cutoff
        try:
            if self.state.draining:
                raise p.ApiError(503, "Server is shutting down", code="UNAVAILABLE")
            with cutoff.track():
                target = route()
                response = answer(target)
                if asyncio.iscoroutine(response):
                    response = await response
            code, message = "OK", ""
        except p.ApiError as err:
            code, message = err.code, err.message
        except ConfigError as err:
            code, message = "INVALID_ARGUMENT", str(err)
        except asyncio.CancelledError:
            if not cutoff.fired:  # the client went away or its deadline passed
                self.observe(method, "CANCELLED", started, target)
                raise
            cutoff.absorb()  # still running when the grace period ended
            code, message = "UNAVAILABLE", cutoff.message
        except Exception as err:  # a bug of ours: logged, answered INTERNAL, never hidden
            log.error("internal error in gRPC %s", method, exc_info=err)
            code, message = "INTERNAL", f"Internal error: {type(err).__name__}"
        self.observe(method, code, started, target)
        if code != "OK":
            await abort(context, code, message)
        return response

    async def infer(
        self,
        route: p.Route,
        context: Context,
        work: Callable[[], R],
        admission: Admission | None = None,
    ) -> R:
        """Check the route, then run `work` on an inference worker within the timeout.

        `admission`: the place taken before the message was read (else taken now).
        """
        self.manager.check(route)  # unknown model or not loaded: no worker needed
        timeout = self.timeout(context)
        try:
            return await self.state.pool.run(work, timeout, admission)
        except p.ApiError as err:
            if err.code == "DEADLINE_EXCEEDED" and timeout < (
                self.state.config.request_timeout or float("inf")
            ):
                raise p.ApiError(504, "Deadline Exceeded") from None
            raise

    def observe(self, method: str, code: str, started: float, route: p.Route | None) -> None:
        seconds = time.perf_counter() - started
        model = self.state.model_label(route)
        self.metrics.observe_grpc(method, code, seconds, model)
        if method in _INFERENCE_METHODS:  # TF Serving counts these three only
            self.metrics.request_done(model, method, monitoring.ENTRYPOINT_GRPC, code, seconds)

    def observe_inference(self, method: str, route: p.Route, seconds: float) -> None:
        """Seconds inside TensorFlow for one successful Predict, Classify or Regress."""
        model = self.state.model_label(route)
        self.metrics.inference.labels(model).observe(seconds)
        self.metrics.runtime_done(model, _INFERENCE_METHODS[method], seconds)


class PredictionService:
    """TF Serving's PredictionService (registered by :func:`add_prediction_service`)."""

    def __init__(self, handlers: _Handlers) -> None:
        self.h = handlers

    async def admitted(self, method: str, requests: Any, context: Context) -> Any:
        """Predict, Classify, Regress, MultiInference: the admission place, then the message.

        These are registered as stream-unary methods (the same single message
        on the wire), so that grpc has not read the message when this runs; a
        call refused here (RESOURCE_EXHAUSTED, or UNAVAILABLE while draining)
        never has its message read.
        """
        started = time.perf_counter()
        cutoff = self.h.state.cutoff
        try:
            if self.h.state.draining:
                raise p.ApiError(503, "Server is shutting down", code="UNAVAILABLE")
            admission = self.h.state.pool.admit()
        except p.ApiError as err:
            self.h.observe(method, err.code, started, None)
            await abort(context, err.code, err.message)
        try:
            try:
                with cutoff.track():  # a message still arriving when the grace period ends
                    request = await context.read()
            except asyncio.CancelledError:
                if not cutoff.fired:  # the client went away
                    raise
                cutoff.absorb()
                request = p.ApiError(503, cutoff.message, code="UNAVAILABLE")
            except p.ApiError as err:  # arrived after the cut-off
                request = err
            if request is aio.EOF:  # none sent, or none read: cancelled, or too large
                # (then grpc has already answered RESOURCE_EXHAUSTED itself)
                request = p.bad_request(f"{method}: no request message was received")
            if isinstance(request, p.ApiError):
                self.h.observe(method, request.code, started, None)
                await abort(context, request.code, request.message)
            call = {
                "Predict": self.Predict,
                "Classify": self.Classify,
                "Regress": self.Regress,
                "MultiInference": self.MultiInference,
            }
            return await call[method](request, context, admission)
        finally:
            admission.close()

    async def Predict(
        self, request: Any, context: Context, admission: Admission | None = None
    ) -> Any:
        async def answer(route: p.Route | None) -> Any:
            assert route is not None  # noqa: S101 - route_of returns one or raises
            return await self.h.infer(
                route, context, functools.partial(self._predict, route, request), admission
            )

        return await self.h.call("Predict", lambda: route_of("predict", request), context, answer)

    def _predict(self, route: p.Route, request: Any) -> Any:
        """On a worker: choose the version now (a swap may have happened while queued)."""
        with self.h.manager.lease(route) as version:
            servable = _servable(version)
            started = time.perf_counter()
            name, outputs = servable.predict_protos(
                request.model_spec.signature_name, request.inputs, list(request.output_filter)
            )
            self.h.observe_inference("Predict", route, time.perf_counter() - started)
            response = predict_pb2.PredictResponse()
            _model_spec(response.model_spec, route.model, version.number, name)
            for alias, tensor in outputs.items():
                response.outputs[alias].CopyFrom(tensor)
        return response

    async def GetModelMetadata(self, request: Any, context: Context) -> Any:
        def answer(route: p.Route | None) -> Any:
            assert route is not None  # noqa: S101
            fields = list(request.metadata_field)
            if not fields:
                raise p.bad_request(
                    "GetModelMetadataRequest must specify at least one metadata_field"
                )
            for field in fields:
                if field != "signature_def":
                    raise p.bad_request(f"Metadata field {field} is not supported")
            with self.h.manager.lease(route) as version:
                response = get_model_metadata_pb2.GetModelMetadataResponse()
                _model_spec(response.model_spec, route.model, version.number, "")
                servable = _servable(version)
                packed = response.metadata["signature_def"]
                if servable.signature_def_map:  # the SavedModel's own, as they are
                    packed.type_url = metadata.TYPE_URL
                    packed.value = servable.signature_def_map
                else:
                    packed.Pack(signature_def_map(servable.signatures))
            return response

        return await self.h.call(
            "GetModelMetadata", lambda: route_of("metadata", request), context, answer
        )

    async def Classify(
        self, request: Any, context: Context, admission: Admission | None = None
    ) -> Any:
        return await self._examples("Classify", "classify", request, context, admission)

    async def Regress(
        self, request: Any, context: Context, admission: Admission | None = None
    ) -> Any:
        return await self._examples("Regress", "regress", request, context, admission)

    async def _examples(
        self,
        method: str,
        kind: p.Kind,
        request: Any,
        context: Context,
        admission: Admission | None,
    ) -> Any:
        async def answer(route: p.Route | None) -> Any:
            assert route is not None  # noqa: S101
            work = functools.partial(self._run_examples, kind, route, request)
            return await self.h.infer(route, context, work, admission)

        return await self.h.call(method, lambda: route_of(kind, request), context, answer)

    def _run_examples(self, kind: p.Kind, route: p.Route, request: Any) -> Any:
        """On a worker: Classify or Regress on the request's tf.Examples."""
        from tf_entrypoint.serving.codec import examples  # noqa: PLC0415

        serialized = examples.serialized_examples(
            request.input, limit=self.h.state.limits.expansion
        )
        name = request.model_spec.signature_name or p.DEFAULT_SIGNATURE
        with self.h.manager.lease(route) as version:
            servable = _servable(version)
            started = time.perf_counter()
            if kind == "classify":
                classes = servable.classify(name, serialized)
                response = classification_pb2.ClassificationResponse()
                _classifications(response.result, classes)
            else:
                values = servable.regress(name, serialized)
                response = regression_pb2.RegressionResponse()
                for value in values:
                    response.result.regressions.add(value=value)
            method = "Classify" if kind == "classify" else "Regress"
            self.h.observe_inference(method, route, time.perf_counter() - started)
            _model_spec(response.model_spec, route.model, version.number, name)
        return response

    async def MultiInference(
        self, request: Any, context: Context, admission: Admission | None = None
    ) -> Any:
        """Classify and Regress tasks over one set of examples (TF Serving's
        multi_inference_helper.cc): the version is the first task's ModelSpec's."""

        async def answer(route: p.Route | None) -> Any:
            assert route is not None  # noqa: S101
            work = functools.partial(self._multi_inference, route, request)
            return await self.h.infer(route, context, work, admission)

        return await self.h.call(
            "MultiInference", lambda: multi_inference_route(request), context, answer
        )

    def _multi_inference(self, route: p.Route, request: Any) -> Any:
        """On a worker: every task on the request's examples, one result per task."""
        from tf_entrypoint.serving.codec import examples  # noqa: PLC0415

        serialized = examples.serialized_examples(
            request.input, limit=self.h.state.limits.expansion
        )
        tasks = examples.tasks_of(request)
        with self.h.manager.lease(route) as version:
            started = time.perf_counter()
            results = _servable(version).multi_inference(tasks, serialized)
            model = self.h.state.model_label(route)
            self.h.metrics.inference.labels(model).observe(time.perf_counter() - started)
            self.h.metrics.examples_counted(model, len(serialized))
            response = inference_pb2.MultiInferenceResponse()
            for task, result in zip(tasks, results, strict=True):
                entry = response.results.add()
                name = task.signature_name or p.DEFAULT_SIGNATURE
                _model_spec(entry.model_spec, task.model, version.number, name)
                if task.method_name == examples.CLASSIFY_METHOD:
                    _classifications(entry.classification_result, cast("Classes", result))
                else:
                    for value in cast("list[float]", result):
                        entry.regression_result.regressions.add(value=value)
        return response


class ModelService(model_service_pb2_grpc.ModelServiceServicer):  # type: ignore[misc]
    def __init__(self, handlers: _Handlers) -> None:
        self.h = handlers

    async def GetModelStatus(self, request: Any, context: Context) -> Any:
        def answer(route: p.Route | None) -> Any:
            assert route is not None  # noqa: S101
            response = get_model_status_pb2.GetModelStatusResponse()
            for status in self.h.manager.status(route):
                entry = response.model_version_status.add()
                entry.version = status.version
                entry.state = get_model_status_pb2.ModelVersionStatus.State.Value(status.state)
                entry.status.error_code = _code_number(status.error_code)
                entry.status.error_message = status.error_message
            return response

        return await self.h.call(
            "GetModelStatus", lambda: route_of("status", request), context, answer
        )

    async def HandleReloadConfigRequest(self, request: Any, context: Context) -> Any:
        async def answer(route: p.Route | None) -> Any:
            config = request.config
            if config.WhichOneof("config") != "model_config_list":
                raise p.bad_request(
                    "ServerModelConfig type not supported by HandleReloadConfigRequest. "
                    "Only ModelConfigList is currently supported"
                )
            wanted = config_from_message(config, origin="ReloadConfigRequest", base_dir=Path.cwd())
            served = self.h.state.config
            if served.models.path is not None and served.model_config_file_poll_wait > 0:
                log.warning(
                    "HandleReloadConfigRequest: %s is re-read every %g s "
                    "(--model_config_file_poll_wait_seconds) and re-applied at each read: this "
                    "configuration is replaced by the file's at its next read, as in TF Serving",
                    served.models.path,
                    served.model_config_file_poll_wait,
                )
            submission = self.h.manager.submit(wanted)
            # Accepted: from here on it is applied whatever becomes of this call.
            # The answer is given a little before the client's deadline, so
            # that it can say whether the configuration is applied.
            timeout = self.h.timeout(context)
            remaining = context.time_remaining()
            if remaining is not None:
                timeout = min(timeout or remaining, remaining - min(1.0, remaining / 10))
            try:
                errors = await asyncio.wait_for(
                    asyncio.wrap_future(submission.done), max(timeout, 0.001) if timeout else None
                )
            except TIMEOUT_ERRORS:
                late = submission.late(timeout)
                log.warning("HandleReloadConfigRequest: %s", late.message)
                raise late from None
            except asyncio.CancelledError:
                log.warning(
                    "HandleReloadConfigRequest: the call was cancelled; its configuration is %s",
                    "applied" if submission.applied.is_set() else "queued and will be applied",
                )
                raise
            except RuntimeError as err:  # the server stopped (or failed) before applying it
                raise p.ApiError(
                    503, f"The new configuration was not applied: {err}", code="UNAVAILABLE"
                ) from None
            if errors:  # a broken export: the server is fine, the model is not
                raise p.ApiError(
                    500,
                    "The new configuration is applied, but loading failed: " + "; ".join(errors),
                    code="FAILED_PRECONDITION",
                )
            response = model_management_pb2.ReloadConfigResponse()
            response.status.error_code = 0
            return response

        return await self.h.call("HandleReloadConfigRequest", lambda: None, context, answer)


def add_prediction_service(service: PredictionService, server: aio.Server) -> None:
    """Register TF Serving's PredictionService (what its generated stub's helper does),
    with Predict, Classify, Regress and MultiInference as stream-unary methods (see
    PredictionService.admitted).
    """

    def admitted(method: str, request: Any, response: Any) -> Any:
        # A coroutine function, not functools.partial: grpc awaits what
        # inspect.iscoroutinefunction recognises, and Python 3.10's does not
        # see through a partial of a bound method (grpc then ran it on a thread
        # and tried to serialise the coroutine it returned).
        async def handler(requests: Any, context: Context) -> Any:
            return await service.admitted(method, requests, context)

        return grpc.stream_unary_rpc_method_handler(
            handler,
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )

    def unary(handler: Any, request: Any, response: Any) -> Any:
        return grpc.unary_unary_rpc_method_handler(
            handler,
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )

    handlers = {
        "Predict": admitted("Predict", predict_pb2.PredictRequest, predict_pb2.PredictResponse),
        "Classify": admitted(
            "Classify",
            classification_pb2.ClassificationRequest,
            classification_pb2.ClassificationResponse,
        ),
        "Regress": admitted(
            "Regress", regression_pb2.RegressionRequest, regression_pb2.RegressionResponse
        ),
        "MultiInference": admitted(
            "MultiInference",
            inference_pb2.MultiInferenceRequest,
            inference_pb2.MultiInferenceResponse,
        ),
        "GetModelMetadata": unary(
            service.GetModelMetadata,
            get_model_metadata_pb2.GetModelMetadataRequest,
            get_model_metadata_pb2.GetModelMetadataResponse,
        ),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("tensorflow.serving.PredictionService", handlers),)
    )


def _servable(version: Version) -> Any:
    servable = version.servable
    assert servable is not None  # noqa: S101 - AVAILABLE versions have one
    return servable


#: Per example, its classes (label, score): a classification's result.
Classes = Sequence[Sequence[tuple[bytes, float]]]


def _classifications(result: Any, classes: Classes) -> None:
    """A ClassificationResult: per example its classes (label, score)."""
    for pairs in classes:
        entry = result.classifications.add()
        for label, score in pairs:
            entry.classes.add(label=label.decode("utf-8", "replace"), score=score)


def multi_inference_route(request: Any) -> p.Route:
    """What a MultiInferenceRequest addresses: its first task's ModelSpec (TF Serving's
    GetModelSpecFromRequest; none, or no name, is its "ModelSpec has no name specified.")."""
    if not request.tasks or not request.tasks[0].model_spec.name:
        raise p.bad_request("ModelSpec has no name specified.")
    return _route_of_spec("multi_inference", request.tasks[0].model_spec)


def _model_spec(spec: Any, name: str, version: int, signature_name: str) -> None:
    spec.name = name
    spec.version.value = version
    spec.signature_name = signature_name


class Health(health_pb2_grpc.HealthServicer):
    """grpc.health.v1.Health whose Watch streams end at the drain.

    grpcio-health-checking's servicer turns every service NOT_SERVING on
    graceful shutdown but keeps Watch streams open, so a server stop would
    wait its whole grace period for them; here each watcher gets the final
    NOT_SERVING and then its stream ends, and only real calls hold the drain.
    """

    def __init__(self) -> None:
        self._status: dict[str, int] = {}
        self._changed = asyncio.Condition()
        self._closed = False

    async def set(self, service: str, status: int) -> None:
        async with self._changed:
            if not self._closed and self._status.get(service) != status:
                self._status[service] = status
                self._changed.notify_all()

    async def close(self) -> None:
        """Every service NOT_SERVING, for good; Watch streams end after saying so."""
        async with self._changed:
            self._status = dict.fromkeys(self._status, _NOT_SERVING)
            self._closed = True
            self._changed.notify_all()

    async def Check(self, request: Any, context: Context) -> Any:
        status = self._status.get(request.service)
        if status is None:
            await abort(context, "NOT_FOUND", f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: Any, context: Context) -> None:
        last = None
        async with self._changed:
            while True:
                status = self._status.get(request.service, _SERVICE_UNKNOWN)
                if status != last:
                    await context.write(health_pb2.HealthCheckResponse(status=status))
                    last = status
                if self._closed:
                    return
                await self._changed.wait()


def server_options(config: ServeConfig) -> list[tuple[str, int | str]]:
    """grpc's options: the message limit (--max-body-bytes; a response has none, as in
    TF Serving), no SO_REUSEPORT (a second server on the port is an error, not a
    silent split of the connections), then --grpc_channel_arguments, which win."""
    ours: tuple[tuple[str, int | str], ...] = (
        ("grpc.max_receive_message_length", config.max_body_bytes),
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 0),
    )
    return channel_args.server_options(ours, config.grpc_channel_arguments)


class GrpcServer:
    """The gRPC server on its own thread and event loop.

    :meth:`start` returns once the port is bound (or raises OSError);
    :meth:`drain` (any thread) turns health NOT_SERVING, refuses new calls
    and gives calls in flight `grace` seconds; :meth:`join` waits for that.
    """

    def __init__(self, state: ServingState) -> None:
        self.state = state
        self.health: Health | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Event | None = None
        self._bound = threading.Event()
        self._failure: BaseException | None = None
        #: Every model name health has reported on.
        self._models: set[str] = set()

    def addresses(self) -> list[str]:
        config = self.state.config
        found = []
        if config.grpc_port:
            found.append(f"{config.host}:{config.grpc_port}")
        if config.grpc_socket_path:
            found.append(f"unix:{config.grpc_socket_path}")
        return found

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="grpc", daemon=True)
        self._thread.start()
        self._bound.wait()
        if self._failure is not None:
            raise self._failure

    def drain(self) -> None:
        """Start the drain (idempotent; a no-op once the server has stopped)."""
        loop, event = self._loop, self._drain
        if loop is None or event is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: already stopped
            loop.call_soon_threadsafe(event.set)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as err:
            self._failure = err
            if self._bound.is_set():  # after start-up: nobody is waiting to hear it
                log.error("the gRPC server stopped: %s", err, exc_info=err)
        finally:
            self._bound.set()
            loop.close()

    async def _serve(self) -> None:
        config = self.state.config
        self._drain = asyncio.Event()
        server = aio.server(options=server_options(config))
        handlers = _Handlers(self.state)
        profiling = self._profiler(handlers)
        server.add_generic_rpc_handlers((profiling,))
        add_prediction_service(PredictionService(handlers), server)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(handlers), server)
        self.health = Health()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for address in self.addresses():
            try:
                bound = server.add_insecure_port(address)
            except RuntimeError as err:
                raise OSError(f"cannot listen for gRPC on {address}: {err}") from None
            if not bound and not address.startswith("unix:"):
                raise OSError(f"cannot listen for gRPC on {address} (in use?)")
        await self._update_health()
        for name in TF_SERVING_SERVICES:
            await self.health.set(name, _SERVING)
        await server.start()
        self._bound.set()
        watcher = asyncio.create_task(self._watch_health())
        await self._drain.wait()
        watcher.cancel()
        await self.health.close()
        # Calls still running when the grace period ends are answered
        # UNAVAILABLE by the server's cut-off (drain.CutOff), before grpc
        # would cancel them (CANCELLED) at the end of this longer wait.
        await server.stop(config.grace_period + EXIT_MARGIN + 1)
        await profiling.close()

    def _profiler(self, handlers: _Handlers) -> profiler.ProfilerHandler:
        """tensorflow.ProfilerService on this server (TF Serving's --enable_profiler)."""

        def wrap(method: str, forward: Callable[[], Awaitable[bytes]], context: Any) -> Any:
            return handlers.call(method, lambda: None, context, lambda _route: forward())

        if not self.state.config.enable_profiler:
            return profiler.ProfilerHandler(None, profiler.OFF, wrap, off=True)
        try:
            address = profiler.start_tensorflow_profiler()
        except Exception as err:  # noqa: BLE001 - serving goes on without the profiler
            why = f"the profiler service could not start: {err}"
            log.warning("%s; tensorflow.ProfilerService calls are answered UNAVAILABLE", why)
            return profiler.ProfilerHandler(None, why, wrap, off=False)
        log.info(
            "profiler: tensorflow.ProfilerService calls on the gRPC port go to TensorFlow's "
            "profiler server in this process (port %s, every interface; "
            "--enable_profiler=false turns both off)",
            address.rpartition(":")[2],
        )
        return profiler.ProfilerHandler(address, "", wrap, off=False)

    async def _watch_health(self) -> None:
        while True:
            await self._update_health()
            await asyncio.sleep(HEALTH_EVERY)

    async def _update_health(self) -> None:
        assert self.health is not None  # noqa: S101 - made in _serve
        pending, serving = self.state.manager.readiness()
        ready = not pending and not self.state.draining
        await self.health.set("", _SERVING if ready else _NOT_SERVING)
        for name, versions in serving.items():
            await self.health.set(name, _SERVING if versions else _NOT_SERVING)
        for name in self._models - set(serving):  # removed from the configuration
            await self.health.set(name, _NOT_SERVING)
        self._models |= set(serving)
