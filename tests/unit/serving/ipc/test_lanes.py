"""ipc/lanes.py and ipc/service.py: a front-end's calls into an engine, over real sockets
and memfds in this process (the engine's threads stand in for its process)."""

from __future__ import annotations

import array
import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.types import Tensor
from tf_entrypoint.serving.ipc import lanes as lanes_module
from tf_entrypoint.serving.ipc import wire
from tf_entrypoint.serving.ipc.lanes import ENGINE_GONE, NO_ANSWER, Lanes
from tf_entrypoint.serving.ipc.service import EngineService


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fds_settle_at(count: int) -> bool:
    """Whether the open descriptors come back to `count` (the engine's threads close
    theirs just after they answer)."""
    waited = time.monotonic() + 5
    while open_fds() != count and time.monotonic() < waited:
        time.sleep(0.01)
    return open_fds() == count


def handler(op: Any, args: Any, inputs: Any, deadline: Any) -> tuple[Any, dict[str, Tensor]]:
    """The stand-in engine: a few operations a test can ask for."""
    if op == "double":
        (x,) = inputs.values()
        return ("doubled", args), {
            "y": Tensor(x.dtype, x.shape, array.array("f", [2 * v for v in x.values]))
        }
    if op == "echo":
        return len(inputs), {
            alias: Tensor(t.dtype, t.shape, t.values if t.dtype == "DT_STRING" else bytes(t.values))
            for alias, t in inputs.items()
        }
    if op == "big":
        return None, {"y": Tensor("DT_UINT8", (args[0],), b"\x07" * args[0])}
    if op == "refuse":
        raise ServingError(Code.INVALID_ARGUMENT, "a bad input: x")
    if op == "busy":
        raise ServingError(Code.UNAVAILABLE, "busy", retry_after=3.0)
    if op == "crash":
        raise RuntimeError("a bug in the engine")
    if op == "sleep":
        time.sleep(args[0])
        return "slept", {}
    raise ServingError(Code.UNIMPLEMENTED, f"no {op}")


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "engine.sock")


@pytest.fixture
def engine(path: str) -> Iterator[EngineService]:
    service = EngineService(path, handler, max_lanes=16)
    service.start()
    yield service
    service.close()


@pytest.fixture
def lanes(engine: EngineService, path: str) -> Iterator[Lanes]:
    made = Lanes(path, 4, region_bytes=64 * 1024)
    yield made
    made.close()


def floats(*values: Any) -> Tensor:
    return Tensor("DT_FLOAT", (len(values),), array.array("f", values))


def test_a_call_crosses_and_its_answer_comes_back(lanes: Lanes) -> None:
    result, outputs = lanes.call("double", ("m", 3), {"x": floats(1.0, 2.5)}, None)
    assert result == ("doubled", ("m", 3))
    assert outputs["y"].shape == (2,)
    assert list(outputs["y"].values) == [2.0, 5.0]


def test_answers_are_copied_out_of_the_lane(lanes: Lanes) -> None:
    _, first = lanes.call("double", (), {"x": floats(1.0)}, None)
    lanes.call("double", (), {"x": floats(100.0)}, None)  # the same lane, written again
    assert list(first["y"].values) == [2.0]


def test_strings_and_every_layout_cross(lanes: Lanes) -> None:
    inputs = {
        "s": Tensor("DT_STRING", (2,), [b"a", b"\x00\xff" * 1000]),
        "i": Tensor("DT_INT64", (1,), array.array("q", [-5])),
    }
    count, outputs = lanes.call("echo", (), inputs, None)
    assert count == 2
    assert outputs["s"].values == [b"a", b"\x00\xff" * 1000]
    assert bytes(outputs["i"].values) == array.array("q", [-5]).tobytes()


def test_requests_and_answers_larger_than_a_lane_go_in_regions_of_their_own(lanes: Lanes) -> None:
    big = Tensor("DT_UINT8", (300_000,), bytes(range(256)) * 1171 + bytes(224))
    lanes.call("echo", (), {}, None)  # the lane itself: a socket and a region on each side
    before = open_fds()
    _, outputs = lanes.call("echo", (), {"b": big}, None)
    assert bytes(outputs["b"].values) == bytes(big.values)
    _, outputs = lanes.call("big", (1_000_000,), {}, None)
    assert bytes(outputs["y"].values) == b"\x07" * 1_000_000
    assert fds_settle_at(before)  # the one-off regions are closed on both sides


def test_the_engines_errors_keep_their_code_message_and_retry_after(lanes: Lanes) -> None:
    with pytest.raises(ServingError) as refused:
        lanes.call("refuse", (), {}, None)
    assert (refused.value.code, refused.value.message) == (Code.INVALID_ARGUMENT, "a bad input: x")
    with pytest.raises(ServingError) as busy:
        lanes.call("busy", (), {}, None)
    assert (busy.value.code, busy.value.retry_after) == (Code.UNAVAILABLE, 3.0)
    # the lane is fine afterwards
    assert lanes.call("double", (), {"x": floats(1.0)}, None)[0] == ("doubled", ())


