"""An in-process gRPC server of the Open Inference Protocol (v2) over a pure-Python
model, for the gRPC tests."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from grpc import aio

from tests.unit.serving.helpers import config, export
from tests.unit.serving.v2_models import Mixed
from tf_entrypoint.serving.codec import v2_proto as pb
from tf_entrypoint.serving.core.serving_core import ServingCore
from tf_entrypoint.serving.grpc.calls import Calls, CheckingServer
from tf_entrypoint.serving.grpc.inference_v2 import InferenceService, add_inference_service
from tf_entrypoint.serving.main import build_core


class Server:
    def __init__(self, core: ServingCore, channel: aio.Channel) -> None:
        self.core = core
        self.channel = channel

    async def call(self, method: str, request: Any) -> Any:
        response_class = {name: response for name, _, response in pb.METHODS}[method]
        stub = self.channel.unary_unary(
            f"/{pb.SERVICE}/{method}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_class.FromString,
        )
        return await stub(request, timeout=10)


async def serve(
    tmp_path: Path, *args: str, servable: Callable[[], Mixed] = Mixed
) -> AsyncIterator[Server]:
    export(tmp_path)
    conf = config(tmp_path, *args)
    core = build_core(conf, loader=lambda directory, version: servable())
    calls = Calls(core, conf)
    server = aio.server()
    services = CheckingServer(server, lambda method, code, started: None)
    add_inference_service(InferenceService(calls), services)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    core.start()
    deadline = time.monotonic() + 10
    while core.manager.readiness()[0] and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    try:
        async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Server(core, channel)
    finally:
        await server.stop(0)
        core.close()


def run(coroutine: Callable[[Path], Coroutine[Any, Any, None]]) -> Callable[[Path], None]:
    """A test body run on its own event loop (no asyncio plugin in this suite)."""

    def test(tmp_path: Path) -> None:
        asyncio.run(coroutine(tmp_path))

    test.__name__ = coroutine.__name__
    test.__doc__ = coroutine.__doc__
    return test


async def with_server(
    tmp_path: Path, body: Callable[[Server], Awaitable[None]], servable: Callable[[], Mixed] = Mixed
) -> None:
    async for server in serve(tmp_path, servable=servable):
        await body(server)


def x_input(request: Any, raw: bool) -> None:
    x = request.inputs.add(name="x", datatype="FP32", shape=[2, 2])
    if raw:
        request.raw_input_contents.append(struct.pack("<4f", 1, 2, 3, 4.5))
    else:
        x.contents.fp32_contents.extend([1, 2, 3, 4.5])
