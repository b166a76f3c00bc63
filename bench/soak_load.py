"""The soak benchmark's client side: good load, hostile requests and the model store's churn.

bench/soak.py runs this in a container of the image that shares the server's
network namespace (REST on 127.0.0.1:8501, gRPC on 127.0.0.1:8500), as root,
with the soak's work directory at /work:

    /work/models/{plus,cr,slow,extra}   what the server mounts (read-only) at /models
    /work/staging/{plus,cr}/V           versions to rename in (bench/soak_models.py)
    /work/poison/{plus,cr}              the versions renamed in under names beyond int64
    /work/config/models.config          the model config file the server re-reads

    python -m bench.soak_load SETTINGS_JSON

It speaks one JSON object a line with bench/soak.py:

    -> {"ready": ...}                 every good path answered correctly once
    <- {"run": true}                  run for settings["seconds"]
    <- {"stop": "why"}                (any time while running) end early
    -> {"results": ...}
    <- {"shutdown": true}             start calls that outlast the grace period
    -> {"sigterm": true}              the host sends SIGTERM now
    <- {"exited": {...}}              the host saw the server exit
    -> {"shutdown": ...}              what the calls in flight got

While running, all at once:

* good load: closed loops of REST and gRPC callers on the two models plus
  (y = x + V) and cr (classify, regress, predict 2x + V), every answer
  checked: values exact, every row from one version V, V a version renamed in
  (the answer carries V, so a swap in the middle of a request still gives a
  consistent answer);
* swaps: a new version renamed in every settings["swap_every"] seconds,
  alternating the models; versions 4, 8, 12... arrive unreadable (root-owned,
  0700) and turn readable settings["unreadable_for"] seconds later; old
  versions beyond the newest settings["keep_versions"] are deleted;
* an unreadable version: every settings["unreadable_every"] seconds a model's
  newest version directory turns root-owned 0700, then back (0 turns both
  lock-outs off);
* reloads, one step after the other: the config file flips (model extra
  added or removed; the effect is awaited), HandleReloadConfigRequest with
  the file's content (deadline 60 s), then one with a short deadline sent
  while the control thread loads a new version (bench/soak.py counts from the
  server's log whether every reload it received was applied), and every
  other round one naming a model no URL can reach;
* hostile requests, one class after the other on a timer per class (HOSTILE),
  each class with the answers the README documents for it;
* a /healthz prober (a separate process: `python -m bench.soak_load probe`)
  every 100 ms, and /readyz every second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.client
import itertools
import json
import os
import random
import shutil
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.grpc_rest import model_config
from bench.serving import read_response
from harness.stats import latency_ms

HOST = "127.0.0.1"
REST_PORT = 8501
GRPC_PORT = 8500
WORK = Path("/work")
#: The models under steady load; slow serves the deadline class, extra the config flips.
GOOD_MODELS = ("plus", "cr")
STATIC_MODELS = ("slow",)
POISON_NAMES = ("20240101123045000000", "9" * 255)
#: Each hostile class (a method of Soak, sending one case) and the setting that paces it.
HOSTILE: tuple[tuple[str, str], ...] = (
    ("malformed_json", "hostile_every"),
    ("wrong_dtype", "hostile_every"),
    ("wrong_shape", "hostile_every"),
    ("over_limit", "hostile_every"),
    ("huge_version_url", "hostile_every"),
    ("odd_names", "hostile_every"),
    ("grpc_malformed", "hostile_every"),
    ("shape_bomb", "bomb_every"),
    ("context_bomb", "bomb_every"),
    ("large_bodies", "large_every"),
    ("deadline", "deadline_every"),
    ("version_beyond_int64", "poison_every"),
)
#: The hostile classes the reloader sends.
RELOAD_CLASSES = ("reload_short_deadline", "reload_unreachable_name")
#: Model names HandleReloadConfigRequest must refuse: no URL reaches them (`/` and `:`
#: are reachable percent-encoded, as in TF Serving; HTTP clients drop `.` and `..`).
UNREACHABLE_NAMES = ("", ".", "..")
#: How many examples of unexpected answers each class keeps.
EXAMPLES = 5


# --- small helpers ------------------------------------------------------------


def emit(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def note(message: str) -> None:
    print(f"soak-load: {message}", file=sys.stderr, flush=True)


def quarter(rng: random.Random) -> float:
    """A value that float32 and JSON carry exactly: a multiple of 0.25 in [0, 64)."""
    return rng.randrange(256) / 4


def percentiles(values: list[float]) -> dict[str, float]:
    """count, p50_ms, p99_ms, max_ms (harness/stats.py's one percentile definition)."""
    return {"count": len(values), **latency_ms(values)}


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text format: (name, labels) -> value."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        pairs = []
        for item in labels.rstrip("}").split('",'):
            key, _, raw = item.partition("=")
            if key:
                pairs.append((key.strip(), raw.strip().strip('"')))
        with contextlib.suppress(ValueError):
            found[(name, frozenset(pairs))] = float(value)
    return found


def metric(
    metrics: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    """The sum of every series of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in metrics.items() if n == name and wanted <= have)


async def http_call(
    method: str,
    path: str,
    body: bytes = b"",
    *,
    headers: tuple[str, ...] = (),
    chunked: bool = False,
    timeout: float = 60.0,
) -> tuple[int | None, bytes, str]:
    """One request on a fresh connection: (status or None, body, what went wrong)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, REST_PORT), 10)
    except (OSError, asyncio.TimeoutError) as err:
        return None, b"", f"connect: {type(err).__name__}: {err}"
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}", *headers]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    elif body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")

    async def send() -> None:
        # The server may answer (413) and close before the body is through: ignore that.
        with contextlib.suppress(OSError):
            writer.write(head)
            if chunked:
                for start in range(0, len(body), 65536):
                    piece = body[start : start + 65536]
                    writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
            else:
                writer.write(body)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        status, content = await asyncio.wait_for(read_response(reader), timeout)
    except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as err:
        return None, b"", f"{type(err).__name__}: {err}"[:300]
    finally:
        sender.cancel()
        writer.close()
    return status, content, ""


def message_of(content: bytes) -> str:
    try:
        return str(json.loads(content).get("error", ""))[:300]
    except (ValueError, AttributeError):
        return content[:300].decode("utf-8", "replace")


# --- the /healthz prober (its own process) -------------------------------------


