"""The Open Inference Protocol's gRPC service (`inference.GRPCInferenceService`), beside
TF Serving's services on the same server.

ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata and
ModelInfer, in the frame every call of this transport has (calls.py): the
drain, the cut-off, the timeout, code mapping, metrics (protocol "v2").
ModelInfer is admitted (--max-queue) before its message is read, as Predict
is, and runs through the core's one predict (core/inference.py), so it
batches with TF Serving's Predicts of the same signature when batching is on.
Inputs come as typed contents or as `raw_input_contents`; outputs always go
back as `raw_output_contents`, as Triton answers (docs/v2.md). The messages
are codec/v2_proto.py's, the tensors codec/v2_tensor.py's.
"""

from __future__ import annotations

from typing import Any

import grpc

from tf_entrypoint import __version__
from tf_entrypoint.serving.codec import v2_proto as pb
from tf_entrypoint.serving.codec import v2_tensor
from tf_entrypoint.serving.core import inference
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.admission import Admission
from tf_entrypoint.serving.core.calls import Ask
from tf_entrypoint.serving.core.errors import Code, ServingError, invalid_argument
from tf_entrypoint.serving.core.inference import Decoded
from tf_entrypoint.serving.core.servable import Servable
from tf_entrypoint.serving.grpc.calls import Calls, Context

#: The platform a model's metadata names (KServe's name for a TensorFlow SavedModel).
PLATFORM = "tensorflow_savedmodel"


def route_of(kind: p.Kind, name: str, version: str) -> p.Route:
    """What a request's model_name and model_version ("" = the newest) address."""
    if not name:
        raise invalid_argument("model_name is empty: name the model to use")
    return p.Route(kind, name, p.version_number(version) if version else None)


def _parameters(request: Any) -> dict[str, Any]:
    return {key: pb.parameter_value(value) for key, value in request.parameters.items()}


