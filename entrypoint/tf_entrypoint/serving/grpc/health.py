"""`grpc.health.v1.Health` (Kubernetes' `grpc:` probes) and readiness polling.

Service "" is SERVING once every model of the start-up configuration serves
a version and NOT_SERVING while loading or draining; a service named after a
model is SERVING while that model has an available version; TF Serving's own
names "PredictionService" and "ModelService" are SERVING until the drain.

A Check, and the first answer of a Watch, read readiness when asked, as GET
/readyz does, so the two never disagree (a gRPC probe right after /readyz
said 200 once saw the NOT_SERVING of the last poll); Watch streams are then
told of changes as the poll finds them, every HEALTH_EVERY seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from grpc_health.v1 import health_pb2, health_pb2_grpc

from tf_entrypoint.serving.grpc.calls import Context, abort

#: Health service names TF Serving itself sets (model_servers/server.cc).
TF_SERVING_SERVICES = ("PredictionService", "ModelService")
#: How often model readiness is copied into the health service.
HEALTH_EVERY = 0.2
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class Health(health_pb2_grpc.HealthServicer):
    """grpc.health.v1.Health whose Watch streams end at the drain.

    grpcio-health-checking's servicer turns every service NOT_SERVING on
    graceful shutdown but keeps Watch streams open, so a server stop would
    wait its whole grace period for them; here each watcher gets the final
    NOT_SERVING and then its stream ends, and only real calls hold the drain.
    """

    def __init__(self, refresh: Callable[[], Awaitable[None]] | None = None) -> None:
        #: Sets every service's status from readiness as of now (before a Check).
        self._refresh = refresh
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
            self._status = dict.fromkeys(self._status, NOT_SERVING)
            self._closed = True
            self._changed.notify_all()

    async def Check(self, request: Any, context: Context) -> Any:
        if self._refresh is not None and not self._closed:
            await self._refresh()
        status = self._status.get(request.service)
        if status is None:
            await abort(context, "NOT_FOUND", f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: Any, context: Context) -> None:
        if self._refresh is not None and not self._closed:
            await self._refresh()  # its first answer is as of now, as a Check's
        last = None
        async with self._changed:
            while True:
                status = self._status.get(request.service, SERVICE_UNKNOWN)
                if status != last:
                    await context.write(health_pb2.HealthCheckResponse(status=status))
                    last = status
                if self._closed:
                    return
                await self._changed.wait()
