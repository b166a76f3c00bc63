"""The REST application's own cost per predict, in process (issue 24): no HTTP, no TensorFlow.

    python -m bench run app_cost     # from the repository, with .venv (it imports the server)

The server's ASGI application (rest/app.py's create_app over main.build_core,
one worker, --request-timeout 30) serving a pure-Python model (y = 0.5 x + 2
on a float vector), called directly with an ASGI scope, receive and send for
a batch-1 predict of three floats; against it, a bare ASGI app that does what
bench/floor.py's REST floor does around its model call (json.loads, the same
arithmetic, json.dumps, two sends). What is left is the server's own Python
per request: routing, admission, the body, the checks, the JSON codecs,
metrics, the answer. This is where the profile of issue 24's fast path was
taken (`--profile`: cProfile, sorted by own time); bench/cost.py measures
the whole server in its container.

Prints one JSON line: µs per request of each (the medians of 5 runs of N).
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tf_entrypoint.serving.config import PlannedCpus, parse_config
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.servable import Call, Done, Pending
from tf_entrypoint.serving.main import build_core
from tf_entrypoint.serving.rest.app import create_app

BODY = b'{"instances": [1.0, 2.0, 5.0]}'
VECTOR = p.TensorSpec("DT_FLOAT", (-1,))


class HalfPlusTwo:
    """y = 0.5 x + 2 in Python (core/servable.py's Servable)."""

    version = 1
    signatures: Mapping[str, p.Signature] = {
        "serving_default": p.Signature({"x": VECTOR}, {"y": VECTOR})
    }
    signature_texts: Mapping[str, str] = {}
    signature_def_map = b""
    warmup_records = 0
    method_name_check = False

    def runs(self, name: str) -> bool:
        return name in self.signatures

    def run(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, p.Tensor]:
        x = inputs["x"]
        return {"y": p.Tensor("DT_FLOAT", x.shape, [0.5 * v + 2 for v in x.values])}

    def run_many(self, calls: Sequence[Call]) -> list[dict[str, p.Tensor]]:
        return [self.run(name, inputs, outputs) for name, inputs, outputs in calls]

    def start(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        deadline: float | None,
        expired: str,
        done: Done,
    ) -> Pending | None:
        return None


def scope() -> dict[str, Any]:
    return {
        "type": "http", "method": "POST", "path": "/v1/models/model:predict",
        "raw_path": b"/v1/models/model:predict", "query_string": b"", "root_path": "",
        "http_version": "1.1", "scheme": "http", "server": ("bench", 80),
        "client": ("bench", 1),
        "headers": [(b"content-length", str(len(BODY)).encode()),
                    (b"content-type", b"application/json")],
    }  # fmt: skip


async def receive() -> dict[str, Any]:
    return {"type": "http.request", "body": BODY, "more_body": False}


async def send(message: Any) -> None:
    return None


async def bare(scope: Any, receive: Any, send: Any) -> None:
    """The REST floor's work around its model call (bench/floor.py)."""
    message = await receive()
    values = json.loads(message["body"])["instances"]
    body = json.dumps({"predictions": [0.5 * v + 2 for v in values]}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def per_request(app: Any, count: int) -> float:
    for _ in range(200):  # warm: the first calls time the model on the worker
        await app(scope(), receive, send)
    started = time.perf_counter()
    for _ in range(count):
        await app(scope(), receive, send)
    return (time.perf_counter() - started) / count * 1e6


async def answer_of(app: Any) -> tuple[int, Any]:
    sent: list[Any] = []

    async def keep(message: Any) -> None:
        sent.append(message)

    await app(scope(), receive, keep)
    return sent[0]["status"], json.loads(sent[1]["body"])


async def measure(app: Any, count: int, profile: bool) -> dict[str, float]:
    for target in (app, bare):  # both answer the request right, or nothing is measured
        got = await answer_of(target)
        if got != (200, {"predictions": [2.5, 3.0, 4.5]}):
            raise RuntimeError(f"wrong answer from {target}: {got}")
    server, floor = [], []
    for _ in range(5):  # taking turns
        server.append(await per_request(app, count))
        floor.append(await per_request(bare, count))
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        await per_request(app, count)
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    return {
        "server_us": round(statistics.median(server), 1),
        "bare_us": round(statistics.median(floor), 1),
    }


@dataclass(frozen=True)
class AppCostConfig:
    requests: int = 3000  # predicts per run (5 runs of each app)
    profile: bool = False  # cProfile the server's app (sorted by own time, on stderr)


def run(config: AppCostConfig) -> dict[str, Any]:
    """µs per request of the server's app and of the bare app (medians of 5 runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        version = Path(tmp) / "model" / "1"
        version.mkdir(parents=True)
        (version / "saved_model.pb").write_bytes(b"")
        config_ = parse_config(
            ["--model-base-path", tmp, "--workers", "1", "--request-timeout", "30"],
            {},
            budget=PlannedCpus(1, "bench"),
        )
        core = build_core(config_, loader=lambda directory, number: HalfPlusTwo())
        app = create_app(core, config_, owns_core=False)
        core.start()
        try:
            deadline = time.monotonic() + 30
            while core.manager.readiness()[0] and time.monotonic() < deadline:
                time.sleep(0.01)
            return asyncio.run(measure(app, config.requests, config.profile))
        finally:
            core.close()
