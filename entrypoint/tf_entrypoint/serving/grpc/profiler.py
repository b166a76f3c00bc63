"""TF Serving's profiler service (`tensorflow.ProfilerService`) on the gRPC port.

TF Serving registers TensorFlow's ProfilerService on its gRPC port unless
--enable_profiler=false; TensorBoard's profile plugin ("Capture profile") and
`tf.profiler.experimental.client.trace(ADDRESS, LOGDIR, MS)` call it: the
server profiles itself for the duration asked and writes the trace under the
client's LOGDIR, a path on the server's file system.

This server answers the service itself, as TensorFlow's implementation does
(tsl's profiler_service_impl.cc): Profile records with the backend's profiler
in this process (core/servable.Profiler; TensorFlow's ProfilerSession,
model/profiler.py) for the duration asked, or until a Terminate names its
session, then writes the XSpace to REPOSITORY_ROOT/SESSION_ID/HOST.xplane.pb
(or returns it, with `emit_xspace`, writing nothing) and says whether it is
empty. Unlike TF Serving, it writes only under --profile-dir: a Profile whose
folder is not inside it (or any that asks to write when it is not set) is
refused PERMISSION_DENIED before a capture starts (core/trace_paths.py's rule;
docs/robustness.md). No second
port is opened: TensorFlow's own profiler server would listen on every
interface, on a port of its own (docs/robustness.md). Monitor and the
continuous-profiling methods answer UNIMPLEMENTED, as TensorFlow's service
does for Monitor.

With --enable_profiler=false the methods answer UNIMPLEMENTED saying so,
never grpc's bare "Method not found".
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from tf_entrypoint.serving.codec import profiler_proto as pb
from tf_entrypoint.serving.core import trace_paths
from tf_entrypoint.serving.core.deadlines import within
from tf_entrypoint.serving.core.drain import TIMEOUT_ERRORS
from tf_entrypoint.serving.core.errors import Code, ServingError, invalid_argument
from tf_entrypoint.serving.core.servable import Capture, Profiler

log = logging.getLogger("tf_entrypoint.serving")

SERVICE = pb.SERVICE
PREFIX = f"/{SERVICE}/"
#: Its methods (tsl/profiler/protobuf/profiler_service.proto), the `method` label of
#: the gRPC metrics; any other name under the service is counted as "ProfilerService".
METHODS = ("Profile", "Terminate", "Monitor")
#: The ProfileOptions fields a capture takes (TensorFlow's ProfilerSession reads these).
OPTIONS = ("host_tracer_level", "device_tracer_level", "python_tracer_level")
OFF = (
    "the profiler service is off (--enable_profiler=false): start the server without "
    "--enable_profiler=false to capture a profile over the gRPC port"
)

#: Runs one call: (method, its bound handler, context) -> answer; the gRPC servicer's
#: shared path (drain, cut-off, metrics) wraps each method with it.
Wrap = Callable[[str, Callable[[], Awaitable[bytes]], Any], Awaitable[bytes]]


def _parse(message_class: Any, body: bytes) -> Any:
    try:
        return message_class.FromString(body)
    except DecodeError:
        raise invalid_argument(
            f"Failed to parse the request message as {message_class.DESCRIPTOR.full_name}"
        ) from None


class ProfilerHandler(grpc.GenericRpcHandler):
    """Every tensorflow.ProfilerService method, answered here (see the module).

    `backend`: the profiler; None answers each call UNIMPLEMENTED (`why`:
    --enable_profiler=false, `off`) or UNAVAILABLE (`why`: the backend has
    none). `wrap` runs each call the way the other gRPC methods run (refused
    while draining, cut off at the end of the grace period, counted).
    """

    def __init__(
        self,
        backend: Profiler | None,
        why: str,
        wrap: Wrap,
        *,
        off: bool,
        profile_dir: str | None = None,
    ) -> None:
        self.backend = backend
        #: --profile-dir, normalised: traces are written only under it (None: none are).
        self.profile_dir = profile_dir
        self.why = why
        self.off = off
        self._wrap = wrap
        #: Session id -> what a Terminate naming it sets (Profile calls under way).
        self._stops: dict[str, asyncio.Event] = {}

    def service(self, handler_call_details: Any) -> Any:
        method: str = handler_call_details.method
        if not method.startswith(PREFIX):
            return None
        name = method[len(PREFIX) :]
        label = name if name in METHODS else "ProfilerService"

        async def handle(request: bytes, context: Any) -> bytes:
            return await self._wrap(label, lambda: self._answer(name, request), context)

        # No (de)serializers: the bytes are parsed in _answer, a bad message named there.
        return grpc.unary_unary_rpc_method_handler(handle)

    async def _answer(self, name: str, body: bytes) -> bytes:
        backend = self.backend
        if backend is None:
            if self.off:
                raise ServingError(Code.UNIMPLEMENTED, self.why)
            raise ServingError(Code.UNAVAILABLE, self.why)
        if name == "Profile":
            return await self._profile(backend, _parse(pb.ProfileRequest, body))
        if name == "Terminate":
            request = _parse(pb.TerminateRequest, body)
            stop = self._stops.get(request.session_id)
            if stop is not None:
                stop.set()
            return bytes(pb.TerminateResponse().SerializeToString())
        raise ServingError(
            Code.UNIMPLEMENTED,
            f"{SERVICE}/{name} is not implemented (this server's profiler service answers "
            "Profile and Terminate, as TensorFlow's profiler server does)",
        )

    async def _profile(self, backend: Profiler, request: Any) -> bytes:
        """Record for the duration asked (or until Terminate), then write or return it."""
        root, run = request.repository_root, request.session_id
        if not request.emit_xspace and not (root and run):
            raise invalid_argument(
                "ProfileRequest names no repository_root and session_id to write the trace "
                "under, and does not ask for emit_xspace"
            )
        options = {name: getattr(request.opts, name) for name in OPTIONS}
        seconds = (request.opts.duration_ms or request.duration_ms) / 1000
        host = request.opts.override_hostname or request.host_name or "localhost"
        loop = asyncio.get_running_loop()
        scratch = ""  # emit_xspace: a temporary folder of the server's own; nothing written
        if not request.emit_xspace:  # before any capture: only under --profile-dir
            check = trace_paths.trace_folder  # realpath reads the file system: off the loop
            scratch = await loop.run_in_executor(None, check, self.profile_dir, root, run, host)
        start = backend.start
        capture: Capture = await loop.run_in_executor(None, start, options, scratch, seconds)
        stop = self._stops[run] = asyncio.Event()
        try:
            if seconds > 0:
                await within(stop.wait(), seconds)
        except TIMEOUT_ERRORS:
            pass  # the duration asked
        except BaseException:  # cancelled (the client went away, the cut-off): end it
            loop.run_in_executor(None, capture.stop)
            raise
        finally:
            if self._stops.get(run) is stop:
                del self._stops[run]
        xspace: bytes = await loop.run_in_executor(None, capture.stop)
        empty: bool = await loop.run_in_executor(None, backend.empty, xspace)
        response = pb.ProfileResponse(empty_trace=empty)
        if request.emit_xspace:
            response.xspace = xspace
        else:
            folder, name = posixpath.split(scratch)
            path = await loop.run_in_executor(None, backend.save, folder, name, host, xspace)
            log.info("profiler: a %g s trace written to %s", seconds, path)
        return bytes(response.SerializeToString())
