"""harness/load.py: the one closed loop, against a local asyncio HTTP server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from harness.load import Caller, Failed, HttpCaller, Tally, closed_loop, http_request


async def _server(statuses: list[int]) -> tuple[asyncio.Server, int, list[int]]:
    """Answers each request with the next status of `statuses` (then 200); counts the
    connections it got."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                status = statuses.pop(0) if statuses else 200
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 2\r\n\r\nok".encode())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], connections


def test_callers_keep_one_connection_each_and_count_failures() -> None:
    async def go() -> tuple[Tally, list[int]]:
        server, port, connections = await _server([503, 200, 404])
        raw = http_request("POST", "127.0.0.1", "/v1/models/m:predict", b'{"x": 1}')
        tally = Tally()
        async with server:
            await closed_loop(
                lambda: HttpCaller("127.0.0.1", port, raw), 3, tally,
                deadline=time.perf_counter() + 0.3,
            )  # fmt: skip
        return tally, connections

    tally, connections = asyncio.run(go())
    assert len(connections) == 3  # keep-alive: one connection per caller
    assert tally.errors == {"HTTP 503": 1, "HTTP 404": 1}
    summary = tally.summary(0.3)
    assert summary["ok"] == summary["requests"] - 2 > 0
    assert summary["errors"] == 2
    assert summary["p50_ms"] <= summary["p99_ms"] <= summary["max_ms"]
    assert tally.first == [({"content-length": "2"}, b"ok")]


class _Flaky:
    """Fails its first connect, then drops its connection after two answers."""

    connects = 0

    def __init__(self) -> None:
        self.sent = 0

    async def connect(self) -> None:
        _Flaky.connects += 1
        if _Flaky.connects == 1:
            raise ConnectionRefusedError

    async def send(self) -> Any:
        await asyncio.sleep(0.001)
        self.sent += 1
        if self.sent == 3:
            raise ConnectionResetError
        if self.sent == 4:
            raise Failed("UNAVAILABLE")
        return self.sent

    async def close(self) -> None:
        pass


def test_a_dropped_connection_reconnects_and_the_loop_stops_on_the_event() -> None:
    async def go() -> Tally:
        tally = Tally()
        stop = asyncio.Event()

        def make() -> Caller:
            return _Flaky()

        loop = asyncio.create_task(closed_loop(make, 1, tally, stop=stop, retry_pause=0.001))
        await asyncio.sleep(0.1)
        stop.set()
        await loop
        return tally

    tally = asyncio.run(go())
    assert tally.errors["connect: ConnectionRefusedError"] == 1
    assert tally.errors["ConnectionResetError"] == 1
    assert tally.errors["UNAVAILABLE"] >= 1
    assert tally.first == [1]
    start = tally.records[0].start
    assert tally.between(start, start).records == []
    assert len(tally.between(start, float("inf")).records) == len(tally.records)
