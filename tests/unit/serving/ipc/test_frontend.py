"""A front-end's transports over an engine (--frontends): the REST app of one front-end
over ipc/remote.py, the engine's core and ipc/service.py in this process, real sockets
and memfds between them; the same answers as one process."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.unit.serving.helpers import HalfPlusTwo, config, export, serving, wait_ready
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.ipc import engine as engine_ops
from tf_entrypoint.serving.ipc.board import Board
from tf_entrypoint.serving.ipc.remote import RemoteModels, RemoteServable
from tf_entrypoint.serving.main import build_core, engine_service, frontend_core
from tf_entrypoint.serving.rest.app import create_app


class Numbered(HalfPlusTwo):
    """HalfPlusTwo that says which version answered (output `v`)."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.signatures = {
            **HalfPlusTwo.signatures,
            "serving_default": p.Signature(
                {"x": p.TensorSpec("DT_FLOAT", (-1,))},
                {"y": p.TensorSpec("DT_FLOAT", (-1,)), "v": p.TensorSpec("DT_INT64", (1,))},
            ),
        }

    def run(
        self,
        name: str,
        inputs: Mapping[str, p.Tensor],
        outputs: Sequence[str],
        *,
        batch: bool = False,
    ) -> dict[str, p.Tensor]:
        answer = super().run(name, inputs, outputs, batch=batch)
        if name == "serving_default":
            answer["v"] = p.Tensor("DT_INT64", (1,), [self.version])
        return {alias: tensor for alias, tensor in answer.items() if alias in outputs}


@pytest.fixture
def engine_and_frontend(tmp_path: Path) -> Iterator[tuple[TestClient, RemoteModels]]:
    export(tmp_path)
    conf = config(tmp_path, "--frontends", "2", "--file_system_poll_wait_seconds", "0.1")
    engine = build_core(conf, loader=lambda directory, version: Numbered(version))
    service = engine_service(engine, conf, str(tmp_path / "engine.sock"))
    service.start()
    engine.start()
    front = frontend_core(conf, str(tmp_path / "engine.sock"), 0, lambda message: None)
    try:
        with TestClient(create_app(front, conf)) as client:
            wait_ready(client)
            assert isinstance(front.manager, RemoteModels)
            yield client, front.manager
    finally:
        front.close()
        service.drain()
        engine.close()


def test_the_front_end_answers_as_one_process_does(
    engine_and_frontend: tuple[TestClient, RemoteModels], tmp_path: Path
) -> None:
    front, _ = engine_and_frontend
    asked = [
        ("POST", "/v1/models/model:predict", {"instances": [1.0, 2.0]}),
        ("POST", "/v1/models/model:predict", {"inputs": {"x": [3.0]}}),
        ("POST", "/v1/models/model:predict", {"signature_name": "broken", "instances": [1.0]}),
        ("POST", "/v1/models/model:predict", {"instances": ["a"]}),
        ("POST", "/v1/models/nope:predict", {"instances": [1.0]}),
        ("POST", "/v1/models/model/versions/7:predict", {"instances": [1.0]}),
        ("GET", "/v1/models/model", None),
        ("GET", "/v1/models/model/metadata", None),
        ("GET", "/v1/models/model/versions/3", None),
        ("POST", "/v2/models/model/infer",
         {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}),
    ]  # fmt: skip
    got = [front.request(method, path, json=body) for method, path, body in asked]
    with serving(tmp_path / "one", Numbered(1)) as one:
        wanted = [one.request(method, path, json=body) for method, path, body in asked]
    for (_, path, _), mine, theirs in zip(asked, got, wanted, strict=True):
        assert (mine.status_code, mine.text) == (theirs.status_code, theirs.text), path


def test_a_swap_fails_no_request_and_the_new_version_answers(
    engine_and_frontend: tuple[TestClient, RemoteModels], tmp_path: Path
) -> None:
    front, models = engine_and_frontend
    with models.lease(p.Route("predict", "model")) as version:
        assert version.number == 1
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            answer = front.post("/v1/models/model:predict", json={"instances": [1.0]})
            if answer.status_code != 200:
                failures.append(answer.text)

    clients = [threading.Thread(target=load) for _ in range(4)]
    for client in clients:
        client.start()
    export(tmp_path, version=2)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = {s["version"]: s["state"] for s in front.get("/v1/models/model").json()[
            "model_version_status"]}  # fmt: skip
        if states == {"2": "AVAILABLE", "1": "END"}:
            break
        time.sleep(0.05)
    stop.set()
    for client in clients:
        client.join()
    assert states == {"2": "AVAILABLE", "1": "END"}
    assert failures == []
    # A lease taken before the swap still runs: on the new version, which it reports.
    answer = front.post("/v1/models/model:predict", json={"inputs": {"x": [1.0]}})
    assert answer.json() == {"outputs": {"y": [2.5], "v": [2]}}