def probe_main(started_at: float) -> int:
    """GET /healthz every 100 ms (a fresh connection each), /readyz every second.

    Runs until stdin ends, then prints its figures as one JSON line.
    """
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    latencies: list[float] = []
    failures: Counter[str] = Counter()
    slowest: list[tuple[float, float]] = []
    ready = not_ready = 0
    for count in itertools.count():
        if stop.is_set():
            break
        sent = time.perf_counter()
        for path in ("/healthz", "/readyz") if count % 10 == 0 else ("/healthz",):
            began = time.perf_counter()
            try:
                conn = http.client.HTTPConnection(HOST, REST_PORT, timeout=60)
                conn.request("GET", path)
                status = conn.getresponse().status
                conn.close()
            except OSError as err:
                status, reason = 0, type(err).__name__
            else:
                reason = f"HTTP {status}"
            took = time.perf_counter() - began
            if path == "/healthz":
                latencies.append(took)
                slowest.append((round(time.time() - started_at, 2), round(took * 1e3, 1)))
                slowest = sorted(slowest, key=lambda x: -x[1])[:5]
                if status != 200:
                    failures[reason] += 1
            elif status == 200:
                ready += 1
            else:
                not_ready += 1
        stop.wait(max(0.0, 0.1 - (time.perf_counter() - sent)))
    print(
        json.dumps(
            {
                "healthz": {
                    **percentiles(latencies),
                    "failed": sum(failures.values()),
                    "failures": dict(failures),
                    "slowest": [{"at_s": t, "ms": ms} for t, ms in slowest],
                },
                "readyz": {"probes": ready + not_ready, "not_ready": not_ready},
            }
        ),
        flush=True,
    )
    return 0


# --- bookkeeping ----------------------------------------------------------------


@dataclass
class Path_:
    """One good path's tally (e.g. 'rest cr regress')."""

    answered: int = 0
    correct: int = 0
    latencies: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)


@dataclass
class HostileClass:
    sent: int = 0
    as_documented: int = 0
    answers: Counter[str] = field(default_factory=Counter)
    unexpected: list[dict[str, str]] = field(default_factory=list)

    def record(self, case: str, answer: str, ok: bool, message: str = "") -> None:
        self.sent += 1
        self.answers[answer] += 1
        if ok:
            self.as_documented += 1
        elif len(self.unexpected) < EXAMPLES:
            self.unexpected.append({"case": case, "answer": answer, "message": message[:300]})

    def result(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "as_documented": self.as_documented,
            "unexpected": self.sent - self.as_documented,
            "answers": dict(self.answers),
            "unexpected_examples": self.unexpected,
        }


