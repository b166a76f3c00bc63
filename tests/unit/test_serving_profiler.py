"""tensorflow.ProfilerService on the gRPC port: forwarded as bytes, or refused clearly.

TensorFlow's profiler server is not in the host's venv; an upstream grpc
server of the test's own stands in for it (the image's real one is
tests/container/test_tfserving_flows.py's profiler test). `wrap` is what the
gRPC servicer's shared path does with a ServingError: abort with its code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from grpc import aio

from tf_entrypoint.serving.core.errors import ServingError
from tf_entrypoint.serving.grpc import profiler

PROFILE = "/tensorflow.ProfilerService/Profile"
#: An answer over grpc's default 4 MiB receive limit (Monitor's, in Upstream).
LARGE = 5 * 1024 * 1024


class Upstream(grpc.GenericRpcHandler):
    """Profile answers the request's bytes reversed; Terminate fails as TensorFlow's would."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes, float | None]] = []

    def service(self, handler_call_details: Any) -> Any:
        method = handler_call_details.method

        async def answer(request: bytes, context: Any) -> bytes:
            self.seen.append((method, request, context.time_remaining()))
            if method.endswith("/Terminate"):
                await context.abort(grpc.StatusCode.NOT_FOUND, "no session s1")
            if method.endswith("/Monitor"):
                return b"m" * LARGE
            return request[::-1]

        return grpc.unary_unary_rpc_method_handler(answer)


async def wrap(method: str, forward: Callable[[], Awaitable[bytes]], context: Any) -> bytes:
    try:
        return await forward()
    except ServingError as err:
        await context.abort(grpc.StatusCode[err.code.name], f"{method}: {err.message}")
        raise


async def call(
    handler: profiler.ProfilerHandler, method: str, body: bytes, timeout: float = 10
) -> tuple[str, Any]:
    server = aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        # A client that takes answers of any size, as TensorFlow's profiler client does.
        unlimited = [("grpc.max_receive_message_length", -1)]
        async with aio.insecure_channel(f"127.0.0.1:{port}", options=unlimited) as channel:
            try:
                multicallable: Any = channel.unary_unary(method)
                answer = await multicallable(body, timeout=timeout)
            except aio.AioRpcError as err:
                return err.code().name, err.details()
            return "OK", answer
    finally:
        await handler.close()
        await server.stop(None)


def run_with_upstream(method: str, body: bytes) -> tuple[tuple[str, Any], Upstream]:
    async def go() -> tuple[str, Any]:
        upstream_server = aio.server()
        upstream_server.add_generic_rpc_handlers((upstream,))
        port = upstream_server.add_insecure_port("127.0.0.1:0")
        await upstream_server.start()
        try:
            handler = profiler.ProfilerHandler(f"127.0.0.1:{port}", "", wrap, off=False)
            return await call(handler, method, body)
        finally:
            await upstream_server.stop(None)

    upstream = Upstream()
    return asyncio.run(go()), upstream


def test_calls_reach_tensorflows_profiler_as_bytes_with_their_deadline() -> None:
    body = bytes(range(256)) * 3  # not a valid message: bytes are never parsed
    (code, answer), upstream = run_with_upstream(PROFILE, body)
    assert (code, answer) == ("OK", body[::-1])
    ((method, seen, remaining),) = upstream.seen
    assert (method, seen) == (PROFILE, body)
    assert remaining is not None
    assert 0 < remaining <= 10


def test_an_answer_over_grpcs_default_limit_comes_back_whole() -> None:
    """TensorFlow's profiler clients take answers of any size (a ProfileResponse can
    carry the trace); the forwarding channel must not cut them at grpc's 4 MiB."""
    (code, answer), _ = run_with_upstream("/tensorflow.ProfilerService/Monitor", b"")
    assert code == "OK", answer
    assert answer == b"m" * LARGE


def test_its_errors_come_back_with_their_code() -> None:
    (code, details), _ = run_with_upstream("/tensorflow.ProfilerService/Terminate", b"")
    assert (code, details) == ("NOT_FOUND", "Terminate: no session s1")


def test_off_is_said_not_method_not_found() -> None:
    handler = profiler.ProfilerHandler(None, profiler.OFF, wrap, off=True)
    code, details = asyncio.run(call(handler, PROFILE, b""))
    assert code == "UNIMPLEMENTED"
    assert details == f"Profile: {profiler.OFF}"
    assert "--enable_profiler=false" in details


def test_a_profiler_that_failed_to_start_is_unavailable_with_the_reason() -> None:
    why = "the profiler service could not start: no answer"
    handler = profiler.ProfilerHandler(None, why, wrap, off=False)
    assert asyncio.run(call(handler, PROFILE, b"")) == ("UNAVAILABLE", f"Profile: {why}")


@pytest.mark.parametrize(
    ("method", "label"),
    [(PROFILE, "Profile"), ("/tensorflow.ProfilerService/Invented", "ProfilerService")],
)
def test_metric_labels_are_bounded(method: str, label: str) -> None:
    labels: list[str] = []

    async def record(name: str, forward: Callable[[], Awaitable[bytes]], context: Any) -> bytes:
        labels.append(name)
        return b""

    handler = profiler.ProfilerHandler(None, "", record, off=True)
    assert asyncio.run(call(handler, method, b""))[0] == "OK"
    assert labels == [label]


def test_other_services_are_left_to_their_handlers() -> None:
    handler = profiler.ProfilerHandler(None, "", wrap, off=True)
    details = SimpleDetails("/tensorflow.serving.PredictionService/Predict")
    assert handler.service(details) is None


class SimpleDetails:
    def __init__(self, method: str) -> None:
        self.method = method
