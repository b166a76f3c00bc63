"""Memory per request (docs/robustness.md): parsing, admission and slots across the layers.

The faults themselves (a container killed for memory) are in
tests/container/test_memory.py; these tests check the rules one by one, on a
pure-Python model (tests/unit/serving/helpers.py's HalfPlusTwo).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import gc
import json
import threading
import time
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.unit.serving.helpers import HalfPlusTwo, config, export, make_app, wait_ready
from tf_entrypoint.serving.codec import json_tensor, json_values
from tf_entrypoint.serving.core import limits
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.admission import InferencePool
from tf_entrypoint.serving.core.deadlines import run_with_deadline
from tf_entrypoint.serving.core.errors import ServingError
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.serving_core import ServingCore
from tf_entrypoint.serving.rest.asgi import RestApp
from tf_entrypoint.serving.rest.body import Body
from tf_entrypoint.serving.rest.errors import Answer, http_status
from tf_entrypoint.serving.rest.handlers import QUEUED_MAX_BYTES

# -- the arithmetic


# -- compact values


@pytest.mark.parametrize(
    ("dtype", "code", "value"),
    [
        ("DT_FLOAT", "f", 1.5), ("DT_DOUBLE", "d", 1.5), ("DT_INT8", "b", -3),
        ("DT_INT16", "h", 300), ("DT_INT32", "i", 70000), ("DT_INT64", "q", 2**40),
        ("DT_UINT8", "B", 200), ("DT_UINT16", "H", 60000), ("DT_UINT32", "I", 2**31),
        ("DT_UINT64", "Q", 2**63), ("DT_BOOL", "B", True),
    ],
)  # fmt: skip
def test_request_numbers_are_parsed_into_compact_arrays(dtype: str, code: str, value: Any) -> None:
    tensor = json_tensor.to_tensor([[value, value]], p.TensorSpec(dtype, (-1, 2)))
    assert isinstance(tensor.values, array.array)
    assert tensor.values.typecode == code
    assert tensor.values.tolist() == [value, value]


def test_strings_and_half_floats_stay_lists() -> None:
    for dtype in ("DT_STRING", "DT_HALF", "DT_BFLOAT16"):
        assert isinstance(json_tensor.new_values(dtype), list)


def test_values_list_takes_tolist_when_there_is_one() -> None:
    class Lazy(list[int]):
        def tolist(self) -> list[int]:
            return [x * 10 for x in self]

    assert p.values_list(Lazy([1, 2])) == [10, 20]
    plain = [1, 2]
    assert p.values_list(plain) is plain
    assert p.values_list((1, 2)) == [1, 2]


# -- the JSON factor: what json.loads and the parse build per body byte


#: The most bytes of Python objects parsing a predict body makes per body byte
#: (documented in docs/robustness.md); measured worst: lists nested in
#: one-element lists (two body bytes each), about 44.
JSON_FACTOR = 50


def _body(unit: bytes, size: int = 1 << 20) -> bytes:
    items = b",".join([unit] * (size // (len(unit) + 1)))
    return b'{"inputs": [' + items + b"]}"


@pytest.mark.parametrize(
    "unit",
    [
        b"[]",  # empty lists
        b"{}",  # empty objects
        b"[0]",  # one-number rows
        b"[1.5]",
        b"0",  # flat numbers (ints made floats: new float objects without compact arrays)
        b"1.5",
        b'"ab"',
        b"[[[[[[[[0]]]]]]]]",  # one-element lists in one-element lists
        b"[" * 30 + b"0" + b"]" * 30,
    ],
)
def test_parsing_a_body_stays_within_the_documented_factor(unit: bytes) -> None:
    body = _body(unit)
    signature = {"serving_default": p.Signature({"x": p.TensorSpec("DT_FLOAT", None)}, {})}
    gc.collect()
    tracemalloc.start()
    try:
        # a shape or type the signature refuses: the document was built all the same
        with contextlib.suppress(ServingError):
            json_tensor.parse_predict_request(json_values.parse_json_object(body), signature)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak / len(body) < JSON_FACTOR


def test_flat_numbers_for_a_float_input_take_four_bytes_each_once_parsed() -> None:
    body = _body(b"0")
    signature = {"serving_default": p.Signature({"x": p.TensorSpec("DT_FLOAT", (-1,))}, {})}
    request = json_tensor.parse_predict_request(json_values.parse_json_object(body), signature)
    (tensor,) = request.inputs.values()
    assert isinstance(tensor.values, array.array)
    assert tensor.values.itemsize * len(tensor.values) < len(body) * 2 + 1


# -- admission and the body


def test_a_body_is_taken_once() -> None:
    body = Body(b"abc")
    assert body.take() == b"abc"
    assert body.take() == b""


def test_admission_is_held_until_run_gives_it_back() -> None:
    pool = InferencePool(workers=1, max_queue=2, metrics=Metrics())
    first, second = pool.admit(), pool.admit()
    with pytest.raises(ServingError) as caught:
        pool.admit()
    assert (http_status(caught.value), caught.value.code.name) == (503, "RESOURCE_EXHAUSTED")
    first.release()
    first.release()  # once only
    assert pool.admitted == 1
    answer = asyncio.run(pool.run(lambda: Answer(200, b"", {}), 5, second))
    assert answer.status == 200
    second.close()  # run took it over: closing does not give it back twice
    assert pool.admitted == 0
    pool.shutdown()


@pytest.fixture
def app(tmp_path: Path) -> Iterator[RestApp]:
    export(tmp_path)
    application = make_app(
        config(tmp_path, "--max-queue=2", "--request-timeout=0.5"),
        loader=lambda directory, version: HalfPlusTwo(),
    )
    with TestClient(application) as client:
        wait_ready(client)
        yield application


def call(app: RestApp, body_parts: list[bytes], block: asyncio.Event | None = None) -> Any:
    """POST a predict straight to the ASGI app; what receive() was asked, and the answer."""
    received: list[int] = []
    sent: list[dict[str, Any]] = []
    size = sum(map(len, body_parts))

    async def receive() -> dict[str, Any]:
        received.append(app.state.serving.pool.admitted)
        if block is not None:
            await block.wait()
        part = body_parts.pop(0) if body_parts else b""
        return {"type": "http.request", "body": part, "more_body": bool(body_parts)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "method": "POST", "path": "/v1/models/model:predict",
        "raw_path": b"/v1/models/model:predict", "query_string": b"", "root_path": "",
        "headers": [(b"content-length", str(size).encode())], "http_version": "1.1",
        "scheme": "http", "server": ("test", 80), "client": ("test", 1),
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))  # type: ignore[arg-type]
    headers = dict(sent[0]["headers"])
    return received, sent[0]["status"], headers, json.loads(sent[1]["body"])


def test_a_refused_request_s_body_is_never_read(app: RestApp) -> None:
    state: ServingCore = app.state.serving
    places = [state.pool.admit(), state.pool.admit()]
    try:
        received, status, _, answer = call(app, [b'{"instances": [1.0]}'])
    finally:
        for place in places:
            place.release()
    assert (status, received) == (503, [])
    assert answer == {
        "error": "Server is at capacity (2 predict requests in progress); retry later"
    }


def test_a_body_is_read_once_admitted(app: RestApp) -> None:
    received, status, _, answer = call(app, [b'{"instances"', b": [1.0]}"])
    assert (status, answer) == (200, {"predictions": [2.5]})
    assert received == [1, 1]  # each part read while its request held a place
    assert app.state.serving.pool.admitted == 0


def test_a_body_that_does_not_arrive_in_time_gets_408(app: RestApp) -> None:
    received, status, headers, answer = call(app, [b"{}"], block=asyncio.Event())
    assert (status, received) == (408, [1])
    assert headers[b"connection"] == b"close"
    assert answer == {"error": "Request body not received within 0.5 s (--request-timeout)"}
    assert app.state.serving.pool.admitted == 0


# -- the JSON conversion slots


def test_a_request_waits_for_a_slot_only_until_its_deadline() -> None:
    request_limits = limits.RequestLimits.of(1000, workers=1)
    request_limits.converting.acquire()  # every slot taken

    def parse() -> None:
        with request_limits.slot():
            raise AssertionError("never reached")

    with pytest.raises(ServingError) as caught:
        run_with_deadline(time.monotonic() + 0.2, parse, "Request timed out after 0.2 s")
    assert http_status(caught.value) == 504
    assert caught.value.message == "Request timed out after 0.2 s"
    request_limits.converting.release()
    with request_limits.slot():  # free again, and given back after
        pass
    assert request_limits.converting.acquire(blocking=False)


class CountingSlots(threading.BoundedSemaphore):
    """limits.converting that counts who has come for a slot."""

    def __init__(self, slots: int) -> None:
        super().__init__(slots)
        self.arrived = 0
        self.lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        with self.lock:
            self.arrived += 1
        return super().acquire(blocking, timeout)


def test_with_batching_at_most_workers_requests_parse_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every admitted request has a thread (8 here), but one slot (--workers 1).

    Bodies over QUEUED_MAX_BYTES: a smaller one is parsed on the event loop,
    one at a time there, and only when a slot is free without waiting
    (rest/handlers.py's queued predict; test_serving_hot_path.py)."""
    export(tmp_path)
    conf = config(tmp_path, "--workers=1", "--max-queue=8", "--enable_batching")
    application = make_app(conf, loader=lambda directory, version: HalfPlusTwo())
    slots = CountingSlots(1)
    state: ServingCore = application.state.serving
    state.limits = limits.RequestLimits(conf.max_body_bytes, slots)
    parsing, most, lock, go = [0], [0], threading.Lock(), threading.Event()
    parse = json_values.parse_json_object

    def counted(body: bytes) -> dict[str, Any]:
        with lock:
            parsing[0] += 1
            most[0] = max(most[0], parsing[0])
        go.wait(30)
        try:
            return parse(body)
        finally:
            with lock:
                parsing[0] -= 1

    monkeypatch.setattr(json_values, "parse_json_object", counted)
    large = b'{"instances": [' + b"1.0, " * (QUEUED_MAX_BYTES // 5) + b"1.0]}"
    with TestClient(application) as client, ThreadPoolExecutor(4) as pool:
        wait_ready(client)
        futures = [
            pool.submit(client.post, "/v1/models/model:predict", content=large) for _ in range(4)
        ]
        deadline = time.monotonic() + 30
        while slots.arrived < 4 and time.monotonic() < deadline:
            time.sleep(0.01)  # until every request has come for the slot
        assert (slots.arrived, parsing[0]) == (4, 1)  # three wait, holding no JSON
        go.set()
        assert [f.result(30).status_code for f in futures] == [200] * 4
    assert most[0] == 1
