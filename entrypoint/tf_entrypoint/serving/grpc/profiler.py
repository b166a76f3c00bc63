"""TF Serving's profiler service (`tensorflow.ProfilerService`) on the gRPC port.

TF Serving registers TensorFlow's ProfilerService on its gRPC port unless
--enable_profiler=false; TensorBoard's profile plugin ("Capture profile") and
`tf.profiler.experimental.client.trace(ADDRESS, LOGDIR, MS)` call it: the
server profiles itself for the duration asked and writes the trace under the
client's LOGDIR, a path on the server's file system.

Here TensorFlow's own profiler server (`tf.profiler.experimental.server.start`)
runs in this process on a free port, and every call to a
`tensorflow.ProfilerService` method on the gRPC port is forwarded to it as
bytes, so Profile, Terminate and Monitor behave as TensorFlow implements them
(the same C++ service TF Serving registers). TensorFlow's server takes no
address: it listens on every interface of the container, on a port chosen at
start (logged). It offers nothing the gRPC port does not already offer.

With --enable_profiler=false the methods answer UNIMPLEMENTED saying so,
never grpc's bare "Method not found".
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc import aio

from tf_entrypoint.serving.core.errors import Code, ServingError

log = logging.getLogger("tf_entrypoint.serving")

SERVICE = "tensorflow.ProfilerService"
PREFIX = f"/{SERVICE}/"
#: Its methods (tsl/profiler/protobuf/profiler_service.proto), the `method` label of
#: the gRPC metrics; any other name under the service is counted as "ProfilerService".
METHODS = ("Profile", "Terminate", "Monitor")
#: Seconds TensorFlow's profiler server gets to answer once started.
READY_TIMEOUT = 10.0
OFF = (
    "the profiler service is off (--enable_profiler=false): start the server without "
    "--enable_profiler=false to capture a profile over the gRPC port"
)


def free_port() -> int:
    """A TCP port free on every interface now (TensorFlow's server binds [::]:PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("0.0.0.0", 0))  # noqa: S104 - where TensorFlow's server will listen
        port: int = probe.getsockname()[1]
        return port


def start_tensorflow_profiler(start: Callable[[int], None], port: int | None = None) -> str:
    """Start the backend's profiler server (`start`, model/profiler.py) on a free port;
    its loopback address.

    Raises RuntimeError when it does not answer within READY_TIMEOUT seconds.
    """
    port = port or free_port()
    start(port)
    address = f"127.0.0.1:{port}"
    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=READY_TIMEOUT)
    except grpc.FutureTimeoutError:
        raise RuntimeError(
            f"TensorFlow's profiler server did not answer on {address} within {READY_TIMEOUT:g} s"
        ) from None
    finally:
        channel.close()
    return address


#: Runs one call: (method, its bound handler) -> answer; the gRPC servicer's
#: shared path (drain, cut-off, metrics) wraps `forward` with it.
Wrap = Callable[[str, Callable[[], Awaitable[bytes]], Any], Awaitable[bytes]]


class ProfilerHandler(grpc.GenericRpcHandler):
    """Every tensorflow.ProfilerService method, forwarded to `upstream` as bytes.

    `upstream`: TensorFlow's profiler server's address; None answers each call
    UNIMPLEMENTED (`why`: --enable_profiler=false) or UNAVAILABLE (`why`: it
    failed to start). `wrap` runs each call the way the other gRPC methods run
    (refused while draining, cut off at the end of the grace period, counted).
    """

    def __init__(self, upstream: str | None, why: str, wrap: Wrap, *, off: bool) -> None:
        self.upstream = upstream
        self.why = why
        self.off = off
        self._wrap = wrap
        self._channel: aio.Channel | None = None

    def service(self, handler_call_details: Any) -> Any:
        method: str = handler_call_details.method
        if not method.startswith(PREFIX):
            return None
        name = method[len(PREFIX) :]
        label = name if name in METHODS else "ProfilerService"

        async def handle(request: bytes, context: Any) -> bytes:
            return await self._wrap(label, lambda: self._forward(method, request, context), context)

        # No (de)serializers: the bytes pass through unread.
        return grpc.unary_unary_rpc_method_handler(handle)

    async def _forward(self, method: str, request: bytes, context: Any) -> bytes:
        if self.upstream is None:
            if self.off:
                raise ServingError(Code.UNIMPLEMENTED, self.why)
            raise ServingError(Code.UNAVAILABLE, self.why)
        if self._channel is None:  # made on the gRPC server's event loop
            # Answers of any size, as TensorFlow's own profiler clients take them (a
            # ProfileResponse can carry the trace): grpc's default would cut at 4 MiB.
            self._channel = aio.insecure_channel(
                self.upstream, options=[("grpc.max_receive_message_length", -1)]
            )
        call: Any = self._channel.unary_unary(method)
        try:
            answer: bytes = await call(request, timeout=context.time_remaining())
        except aio.AioRpcError as err:
            code = err.code()
            raise ServingError(Code[code.name], err.details() or code.name) from None
        return answer

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
