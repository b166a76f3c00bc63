"""TF Serving's ModelService: GetModelStatus, HandleReloadConfigRequest."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import grpc
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
)

from tf_entrypoint.serving.config.model_config import config_from_message
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.drain import TIMEOUT_ERRORS
from tf_entrypoint.serving.core.errors import Code, ServingError, invalid_argument
from tf_entrypoint.serving.grpc.calls import Calls, Context, route_of

log = logging.getLogger("tf_entrypoint.serving")


def _code_number(name: str) -> int:
    number: int = grpc.StatusCode[name].value[0]
    return number


class ModelService(model_service_pb2_grpc.ModelServiceServicer):  # type: ignore[misc]
    def __init__(self, handlers: Calls) -> None:
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
                raise invalid_argument(
                    "ServerModelConfig type not supported by HandleReloadConfigRequest. "
                    "Only ModelConfigList is currently supported"
                )
            wanted = config_from_message(config, origin="ReloadConfigRequest", base_dir=Path.cwd())
            served = self.h.config
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
                raise ServingError(
                    Code.UNAVAILABLE, f"The new configuration was not applied: {err}"
                ) from None
            if errors:  # a broken export: the server is fine, the model is not
                raise ServingError(
                    Code.FAILED_PRECONDITION,
                    "The new configuration is applied, but loading failed: " + "; ".join(errors),
                )
            response = model_management_pb2.ReloadConfigResponse()
            response.status.error_code = 0
            return response

        return await self.h.call("HandleReloadConfigRequest", lambda: None, context, answer)
