"""TensorFlow's profiler in this process, for TF Serving's `tensorflow.ProfilerService` on the
gRPC port (grpc/profiler.py answers the service; this module records and writes).

A capture is TensorFlow's own ProfilerSession (what `tf.profiler.experimental.start`
and TensorFlow's profiler server use), so the trace is TensorFlow's XSpace,
as its profiler server would write it. No profiler server is started: it
would listen on a second port, on every interface (TensorFlow's server takes
no address), which nobody asked to expose (docs/robustness.md).
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tf_entrypoint.serving.core.errors import Code, ServingError

T = TypeVar("T")
#: The ProfileOptions fields TensorFlow's ProfilerSession reads from Python.
OPTIONS = ("host_tracer_level", "device_tracer_level", "python_tracer_level")
_scratch_numbers = itertools.count(1)


def _files(what: str, action: Callable[[], T]) -> T:
    """`action()`, TensorFlow's file errors as the client's (a LOGDIR it cannot write)."""
    import tensorflow as tf  # noqa: PLC0415 - the server process has it loaded already

    try:
        return action()
    except tf.errors.OpError as err:
        raise ServingError(Code.of(err.error_code), f"cannot {what}: {err.message}") from None


class TensorFlowCapture:
    """One ProfilerSession; :meth:`stop` hands its XSpace back and removes its folder."""

    def __init__(self, options: Mapping[str, int], scratch: str) -> None:
        import tensorflow as tf  # noqa: PLC0415
        from tensorflow.python.profiler.internal import _pywrap_profiler  # noqa: PLC0415

        self._gfile = tf.io.gfile
        if scratch:
            number = next(_scratch_numbers)
            self._folder = f"{scratch.rstrip('/')}/.tf-entrypoint-{os.getpid()}-{number}"
        else:
            self._folder = tempfile.mkdtemp(prefix="tf-entrypoint-profile-")
        self._session: Any = _pywrap_profiler.ProfilerSession()
        wanted = {name: int(value) for name, value in options.items() if name in OPTIONS}
        try:
            self._session.start(self._folder, wanted)
        except tf.errors.AlreadyExistsError:
            self._remove()
            raise ServingError(
                Code.ALREADY_EXISTS,
                "Another profile is being captured in this server: retry once it ends "
                "(one at a time, as TensorFlow's profiler allows)",
            ) from None
        except Exception:
            self._remove()
            raise

    def stop(self) -> bytes:
        """The XSpace: TensorFlow writes it (export_to_tb) under the folder, read back."""
        try:
            return _files(f"write the trace under {self._folder}", self._export)
        finally:
            self._session = None
            self._remove()

    def _export(self) -> bytes:
        self._session.export_to_tb()
        found = self._gfile.glob(f"{self._folder}/plugins/profile/*/*.xplane.pb")
        if not found:
            return b""
        with self._gfile.GFile(found[0], "rb") as file:
            data: bytes = file.read()
        return data

    def _remove(self) -> None:
        try:
            if self._gfile.exists(self._folder):
                self._gfile.rmtree(self._folder)
        except Exception:  # noqa: BLE001, S110 - a scratch folder left behind harms nothing
            pass


class TensorFlowProfiler:
    """:class:`~tf_entrypoint.serving.core.servable.Profiler` over TensorFlow's ProfilerSession."""

    def start(self, options: Mapping[str, int], scratch: str, seconds: float) -> TensorFlowCapture:
        return TensorFlowCapture(options, scratch)

    def save(self, root: str, run: str, host: str, xspace: bytes) -> str:
        import tensorflow as tf  # noqa: PLC0415

        folder = f"{root.rstrip('/')}/{run}"
        path = f"{folder}/{host}.xplane.pb"

        def write() -> None:
            tf.io.gfile.makedirs(folder)
            with tf.io.gfile.GFile(path, "wb") as file:
                file.write(xspace)

        _files(f"write the trace to {path}", write)
        return path

    def empty(self, xspace: bytes) -> bool:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: PLC0415

        space = xplane_pb2.XSpace.FromString(xspace)
        return not any(line.events for plane in space.planes for line in plane.lines)
