"""The predict path stays cheap (issue 24; docs/benchmarks.md, "Cost per request").

What made a request cost more than the model, checked without timing
anything: a predict over REST goes through no Starlette layer and starts no
asyncio task of its own (asyncio.wait_for made one per timeout); a short call
runs inline on the loop once its model has been timed on the worker, never
beside another call when there is one worker, never for a large request, and
a model slow on the loop goes back to the worker until a call there is fast
again. ("slow" sleeps 5x the threshold: wall time, whatever the CPU.)
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import random
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.unit.serving.helpers import HalfPlusTwo, config, export, make_app, wait_ready
from tf_entrypoint.serving.codec import json_tensor, json_values
from tf_entrypoint.serving.core import admission
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.admission import InferencePool
from tf_entrypoint.serving.core.errors import ServingError
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.servable import Done, Pending
from tf_entrypoint.serving.main import runs_inline
from tf_entrypoint.serving.rest.asgi import RestApp
from tf_entrypoint.serving.rest.body import read_body

# -- which thread runs a call


def threads_of(pool: InferencePool, calls: list[tuple[Callable[[], Any], str, int]]) -> list[str]:
    """Run each (work, model, size) in turn; the thread each ran on."""
    names: list[str] = []

    def recorded(work: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            names.append(threading.current_thread().name)
            return work()

        return run

    async def main() -> None:
        for work, model, size in calls:
            await pool.run(recorded(work), 30, model=model, size=size)

    try:
        asyncio.run(main())
    finally:
        pool.shutdown()
    return names


def quick() -> None:
    return None


def slow() -> None:
    time.sleep(5 * admission.INLINE_BELOW_SECONDS)  # wall time: whatever the CPU


def test_a_short_call_runs_inline_once_timed_on_the_worker() -> None:
    pool = InferencePool(workers=1, max_queue=4, metrics=Metrics(), inline=True)
    names = threads_of(pool, [(quick, "m", 10)] * 3)
    loop_thread = threading.current_thread().name  # asyncio.run's loop runs here
    assert names[0].startswith("inference")  # a model's first call: the worker times it
    assert names[1:] == [loop_thread, loop_thread]
    assert pool.admitted == 0


def test_a_slow_model_never_runs_on_the_loop() -> None:
    pool = InferencePool(workers=1, max_queue=4, metrics=Metrics(), inline=True)
    names = threads_of(pool, [(slow, "slow", 10)] * 4)
    assert all(name.startswith("inference") for name in names)


def test_a_large_request_goes_to_the_worker() -> None:
    pool = InferencePool(workers=1, max_queue=4, metrics=Metrics(), inline=True)
    big = admission.INLINE_MAX_REQUEST_BYTES + 1
    names = threads_of(pool, [(quick, "m", 10), (quick, "m", big), (quick, "m", 10)])
    assert [name.startswith("inference") for name in names] == [True, True, False]


def test_a_fast_model_stalled_once_stays_inline() -> None:
    """One call held up (a throttled CPU quota, a collection) counts for little."""
    pool = InferencePool(workers=1, max_queue=4, metrics=Metrics(), inline=True)
    names = threads_of(
        pool, [(quick, "m", 10), (quick, "m", 10), (slow, "m", 10), (quick, "m", 10)]
    )
    assert [name.startswith("inference") for name in names] == [True, False, False, False]


def test_a_model_slow_on_the_loop_goes_back_to_the_worker_until_fast_there() -> None:
    pool = InferencePool(workers=1, max_queue=4, metrics=Metrics(), inline=True)
    calls = [(quick, "m", 10), *[(slow, "m", 10)] * 30, (quick, "m", 10), (quick, "m", 10)]
    on_worker = [name.startswith("inference") for name in threads_of(pool, calls)]
    assert on_worker[:2] == [True, False]  # timed on the worker, then inline
    assert on_worker[-3] is True  # the slow calls' average sent it back
    assert on_worker[-1] is False  # a fast call on the worker brings it back inline


def test_without_inline_every_call_goes_to_the_worker() -> None:
    pool = InferencePool(workers=1, max_queue=4, metrics=Metrics(), inline=False)
    names = threads_of(pool, [(quick, "m", 10)] * 3)
    assert all(name.startswith("inference") for name in names)


def test_an_inline_call_waits_its_turn_behind_the_worker() -> None:
    """One worker: a call never runs inline while another runs on the worker thread."""
    pool = InferencePool(workers=1, max_queue=4, metrics=Metrics(), inline=True)
    running, most, lock = [0], [0], threading.Lock()
    held, release = threading.Event(), threading.Event()

    def counted(wait: bool) -> Callable[[], str]:
        def work() -> str:
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            if wait:
                held.set()
                release.wait(30)
            with lock:
                running[0] -= 1
            return threading.current_thread().name

        return work

    async def main() -> list[str]:
        await pool.run(counted(False), 30, model="m")  # timed: short
        # Another transport's call holds the worker (the executor runs it) ...
        holding = asyncio.ensure_future(
            pool.run(counted(True), 30, model="big", size=admission.INLINE_MAX_REQUEST_BYTES + 1)
        )
        while not held.is_set():
            await asyncio.sleep(0.001)
        # ... so this short one cannot take the turn inline: it queues for the worker.
        second = asyncio.ensure_future(pool.run(counted(False), 30, model="m"))
        await asyncio.sleep(0.05)
        assert not second.done()
        release.set()
        return [await holding, await second]

    try:
        names = asyncio.run(main())
    finally:
        release.set()
        pool.shutdown()
    assert most[0] == 1
    assert all(name.startswith("inference") for name in names)


def test_an_inline_call_that_ends_after_its_deadline_is_a_504() -> None:
    pool = InferencePool(workers=1, max_queue=4, metrics=Metrics(), inline=True)

    async def main() -> ServingError:
        await pool.run(quick, 30, model="m")
        try:
            await pool.run(lambda: time.sleep(0.05), 0.01, model="m")
        except ServingError as err:
            return err
        raise AssertionError("answered after its deadline")

    try:
        err = asyncio.run(main())
    finally:
        pool.shutdown()
    assert (err.code.name, err.message) == (
        "DEADLINE_EXCEEDED",
        "Request timed out after 0.01 s (--request-timeout)",
    )
    assert pool.admitted == 0


@pytest.mark.parametrize(
    ("args", "inline"),
    [
        (["--workers=1"], True),
        (["--workers=2"], False),
        (["--workers=1", "--enable_batching"], False),
    ],
)
def test_calls_run_inline_only_with_one_worker_and_no_batching(
    tmp_path: Path, args: list[str], inline: bool
) -> None:
    assert runs_inline(config(tmp_path, *args)) is inline


# -- the REST predict path


@pytest.fixture
def app(tmp_path: Path) -> Iterator[RestApp]:
    export(tmp_path)
    application = make_app(
        config(tmp_path, "--workers=1", "--request-timeout=30"),
        loader=lambda directory, version: HalfPlusTwo(),
    )
    with TestClient(application) as client:
        wait_ready(client)
        yield application


def post(app: RestApp, path: str, body: bytes) -> tuple[int, Any, int]:
    """POST straight to the ASGI app: its status, JSON answer, and the tasks it started."""
    sent: list[dict[str, Any]] = []
    tasks = [0]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
            tasks[0] += 1
            return asyncio.Task(coro, loop=loop, **kwargs)

        loop.set_task_factory(counting)
        scope = {
            "type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "http_version": "1.1", "scheme": "http",
            "headers": [(b"content-length", str(len(body)).encode())],
            "server": ("test", 80), "client": ("test", 1),
        }  # fmt: skip
        await app(scope, receive, send)
        loop.set_task_factory(None)  # asyncio.run's own shutdown tasks are not counted

    asyncio.run(main())
    return sent[0]["status"], json.loads(sent[1]["body"]), tasks[0]


def test_a_predict_goes_through_no_starlette_layer_and_starts_no_task(app: RestApp) -> None:
    other = app.other
    reached: list[str] = []

    async def starlette(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await other(scope, receive, send)

    app.other = starlette  # type: ignore[assignment]
    answers = [post(app, "/v1/models/model:predict", b'{"instances": [1.0]}') for _ in range(3)]
    assert answers == [(200, {"predictions": [2.5]}, 0)] * 3
    assert post(app, "/v1/models/model:predict", b"{")[::2] == (400, 0)
    assert post(app, "/v1/models/nope:predict", b"{}")[::2] == (404, 0)
    assert reached == []


def test_everything_but_a_post_to_v1_is_starlette_s(app: RestApp) -> None:
    with TestClient(app) as client:
        assert client.get("/v1/models/model").status_code == 200
        assert client.post("/healthz").json() == {"error": '404: POST "/healthz"'}
        assert client.post("/nowhere").json() == {"error": '404: POST "/nowhere"'}
        answer = client.post("/V1/Models/model:PREDICT", json={"instances": [1.0]})
        assert answer.json() == {"predictions": [2.5]}  # TF Serving's paths: any case


# -- what the fast readers skip, they skip only where the answer is the same


FAST_CASES: list[list[Any]] = [
    [1.0, 2.5, -3.25],
    [[0.5, 1.5], [2.5, 3.5]],
    [[0.1] * 32] * 8,
    [1.0, 2],  # an int: the general reader
    [True, 1.0],  # a bool: refused there
    [float("nan"), 1.0],
    [float("inf")],
    [1e39],  # beyond float32: refused there
    [-3.4028234663852886e38, 3.4028234663852886e38],
    [340282346638528859811704183484516925440, 1],  # float32's largest, as an integer
    [340282346638528859811704183484516925441, 1],  # beyond it, but float() rounds it in
    [2**128, -(2**128)],
    [2**1023, 1.0],
    [2**1024 - 2**970 - 1, 1.0],  # beyond a double, but float() rounds it in
    [10**400, 1.0],  # beyond a double: refused there
    [2**1023, 2**1023],  # each within a double, their sum not
    [[1, 2], [3, 4.5]],
    [float("nan")] * 3,
    [1.0, float("nan"), 0.5],
    [[1.0], [2.0, 3.0]],  # ragged: refused there
    [[[1.0]]],  # deeper
    [[]],
    ["1.0"],
    [{"x": 1.0}],
]


@pytest.mark.parametrize("dtype", ["DT_FLOAT", "DT_DOUBLE"])
@pytest.mark.parametrize("instances", FAST_CASES, ids=range(len(FAST_CASES)))
def test_the_fast_float_reader_agrees_with_the_general_one(
    dtype: str, instances: list[Any]
) -> None:
    signature = p.Signature({"x": p.TensorSpec(dtype, None)}, {"y": p.TensorSpec(dtype, None)})
    fast = json_tensor._fast_instances(instances, signature)
    try:
        general: dict[str, p.Tensor] | ServingError = json_tensor._from_instances(
            instances, signature
        )
    except ServingError as err:
        general = err
    if fast is None:
        return  # the general reader answers, whatever it answers
    assert not isinstance(general, ServingError), general.message
    (tensor,) = fast.values()
    (expected,) = general.values()
    assert (tensor.dtype, tensor.shape) == (expected.dtype, expected.shape)
    assert tensor.values == expected.values  # the same array type, the same values
    assert not any(math.isnan(v) or math.isinf(v) for v in tensor.values)


def test_the_fast_reader_takes_the_common_requests() -> None:
    signature = p.Signature({"x": p.TensorSpec("DT_FLOAT", None)}, {})
    for instances in FAST_CASES[:3]:
        assert json_tensor._fast_instances(instances, signature) is not None


def test_a_body_that_comes_later_is_read_within_its_timeout(app: RestApp) -> None:
    parts = [b'{"instances"', b": [1.0]}"]

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.01)  # not there yet: the reader waits, under its timer
        part = parts.pop(0)
        return {"type": "http.request", "body": part, "more_body": bool(parts)}

    async def main() -> bytes:
        return await read_body({"headers": []}, receive, 1000, timeout=5)

    assert asyncio.run(main()) == b'{"instances": [1.0]}'


JSON_BODIES = [
    b'{"instances": [1.0, 2.5]}',
    b'{"instances": [[0.1, 0.2], [1e-30, -3.5e38]]}',
    b'{"a": 1, "a": 2}',
    b'{"n": 123456789012345678901234567890}',  # beyond 64 bits: json reads it
    b'{"n": -9223372036854775809}',
    b'{"n": 18446744073709551615}',
    b'{"x": NaN, "y": Infinity, "z": -Infinity}',
    b'{"x": 1e400}',
    b'{"s": "\\ud800"}',
    b'{"s": "caf\xc3\xa9 \\u00e9 \\n"}',
    b'{"s": "\xff"}',
    b'\xef\xbb\xbf{"bom": 1}',
    b'{"instances": [1.0,]}',
    b"[1, 2] garbage",
    b'{"deep": ' + b"[" * 2000 + b"]" * 2000 + b"}",
    b'{"f": -0.0, "i": -0, "e": 1E5}',
]


@pytest.mark.parametrize("body", JSON_BODIES, ids=range(len(JSON_BODIES)))
def test_the_json_reader_reads_what_json_reads(body: bytes) -> None:
    def outcome(read: Callable[[bytes], Any]) -> str:
        try:
            return repr(read(body))
        except (ValueError, RecursionError) as err:
            return f"{type(err).__name__}: {err}"

    assert outcome(json_values.loads) == outcome(json.loads)


def test_random_floats_read_the_same_by_both_readers() -> None:
    generator = random.Random(24)
    texts = []
    for _ in range(20000):
        value = struct.unpack("d", generator.randbytes(8))[0]
        if math.isfinite(value):
            texts += [repr(value), f"{value:.9g}", f"{value:.12e}"]
    body = ("[" + ",".join(texts) + "]").encode()
    assert importlib.util.find_spec("orjson") is not None  # the server has it (requirements/)
    assert repr(json_values.loads(body)) == repr(json.loads(body))


# -- with batching on, a predict waits for its batch on no thread


class Queued(HalfPlusTwo):
    """HalfPlusTwo whose predicts go through a queue that a 'batch thread' empties."""

    def __init__(self, answer: bool = True, running: threading.Event | None = None) -> None:
        self.answer = answer
        #: Set: the batch is running (cancel refused) and answers once it is set.
        self.running = running
        self.started: list[str] = []
        self.cancelled = 0

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
        self.started.append(threading.current_thread().name)
        running = self.running
        if running is not None:

            def late_batch() -> None:
                running.wait(30)
                done(self.run(name, inputs, outputs), None)

            threading.Thread(target=late_batch, name="batch-0").start()
        elif self.answer:

            def batch_thread() -> None:
                done(self.run(name, inputs, outputs), None)

            threading.Thread(target=batch_thread, name="batch-0").start()
        owner = self

        class Handle:
            def cancel(self) -> bool:
                owner.cancelled += 1
                return owner.running is None  # a running batch cannot be withdrawn

        return Handle()


def test_a_batched_predict_is_queued_from_the_loop_and_answered_there(tmp_path: Path) -> None:
    export(tmp_path)
    servable = Queued()
    application = make_app(
        config(tmp_path, "--enable_batching", "--request-timeout=30"),
        loader=lambda directory, version: servable,
    )
    with TestClient(application) as client:
        wait_ready(client)
        answer = client.post("/v1/models/model:predict", json={"instances": [1.0, 2.0]})
        assert (answer.status_code, answer.json()) == (200, {"predictions": [2.5, 3.0]})
        rows = client.post("/v1/models/model:predict", json={"instances": [[1.0], [2.0]]})
        assert rows.json() == {"predictions": [[2.5], [3.0]]}
    # Queued by the REST thread's event loop, not by an inference thread.
    assert len(servable.started) == 2
    assert not any(name.startswith("inference") for name in servable.started)
    assert application.state.serving.pool.admitted == 0


def test_a_batched_predict_not_run_in_time_is_withdrawn_with_a_504(tmp_path: Path) -> None:
    export(tmp_path)
    servable = Queued(answer=False)
    application = make_app(
        config(tmp_path, "--enable_batching", "--request-timeout=0.2"),
        loader=lambda directory, version: servable,
    )
    with TestClient(application) as client:
        wait_ready(client)
        answer = client.post("/v1/models/model:predict", json={"instances": [1.0]})
    assert (answer.status_code, answer.json()) == (
        504,
        {"error": "Request timed out after 0.2 s (--request-timeout)"},
    )
    assert servable.cancelled == 1
    assert application.state.serving.pool.admitted == 0


def test_a_batched_predict_that_times_out_while_running_keeps_its_place_until_it_ends(
    tmp_path: Path,
) -> None:
    export(tmp_path)
    running = threading.Event()
    servable = Queued(running=running)
    application = make_app(
        config(tmp_path, "--enable_batching", "--request-timeout=0.2"),
        loader=lambda directory, version: servable,
    )
    pool = application.state.serving.pool
    try:
        with TestClient(application) as client:
            wait_ready(client)
            answer = client.post("/v1/models/model:predict", json={"instances": [1.0]})
            assert answer.status_code == 504
            assert pool.admitted == 1  # still running in the batch: it holds its place
            running.set()
            deadline = time.monotonic() + 30
            while pool.admitted and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        running.set()
    assert pool.admitted == 0


def test_a_call_that_names_no_model_never_runs_on_the_loop() -> None:
    """A predict that could not be queued from the loop (core/queued.py: no lane free
    yet, or not batchable) may wait for its batch: however fast such calls have been,
    none runs inline, where it would hold the loop."""
    pool = InferencePool(workers=1, max_queue=4, metrics=Metrics(), inline=True)
    names = threads_of(pool, [(quick, "", 10)] * 4)
    assert all(name.startswith("inference") for name in names)
