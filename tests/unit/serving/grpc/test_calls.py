"""gRPC calls whose message never arrives: they end at their deadline and give back their place.

Predict, Classify, Regress, MultiInference and ModelInfer take their
admission place (--max-queue) before their message is read (calls.py). A
client that opens such calls and sends no message used to hold every place
until it went away, and every other client got RESOURCE_EXHAUSTED. The
message is now awaited within the call's deadline (--request-timeout, or the
client's when shorter). ModelInfer stands for the five here (the host has no
tensorflow_serving.apis; the same frame, Calls.admitted, runs them all, and
tests/container/test_grpc.py stalls Predict in the image).

A call still awaiting its message also gives its place to a newcomer when
every place is taken (after admission.EVICTABLE_AFTER), so that such a client
cannot keep others out even until the deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc import aio

from tests.unit.serving.grpc.v2_server import Server, run, serve, x_input
from tf_entrypoint.serving.codec import v2_proto as pb
from tf_entrypoint.serving.core import admission
from tf_entrypoint.serving.grpc.calls import LateMessages

INFER = f"/{pb.SERVICE}/ModelInfer"


async def _never() -> AsyncIterator[Any]:
    """A request stream that sends no message and stays open."""
    await asyncio.Event().wait()
    yield pb.ModelInferRequest()  # pragma: no cover - never reached


def _stalled(server: Server, timeout: float | None = None) -> Any:
    stub = server.channel.stream_unary(
        INFER,
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelInferResponse.FromString,
    )
    return stub(_never(), timeout=timeout)


async def _outcome(call: Any) -> tuple[str, str]:
    try:
        await call
    except aio.AioRpcError as err:
        return err.code().name, err.details() or ""
    return "OK", ""


async def _infer_until_admitted(server: Server, within: float) -> tuple[str, float]:
    """ModelInfer retried while the server is at capacity: its code and when it came."""
    request = pb.ModelInferRequest(model_name="model")
    x_input(request, raw=True)
    started = time.monotonic()
    while True:
        try:
            await server.call("ModelInfer", request)
            return "OK", time.monotonic() - started
        except aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                return err.code().name, time.monotonic() - started
        if time.monotonic() - started > within:
            return "RESOURCE_EXHAUSTED", time.monotonic() - started
        await asyncio.sleep(0.05)


def _count(server: Server, code: str) -> str | None:
    prefix = (
        f'serving_grpc_requests_total{{code="{code}",method="ModelInfer",model="",protocol="v2"}} '
    )
    for line in server.core.metrics.exposition().decode().splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :]
    return None


async def _wait_admitted(server: Server, count: int) -> None:
    deadline = time.monotonic() + 10
    while server.core.pool.admitted != count and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert server.core.pool.admitted == count


def test_stalled_streams_end_at_the_request_timeout_and_free_their_places(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The deadline alone: no newcomer takes a stalled call's place (the next test's).
    monkeypatch.setattr(admission, "EVICTABLE_AFTER", float("inf"))
    with caplog.at_level(logging.WARNING, "tf_entrypoint.serving"):
        asyncio.run(_stalled_streams(tmp_path))
    lines = [r.getMessage() for r in caplog.records if "did not arrive" in r.getMessage()]
    assert len(lines) == 1, lines  # the second is counted, not logged (a minute apart)
    assert "ModelInfer" in lines[0]


async def _stalled_streams(tmp_path: Path) -> None:
    """More stalled calls than --max-queue: the others get in once the deadline passes.

    The bounds are generous (the timeout plus 8 s) and say only that the
    places come back; before the fix they never did while the client stayed.
    """
    async for server in serve(tmp_path, "--max-queue", "2", "--request-timeout", "1"):
        stalled = [_stalled(server) for _ in range(4)]
        await _wait_admitted(server, 2)
        code, seconds = await _infer_until_admitted(server, within=9)
        assert code == "OK", f"still at capacity after {seconds:.1f} s"
        outcomes = await asyncio.wait_for(asyncio.gather(*(_outcome(call) for call in stalled)), 10)
        codes = sorted(code for code, _ in outcomes)
        assert codes == ["DEADLINE_EXCEEDED"] * 2 + ["RESOURCE_EXHAUSTED"] * 2
        late = [details for code, details in outcomes if code == "DEADLINE_EXCEEDED"]
        assert all("--request-timeout" in details for details in late), late
        assert server.core.pool.admitted == 0
        assert _count(server, "DEADLINE_EXCEEDED") == "2.0"


def test_a_newcomer_takes_the_place_of_a_stalled_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stalled calls hold every place and the deadline is a minute away: another
    client's call still gets in, the stalled call that waited longest ends
    RESOURCE_EXHAUSTED saying why, and the others keep waiting."""
    monkeypatch.setattr(admission, "EVICTABLE_AFTER", 0.0)

    async def body() -> None:
        async for server in serve(tmp_path, "--max-queue", "2", "--request-timeout", "60"):
            first = _stalled(server)
            await _wait_admitted(server, 1)
            second = _stalled(server)
            await _wait_admitted(server, 2)
            code, seconds = await _infer_until_admitted(server, within=9)
            assert code == "OK", f"still at capacity after {seconds:.1f} s"
            code, details = await asyncio.wait_for(_outcome(first), 10)
            assert code == "RESOURCE_EXHAUSTED"
            assert "had not arrived" in details
            assert not second.done()
            assert server.core.pool.admitted == 1  # the second's, the newcomer's given back
            second.cancel()
            await _wait_admitted(server, 0)

    asyncio.run(body())


@run
async def test_a_stalled_stream_ends_at_the_client_s_shorter_deadline(tmp_path: Path) -> None:
    async for server in serve(tmp_path, "--max-queue", "1", "--request-timeout", "60"):
        call = _stalled(server, timeout=0.5)
        code, _ = await asyncio.wait_for(_outcome(call), 10)
        assert code == "DEADLINE_EXCEEDED"
        await _wait_admitted(server, 0)
        code, _ = await _infer_until_admitted(server, within=5)
        assert code == "OK"
        # counted once, whichever of the client's deadline and the server's timer ended it
        assert _count(server, "DEADLINE_EXCEEDED") == "1.0"


def test_late_messages_log_one_line_a_minute_counting_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    late = LateMessages(clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "tf_entrypoint.serving"):
        for _ in range(1000):
            late.note("Predict", 5, client=False)
        now[0] = 61.0
        late.note("Predict", 5, client=False)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "1 call(s)" in lines[0]
    assert "--request-timeout (5 s)" in lines[0]
    assert "1000 call(s)" in lines[1]
