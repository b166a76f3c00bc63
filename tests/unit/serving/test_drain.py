"""The end of the grace period: the cut-off (core/drain.py, rest/cutoff.py) on the request path.

The real server's stop (signals, exit code, the time it takes, gRPC) is
tested in the image: tests/container/test_shutdown.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Mapping, MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.unit.serving.helpers import HalfPlusTwo, config, export, make_app, wait_ready
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.drain import STOPPED, TIMEOUT_ERRORS, CutOff
from tf_entrypoint.serving.core.serving_core import ServingCore
from tf_entrypoint.serving.rest.cutoff import CutOffMiddleware


class Stuck(HalfPlusTwo):
    """Computes until `release` is set, like a long TensorFlow call."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def run(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, p.Tensor]:
        self.started.set()
        self.release.wait(30)
        return super().run(name, inputs, outputs, batch=batch)


def test_a_request_still_running_at_the_cut_off_is_answered_503_with_json(
    tmp_path: Path,
) -> None:
    export(tmp_path)
    model = Stuck()
    app = make_app(config(tmp_path, "--grace-period", "3"), loader=lambda directory, version: model)
    state: ServingCore = app.state.serving
    try:
        with TestClient(app) as client, ThreadPoolExecutor(1) as pool:
            wait_ready(client)
            answer = pool.submit(client.post, "/v1/models/model:predict", json={"inputs": [1.0]})
            assert model.started.wait(10)
            assert state.cutoff.fire() == 1
            response = answer.result(10)
            assert response.status_code == 503
            assert response.json() == {"error": STOPPED.format(grace=3)}
            assert response.json()["error"].startswith(
                "The server stopped before the request finished"
            )
            # A request that arrives afterwards is refused at once, with the same text.
            late = client.get("/v1/models/model")
            assert (late.status_code, late.json()) == (503, {"error": STOPPED.format(grace=3)})
    finally:
        model.release.set()


def test_a_v2_infer_still_running_at_the_cut_off_is_answered_503_too(tmp_path: Path) -> None:
    """The Open Inference Protocol's requests share the frame: draining turns its
    readiness off, and the cut-off answers a call still running."""
    export(tmp_path)
    model = Stuck()
    app = make_app(config(tmp_path, "--grace-period", "3"), loader=lambda directory, version: model)
    state: ServingCore = app.state.serving
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    try:
        with TestClient(app) as client, ThreadPoolExecutor(1) as pool:
            wait_ready(client)
            answer = pool.submit(client.post, "/v2/models/model/infer", json=body)
            assert model.started.wait(10)
            state.begin_drain()
            ready = client.get("/v2/health/ready")
            assert (ready.status_code, ready.json()["ready"]) == (503, False)
            assert client.get("/v2/health/live").status_code == 200
            assert state.cutoff.fire() == 1
            response = answer.result(10)
            assert (response.status_code, response.json()) == (
                503,
                {"error": STOPPED.format(grace=3)},
            )
            late = client.get("/v2/models/model")
            assert (late.status_code, late.json()) == (503, {"error": STOPPED.format(grace=3)})
    finally:
        model.release.set()


def test_a_request_whose_body_is_still_arriving_is_answered_503_too() -> None:
    """Whatever a request waits for when the grace period ends, here a slow client's body."""
    cutoff = CutOff("stopped")
    sent: list[MutableMapping[str, Any]] = []
    reading = threading.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reading.set()
        await receive()  # the client never sends the rest of its body
        raise AssertionError("unreachable")

    async def receive() -> MutableMapping[str, Any]:
        await asyncio.sleep(30)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    def serve() -> None:
        asyncio.run(CutOffMiddleware(app, cutoff)({"type": "http"}, receive, send))

    thread = threading.Thread(target=serve)
    thread.start()
    assert reading.wait(5)
    assert cutoff.fire() == 1
    thread.join(5)
    assert not thread.is_alive()
    start, body = sent
    assert start["status"] == 503
    assert (b"content-type", b"application/json") in start["headers"]
    assert json.loads(body["body"]) == {"error": "stopped"}


def test_without_a_cut_off_a_cancelled_request_stays_cancelled() -> None:
    cutoff = CutOff("stopped")

    async def handler(tracked: asyncio.Event) -> None:
        with cutoff.track():
            tracked.set()
            await asyncio.sleep(30)

    async def main() -> None:
        tracked = asyncio.Event()
        task = asyncio.create_task(handler(tracked))
        await tracked.wait()  # cancelled while tracked, not before it started
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert cutoff.fire() == 0  # nothing tracked any more


def test_the_cut_off_reaches_tasks_on_every_event_loop() -> None:
    """REST and gRPC run their own loops on their own threads; one fire() cuts both."""
    cutoff = CutOff("stopped")
    tracking = threading.Barrier(3)
    outcomes: list[str] = []

    def loop_thread() -> None:
        async def handler() -> str:
            try:
                with cutoff.track():
                    tracking.wait(5)
                    await asyncio.sleep(30)
            except asyncio.CancelledError:
                assert cutoff.fired
                cutoff.absorb()
                return "cut off"
            return "finished"

        outcomes.append(asyncio.run(handler()))

    threads = [threading.Thread(target=loop_thread) for _ in range(2)]
    for thread in threads:
        thread.start()
    tracking.wait(5)
    started = time.monotonic()
    assert cutoff.fire() == 2
    for thread in threads:
        thread.join(10)
    assert outcomes == ["cut off", "cut off"]
    assert time.monotonic() - started < 5
    assert cutoff.cut == 2


def test_timeout_errors_catch_asyncio_s_on_every_python() -> None:
    # Python 3.10: asyncio.TimeoutError is its own class, which `except
    # TimeoutError` misses (the matrix's Python 3.10 cell runs the real server).
    assert asyncio.TimeoutError in TIMEOUT_ERRORS
    assert TimeoutError in TIMEOUT_ERRORS


# -- calls that run alone with batching on wait for their turn within their deadline
