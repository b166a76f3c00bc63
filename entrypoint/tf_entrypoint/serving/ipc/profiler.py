"""TF Serving's profiler service in a server of several processes.

TensorFlow runs in the engine, so its profiler records there: a front-end's
gRPC port answers ``tensorflow.ProfilerService`` as one process does
(grpc/profiler.py), with :class:`RemoteProfiler` as its backend, which asks
the engine over the engine call (:class:`EngineProfiles`, the engine's
``profile_*`` operations). The trace is the engine's: the process that runs
the models.

A capture that no front-end stops (its front-end died while it recorded) is
stopped by the engine ORPHAN_AFTER seconds past the duration it was started
for, so TensorFlow's one profiler is never held for good.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from tf_entrypoint.serving.core.errors import Code, ServingError
from tf_entrypoint.serving.core.servable import Capture, Profiler
from tf_entrypoint.serving.core.types import Tensor
from tf_entrypoint.serving.ipc.lanes import Lanes

log = logging.getLogger("tf_entrypoint.serving")

#: Seconds past its duration after which the engine stops a capture nobody stopped.
ORPHAN_AFTER = 60.0
#: Seconds a front-end waits for the engine to start a capture, or to save a trace.
CALL_TIMEOUT = 120.0
#: The tensor a trace (a serialized XSpace) crosses in.
XSPACE = "xspace"
NO_PROFILER = "the model engine has no profiler"


def trace_tensor(xspace: bytes) -> dict[str, Tensor]:
    return {XSPACE: Tensor("DT_UINT8", (len(xspace),), memoryview(xspace))}


def trace_of(tensors: Mapping[str, Tensor]) -> bytes:
    values: Any = tensors[XSPACE].values
    data: bytes = values.tobytes()  # a memoryview, or the model layer's OutputValues
    return data


class EngineProfiles:
    """The engine's ``profile_*`` operations over its own profiler (None: refused)."""

    def __init__(self, profiler: Profiler | None) -> None:
        self.profiler = profiler
        self._lock = threading.Lock()
        #: Capture number -> the capture, not yet stopped.
        self._captures: dict[int, Capture] = {}
        self._numbers = itertools.count(1)

    def __call__(
        self, op: str, args: tuple[Any, ...], inputs: Mapping[str, Tensor]
    ) -> tuple[Any, Mapping[str, Tensor]]:
        profiler = self.profiler
        if profiler is None:
            raise ServingError(Code.UNAVAILABLE, NO_PROFILER)
        if op == "profile_start":
            options, scratch, seconds = args[0], args[1], args[2]
            capture = profiler.start(dict(options), str(scratch), float(seconds))
            with self._lock:
                number = next(self._numbers)
                self._captures[number] = capture
            orphan = threading.Timer(float(seconds) + ORPHAN_AFTER, self._orphaned, (number,))
            orphan.daemon = True
            orphan.start()
            return number, {}
        if op == "profile_stop":
            return None, trace_tensor(self._take(int(args[0])).stop())
        if op == "profile_empty":
            return profiler.empty(trace_of(inputs)), {}
        if op == "profile_save":
            root, run, host = str(args[0]), str(args[1]), str(args[2])
            return profiler.save(root, run, host, trace_of(inputs)), {}
        raise ServingError(Code.UNIMPLEMENTED, f"the engine has no operation {op!r}")

    def _take(self, number: int) -> Capture:
        with self._lock:
            capture = self._captures.pop(number, None)
        if capture is None:
            raise ServingError(Code.NOT_FOUND, f"no profile capture {number} is recording")
        return capture

    def _orphaned(self, number: int) -> None:
        with self._lock:
            capture = self._captures.pop(number, None)
        if capture is None:
            return
        log.warning("profiler: capture %d was not stopped by its front-end: stopped", number)
        try:
            capture.stop()
        except Exception as err:  # noqa: BLE001 - a timer thread: logged, nothing to answer
            log.warning("profiler: stopping capture %d failed: %s", number, err)


class RemoteCapture:
    """A capture recording in the engine."""

    def __init__(self, lanes: Lanes, number: int) -> None:
        self._lanes = lanes
        self._number = number

    def stop(self) -> bytes:
        _, tensors = self._lanes.call(
            "profile_stop", (self._number,), {}, time.monotonic() + CALL_TIMEOUT, patient=True
        )
        return trace_of(tensors)


class RemoteProfiler:
    """core/servable.py's Profiler over the engine's (a front-end's gRPC profiler service)."""

    def __init__(self, lanes: Lanes) -> None:
        self._lanes = lanes

    def _call(self, op: str, args: tuple[Any, ...], inputs: Mapping[str, Tensor]) -> Any:
        deadline = time.monotonic() + CALL_TIMEOUT
        result, _ = self._lanes.call(op, args, inputs, deadline, patient=True)
        return result

    def start(self, options: Mapping[str, int], scratch: str, seconds: float) -> Capture:
        number = self._call("profile_start", (dict(options), scratch, seconds), {})
        return RemoteCapture(self._lanes, int(number))

    def save(self, root: str, run: str, host: str, xspace: bytes) -> str:
        return str(self._call("profile_save", (root, run, host), trace_tensor(xspace)))

    def empty(self, xspace: bytes) -> bool:
        return bool(self._call("profile_empty", (), trace_tensor(xspace)))
