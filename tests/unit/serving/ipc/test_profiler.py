"""TF Serving's profiler service across processes (ipc/profiler.py): a front-end's
RemoteProfiler over real lanes and the engine's operations (ipc/engine.py) over a
profiler that records nothing but what it was asked."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import cast

import pytest

from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.models import ModelTable
from tf_entrypoint.serving.ipc import profiler as ipc_profiler
from tf_entrypoint.serving.ipc.engine import EngineOps
from tf_entrypoint.serving.ipc.lanes import Lanes
from tf_entrypoint.serving.ipc.profiler import RemoteProfiler
from tf_entrypoint.serving.ipc.service import EngineService

#: Larger than a lane's region here (64 KiB), so a trace crosses in a one-off region.
TRACE = bytes(range(256)) * 1024
#: The profile operations never ask the model table.
NO_MODELS = cast(ModelTable, object())


class Capture:
    def __init__(self, owner: Recorder) -> None:
        self.owner = owner

    def stop(self) -> bytes:
        with self.owner.lock:
            self.owner.stopped += 1
            self.owner.recording = False
        return TRACE


class Recorder:
    """core/servable.py's Profiler: one capture at a time, as TensorFlow's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.recording = False
        self.started: list[tuple[dict[str, int], str, float]] = []
        self.stopped = 0
        self.saved: list[tuple[str, str, str, bytes]] = []

    def start(self, options: Mapping[str, int], scratch: str, seconds: float) -> Capture:
        with self.lock:
            if self.recording:
                raise ServingError(Code.ALREADY_EXISTS, "another profile is being captured")
            self.recording = True
            self.started.append((dict(options), scratch, seconds))
        return Capture(self)

    def save(self, root: str, run: str, host: str, xspace: bytes) -> str:
        self.saved.append((root, run, host, xspace))
        return f"{root}/{run}/{host}.xplane.pb"

    def empty(self, xspace: bytes) -> bool:
        return xspace != TRACE


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def remote(tmp_path: Path, recorder: Recorder) -> Iterator[RemoteProfiler]:
    path = str(tmp_path / "engine.sock")
    service = EngineService(path, EngineOps(NO_MODELS, profiler=recorder), max_lanes=8)
    service.start()
    lanes = Lanes(path, 4, region_bytes=64 * 1024)
    yield RemoteProfiler(lanes)
    lanes.close()
    service.close()


def test_a_profile_records_in_the_engine_and_its_trace_comes_back(
    remote: RemoteProfiler, recorder: Recorder
) -> None:
    capture = remote.start({"host_tracer_level": 2}, "/profiles/run", 0.5)
    assert recorder.started == [({"host_tracer_level": 2}, "/profiles/run", 0.5)]
    assert recorder.recording
    trace = capture.stop()
    assert trace == TRACE
    assert not recorder.recording
    assert remote.empty(trace) is False
    assert remote.empty(b"other") is True
    path = remote.save("/profiles", "run", "host", trace)
    assert path == "/profiles/run/host.xplane.pb"
    assert recorder.saved == [("/profiles", "run", "host", TRACE)]


def test_the_engines_answers_cross_as_they_are(remote: RemoteProfiler) -> None:
    """ALREADY_EXISTS while a capture records, as TensorFlow's one profiler answers;
    a capture stopped twice is NOT_FOUND, not a second trace."""
    capture = remote.start({}, "", 1.0)
    with pytest.raises(ServingError) as second:
        remote.start({}, "", 1.0)
    assert second.value.code == Code.ALREADY_EXISTS
    capture.stop()
    with pytest.raises(ServingError) as again:
        capture.stop()
    assert again.value.code == Code.NOT_FOUND


def test_a_capture_nobody_stops_is_stopped_by_the_engine(
    remote: RemoteProfiler, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its front-end died while it recorded: the engine stops it past its duration,
    so the next profile can start."""
    monkeypatch.setattr(ipc_profiler, "ORPHAN_AFTER", 0.05)
    remote.start({}, "", 0.05)
    deadline = time.monotonic() + 10
    while recorder.recording and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recorder.stopped == 1
    remote.start({}, "", 1.0).stop()


def test_an_engine_without_a_profiler_says_so(tmp_path: Path) -> None:
    path = str(tmp_path / "engine.sock")
    service = EngineService(path, EngineOps(NO_MODELS), max_lanes=4)
    service.start()
    lanes = Lanes(path, 1, region_bytes=4096)
    try:
        with pytest.raises(ServingError) as refused:
            RemoteProfiler(lanes).start({}, "", 1.0)
        assert refused.value.code == Code.UNAVAILABLE
        assert ipc_profiler.NO_PROFILER in refused.value.message
    finally:
        lanes.close()
        service.close()
