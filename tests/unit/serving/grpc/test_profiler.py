"""tensorflow.ProfilerService on the gRPC port: answered in this process, or refused clearly.

TensorFlow is not in the host's venv; a fake profiler stands for the
backend's (the image's real one, with TensorFlow's own profiler client, is
tests/container/test_tfserving_flows.py's profiler test, which also checks
that no port but the gRPC and REST ports listens). `wrap` is what the gRPC
servicer's shared path does with a ServingError: abort with its code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
import pytest
from grpc import aio

from tf_entrypoint.serving.codec import profiler_proto as pb
from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.grpc import profiler

PROFILE = "/tensorflow.ProfilerService/Profile"
TERMINATE = "/tensorflow.ProfilerService/Terminate"
XSPACE = b"\x0a\x02\x12\x00"  # stands for a serialized XSpace
#: --profile-dir of the handlers that write (_request's repository_root is inside it).
LOGS = "/logs"


class FakeCapture:
    def __init__(self, backend: FakeProfiler) -> None:
        self.backend = backend

    def stop(self) -> bytes:
        self.backend.running = False
        self.backend.stopped += 1
        return XSPACE


class FakeProfiler:
    def __init__(self) -> None:
        self.running = False
        self.stopped = 0
        self.started: list[tuple[dict[str, int], str]] = []
        self.saved: list[tuple[str, str, str, bytes]] = []

    def start(self, options: Mapping[str, int], scratch: str, seconds: float) -> FakeCapture:
        if self.running:
            raise ServingError(Code.ALREADY_EXISTS, "Another profile is being captured")
        self.running = True
        self.started.append((dict(options), scratch))
        return FakeCapture(self)

    def save(self, root: str, run: str, host: str, xspace: bytes) -> str:
        self.saved.append((root, run, host, xspace))
        return f"{root}/{run}/{host}.xplane.pb"

    def empty(self, xspace: bytes) -> bool:
        return xspace != XSPACE


async def wrap(method: str, answer: Callable[[], Awaitable[bytes]], context: Any) -> bytes:
    try:
        return await answer()
    except ServingError as err:
        await context.abort(grpc.StatusCode[err.code.name], f"{method}: {err.message}")
        raise


async def _serve(handler: profiler.ProfilerHandler) -> tuple[aio.Server, aio.Channel]:
    server = aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, aio.insecure_channel(f"127.0.0.1:{port}")


async def _call(channel: aio.Channel, method: str, body: bytes, timeout: float = 10) -> Any:
    try:
        multicallable: Any = channel.unary_unary(method)
        return "OK", await multicallable(body, timeout=timeout)
    except aio.AioRpcError as err:
        return err.code().name, err.details()


async def call(
    handler: profiler.ProfilerHandler, method: str, body: bytes, timeout: float = 10
) -> tuple[str, Any]:
    server, channel = await _serve(handler)
    try:
        result: tuple[str, Any] = await _call(channel, method, body, timeout)
        return result
    finally:
        await channel.close()
        await server.stop(None)


def _request(**fields: Any) -> bytes:
    request = pb.ProfileRequest(
        repository_root="/logs/plugins/profile", session_id="2026_11_28", host_name="server"
    )
    request.opts.host_tracer_level = 2
    request.opts.device_tracer_level = 1
    request.opts.duration_ms = 50
    for name, value in fields.items():
        setattr(request, name, value)
    return bytes(request.SerializeToString())


def test_profile_records_for_the_duration_and_writes_where_the_client_says() -> None:
    """Inside --profile-dir: written under the client's repository_root and session id."""
    backend = FakeProfiler()
    handler = profiler.ProfilerHandler(backend, "", wrap, off=False, profile_dir=LOGS)
    code, answer = asyncio.run(call(handler, PROFILE, _request()))
    assert code == "OK", answer
    assert not pb.ProfileResponse.FromString(answer).empty_trace
    options = {"host_tracer_level": 2, "device_tracer_level": 1, "python_tracer_level": 0}
    assert backend.started == [(options, "/logs/plugins/profile/2026_11_28")]
    assert backend.saved == [("/logs/plugins/profile", "2026_11_28", "server", XSPACE)]
    assert not backend.running