def test_an_exception_in_the_engine_is_internal_and_the_lane_goes_on(
    lanes: Lanes, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ServingError) as crashed:
        lanes.call("crash", (), {}, None)
    assert crashed.value.code == Code.INTERNAL
    assert "a bug in the engine" in crashed.value.message
    assert "Traceback" in caplog.text  # the traceback is in the engine's log only
    assert "Traceback" not in crashed.value.message
    assert lanes.call("double", (), {"x": floats(1.0)}, None)[0] == ("doubled", ())


def test_a_stuck_engine_call_still_ends_at_the_deadline(lanes: Lanes) -> None:
    started = time.monotonic()
    with pytest.raises(ServingError) as late:
        lanes.call("sleep", (2.0,), {}, time.monotonic() + 0.2)
    assert late.value.code == Code.DEADLINE_EXCEEDED
    assert late.value.message == NO_ANSWER
    assert time.monotonic() - started < 1.5
    # the late answer is never read as another call's
    assert lanes.call("double", (), {"x": floats(4.0)}, None)[0] == ("doubled", ())


def test_a_call_past_its_deadline_is_not_run(lanes: Lanes) -> None:
    with pytest.raises(ServingError) as late:
        lanes.call("crash", (), {}, time.monotonic() - 1)
    assert late.value.code == Code.DEADLINE_EXCEEDED


def test_calls_from_many_threads_share_the_lanes(lanes: Lanes, engine: EngineService) -> None:
    errors, results = [], []

    def client(n: int) -> None:
        try:
            for i in range(50):
                _, out = lanes.call("double", (), {"x": floats(n, i)}, None)
                results.append(list(out["y"].values) == [2 * n, 2 * i])
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results == [True] * 400
    assert len(engine._lanes) <= 4  # at most max_lanes at once


def test_a_call_waits_for_a_lane_within_its_deadline(path: str, engine: EngineService) -> None:
    one = Lanes(path, 1, region_bytes=4096)
    try:
        holder = threading.Thread(target=one.call, args=("sleep", (0.5,), {}, None))
        holder.start()
        time.sleep(0.1)
        with pytest.raises(ServingError) as late:
            one.call("double", (), {"x": floats(1.0)}, time.monotonic() + 0.1)
        assert late.value.code == Code.DEADLINE_EXCEEDED
        holder.join()
    finally:
        one.close()


def test_an_engine_that_is_gone_is_unavailable_and_a_new_one_is_used(
    path: str, engine: EngineService
) -> None:
    lanes = Lanes(path, 2, region_bytes=4096)
    try:
        lanes.call("double", (), {"x": floats(1.0)}, None)
        engine.close()
        with pytest.raises(ServingError) as gone:
            lanes.call("double", (), {"x": floats(1.0)}, None)
        assert (gone.value.code, gone.value.message) == (Code.UNAVAILABLE, ENGINE_GONE)
        assert gone.value.retry_after == lanes_module.RETRY_AFTER
        restarted = EngineService(path, handler, max_lanes=4)
        restarted.start()
        try:
            assert lanes.call("double", (), {"x": floats(1.0)}, None)[0] == ("doubled", ())
        finally:
            restarted.close()
    finally:
        lanes.close()


def test_an_engine_that_dies_during_a_call_is_unavailable(path: str, engine: EngineService) -> None:
    lanes = Lanes(path, 1, region_bytes=4096)
    try:
        threading.Timer(0.2, engine.close).start()
        with pytest.raises(ServingError) as gone:
            lanes.call("sleep", (1.0,), {}, None)
        assert gone.value.code == Code.UNAVAILABLE
    finally:
        lanes.close()


def test_nothing_is_left_open_or_on_disk(path: str) -> None:
    before = open_fds()
    service = EngineService(path, handler, max_lanes=4)
    service.start()
    lanes = Lanes(path, 2, region_bytes=4096)
    lanes.call("big", (100_000,), {}, None)
    lanes.close()
    service.close()
    assert fds_settle_at(before)
    assert not os.path.exists(path)


def test_the_socket_is_private_and_strangers_are_refused(path: str, engine: EngineService) -> None:
    assert os.stat(path).st_mode & 0o777 == 0o600
    stranger = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stranger.connect(path)
    stranger.send(wire.dumps(("hello", 99, 1, 4096)))
    assert wire.loads(stranger.recv(4096))[0] == "refused"
    stranger.close()


def test_an_engine_at_its_lane_bound_refuses_more(path: str) -> None:
    service = EngineService(path, handler, max_lanes=1)
    service.start()
    first, second = Lanes(path, 1, region_bytes=4096), Lanes(path, 1, region_bytes=4096)
    try:
        first.call("double", (), {"x": floats(1.0)}, None)
        with pytest.raises(ServingError) as refused:
            second.call("double", (), {"x": floats(1.0)}, None)
        assert refused.value.code == Code.UNAVAILABLE
    finally:
        first.close()
        second.close()
        service.close()


def test_a_patient_call_waits_for_the_engine_past_its_deadline(lanes: Lanes) -> None:
    """A model's run keeps its caller (a worker, an admission place) until the engine
    ends it, as a worker of one process does; the engine still gets the deadline."""
    result, _ = lanes.call("sleep", (0.3,), {}, time.monotonic() + 0.1, patient=True)
    assert result == "slept"


