"""The one load loop: C callers in a closed loop, each sending its next request as soon as
the answer to the last is in, with pluggable request senders.

    tally = Tally()
    await closed_loop(lambda: HttpCaller(host, port, raw), callers=8, tally=tally,
                      deadline=time.perf_counter() + 5)
    tally.summary(elapsed=5)          # requests, ok, errors, rps, p50_ms, p99_ms, ...

A Caller opens its connection (`connect`), sends one request and returns the
answer (`send`), and closes (`close`). `send` raises `Failed(kind)` for an
answer that is not a success (an HTTP status, a gRPC code): the failure is
counted and the caller keeps its connection. Any other OSError, ValueError or
asyncio.IncompleteReadError drops the connection: counted by its type's name,
then the caller connects again; a failed connect is counted as
"connect: NAME" and retried after `retry_pause`.

The loop runs until `deadline` (time.perf_counter()) or until `stop` is set,
whichever comes first. Every request is one Record (start, latency, error),
so a caller may cut the records into phases afterwards (bench/swap.py's
before/during/after the swap); the first successful answer is kept, so the
caller can check it (bench/protocol_load.py). Latency percentiles count
successful requests only (harness/stats.py's one definition).

Users: bench/serving.py (the asyncio REST client), bench/swap.py,
bench/protocol_load.py (REST, gRPC and v2 senders; it runs inside a container
of the image on the server's network namespace, with harness/ mounted beside
bench/), bench/serving_workers.py. bench/soak_load.py keeps its own loops:
they run inside the image too, but every answer is checked against the
version that may have served it and the loops interleave with swaps and
hostile requests, so each is a loop over its own checker (see its docstring).
Stdlib only.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.stats import latency_ms

__all__ = [
    "Caller",
    "Failed",
    "HttpCaller",
    "Record",
    "Tally",
    "closed_loop",
    "http_request",
    "read_message",
]

#: What drops a caller's connection (it then connects again).
DROPPED = (OSError, ValueError, asyncio.IncompleteReadError)


class Failed(Exception):
    """An answer that is not a success; `kind` names it (e.g. "HTTP 503", "UNAVAILABLE")."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class Caller(Protocol):
    async def connect(self) -> None: ...

    async def send(self) -> Any: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Record:
    start: float  # time.perf_counter() when the request was sent
    latency: float  # seconds to the whole answer (0.0 for a failed connect)
    error: str | None = None  # None: a success


@dataclass
class Tally:
    """What one run's callers record."""

    records: list[Record] = field(default_factory=list)
    first: list[Any] = field(default_factory=list)  # the first successful answer

    def add(self, record: Record, answer: Any = None) -> None:
        self.records.append(record)
        if record.error is None and not self.first:
            self.first.append(answer)

    def between(self, start: float, end: float) -> Tally:
        """The requests sent in [start, end)."""
        return Tally([r for r in self.records if start <= r.start < end], self.first)

    @property
    def errors(self) -> Counter[str]:
        return Counter(r.error for r in self.records if r.error is not None)

    @property
    def latencies(self) -> list[float]:
        return [r.latency for r in self.records if r.error is None]

    def summary(
        self, elapsed: float, points: tuple[float, ...] = (50, 99), digits: int = 3
    ) -> dict[str, Any]:
        """requests, ok, errors, error_kinds, seconds, rps (successes a second), pNN_ms, max_ms."""
        latencies = self.latencies
        errors = self.errors
        return {
            "requests": len(self.records),
            "ok": len(latencies),
            "errors": sum(errors.values()),
            "error_kinds": dict(errors),
            "seconds": round(elapsed, 4),
            "rps": round(len(latencies) / max(elapsed, 1e-9), 2),
            **latency_ms(latencies, points, digits),
        }


async def closed_loop(
    make: Callable[[], Caller],
    callers: int,
    tally: Tally,
    *,
    deadline: float | None = None,
    stop: asyncio.Event | None = None,
    retry_pause: float = 0.01,
) -> None:
    """Run `callers` callers made by `make` until `deadline` or `stop` (one is needed)."""
    if deadline is None and stop is None:
        raise ValueError("closed_loop needs a deadline or a stop event")

    def running() -> bool:
        if stop is not None and stop.is_set():
            return False
        return deadline is None or time.perf_counter() < deadline

    async def one() -> None:
        caller = make()
        while running():
            try:
                await caller.connect()
            except OSError as err:
                tally.add(Record(time.perf_counter(), 0.0, f"connect: {type(err).__name__}"))
                await asyncio.sleep(retry_pause)
                continue
            try:
                while running():
                    sent = time.perf_counter()
                    try:
                        answer = await caller.send()
                    except Failed as failed:
                        tally.add(Record(sent, time.perf_counter() - sent, failed.kind))
                        continue
                    tally.add(Record(sent, time.perf_counter() - sent), answer)
            except DROPPED as err:
                tally.add(Record(time.perf_counter(), 0.0, type(err).__name__))
            finally:
                await caller.close()

    await asyncio.gather(*(one() for _ in range(callers)))


# --- HTTP/1.1 -----------------------------------------------------------------------


def http_request(
    method: str, host: str, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None
) -> bytes:
    """A request's bytes, built once (keep-alive; a body is JSON unless `headers` say
    otherwise; Content-Length always set)."""
    given = {"Content-Type": "application/json"} if body else {}
    given.update(headers or {})
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in given.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def read_message(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length: (status, headers (lower-case names), body)."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {}
    for line in head[1:]:
        if line:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
    length = int(headers.get("content-length", 0))
    return int(head[0].split()[1]), headers, await reader.readexactly(length)


class HttpCaller:
    """One keep-alive HTTP/1.1 connection sending the same prebuilt request; the answer is
    (headers, body); a status outside `ok` is Failed("HTTP NNN")."""

    def __init__(self, host: str, port: int, raw: bytes, ok: Callable[[int], bool] | None = None):
        self.host, self.port, self.raw = host, port, raw
        self.ok = ok or (lambda status: status == 200)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def send(self) -> tuple[dict[str, str], bytes]:
        if self.reader is None or self.writer is None:
            raise OSError("not connected")
        self.writer.write(self.raw)
        await self.writer.drain()
        status, headers, body = await read_message(self.reader)
        if not self.ok(status):
            raise Failed(f"HTTP {status}")
        return headers, body

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
