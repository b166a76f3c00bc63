"""grpc/health.py: a Check answers readiness as of the moment it is asked."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from grpc_health.v1 import health_pb2

from tf_entrypoint.serving.grpc.health import NOT_SERVING, SERVING, Health


def test_a_check_reads_readiness_when_asked_and_not_after_the_drain() -> None:
    ready = False
    health: Health

    async def refresh() -> None:  # what the transport's poll does, every 0.2 s
        await health.set("", SERVING if ready else NOT_SERVING)

    async def body() -> list[int]:
        nonlocal ready, health
        health = Health(refresh=refresh)
        await refresh()  # the poll's last look: loading
        ask = health_pb2.HealthCheckRequest(service="")
        context = cast(Any, None)  # Check needs its context only to refuse an unknown name
        seen = [(await health.Check(ask, context)).status]
        ready = True  # the models are in; no poll has run since
        seen.append((await health.Check(ask, context)).status)
        await health.close()  # the drain
        seen.append((await health.Check(ask, context)).status)
        return seen

    assert asyncio.run(body()) == [NOT_SERVING, SERVING, NOT_SERVING]