def _inputs(request: Any, signature: p.Signature, limit: int) -> dict[str, p.Tensor]:
    """The request's inputs as tensors: all in typed contents, or all in raw_input_contents."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise invalid_argument(
            f"raw_input_contents has {len(raw)} entries for {len(request.inputs)} inputs: "
            "give every input's data there, in the inputs' order, or none"
        )
    tensors: dict[str, p.Tensor] = {}
    for index, tensor in enumerate(request.inputs):
        name, datatype, shape = tensor.name, tensor.datatype, tuple(tensor.shape)
        if name in tensors:
            raise invalid_argument(f"input {p.quote(name)} is given twice")
        v2_tensor.check_input(name, datatype, shape, signature.inputs.get(name))
        if raw:
            if tensor.HasField("contents"):
                raise invalid_argument(
                    f"input {p.quote(name)} has contents while raw_input_contents is used: "
                    "give every input's data one way"
                )
            decoded = v2_tensor.from_raw(name, datatype, shape, raw[index], limit)
        else:
            field = v2_tensor.datatype(datatype, name).contents
            values = getattr(tensor.contents, field) if field else ()
            decoded = v2_tensor.from_contents(name, datatype, shape, values, limit)
        tensors[name] = decoded
    return tensors


class InferenceService:
    """`inference.GRPCInferenceService` (registered by :func:`add_inference_service`)."""

    def __init__(self, handlers: Calls) -> None:
        self.h = handlers

    async def ServerLive(self, request: Any, context: Context) -> Any:
        return await self.h.call(
            "ServerLive", lambda: None, context, lambda _: pb.ServerLiveResponse(live=True)
        )

    async def ServerReady(self, request: Any, context: Context) -> Any:
        def answer(_: object) -> Any:
            state = self.h.state
            pending, _serving = state.manager.readiness()
            return pb.ServerReadyResponse(ready=not pending and not state.draining)

        return await self.h.call("ServerReady", lambda: None, context, answer)

    async def ModelReady(self, request: Any, context: Context) -> Any:
        def answer(route: p.Route | None) -> Any:
            assert route is not None  # noqa: S101 - route_of returns one or raises
            try:
                self.h.manager.check(route)
            except ServingError as err:
                if err.code == Code.NOT_FOUND:
                    raise
                return pb.ModelReadyResponse(ready=False)
            return pb.ModelReadyResponse(ready=True)

        return await self.h.call(
            "ModelReady",
            lambda: route_of("status", request.name, request.version),
            context,
            answer,
        )

    async def ServerMetadata(self, request: Any, context: Context) -> Any:
        def answer(_: object) -> Any:
            return pb.ServerMetadataResponse(
                name="tf-entrypoint", version=__version__, extensions=["binary_tensor_data"]
            )

        return await self.h.call("ServerMetadata", lambda: None, context, answer)

    async def ModelMetadata(self, request: Any, context: Context) -> Any:
        def answer(route: p.Route | None) -> Any:
            assert route is not None  # noqa: S101
            signature = self.h.core.signatures(
                route,
                lambda _, servable: servable.signatures[
                    inference.unnamed_signature(None, servable)
                ],
            )
            # the versions that may be asked for
            versions = self.h.manager.readiness()[1].get(route.model, [])
            response = pb.ModelMetadataResponse(
                name=route.model, versions=[str(v) for v in versions], platform=PLATFORM
            )
            for specs, target in ((signature.inputs, response.inputs),
                                  (signature.outputs, response.outputs)):  # fmt: skip
                for key, datatype, shape in v2_tensor.tensor_metadata(specs):
                    target.add(name=key, datatype=datatype, shape=shape)
            return response

        return await self.h.call(
            "ModelMetadata",
            lambda: route_of("metadata", request.name, request.version),
            context,
            answer,
        )

    async def admitted(self, requests: Any, context: Context) -> Any:
        """ModelInfer: admitted, then read (Calls.admitted), as TF Serving's Predict."""
        return await self.h.admitted(
            "ModelInfer",
            context,
            lambda request, admission: self.ModelInfer(request, context, admission),
        )

    async def ModelInfer(
        self, request: Any, context: Context, admission: Admission | None = None
    ) -> Any:
        async def answer(route: p.Route | None) -> Any:
            assert route is not None  # noqa: S101
            return await self.h.infer(
                route,
                context,
                lambda: self._infer(route, request),
                admission,
                request.ByteSize(),
            )

        return await self.h.call(
            "ModelInfer",
            lambda: route_of("predict", request.model_name, request.model_version),
            context,
            answer,
        )

    def _infer(self, route: p.Route, request: Any) -> Any:
        """On a worker (or inline): one core call; the version is chosen then, as for Predict."""
        expansion = self.h.state.limits.expansion
        wanted = [output.name for output in request.outputs]

        def decode(servable: Servable) -> Ask[None]:
            signatures = servable.signatures
            name = inference.signature_of(_parameters(request), servable)
            tensors = _inputs(request, signatures[name], expansion)
            v2_tensor.check_outputs(signatures[name].outputs, wanted)
            return Ask(name, Decoded(tensors), None, wanted)

        predicted = self.h.core.predict(route, "ModelInfer", decode)
        outputs = predicted.outputs
        response = pb.ModelInferResponse(
            model_name=route.model, model_version=str(predicted.version), id=request.id
        )
        for alias in wanted or sorted(outputs):
            tensor = outputs[alias]
            response.outputs.add(
                name=alias, datatype=v2_tensor.v2_datatype(tensor.dtype), shape=list(tensor.shape)
            )
            try:
                response.raw_output_contents.append(v2_tensor.to_raw(tensor))
            except ServingError as err:
                raise invalid_argument(f"output '{alias}': {err.message}") from None
        return response


def add_inference_service(service: InferenceService, server: Any) -> None:
    """Register the service; ModelInfer is stream-unary on our side (admitted before its
    message is read), which is the same single message on the wire."""

    def unary(handler: Any, request: Any, response: Any) -> Any:
        return grpc.unary_unary_rpc_method_handler(
            handler,
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )

    handlers = {
        "ServerLive": unary(service.ServerLive, pb.ServerLiveRequest, pb.ServerLiveResponse),
        "ServerReady": unary(service.ServerReady, pb.ServerReadyRequest, pb.ServerReadyResponse),
        "ModelReady": unary(service.ModelReady, pb.ModelReadyRequest, pb.ModelReadyResponse),
        "ServerMetadata": unary(
            service.ServerMetadata, pb.ServerMetadataRequest, pb.ServerMetadataResponse
        ),
        "ModelMetadata": unary(
            service.ModelMetadata, pb.ModelMetadataRequest, pb.ModelMetadataResponse
        ),
        "ModelInfer": grpc.stream_unary_rpc_method_handler(
            service.admitted,
            request_deserializer=pb.ModelInferRequest.FromString,
            response_serializer=pb.ModelInferResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(pb.SERVICE, handlers),))
