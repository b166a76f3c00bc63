"""bench/v2_cost.py's analysis and table, and the HTTP reader its load client uses.

The benchmark itself runs in the image (tests/container/test_bench.py);
these check the arithmetic on made-up windows, never a timing.
"""

from __future__ import annotations

import asyncio

from bench import v2_cost
from bench.serving import read_response
from harness.load import read_message


def _run(model: str, arm: str, rep: int, cpu_ms: float, rps: float) -> dict[str, object]:
    return {
        "part": "v2",
        "rep": rep,
        "model": model,
        "concurrency": 1,
        "arm": arm,
        "requests": 100,
        "ok": 100,
        "errors": 0,
        "rps": rps,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "server_cpu_ms_per_request": cpu_ms,
        "throttled_periods": 0,
        "periods": 10,
    }


def test_ratios_divide_the_medians_by_v1_rest_and_tf_servings_grpc() -> None:
    cpu = {"v1 rest": 1.0, "v2 json": 1.2, "v2 binary": 0.8, "tfs grpc": 2.0, "v2 grpc": 1.5}
    runs = [
        _run("mlp", arm, rep, value * (1 + rep / 10), 1000 / value)
        for rep in range(3)
        for arm, value in cpu.items()
    ]
    (cell,) = v2_cost.analyse(runs)
    assert (cell["model"], cell["concurrency"]) == ("mlp", 1)
    assert cell["arms"]["v2 json"]["server_cpu_ms_per_request"]["median"] == 1.2 * 1.1
    ratios = cell["ratios"]
    assert ratios["cpu_vs_v1_rest"] == {
        "v2 json": 1.2,
        "v2 binary": 0.8,
        "tfs grpc": 2.0,
        "v2 grpc": 1.5,
    }
    assert ratios["rps_vs_v1_rest"]["v2 binary"] == 1.25
    assert ratios["v2_grpc_vs_tfs_grpc"] == {"cpu": 0.75, "rps": 1.333, "p99": 1.0}
    text = v2_cost.table({"config": {"cpus": "1", "reps": 3, "seconds": 5.0}, "cells": [cell]})
    assert "| mlp | 1 | 1,100 µs, 1,000 req/s, p99 2.0 ms |" in text
    assert text.endswith("| 1.20x | 0.80x | 0.75x |")


def test_read_message_gives_the_headers_and_read_response_stays_as_it_was() -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
        b"Inference-Header-Content-Length: 2\r\ncontent-length: 6\r\n\r\n{}abcd"
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}"
    )

    async def read() -> tuple[object, object]:
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        return await read_message(reader), await read_response(reader)

    first, second = asyncio.run(read())
    assert first == (
        200,
        {
            "content-type": "application/octet-stream",
            "inference-header-content-length": "2",
            "content-length": "6",
        },
        b"{}abcd",
    )
    assert second == (404, b"{}")