# -- an event loop's own lanes (LoopLanes) and the engine's dispatcher


async def _sent(lanes: Lanes, op: str, args: Any, inputs: Any, *, answered: Any) -> None:
    """Start the call on this loop, once a lane of the loop's is ready (the first start
    only has one made, on a thread: None, the caller's cue to go the blocking way)."""
    waited = time.monotonic() + 5
    while lanes.start(op, args, inputs, None, answered) is None:
        assert time.monotonic() < waited, "the loop never got a lane"
        await asyncio.sleep(0.01)


def _on_loop(lanes: Lanes, op: str, args: Any, inputs: Any) -> tuple[Any, Any, Any, bool]:
    """One call started from an event loop: (result, outputs, error, answered on its thread)."""

    async def run() -> tuple[Any, Any, Any, bool]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[tuple[Any, Any, Any, bool]] = loop.create_future()
        here = threading.get_ident()

        def answered(result: Any, outputs: Any, error: Any) -> None:
            answer.set_result((result, outputs, error, threading.get_ident() == here))

        await _sent(lanes, op, args, inputs, answered=answered)
        return await asyncio.wait_for(answer, 5)

    return asyncio.run(run())


def test_a_call_from_an_event_loop_is_answered_on_it(path: str, engine: EngineService) -> None:
    lanes = Lanes(path, 2, region_bytes=64 * 1024, loop_lanes=2)
    try:
        result, outputs, error, on_loop = _on_loop(lanes, "double", ("m",), {"x": floats(1.5)})
        assert (result, error, on_loop) == (("doubled", ("m",)), None, True)
        assert list(outputs["y"].values) == [3.0]
        _, outputs, _, _ = _on_loop(lanes, "big", (200_000,), {})  # an answer in its own region
        assert bytes(outputs["y"].values) == b"\x07" * 200_000
        _, _, error, _ = _on_loop(lanes, "busy", (), {})
        assert (error.code, error.retry_after) == (Code.UNAVAILABLE, 3.0)
    finally:
        lanes.close()


def test_an_event_loop_without_lanes_or_too_large_a_call_goes_the_blocking_way(
    path: str, engine: EngineService
) -> None:
    none = Lanes(path, 2, region_bytes=4096)  # loop_lanes=0
    small = Lanes(path, 2, region_bytes=4096, loop_lanes=1)
    big = {"b": Tensor("DT_UINT8", (10_000,), bytes(10_000))}

    async def starts() -> tuple[Any, Any]:
        await _sent(small, "double", (), {"x": floats(1.0)}, answered=lambda *a: None)
        await asyncio.sleep(0.1)  # its answer gives the lane back
        return none.start("echo", (), {}, None, print), small.start("echo", (), big, None, print)

    try:
        assert asyncio.run(starts()) == (None, None)
        assert none.start("echo", (), {}, None, print) is None  # no running loop
    finally:
        none.close()
        small.close()


def test_an_engine_that_dies_during_a_loop_call_is_unavailable(
    path: str, engine: EngineService
) -> None:
    lanes = Lanes(path, 1, region_bytes=4096, loop_lanes=1)
    try:
        threading.Timer(0.3, engine.close).start()
        _, _, error, on_loop = _on_loop(lanes, "sleep", (1.0,), {})
        assert (error.code, error.message, on_loop) == (Code.UNAVAILABLE, ENGINE_GONE, True)
    finally:
        lanes.close()


def test_short_calls_run_on_the_dispatcher_and_others_on_the_pool(path: str) -> None:
    threads: dict[str, set[str]] = {}

    def recording(op: Any, args: Any, inputs: Any, deadline: Any) -> Any:
        threads.setdefault(op, set()).add(threading.current_thread().name)
        return handler(op, args, inputs, deadline)

    def short(op: str, args: Any) -> str | None:
        return op if op in ("double", "sleep") else None  # "sleep" is timed: too long

    service = EngineService(path, recording, max_lanes=8, short=short)
    service.start()
    lanes = Lanes(path, 2, region_bytes=4096)
    try:
        for _ in range(5):
            lanes.call("double", (), {"x": floats(1.0)}, None)
            lanes.call("sleep", (0.001,), {}, None)  # short for a loop (2 ms), not here
            lanes.call("echo", (), {}, None)
        # a short kind: timed once on the pool, then run where its message was read
        assert "engine-dispatch" in threads["double"]
        assert all(name.startswith("engine-call") for name in threads["sleep"] | threads["echo"])
    finally:
        lanes.close()
        service.close()


def test_a_slow_call_on_the_pool_holds_up_no_other_lane(lanes: Lanes) -> None:
    slow = threading.Thread(target=lanes.call, args=("sleep", (1.0,), {}, None))
    slow.start()
    time.sleep(0.1)
    started = time.monotonic()
    for _ in range(20):
        lanes.call("double", (), {"x": floats(1.0)}, None)
    assert time.monotonic() - started < 0.9  # answered while the slow call still ran
    slow.join()