async def _started(servable: RemoteServable, inputs: dict[str, p.Tensor]) -> dict[str, p.Tensor]:
    """A run sent from this event loop (RemoteServable.start), once the loop has a lane."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[dict[str, p.Tensor]] = loop.create_future()

    def done(outputs: dict[str, p.Tensor] | None, error: BaseException | None) -> None:
        if error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(outputs or {})

    waited = time.monotonic() + 5
    while (
        servable.start("serving_default", inputs, ["y", "v"], deadline=None, expired="", done=done)
        is None
    ):
        assert time.monotonic() < waited
        await asyncio.sleep(0.01)
    return await asyncio.wait_for(answer, 5)


@pytest.mark.parametrize("way", ["blocking", "from a loop"])
def test_a_lease_from_before_a_swap_runs_on_the_new_version(
    engine_and_frontend: tuple[TestClient, RemoteModels], tmp_path: Path, way: str
) -> None:
    _, models = engine_and_frontend
    route = p.Route("predict", "model")
    with models.lease(route) as version:
        assert version.number == 1
        export(tmp_path, version=2)
        deadline = time.monotonic() + 10
        while [s.state for s in models.status(route)] != ["AVAILABLE", "END"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        servable = version.servable
        assert isinstance(servable, RemoteServable)
        x = p.Tensor("DT_FLOAT", (1,), [4.0])
        if way == "blocking":
            outputs = servable.run("serving_default", {"x": x}, ["y", "v"])
        else:
            outputs = asyncio.run(_started(servable, {"x": x}))
        assert list(outputs["v"].values) == [2]  # stale, sent again for version 2
        assert version.number == 2


def test_the_metrics_page_has_every_process(
    engine_and_frontend: tuple[TestClient, RemoteModels],
) -> None:
    front, _ = engine_and_frontend
    front.post("/v1/models/model:predict", json={"instances": [1.0]})
    page = front.get("/metrics").text
    # the engine's (it loaded the version) and the front-end's own (it answered the predict)
    assert 'serving_model_loads_total{model="model",result="success"} 1.0' in page
    assert 'serving_requests_total{api="predict",code="200",model="model",protocol="v1"}' in page
    assert "serving_workers 2.0" in page  # the front-end's threads; the engine's count none


def test_an_engine_that_is_gone_makes_the_front_end_unready(
    engine_and_frontend: tuple[TestClient, RemoteModels], tmp_path: Path
) -> None:
    front, models = engine_and_frontend
    models.lanes.close()  # as if the engine were gone: every call is UNAVAILABLE
    assert front.get("/readyz").status_code == 503
    answer = front.post("/v1/models/model:predict", json={"instances": [1.0]})
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"


@pytest.fixture
def two_front_ends(tmp_path: Path) -> Iterator[tuple[TestClient, TestClient, RemoteModels]]:
    """An engine and two front-ends sharing a board (ipc/board.py), as processes.py makes."""
    export(tmp_path)
    conf = config(tmp_path, "--frontends", "2", "--file_system_poll_wait_seconds", "0.1")
    board = Board.create(2)
    engine = build_core(conf, loader=lambda directory, version: Numbered(version))
    path = str(tmp_path / "engine.sock")
    service = engine_service(engine, conf, path, board)
    service.start()
    engine.start()
    fronts = [frontend_core(conf, path, i, lambda message: None, board=board) for i in (0, 1)]
    try:
        with (
            TestClient(create_app(fronts[0], conf)) as one,
            TestClient(create_app(fronts[1], conf)) as two,
        ):
            wait_ready(one)
            wait_ready(two)
            assert isinstance(fronts[1].manager, RemoteModels)
            yield one, two, fronts[1].manager
    finally:
        for front in fronts:
            front.close()
        service.drain()
        engine.close()


def test_a_swap_is_seen_by_the_next_lease_of_every_front_end(
    two_front_ends: tuple[TestClient, TestClient, RemoteModels], tmp_path: Path
) -> None:
    one, _, models = two_front_ends
    route = p.Route("predict", "model")
    with models.lease(route) as version:
        assert version.number == 1  # cached now, for FRESH seconds
    export(tmp_path, version=2)
    deadline = time.monotonic() + 10
    while {s["state"] for s in one.get("/v1/models/model").json()["model_version_status"]} != {
        "AVAILABLE", "END"
    }:  # fmt: skip
        assert time.monotonic() < deadline
        time.sleep(0.02)
    with models.lease(route) as version:  # the board's generation moved: asked again
        assert version.number == 2


def test_a_scrape_has_every_front_ends_requests_at_once(
    two_front_ends: tuple[TestClient, TestClient, RemoteModels], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine asks the other front-end (ipc/board.py wakes its reporter) and waits
    for its answer. The engine's bounds on that wait (0.5 s; a front-end silent for 3 s
    is not waited for) are lifted here: on a loaded machine this process's threads may
    take longer than that, and the point is that the answer is asked for and used."""
    monkeypatch.setattr(engine_ops, "FRESH_REPORTS", 60.0)
    monkeypatch.setattr(engine_ops, "LIVE", 60.0)
    one, two, _ = two_front_ends
    for _ in range(3):
        assert two.post("/v1/models/model:predict", json={"instances": [1.0]}).status_code == 200
    page = one.get("/metrics").text  # served by the other front-end, at once
    labels = '{api="predict",code="200",model="model",protocol="v1"}'
    assert f"serving_requests_total{labels} 3.0" in page


def test_the_front_ends_share_one_admission_bound() -> None:
    board = Board.create()
    first, second = board.places(0, 2), board.places(1, 2)
    assert first.take(3) == 1
    assert second.take(3) == 2
    assert first.take(3) == 3
    assert second.take(3) is None  # 3 held between them
    first.give()
    assert second.take(3) == 3
    # A front-end that starts again holds none: what the dead one held comes back.
    restarted = board.places(1, 2)
    assert restarted.held() == 1  # the first front-end's one
    assert restarted.take(3) == 2


def test_rest_predicts_are_sent_from_the_loop_once_it_has_lanes(
    engine_and_frontend: tuple[TestClient, RemoteModels],
) -> None:
    front, models = engine_and_frontend
    for _ in range(20):  # the first ones go the blocking way while the loop's lane is made
        answer = front.post("/v1/models/model:predict", json={"instances": [1.0]})
        assert answer.status_code == 200, answer.text
    loops = list(models.lanes._loops.values())
    assert len(loops) == 1  # the app's loop
    assert loops[0]._count >= 1
    assert loops[0]._free  # each answer gave its lane back
