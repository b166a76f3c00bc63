"""TF Serving's PredictionService: Predict, Classify, Regress, MultiInference,
GetModelMetadata.

The services are TF Serving's own, from `tensorflow-serving-api`'s stubs, so
a client written for TF Serving (Python, Java, Go, KServe's `grpc-v1`) works
unchanged. Predict, Classify, Regress and MultiInference take their admission
place (--max-queue) before their message is read, as REST requests do before
their body (calls.py): at most --max-queue inference messages are held at
once, and a refused call's message is never read (docs/robustness.md,
"Memory per request").

MultiInference runs classify and regress tasks over one set of examples, as
TF Serving's multi_inference.cc (docs/tf-serving.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import grpc
from grpc import aio
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    inference_pb2,
    predict_pb2,
    regression_pb2,
)

from tf_entrypoint.serving.codec import example_proto, metadata, tensor_proto
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.admission import Admission
from tf_entrypoint.serving.core.calls import Ask, Predicted
from tf_entrypoint.serving.core.errors import invalid_argument
from tf_entrypoint.serving.core.models import Leased
from tf_entrypoint.serving.core.servable import Servable
from tf_entrypoint.serving.grpc.calls import Calls, Context, route_of, route_of_spec


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


class PredictionService:
    """TF Serving's PredictionService (registered by :func:`add_prediction_service`)."""

    def __init__(self, handlers: Calls) -> None:
        self.h = handlers

    async def admitted(self, method: str, requests: Any, context: Context) -> Any:
        """Predict, Classify, Regress, MultiInference: admitted, then read (Calls.admitted)."""
        call = {
            "Predict": self.Predict,
            "Classify": self.Classify,
            "Regress": self.Regress,
            "MultiInference": self.MultiInference,
        }
        return await self.h.admitted(
            method, context, lambda request, admission: call[method](request, context, admission)
        )

    async def Predict(
        self, request: Any, context: Context, admission: Admission | None = None
    ) -> Any:
        async def answer(route: p.Route | None) -> Any:
            assert route is not None  # noqa: S101 - route_of returns one or raises
            size = request.ByteSize()
            if self.h.queues(size):  # decoded here, queued for its batch or the engine
                predicted = await self.h.predict_queued(
                    route, context, self._decoder(request), admission
                )
                return _predict_response(route, predicted)
            return await self.h.infer(
                route, context, functools.partial(self._predict, route, request), admission, size
            )

        return await self.h.call("Predict", lambda: route_of("predict", request), context, answer)

    def _decoder(self, request: Any) -> Callable[[object], Ask[None]]:
        expansion = self.h.state.limits.expansion

        def decode(_: object) -> Ask[None]:
            return Ask(
                request.model_spec.signature_name,
                tensor_proto.ProtoInputs(request.inputs, expansion),
                None,
                list(request.output_filter),
            )

        return decode

    def _predict(self, route: p.Route, request: Any) -> Any:
        """On a worker: one core call (the version is chosen then: a swap may have
        happened while the call was queued)."""
        return _predict_response(
            route, self.h.core.predict(route, "Predict", self._decoder(request))
        )

    async def GetModelMetadata(self, request: Any, context: Context) -> Any:
        def answer(route: p.Route | None) -> Any:
            assert route is not None  # noqa: S101
            fields = list(request.metadata_field)
            if not fields:
                raise invalid_argument(
                    "GetModelMetadataRequest must specify at least one metadata_field"
                )
            for field in fields:
                if field != "signature_def":
                    raise invalid_argument(f"Metadata field {field} is not supported")
            return self.h.core.signatures(route, functools.partial(_metadata_response, route.model))

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
            return await self.h.infer(route, context, work, admission, request.ByteSize())

        return await self.h.call(method, lambda: route_of(kind, request), context, answer)

    def _run_examples(self, kind: p.Kind, route: p.Route, request: Any) -> Any:
        """On a worker: Classify or Regress on the request's tf.Examples."""
        serialized = example_proto.serialized_examples(
            request.input, limit=self.h.state.limits.expansion
        )
        name = request.model_spec.signature_name or p.DEFAULT_SIGNATURE
        if kind == "classify":
            number, classes = self.h.core.classify(route, name, serialized)
            response = classification_pb2.ClassificationResponse()
            _classifications(response.result, classes)
        else:
            number, values = self.h.core.regress(route, name, serialized)
            response = regression_pb2.RegressionResponse()
            for value in values:
                response.result.regressions.add(value=value)
        _model_spec(response.model_spec, route.model, number, name)
        return response

    async def MultiInference(
        self, request: Any, context: Context, admission: Admission | None = None
    ) -> Any:
        """Classify and Regress tasks over one set of examples (TF Serving's
        multi_inference_helper.cc): the version is the first task's ModelSpec's."""

        async def answer(route: p.Route | None) -> Any:
            assert route is not None  # noqa: S101
            work = functools.partial(self._multi_inference, route, request)
            return await self.h.infer(route, context, work, admission, request.ByteSize())

        return await self.h.call(
            "MultiInference", lambda: multi_inference_route(request), context, answer
        )

    def _multi_inference(self, route: p.Route, request: Any) -> Any:
        """On a worker: every task on the request's examples, one result per task."""
        serialized = example_proto.serialized_examples(
            request.input, limit=self.h.state.limits.expansion
        )
        tasks = example_proto.tasks_of(request)
        number, results = self.h.core.multi_inference(route, tasks, serialized)
        response = inference_pb2.MultiInferenceResponse()
        for task, result in zip(tasks, results, strict=True):
            entry = response.results.add()
            name = task.signature_name or p.DEFAULT_SIGNATURE
            _model_spec(entry.model_spec, task.model, number, name)
            if task.method_name == p.CLASSIFY_METHOD:
                _classifications(entry.classification_result, cast("Classes", result))
            else:
                for value in cast("list[float]", result):
                    entry.regression_result.regressions.add(value=value)
        return response


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


def _predict_response(route: p.Route, predicted: Predicted[None]) -> Any:
    protos = {
        alias: tensor_proto.as_proto_field(alias, t) for alias, t in predicted.outputs.items()
    }
    response = predict_pb2.PredictResponse()
    _model_spec(response.model_spec, route.model, predicted.version, predicted.signature_name)
    for alias, proto in protos.items():
        response.outputs[alias].CopyFrom(proto)
    return response


def _metadata_response(model: str, version: Leased, servable: Servable) -> Any:
    """GetModelMetadata's answer for a leased version: its SignatureDefMap, packed."""
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    _model_spec(response.model_spec, model, version.number, "")
    packed = response.metadata["signature_def"]
    if servable.signature_def_map:  # the SavedModel's own, as they are
        packed.type_url = metadata.TYPE_URL
        packed.value = servable.signature_def_map
    else:
        packed.Pack(signature_def_map(servable.signatures))
    return response


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
        raise invalid_argument("ModelSpec has no name specified.")
    return route_of_spec("multi_inference", request.tasks[0].model_spec)


def _model_spec(spec: Any, name: str, version: int, signature_name: str) -> None:
    spec.name = name
    spec.version.value = version
    spec.signature_name = signature_name