def test_emit_xspace_returns_the_trace_instead() -> None:
    backend = FakeProfiler()
    handler = profiler.ProfilerHandler(backend, "", wrap, off=False)
    body = _request(emit_xspace=True, repository_root="")
    code, answer = asyncio.run(call(handler, PROFILE, body))
    assert code == "OK", answer
    assert pb.ProfileResponse.FromString(answer).xspace == XSPACE
    assert backend.saved == []
    assert backend.started[0][1] == ""  # a temporary scratch folder


def test_emit_xspace_needs_no_profile_dir_and_writes_nothing() -> None:
    """Without --profile-dir (the default), emit_xspace with a repository_root too is
    answered with the trace: nothing is written there, not even a scratch folder."""
    backend = FakeProfiler()
    handler = profiler.ProfilerHandler(backend, "", wrap, off=False)
    code, answer = asyncio.run(call(handler, PROFILE, _request(emit_xspace=True)))
    assert code == "OK", answer
    assert pb.ProfileResponse.FromString(answer).xspace == XSPACE
    assert backend.saved == []
    assert backend.started[0][1] == ""


@pytest.mark.parametrize(
    ("profile_dir", "fields", "code", "words"),
    [
        # without --profile-dir: asking the server to write is refused, saying how to allow it
        (None, {}, "PERMISSION_DENIED", ["'/logs/plugins/profile'", "--profile-dir=DIR"]),
        ("/profile", {}, "PERMISSION_DENIED", ["'/logs/plugins/profile'", "--profile-dir"]),
        ("/logs", {"repository_root": "/logs/../etc"}, "PERMISSION_DENIED", ["'/logs/../etc'"]),
        ("/logs", {"repository_root": "/logs2"}, "PERMISSION_DENIED", ["'/logs2'"]),
        ("/logs", {"session_id": "../../etc"}, "INVALID_ARGUMENT", ["session_id"]),
        ("/logs", {"host_name": "../../../etc/cron.d/x"}, "INVALID_ARGUMENT", ["host_name"]),
        (None, {"host_name": ".."}, "INVALID_ARGUMENT", ["host_name"]),
    ],
)
def test_a_trace_outside_the_profile_dir_is_refused_before_any_capture(
    profile_dir: str | None, fields: dict[str, str], code: str, words: list[str]
) -> None:
    backend = FakeProfiler()
    given = {} if profile_dir is None else {"profile_dir": profile_dir}  # None: the default
    handler = profiler.ProfilerHandler(backend, "", wrap, off=False, **given)
    found, details = asyncio.run(call(handler, PROFILE, _request(**fields)))
    assert found == code, details
    for word in words:
        assert word in details
    assert backend.started == []
    assert backend.saved == []


def test_override_hostname_is_a_plain_name_too() -> None:
    backend = FakeProfiler()
    handler = profiler.ProfilerHandler(backend, "", wrap, off=False, profile_dir=LOGS)
    request = pb.ProfileRequest.FromString(_request())
    request.opts.override_hostname = "../../escape"
    found, details = asyncio.run(call(handler, PROFILE, request.SerializeToString()))
    assert found == "INVALID_ARGUMENT"
    assert "host_name" in details
    assert backend.started == []


def test_terminate_ends_a_long_profile_early_and_a_second_one_waits_its_turn() -> None:
    """A 60 s profile, ended by a Terminate naming its session: it answers at once
    (the bound, 30 s, only says it did not wait the minute); a profile asked
    while it runs is ALREADY_EXISTS (TensorFlow allows one session at a time)."""
    backend = FakeProfiler()
    handler = profiler.ProfilerHandler(backend, "", wrap, off=False, profile_dir=LOGS)
    long_one = pb.ProfileRequest.FromString(_request())
    long_one.opts.duration_ms = 60_000

    async def go() -> tuple[Any, Any, Any, float]:
        server, channel = await _serve(handler)
        try:
            started = time.monotonic()
            profile = asyncio.ensure_future(
                _call(channel, PROFILE, long_one.SerializeToString(), timeout=60)
            )
            while not backend.running:
                await asyncio.sleep(0.01)
            second = await _call(channel, PROFILE, _request())
            stop = pb.TerminateRequest(session_id="2026_11_28").SerializeToString()
            terminated = await _call(channel, TERMINATE, stop)
            return await profile, second, terminated, time.monotonic() - started
        finally:
            await channel.close()
            await server.stop(None)

    (code, _), second, terminated, seconds = asyncio.run(go())
    assert code == "OK"
    assert second[0] == "ALREADY_EXISTS"
    assert terminated[0] == "OK"
    assert seconds < 30
    assert len(backend.saved) == 1