class Ledger:
    """Which versions are on disk since when, and which have answered."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.placed: dict[str, dict[int, float]] = {m: {1: 0.0} for m in GOOD_MODELS}
        self.seen: dict[str, dict[int, float]] = {m: {1: 0.0} for m in GOOD_MODELS}
        #: Per model: (time, highest version answered by then), increasing.
        self.highest: dict[str, list[tuple[float, int]]] = {m: [(0.0, 1)] for m in GOOD_MODELS}
        self.older_answers = 0

    def check(self, model: str, version: int, started: float) -> str:
        """'' if `version` may answer a request to `model` started at `started`."""
        if version not in self.placed[model]:
            return f"answered by version {version}, which was never renamed in"
        before = [v for t, v in self.highest[model] if t <= started]
        if before and version < before[-1]:
            self.older_answers += 1
        now = self.clock()
        if version > self.highest[model][-1][1]:
            self.highest[model].append((now, version))
        for placed in self.placed[model]:
            if placed <= version and placed not in self.seen[model]:
                self.seen[model][placed] = now
        return ""


# --- the soak -------------------------------------------------------------------


class Soak:
    def __init__(self, settings: dict[str, Any]) -> None:
        import grpc  # noqa: PLC0415 - in the container only
        from google.protobuf import text_format  # noqa: PLC0415
        from tensorflow.core.example import example_pb2  # noqa: PLC0415
        from tensorflow.core.framework import tensor_pb2, types_pb2  # noqa: PLC0415
        from tensorflow_serving.apis import (  # noqa: PLC0415
            classification_pb2,
            get_model_status_pb2,
            model_management_pb2,
            model_service_pb2_grpc,
            predict_pb2,
            prediction_service_pb2_grpc,
            regression_pb2,
        )
        from tensorflow_serving.config import model_server_config_pb2  # noqa: PLC0415

        self.s = settings
        self.grpc = grpc
        self.pb = {
            "text_format": text_format,
            "example": example_pb2,
            "tensor": tensor_pb2,
            "types": types_pb2,
            "classification": classification_pb2,
            "status": get_model_status_pb2,
            "management": model_management_pb2,
            "server_config": model_server_config_pb2,
            "predict": predict_pb2,
            "regression": regression_pb2,
        }
        options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        self.good_channel = grpc.aio.insecure_channel(f"{HOST}:{GRPC_PORT}", options=options)
        self.hostile_channel = grpc.aio.insecure_channel(
            f"{HOST}:{GRPC_PORT}", options=[*options, ("grpc.use_local_subchannel_pool", 1)]
        )
        self.predict = prediction_service_pb2_grpc.PredictionServiceStub(self.good_channel)
        self.hostile = prediction_service_pb2_grpc.PredictionServiceStub(self.hostile_channel)
        self.models_stub = model_service_pb2_grpc.ModelServiceStub(self.hostile_channel)
        self.started = time.monotonic()
        self.ledger = Ledger(self.clock)
        self.paths: dict[str, Path_] = {}
        self.classes: dict[str, HostileClass] = {}
        self.failure_examples: list[dict[str, Any]] = []
        self.events: list[list[Any]] = []
        self.stop = asyncio.Event()
        self.rng = random.Random(21)
        self.steps_per_s = 0.0
        self.swaps = Counter[str]()
        self.unreadable = Counter[str]()
        self.reloads: dict[str, Any] = {
            "file_flips": 0,
            "file_flips_applied": 0,
            "file_flips_not_applied": 0,
            "grpc": Counter[str](),
            "short_deadline_received": 0,
            "short_deadline_not_received": 0,
        }
        self.extra = False
        self.swap_lock = asyncio.Lock()
        self.big_bodies: dict[int, tuple[bytes, list[float]]] = {}
        self.harness_errors = 0
        self.last_metrics: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        self.deadline_pairs = 0

    def clock(self) -> float:
        return time.monotonic() - self.started

    def event(self, kind: str, detail: str) -> None:
        self.events.append([round(self.clock(), 2), kind, detail])

    # --- good requests ------------------------------------------------------------

    def good_request(self, model: str, kind: str) -> dict[str, Any]:
        rows = self.rng.randint(1, 4)
        xs = [quarter(self.rng) for _ in range(rows)]
        ys = [quarter(self.rng) for _ in range(rows)]
        return {"model": model, "kind": kind, "x": xs, "y": ys}

    def expect(
        self, request: dict[str, Any], values: Any, started: float
    ) -> tuple[str, int | None]:
        """('' or what is wrong, the version the values came from)."""
        model, kind, xs, ys = request["model"], request["kind"], request["x"], request["y"]
        if kind == "classify":
            want = [[("sum", x + y), ("difference", x - y)] for x, y in zip(xs, ys, strict=True)]
            got = [[(str(label), float(score)) for label, score in row] for row in values]
            return (
                "" if got == want else f"classify answered {got!r:.200}, expected {want!r:.200}"
            ), None
        if not isinstance(values, list) or len(values) != len(xs):
            return f"{len(xs)} rows sent, answer {values!r:.200}", None
        if kind == "regress":
            offsets = [float(v) - 2 * x - y for v, x, y in zip(values, xs, ys, strict=True)]
        elif model == "cr":
            offsets = [float(v) - 2 * x for v, x in zip(values, xs, strict=True)]
        else:
            offsets = [float(v) - x for v, x in zip(values, xs, strict=True)]
        if len(set(offsets)) != 1 or not offsets[0].is_integer():
            return f"rows answered by no single version: offsets {offsets!r:.200}", None
        version = int(offsets[0])
        return self.ledger.check(model, version, started), version

    def account(self, key: str, request: dict[str, Any], started: float, problem: str) -> None:
        tally = self.paths.setdefault(key, Path_())
        tally.answered += 1
        if problem:
            reason = problem.split(":", 1)[0][:80]
            tally.failures[reason] += 1
            if len(self.failure_examples) < 20:
                self.failure_examples.append(
                    {"at_s": round(started, 2), "path": key, "problem": problem[:400]}
                )
        else:
            tally.correct += 1
            tally.latencies.append(self.clock() - started)

    def rest_body(self, request: dict[str, Any]) -> tuple[str, bytes]:
        model, kind = request["model"], request["kind"]
        if kind == "predict":
            return f"/v1/models/{model}:predict", json.dumps({"instances": request["x"]}).encode()
        examples = [{"x": x, "y": y} for x, y in zip(request["x"], request["y"], strict=True)]
        body = {"signature_name": kind, "examples": examples}
        return f"/v1/models/{model}:{kind}", json.dumps(body).encode()

    async def rest_caller(self, model: str, kinds: tuple[str, ...]) -> None:
        cycle = itertools.cycle(kinds)
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(HOST, REST_PORT)
            except OSError as err:
                request = self.good_request(model, next(cycle))
                self.account(
                    f"rest {model} {request['kind']}", request, self.clock(), f"connect: {err}"
                )
                await asyncio.sleep(0.1)
                continue
            try:
                while not self.stop.is_set():
                    request = self.good_request(model, next(cycle))
                    key = f"rest {model} {request['kind']}"
                    path, body = self.rest_body(request)
                    started = self.clock()
                    writer.write(
                        f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\n"
                        "Content-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                    try:
                        await writer.drain()
                        status, content = await asyncio.wait_for(read_response(reader), 90)
                    except (
                        OSError,
                        asyncio.IncompleteReadError,
                        asyncio.TimeoutError,
                        ValueError,
                    ) as err:
                        self.account(
                            key, request, started, f"connection: {type(err).__name__}: {err}"
                        )
                        break
                    if status != 200:
                        self.account(key, request, started, f"HTTP {status}: {message_of(content)}")
                        continue
                    answer = json.loads(content)
                    values = answer.get("predictions", answer.get("results"))
                    problem, _ = self.expect(request, values, started)
                    self.account(key, request, started, problem)
            finally:
                writer.close()

    def grpc_request(self, request: dict[str, Any]) -> tuple[Any, Any]:
        """(stub method, request message)."""
        model, kind = request["model"], request["kind"]
        pb = self.pb
        if kind == "predict":
            message = pb["predict"].PredictRequest()
            message.model_spec.name = model
            message.inputs["x"].CopyFrom(self.floats(request["x"]))
            return self.predict.Predict, message
        message = (
            pb["classification"].ClassificationRequest()
            if kind == "classify"
            else pb["regression"].RegressionRequest()
        )
        message.model_spec.name = model
        message.model_spec.signature_name = kind
        for x, y in zip(request["x"], request["y"], strict=True):
            example = message.input.example_list.examples.add()
            example.features.feature["x"].float_list.value.append(x)
            example.features.feature["y"].float_list.value.append(y)
        method = self.predict.Classify if kind == "classify" else self.predict.Regress
        return method, message

    def floats(self, values: list[float], shape: list[int] | None = None) -> Any:
        tensor = self.pb["tensor"].TensorProto(dtype=self.pb["types"].DT_FLOAT)
        for size in [len(values)] if shape is None else shape:
            tensor.tensor_shape.dim.add(size=size)
        tensor.float_val.extend(values)
        return tensor

    @staticmethod
    def float_values(tensor: Any) -> list[float]:
        if tensor.tensor_content:
            count = len(tensor.tensor_content) // 4
            return list(struct.unpack(f"<{count}f", tensor.tensor_content))
        return list(tensor.float_val)

    async def grpc_caller(self, model: str, kinds: tuple[str, ...]) -> None:
        cycle = itertools.cycle(kinds)
        while not self.stop.is_set():
            request = self.good_request(model, next(cycle))
            key = f"grpc {model} {request['kind']}"
            method, message = self.grpc_request(request)
            started = self.clock()
            try:
                response = await method(message, timeout=90)
            except self.grpc.aio.AioRpcError as err:
                self.account(key, request, started, f"{err.code().name}: {err.details()}")
                if err.code() == self.grpc.StatusCode.UNAVAILABLE:
                    await asyncio.sleep(0.1)  # no server: do not spin (REST waits as long)
                continue
            if request["kind"] == "predict":
                values: Any = self.float_values(response.outputs["y"])
            elif request["kind"] == "regress":
                values = [r.value for r in response.result.regressions]
            else:
                values = [
                    [(c.label, c.score) for c in row.classes]
                    for row in response.result.classifications
                ]
            problem, version = self.expect(request, values, started)
            served = response.model_spec.version.value
            if not problem and version is not None and served != version:
                problem = f"model_spec.version {served} but the values come from version {version}"
            self.account(key, request, started, problem)

    # --- the model store --------------------------------------------------------------

    def model_dir(self, model: str) -> Path:
        return WORK / "models" / model

    def numbered(self, model: str) -> list[int]:
        return sorted(
            int(p.name)
            for p in self.model_dir(model).iterdir()
            if p.name.isdigit() and p.name not in POISON_NAMES
        )

    @staticmethod
    def lock_out(path: Path) -> tuple[int, int]:
        """Root-owned, 0700: the server's user can no longer read it. The old owner."""
        info = path.stat()
        os.chown(path, 0, 0)
        path.chmod(0o700)
        return info.st_uid, info.st_gid

    @staticmethod
    def let_in(path: Path, owner: tuple[int, int]) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.chmod(0o755)
            os.chown(path, *owner)

    async def swapper(self) -> None:
        """A new version every swap_every seconds, alternating the models."""
        for model in itertools.cycle(GOOD_MODELS):
            if await self.pause(self.s["swap_every"]):
                return
            await self.place(model)

    async def place(self, model: str) -> bool:
        """Rename the model's next version in (every fourth arrives unreadable); False if none."""
        version = max(self.ledger.placed[model]) + 1
        source = WORK / "staging" / model / str(version)
        if not source.is_dir():
            self.swaps["pool_exhausted"] += 1
            return False
        unreadable = version % 4 == 0 and self.s["unreadable_every"] > 0
        async with self.swap_lock:
            owner = self.lock_out(source) if unreadable else None
            target = self.model_dir(model) / str(version)
            source.rename(target)
            self.ledger.placed[model][version] = self.clock()
            self.swaps["renamed_in"] += 1
            self.event("swap", f"{model} {version}" + (" unreadable" if unreadable else ""))
            for old in self.numbered(model)[: -self.s["keep_versions"]]:
                shutil.rmtree(self.model_dir(model) / str(old), ignore_errors=True)
        if owner is not None:
            self.swaps["arrived_unreadable"] += 1
            self.unreadable["episodes"] += 1
            asyncio.get_running_loop().call_later(
                self.s["unreadable_for"], self.readable_again, target, owner, model, version
            )
        return True

    def readable_again(self, path: Path, owner: tuple[int, int], model: str, version: int) -> None:
        self.let_in(path, owner)
        self.event("readable", f"{model} {version}")

    async def locker(self) -> None:
        """Every unreadable_every seconds a model's newest version turns unreadable for a while."""
        for model in itertools.cycle(GOOD_MODELS):
            if await self.pause(self.s["unreadable_every"]):
                return
            async with self.swap_lock:
                versions = self.numbered(model)
                if not versions:
                    continue
                path = self.model_dir(model) / str(versions[-1])
                owner = self.lock_out(path)
            self.unreadable["episodes"] += 1
            self.event("unreadable", f"{model} {versions[-1]}")
            await asyncio.sleep(self.s["unreadable_for"])
            self.let_in(path, owner)
            self.event("readable", f"{model} {versions[-1]}")

    async def guarded(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        """Run `loop` until the run stops; a harness bug is logged and the loop restarted."""
        while not self.stop.is_set():
            try:
                await loop()
            except Exception as err:  # noqa: BLE001 - a harness bug must not end the soak silently
                self.harness_error(name, err)
                await self.pause(1.0)
            else:
                return

    def harness_error(self, name: str, err: BaseException) -> None:
        self.harness_errors += 1
        self.event("harness-error", f"{name}: {type(err).__name__}: {err}"[:300])
        note(f"{name}: {type(err).__name__}: {err}")

    async def pause(self, seconds: float) -> bool:
        """Sleep, or return True as soon as the run stops."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
        return self.stop.is_set()

    # --- reloads ----------------------------------------------------------------------

    def config_text(self, extra: bool) -> str:
        names = (*GOOD_MODELS, *STATIC_MODELS, *(("extra",) if extra else ()))
        return model_config(names)

    def reload_request(self, text: str) -> Any:
        config = self.pb["server_config"].ModelServerConfig()
        self.pb["text_format"].Parse(text, config)
        return self.pb["management"].ReloadConfigRequest(config=config)

    async def watch_metrics(self) -> None:
        """Keep the last /metrics page, so a server that dies still has its counters read."""
        while not await self.pause(2.0):
            with contextlib.suppress(RuntimeError):
                self.last_metrics = await self.metrics()

    async def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        status, content, problem = await http_call("GET", "/metrics", timeout=30)
        if status != 200:
            raise RuntimeError(f"/metrics: {status} {problem}")
        return parse_metrics(content.decode())

    async def reloader(self) -> None:
        """Flip the file, then gRPC reloads, one step at a time."""
        settle = self.s["config_poll"] + 0.5
        for round_ in itertools.count():
            if await self.pause(self.s["reload_every"]):
                return
            await self.flip_file()
            if self.stop.is_set():
                return
            await self.grpc_reload("normal", 60.0, self.config_text(self.extra), "OK")
            await asyncio.sleep(settle)
            await self.short_reload((0.001, 0.005, 0.02, 0.1)[round_ % 4], GOOD_MODELS[round_ % 2])
            await asyncio.sleep(settle)
            if round_ % 2 == 0:
                name = UNREACHABLE_NAMES[(round_ // 2) % len(UNREACHABLE_NAMES)]
                await self.grpc_reload(
                    f"unreachable name {name!r}",
                    60.0,
                    self.bad_name_text(name),
                    "INVALID_ARGUMENT",
                    cls="reload_unreachable_name",
                )
                await asyncio.sleep(settle)

    def bad_name_text(self, name: str) -> str:
        good = self.config_text(self.extra).rstrip().removesuffix("}")
        return (
            f'{good}  config {{ name: {json.dumps(name)} base_path: "/models/extra" '
            'model_platform: "tensorflow" }\n}\n'
        )

    async def flip_file(self) -> None:
        self.extra = not self.extra
        path = WORK / "config" / "models.config"
        staging = path.with_name(".models.config.tmp")
        staging.write_text(self.config_text(self.extra))
        staging.rename(path)
        self.reloads["file_flips"] += 1
        self.event("config", "extra added" if self.extra else "extra removed")
        deadline = time.monotonic() + self.s["config_poll"] + 60
        while time.monotonic() < deadline and not self.stop.is_set():
            status, content, _ = await http_call("GET", "/v1/models/extra", timeout=30)
            if self.extra and status == 200 and b'"AVAILABLE"' in content:
                self.reloads["file_flips_applied"] += 1
                return
            if not self.extra and status == 404:
                self.reloads["file_flips_applied"] += 1
                return
            await asyncio.sleep(0.1)
        if not self.stop.is_set():
            self.reloads["file_flips_not_applied"] += 1
            self.event("config", "flip NOT applied within the poll period + 60 s")

    async def grpc_reload(
        self, case: str, deadline: float, text: str, expected: str, cls: str = ""
    ) -> str:
        try:
            response = await self.models_stub.HandleReloadConfigRequest(
                self.reload_request(text), timeout=deadline
            )
            code = (
                "OK" if response.status.error_code == 0 else f"status {response.status.error_code}"
            )
            message = response.status.error_message
        except self.grpc.aio.AioRpcError as err:
            code, message = err.code().name, err.details() or ""
        if cls:
            self.hostile_class(cls).record(case, code, code == expected, message)
        else:
            self.reloads["grpc"][code] += 1
        return code

    async def short_reload(self, deadline: float, model: str) -> None:
        """A reload whose deadline passes while the control thread is busy; it must still apply.

        A new version of `model` is renamed in and a reload (deadline 60 s)
        makes the control thread load it; 30 ms later the short one is sent,
        while that load runs. Whether each reload the server received was
        applied is counted from the server's log at the end (bench/soak.py).
        """
        text = self.config_text(self.extra)
        received_before = metric(
            await self.metrics(), "serving_grpc_requests_total", method="HandleReloadConfigRequest"
        )
        await self.place(model)
        busy = asyncio.ensure_future(self.grpc_reload("busy", 60.0, text, "OK"))
        await asyncio.sleep(0.03)
        case = f"deadline {deadline * 1e3:g} ms"
        code = await self.grpc_reload(case, deadline, text, "OK")
        # FAILED_PRECONDITION: applied, but a version failed to load (one the soak locked out).
        self.hostile_class("reload_short_deadline").record(
            case, code, code in ("OK", "DEADLINE_EXCEEDED", "FAILED_PRECONDITION")
        )
        await busy
        received = metric(
            await self.metrics(), "serving_grpc_requests_total", method="HandleReloadConfigRequest"
        )
        key = (
            "short_deadline_received"
            if received - received_before >= 2
            else "short_deadline_not_received"
        )
        self.reloads[key] += 1

    # --- hostile requests -------------------------------------------------------------

    def hostile_class(self, name: str) -> HostileClass:
        return self.classes.setdefault(name, HostileClass())

    async def rest_case(
        self,
        cls: str,
        case: str,
        expected: tuple[int, ...],
        path: str,
        *,
        method: str = "POST",
        body: bytes = b"",
        chunked: bool = False,
    ) -> None:
        status, content, problem = await http_call(method, path, body, chunked=chunked)
        answer = f"HTTP {status}" if status is not None else "no answer"
        self.hostile_class(cls).record(
            case, answer, status in expected, problem or message_of(content)
        )

    async def grpc_case(
        self, cls: str, case: str, expected: tuple[str, ...], call: Awaitable[Any]
    ) -> None:
        try:
            await call
            code, message = "OK", ""
        except self.grpc.aio.AioRpcError as err:
            code, message = err.code().name, err.details() or ""
        self.hostile_class(cls).record(case, code, code in expected, message)

    def limit(self) -> int:
        return int(self.s["max_body_bytes"])

    async def malformed_json(self, i: int) -> None:
        cases = [
            ("truncated", b'{"instances": [1.0, 2.0'),
            ("not JSON", b"instances=1,2,3"),
            ("trailing garbage", b'{"instances": [1.0]}}'),
            ("not UTF-8", b'{"instances": ["\xff\xfe"]}'),
            ("nested 100000 deep", b"[" * 100_000 + b"]" * 100_000),
            ("empty body", b""),
            ("a JSON string", b'"predict"'),
            ("both instances and inputs", b'{"instances": [1.0], "inputs": {"x": [1.0]}}'),
        ]
        case, body = cases[i % len(cases)]
        await self.rest_case("malformed_json", case, (400,), "/v1/models/plus:predict", body=body)

    async def wrong_dtype(self, i: int) -> None:
        cases = [
            ("strings for floats", {"instances": ["a", "b"]}),
            ("booleans for floats", {"inputs": {"x": [True, False]}}),
            ("b64 for floats", {"inputs": {"x": [{"b64": "AAAA"}]}}),
            ("an integer beyond a double", {"instances": [10**400]}),
            ("objects for floats", {"instances": [{"x": {"y": 1}}]}),
            ("strings for int64", {"inputs": {"x": [1.0], "n": ["many"]}}),
        ]
        case, body = cases[i % len(cases)]
        model = "slow" if case.endswith("int64") else ("plus", "cr")[i % 2]
        path = f"/v1/models/{model}:predict"
        await self.rest_case("wrong_dtype", case, (400,), path, body=json.dumps(body).encode())

    async def wrong_shape(self, i: int) -> None:
        cases = [
            ("ragged rows", {"instances": [[1.0, 2.0], [3.0]]}),
            ("2-D for [batch]", {"instances": [[1.0, 2.0]]}),
            ("scalar for [batch]", {"inputs": {"x": 1.0}}),
            ("unknown input", {"inputs": {"z": [1.0]}}),
            ("slow without n", {"inputs": {"x": [1.0]}}),
        ]
        case, body = cases[i % len(cases)]
        model = "slow" if case.startswith("slow") else "plus"
        path = f"/v1/models/{model}:predict"
        # As in TF Serving, no shape is checked against the signature: a 2-D or a
        # scalar x goes to the graph, and plus's (y = x + V) takes any shape, so
        # both are answered 200, as TF Serving answers them. Ragged rows and
        # unknown or missing inputs are the server's own 400.
        expected = (200,) if "for [batch]" in case else (400,)
        await self.rest_case("wrong_shape", case, expected, path, body=json.dumps(body).encode())

    def numbers_body(self, size: int) -> tuple[bytes, list[float]]:
        """{"instances": [...]} of about `size` bytes, of exactly representable values."""
        if size not in self.big_bodies:
            count = max(1, size // 6)
            values = [quarter(self.rng) for _ in range(count)]
            self.big_bodies[size] = (json.dumps({"instances": values}).encode(), values)
        return self.big_bodies[size]

    async def over_limit(self, i: int) -> None:
        body, _ = self.numbers_body(self.limit() + 4096)
        body = body[: self.limit() + 1024]  # not even valid JSON: the size alone must refuse it
        variant = i % 3
        if variant == 0:
            case = "Content-Length over the limit"
            await self.rest_case("over_limit", case, (413,), "/v1/models/plus:predict", body=body)
        elif variant == 1:
            case = "chunked, no Content-Length"
            path = "/v1/models/plus:predict"
            await self.rest_case("over_limit", case, (413,), path, body=body, chunked=True)
        else:
            message = self.plus_request([0.25] * (self.limit() // 4 + 1024))
            call = self.hostile.Predict(message, timeout=60)
            case = "gRPC message over the limit"
            await self.grpc_case("over_limit", case, ("RESOURCE_EXHAUSTED",), call)

    def plus_request(self, values: list[float], model: str = "plus") -> Any:
        message = self.pb["predict"].PredictRequest()
        message.model_spec.name = model
        message.inputs["x"].CopyFrom(self.floats(values))
        return message

    async def huge_version_url(self, i: int) -> None:
        digits = "".join(str(self.rng.randrange(10)) for _ in range(5000))
        cases = [
            (
                "POST versions/<5000 digits>:predict",
                "POST",
                f"/v1/models/plus/versions/{digits}:predict",
            ),
            ("GET versions/<5000 digits>", "GET", f"/v1/models/cr/versions/{digits}"),
            ("GET versions/2^63/metadata", "GET", f"/v1/models/plus/versions/{2**63}/metadata"),
        ]
        case, method, path = cases[i % len(cases)]
        body = b'{"instances": [1.0]}' if method == "POST" else b""
        await self.rest_case("huge_version_url", case, (400, 404), path, method=method, body=body)

    async def odd_names(self, i: int) -> None:
        rest_cases = [
            ("NUL in the name", "/v1/models/%00:predict"),
            ("dot-dot", "/v1/models/..:predict"),
            ("encoded slash", "/v1/models/plus%2Fcr:predict"),
            ("encoded traversal", "/v1/models/%2e%2e%2f%2e%2e%2fetc%2fpasswd:predict"),
            ("non-ASCII", "/v1/models/%C3%BC%E2%82%AC:predict"),
            ("invalid UTF-8", "/v1/models/%FF%FE:predict"),
            ("10,000 characters", "/v1/models/" + "a" * 10_000 + ":predict"),
            ("encoded colon", "/v1/models/plus%3Apredict:predict"),
            ("space", "/v1/models/plus%20:predict"),
            ("a label of 5000 digits", "/v1/models/plus/labels/" + "7" * 5000 + ":predict"),
            ("empty name", "/v1/models/:predict"),
        ]
        grpc_names = ["", "a/b", "\x00", "ü" * 2000, "plus\n", "..", "plus:predict"]
        if i % 3 == 2:
            name = grpc_names[(i // 3) % len(grpc_names)]
            call = self.hostile.Predict(self.plus_request([1.0], model=name), timeout=60)
            case = f"gRPC model name {name[:20]!r}"
            await self.grpc_case("odd_names", case, ("NOT_FOUND", "INVALID_ARGUMENT"), call)
            return
        case, path = rest_cases[(i - i // 3) % len(rest_cases)]
        method = "POST" if i % 2 == 0 else "GET"
        if method == "GET":  # status ignores a label (as TF Serving's): ask for metadata
            path = path.removesuffix(":predict") + ("/metadata" if "/labels/" in path else "")
        body = b'{"instances": [1.0]}' if method == "POST" else b""
        await self.rest_case(
            "odd_names", f"{method} {case}", (400, 404), path, method=method, body=body
        )

    async def context_bomb(self, i: int) -> None:
        """A body under the limit whose context, copied into every example, is 64 times it."""
        context_bytes = self.limit() // 2
        pad = [0.5] * (context_bytes // 4)
        examples = 128
        if i % 2 == 0:
            kind = ("regress", "classify")[(i // 2) % 2]
            document = {
                "signature_name": kind,
                "context": {"pad": pad},
                "examples": [{"x": 1.0}] * examples,
            }
            body = json.dumps(document, separators=(",", ":")).encode()
            case = f"REST {kind}, {len(body)} bytes, x{examples}"
            await self.rest_case(
                "context_bomb", case, (400, 413), f"/v1/models/cr:{kind}", body=body
            )
            return
        message = self.pb["classification"].ClassificationRequest()
        message.model_spec.name = "cr"
        message.model_spec.signature_name = "classify"
        with_context = message.input.example_list_with_context
        with_context.context.features.feature["pad"].float_list.value.extend(pad)
        for _ in range(examples):
            with_context.examples.add().features.feature["x"].float_list.value.append(1.0)
        case = f"gRPC Classify, {message.ByteSize()} bytes, x{examples}"
        call = self.hostile.Classify(message, timeout=120)
        await self.grpc_case("context_bomb", case, ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"), call)

    async def shape_bomb(self, i: int) -> None:
        """gRPC TensorProtos whose declared shape is far larger than their values."""
        cases = [
            ("one value, shape [2^31]", [1.0], [2**31]),
            ("two values, shape [2^31]", [1.0, 2.0], [2**31]),
            ("no values, shape [2^40]", [], [2**40]),
            ("one value, shape [65536, 65536] (4-byte content)", None, [65536, 65536]),
            ("shape [-5]", [1.0], [-5]),
        ]
        case, values, shape = cases[i % len(cases)]
        message = self.pb["predict"].PredictRequest()
        message.model_spec.name = "plus"
        tensor = message.inputs["x"]
        tensor.dtype = self.pb["types"].DT_FLOAT
        for size in shape:
            tensor.tensor_shape.dim.add(size=size)
        if values is None:
            tensor.tensor_content = struct.pack("<f", 1.0)
        else:
            tensor.float_val.extend(values)
        call = self.hostile.Predict(message, timeout=120)
        await self.grpc_case("shape_bomb", case, ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"), call)

    async def grpc_malformed(self, i: int) -> None:
        pb = self.pb
        message = pb["predict"].PredictRequest()
        message.model_spec.name = "plus"
        variant = i % 6
        if variant == 0:
            case, expected = "int32 for a float input", "INVALID_ARGUMENT"
            message.inputs["x"].dtype = pb["types"].DT_INT32
            message.inputs["x"].tensor_shape.dim.add(size=1)
            message.inputs["x"].int_val.append(1)
        elif variant == 1:
            case, expected = "no inputs", "INVALID_ARGUMENT"
        elif variant == 2:
            case, expected = "unknown signature", "FAILED_PRECONDITION"
            message.model_spec.signature_name = "nope"
            message.inputs["x"].CopyFrom(self.floats([1.0]))
        elif variant == 3:
            case, expected = "unknown output_filter", "INVALID_ARGUMENT"
            message.inputs["x"].CopyFrom(self.floats([1.0]))
            message.output_filter.append("nope")
        elif variant == 4:
            case, expected = "version 2^63-1", "NOT_FOUND"
            message.model_spec.version.value = 2**63 - 1
            message.inputs["x"].CopyFrom(self.floats([1.0]))
        else:  # the graph's business, as in TF Serving: plus's graph takes any shape
            case, expected = "2-D for [batch]", "OK"
            message.inputs["x"].CopyFrom(self.floats([1.0, 2.0], shape=[1, 2]))
        await self.grpc_case(
            "grpc_malformed", case, (expected,), self.hostile.Predict(message, timeout=60)
        )

    async def large_bodies(self, i: int) -> None:
        """A burst of concurrent predicts of nearly --max-body-bytes each: answered or 503."""
        body, values = self.numbers_body(int(self.limit() * 0.9))
        started = self.clock()
        self.event("hostile", f"large_bodies: {self.s['large_burst']} x {len(body)} bytes")

        async def one() -> None:
            status, content, problem = await http_call(
                "POST", "/v1/models/plus:predict", body, timeout=120
            )
            if status == 200:
                loop = asyncio.get_running_loop()
                answer = await loop.run_in_executor(None, json.loads, content)
                wrong, _ = self.expect(
                    {"model": "plus", "kind": "predict", "x": values, "y": values},
                    answer.get("predictions"),
                    started,
                )
                self.hostile_class("large_bodies").record(
                    f"{len(body)} bytes x{self.s['large_burst']}",
                    "HTTP 200" + (" wrong" if wrong else ""),
                    not wrong,
                    wrong,
                )
                return
            answer = f"HTTP {status}" if status is not None else "no answer"
            self.hostile_class("large_bodies").record(
                f"{len(body)} bytes x{self.s['large_burst']}",
                answer,
                status == 503,
                problem or message_of(content),
            )

        await asyncio.gather(*(one() for _ in range(self.s["large_burst"])))

    async def deadline(self, i: int) -> None:
        """Two gRPC predicts that run 4 times longer than their deadline, 50 ms apart.

        The first runs (TensorFlow cannot be interrupted); the second waits
        behind it, and must be withdrawn when its deadline passes, never run.
        """
        seconds = self.s["deadline_s"]
        steps = int(self.steps_per_s * seconds * 4)
        case = f"deadline {seconds:g} s, run ~{seconds * 4:g} s"

        async def one(delay: float) -> None:
            await asyncio.sleep(delay)
            call = self.hostile.Predict(self.slow_request(steps), timeout=seconds)
            await self.grpc_case("deadline", case, ("DEADLINE_EXCEEDED",), call)

        self.deadline_pairs += 1
        await asyncio.gather(one(0.0), one(0.05))

    def slow_request(self, steps: int) -> Any:
        message = self.pb["predict"].PredictRequest()
        message.model_spec.name = "slow"
        message.inputs["x"].CopyFrom(self.floats([1.0]))
        counts = self.pb["tensor"].TensorProto(dtype=self.pb["types"].DT_INT64)
        counts.tensor_shape.dim.add(size=1)
        counts.int64_val.append(steps)
        message.inputs["n"].CopyFrom(counts)
        return message

    async def version_beyond_int64(self, i: int) -> None:
        """A copy of a poison version renamed in under a name beyond int64, then removed."""
        model = GOOD_MODELS[i % 2]
        name = POISON_NAMES[(i // 2) % len(POISON_NAMES)]
        staging = self.model_dir(model) / f".poison-{i}"
        shutil.copytree(WORK / "poison" / model, staging)
        target = self.model_dir(model) / name
        staging.rename(target)
        self.event("poison", f"{model}/{name[:24]}")
        case = f"{model}/{name[:24]}{'...' if len(name) > 24 else ''}"
        try:
            await asyncio.sleep(self.s["config_poll"] + 1.5)  # past the next directory poll
            status, content, problem = await http_call("GET", f"/v1/models/{model}", timeout=30)
            self.hostile_class("version_beyond_int64").record(
                f"{case}: GET status",
                f"HTTP {status}",
                status == 200,
                problem or message_of(content),
            )
            request = self.pb["status"].GetModelStatusRequest()
            request.model_spec.name = model
            await self.grpc_case(
                "version_beyond_int64",
                f"{case}: GetModelStatus",
                ("OK",),
                self.models_stub.GetModelStatus(request, timeout=30),
            )
            status, content, problem = await http_call("GET", "/metrics", timeout=30)
            self.hostile_class("version_beyond_int64").record(
                f"{case}: GET /metrics", f"HTTP {status}", status == 200, problem
            )
            await asyncio.sleep(2)
        finally:
            gone = self.model_dir(model) / f".gone-{i}"
            target.rename(gone)
            shutil.rmtree(gone, ignore_errors=True)

    async def hostile_actor(self, name: str, every: float, first: float) -> None:
        action: Callable[[int], Awaitable[None]] = getattr(self, name)
        if await self.pause(first):
            return
        for i in itertools.count():
            if name in ("context_bomb", "shape_bomb"):  # the heavy ones, to read stalls against
                self.event("hostile", f"{name} {i}")
            try:
                await action(i)
            except Exception as err:  # noqa: BLE001 - a harness bug must not end the soak silently
                self.harness_error(name, err)
            if await self.pause(every):
                return

    # --- phases -----------------------------------------------------------------------

    async def calibrate(self) -> None:
        """Steps of the slow model's loop per second, timed on this machine."""
        steps = 100_000
        for _ in range(5):
            began = time.perf_counter()
            await self.predict.Predict(self.slow_request(steps), timeout=120)
            took = time.perf_counter() - began
            if took > 0.2:
                break
            steps *= 4
        self.steps_per_s = steps / took

    async def check_paths(self) -> dict[str, bool]:
        """Every good path answers correctly once before the run."""
        checks = {}
        for model, kinds in (("plus", ("predict",)), ("cr", ("predict", "regress", "classify"))):
            for kind in kinds:
                request = self.good_request(model, kind)
                path, body = self.rest_body(request)
                status, content, _ = await http_call("POST", path, body)
                values = (
                    json.loads(content).get("predictions", json.loads(content).get("results"))
                    if status == 200
                    else None
                )
                checks[f"rest {model} {kind}"] = (
                    status == 200 and not self.expect(request, values, 0.0)[0]
                )
                method, message = self.grpc_request(request)
                try:
                    await method(message, timeout=60)
                    checks[f"grpc {model} {kind}"] = True
                except self.grpc.aio.AioRpcError:
                    checks[f"grpc {model} {kind}"] = False
        return checks

    async def run(self, seconds: float, commands: asyncio.Queue[dict[str, Any]]) -> dict[str, Any]:
        self.started = time.monotonic()
        self.ledger = Ledger(self.clock)
        probe = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.soak_load",
            "probe",
            str(time.time()),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        metrics_before = self.last_metrics = await self.metrics()
        loops: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        for model, kinds in (("plus", ("predict",)), ("cr", ("regress", "predict", "classify"))):
            for _ in range(self.s["rest_callers"]):
                loops.append((f"rest {model}", functools.partial(self.rest_caller, model, kinds)))
            for _ in range(self.s["grpc_callers"]):
                loops.append((f"grpc {model}", functools.partial(self.grpc_caller, model, kinds)))
        loops.append(("metrics", self.watch_metrics))
        for name, every, loop in (
            ("swapper", "swap_every", self.swapper),
            ("locker", "unreadable_every", self.locker),
            ("reloader", "reload_every", self.reloader),
        ):
            if self.s[every] > 0:  # 0 turns an actor off, to isolate a fault
                loops.append((name, loop))
        tasks = [asyncio.create_task(self.guarded(name, loop)) for name, loop in loops]
        chosen = [(n, k) for n, k in HOSTILE if n in self.s["classes"]]
        for name in [n for n, _ in chosen] + (
            list(RELOAD_CLASSES) if self.s["reload_every"] else []
        ):
            self.hostile_class(name)  # every class is in the results, even one never sent
        for index, (name, every) in enumerate(chosen):
            first = 2 + index * min(1.5, max(0.2, (seconds / 3) / max(1, len(chosen))))
            tasks.append(asyncio.create_task(self.hostile_actor(name, self.s[every], first)))
        reason = "time"
        waiter = asyncio.create_task(commands.get())
        done, _ = await asyncio.wait({waiter}, timeout=seconds)
        if done:
            reason = str(waiter.result().get("stop", "stopped"))
        else:
            waiter.cancel()
        ran = self.clock()
        self.stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        probe_out, _ = await probe.communicate(b"")
        final = await self.final_versions() if reason == "time" else {}
        try:
            probed = json.loads(probe_out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            probed = {"healthz": {}, "readyz": {}}
        try:
            metrics_after = await self.metrics()
        except RuntimeError:  # the server died: its last page read while it lived
            metrics_after = self.last_metrics
        return self.results(ran, reason, final, probed, before=metrics_before, after=metrics_after)

    async def final_versions(self) -> dict[str, Any]:
        """After the run: does each model serve the newest version renamed in (within 60 s)?"""

        async def newest_served(model: str) -> dict[str, Any]:
            newest = max(self.ledger.placed[model])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                path = f"/v1/models/{model}/versions/{newest}"
                status, content, _ = await http_call("GET", path)
                if status == 200 and b'"AVAILABLE"' in content:
                    return {"newest_renamed_in": newest, "served": True}
                await asyncio.sleep(0.25)
            return {"newest_renamed_in": newest, "served": False}

        found = await asyncio.gather(*(newest_served(m) for m in GOOD_MODELS))
        return dict(zip(GOOD_MODELS, found, strict=True))

    def results(
        self,
        ran: float,
        reason: str,
        final: dict[str, Any],
        probed: dict[str, Any],
        *,
        before: dict[tuple[str, frozenset[tuple[str, str]]], float],
        after: dict[tuple[str, frozenset[tuple[str, str]]], float],
    ) -> dict[str, Any]:
        paths = {}
        for key, tally in sorted(self.paths.items()):
            paths[key] = {
                "answered": tally.answered,
                "correct": tally.correct,
                "failed": tally.answered - tally.correct,
                "failures": dict(tally.failures),
                **percentiles(tally.latencies),
            }
        answered = sum(t.answered for t in self.paths.values())
        correct = sum(t.correct for t in self.paths.values())
        latency = percentiles([x for t in self.paths.values() for x in t.latencies])
        swap_seconds = sorted(
            self.ledger.seen[m][v] - t
            for m in GOOD_MODELS
            for v, t in self.ledger.placed[m].items()
            if v != 1 and v in self.ledger.seen[m]
        )
        never = [
            f"{m} {v}"
            for m in GOOD_MODELS
            for v, t in self.ledger.placed[m].items()
            if v not in self.ledger.seen[m] and ran - t > 60
        ]

        def delta(name: str, **labels: str) -> float:
            return metric(after, name, **labels) - metric(before, name, **labels) if after else 0.0

        loads = {
            m: delta("serving_model_loads_total", model=m, result="success") for m in GOOD_MODELS
        }
        hostile = {name: c.result() for name, c in sorted(self.classes.items())}
        slow_codes = {
            code: delta("serving_grpc_requests_total", method="Predict", model="slow", code=code)
            for code in (
                "OK",
                "DEADLINE_EXCEEDED",
                "CANCELLED",
                "UNAVAILABLE",
                "RESOURCE_EXHAUSTED",
            )
        }
        reloads = {**self.reloads, "grpc": dict(self.reloads["grpc"])}
        reloads["applied"] = delta("serving_model_config_reloads_total", result="success")
        reloads["refused"] = delta("serving_model_config_reloads_total", result="failure")
        method = "HandleReloadConfigRequest"
        reloads["grpc_received"] = round(
            delta("serving_grpc_requests_total", method=method)
            - delta("serving_grpc_requests_total", method=method, code="INVALID_ARGUMENT")
        )
        return {
            "ran_s": round(ran, 1),
            "ended_by": reason,
            "harness_errors": self.harness_errors,
            "good": {
                "answered": answered,
                "correct": correct,
                "failed": answered - correct,
                "older_version_answers": self.ledger.older_answers,
                **latency,
                "paths": paths,
                "failure_examples": self.failure_examples,
            },
            "hostile": {
                "sent": sum(c["sent"] for c in hostile.values()),
                "as_documented": sum(c["as_documented"] for c in hostile.values()),
                "unexpected": sum(c["unexpected"] for c in hostile.values()),
                "classes": hostile,
            },
            "swaps": {
                "renamed_in": self.swaps["renamed_in"],
                "arrived_unreadable": self.swaps["arrived_unreadable"],
                "pool_exhausted": self.swaps["pool_exhausted"],
                "loaded": {m: round(v) for m, v in loads.items()},
                "versions_swapped": round(sum(loads.values())),
                "versions_answered": sum(len(self.ledger.seen[m]) - 1 for m in GOOD_MODELS),
                "never_answered": never,
                "rename_to_answer_s": {
                    "median": swap_seconds[len(swap_seconds) // 2] if swap_seconds else 0.0,
                    "max": swap_seconds[-1] if swap_seconds else 0.0,
                },
                "final": final,
            },
            "unreadable": {"episodes": self.unreadable["episodes"]},
            "reloads": reloads,
            "deadlines": {
                "steps_per_s": round(self.steps_per_s),
                "deadline_s": self.s["deadline_s"],
                "pairs": self.deadline_pairs,
                "ran_in_tensorflow": round(
                    delta("serving_inference_duration_seconds_count", model="slow")
                ),
                "server_codes_slow_predict": {k: round(v) for k, v in slow_codes.items()},
                "server_mean_s": round(
                    delta(
                        "serving_grpc_request_duration_seconds_sum", method="Predict", model="slow"
                    )
                    / max(
                        1.0,
                        delta(
                            "serving_grpc_request_duration_seconds_count",
                            method="Predict",
                            model="slow",
                        ),
                    ),
                    3,
                ),
            },
            "healthz": probed.get("healthz", {}),
            "readyz": probed.get("readyz", {}),
            "events": self.events,
        }

    async def shutdown(self, commands: asyncio.Queue[dict[str, Any]]) -> dict[str, Any]:
        """Calls that outlast the grace period are in flight when SIGTERM comes."""
        steps = int(self.steps_per_s * (self.s["grace_period"] + 4))
        calls = [
            asyncio.ensure_future(self.predict.Predict(self.slow_request(steps), timeout=120))
            for _ in range(2)
        ]
        await asyncio.sleep(1.0)
        emit({"sigterm": True})
        exited = await commands.get()
        outcomes: Counter[str] = Counter()
        for call in calls:
            try:
                await asyncio.wait_for(call, 30)
                outcomes["OK"] += 1
            except self.grpc.aio.AioRpcError as err:
                outcomes[err.code().name] += 1
            except asyncio.TimeoutError:
                outcomes["no answer 30 s after the exit"] += 1
        return {"in_flight_calls": dict(outcomes), "host": exited.get("exited", {})}


async def serve(settings: dict[str, Any]) -> None:
    soak = Soak(settings)
    commands: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    async def read_commands() -> None:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            await commands.put(json.loads(line))
        await commands.put({"stop": "stdin closed"})

    reader = asyncio.create_task(read_commands())
    checks = await soak.check_paths()
    await soak.calibrate()
    emit({"ready": True, "checks": checks, "steps_per_s": soak.steps_per_s})
    while True:
        command = await commands.get()
        if "run" in command:
            emit({"results": await soak.run(settings["seconds"], commands)})
        elif "shutdown" in command:
            emit({"shutdown": await soak.shutdown(commands)})
        else:
            break
    reader.cancel()


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"]:
        return probe_main(float(argv[1]))
    if len(argv) != 1:
        print("usage: python -m bench.soak_load SETTINGS_JSON | probe STARTED_AT", file=sys.stderr)
        return 64
    asyncio.run(serve(json.loads(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