def test_a_client_that_goes_away_ends_its_capture() -> None:
    """Its deadline passes mid-profile: the capture is stopped, so the next can start."""
    backend = FakeProfiler()
    handler = profiler.ProfilerHandler(backend, "", wrap, off=False, profile_dir=LOGS)
    long_one = pb.ProfileRequest.FromString(_request())
    long_one.opts.duration_ms = 60_000

    async def go() -> tuple[Any, Any]:
        server, channel = await _serve(handler)
        try:
            first = await _call(channel, PROFILE, long_one.SerializeToString(), timeout=0.3)
            deadline = time.monotonic() + 10
            while backend.running and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return first, await _call(channel, PROFILE, _request())
        finally:
            await channel.close()
            await server.stop(None)

    first, second = asyncio.run(go())
    assert first[0] == "DEADLINE_EXCEEDED"
    assert second[0] == "OK"
    assert backend.stopped == 2


@pytest.mark.parametrize(
    ("method", "body", "code", "words"),
    [
        (PROFILE, b"\xff\xff", "INVALID_ARGUMENT", "tensorflow.ProfileRequest"),
        (PROFILE, _request(repository_root=""), "INVALID_ARGUMENT", "repository_root"),
        ("/tensorflow.ProfilerService/Monitor", b"", "UNIMPLEMENTED", "Monitor"),
        ("/tensorflow.ProfilerService/GetSnapshot", b"", "UNIMPLEMENTED", "GetSnapshot"),
    ],
)
def test_what_it_does_not_do_is_said(method: str, body: bytes, code: str, words: str) -> None:
    handler = profiler.ProfilerHandler(FakeProfiler(), "", wrap, off=False)
    found, details = asyncio.run(call(handler, method, body))
    assert found == code
    assert words in details


def test_off_is_said_not_method_not_found() -> None:
    handler = profiler.ProfilerHandler(None, profiler.OFF, wrap, off=True)
    code, details = asyncio.run(call(handler, PROFILE, b""))
    assert code == "UNIMPLEMENTED"
    assert details == f"Profile: {profiler.OFF}"
    assert "--enable_profiler=false" in details


def test_a_backend_without_a_profiler_is_unavailable_with_the_reason() -> None:
    why = "this server's backend has no profiler"
    handler = profiler.ProfilerHandler(None, why, wrap, off=False)
    assert asyncio.run(call(handler, PROFILE, b"")) == ("UNAVAILABLE", f"Profile: {why}")


@pytest.mark.parametrize(
    ("method", "label"),
    [(PROFILE, "Profile"), ("/tensorflow.ProfilerService/Invented", "ProfilerService")],
)
def test_metric_labels_are_bounded(method: str, label: str) -> None:
    labels: list[str] = []

    async def record(name: str, forward: Callable[[], Awaitable[bytes]], context: Any) -> bytes:
        labels.append(name)
        return b""

    handler = profiler.ProfilerHandler(None, "", record, off=True)
    assert asyncio.run(call(handler, method, b""))[0] == "OK"
    assert labels == [label]


def test_other_services_are_left_to_their_handlers() -> None:
    handler = profiler.ProfilerHandler(None, "", wrap, off=True)
    details = SimpleDetails("/tensorflow.serving.PredictionService/Predict")
    assert handler.service(details) is None


class SimpleDetails:
    def __init__(self, method: str) -> None:
        self.method = method
