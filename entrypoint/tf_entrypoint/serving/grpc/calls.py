"""One gRPC call's frame, shared by every service of the gRPC transport.

Draining check, cut-off, admission before the message is read, the
timeout (--request-timeout or the client's deadline), code mapping, the
bound on a status message, metrics. Errors carry TF Serving's codes and
messages: NOT_FOUND for an unknown model, version or label,
INVALID_ARGUMENT for a bad tensor or signature, FAILED_PRECONDITION for a
missing signature key, UNAVAILABLE while a model loads or the server
drains, RESOURCE_EXHAUSTED when the admission limit is reached or a message
is too large, DEADLINE_EXCEEDED past the client's deadline or
--request-timeout (README: "gRPC").
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import DecodeError
from grpc import aio

from tf_entrypoint.serving.config import ServeConfig
from tf_entrypoint.serving.config.model_config import ConfigError
from tf_entrypoint.serving.core import tfs_metrics as monitoring
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.admission import (
    EVICTED,
    INLINE_MAX_REQUEST_BYTES,
    Admission,
)
from tf_entrypoint.serving.core.calls import Ask, Predicted
from tf_entrypoint.serving.core.deadlines import within
from tf_entrypoint.serving.core.drain import TIMEOUT_ERRORS
from tf_entrypoint.serving.core.errors import (
    Code,
    Refusal,
    ServingError,
    invalid_argument,
    log_server_fault,
)
from tf_entrypoint.serving.core.queued import queued_start
from tf_entrypoint.serving.core.servable import Servable
from tf_entrypoint.serving.core.serving_core import ServingCore
from tf_entrypoint.serving.grpc import profiler
from tf_entrypoint.serving.grpc.metrics import GrpcMetrics

log = logging.getLogger("tf_entrypoint.serving")

R = TypeVar("R")
N = TypeVar("N")

#: A predict is queued from the loop (Calls.predict_queued) up to this many bytes (a
#: larger one is decoded on a worker): the bound for calls run inline.
QUEUED_MAX_BYTES = INLINE_MAX_REQUEST_BYTES
#: A call's context (requests and responses are protobuf messages, untyped here).
Context = aio.ServicerContext[Any, Any]

#: The Open Inference Protocol's methods (inference_v2.py): protocol "v2" in the metrics.
V2_METHODS = frozenset(
    ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer")
)
#: The gRPC method names, the `method` label of the gRPC metrics.
METHODS = (
    "Predict",
    "Classify",
    "Regress",
    "MultiInference",
    "GetModelMetadata",
    "GetModelStatus",
    "HandleReloadConfigRequest",
    *profiler.METHODS,
    "ProfilerService",
    *V2_METHODS,
)
#: The gRPC methods TF Serving's request_count and request_latency count (by method name).
TFS_METHODS = frozenset(
    (monitoring.API_GRPC_PREDICT, monitoring.API_GRPC_CLASSIFY, monitoring.API_GRPC_REGRESS)
)


#: Bytes a status message may take on the wire. grpc percent-encodes the
#: message in the trailers (every byte outside printable ASCII, and "%", takes
#: three), and its clients refuse a call whose trailers pass 8 kB (soft) to
#: 16 kB (hard): an error quoting a request's 100 kB model name, or 2,000
#: non-ASCII characters (12 bytes each encoded), reached the client as
#: "received metadata size exceeds ... limit" instead of its own code.
MAX_STATUS_MESSAGE_BYTES = 6000


def _wire_bytes(char: str) -> int:
    if " " <= char <= "~" and char != "%":
        return 1
    return 3 * len(char.encode("utf-8", "surrogatepass"))


def status_message(message: str) -> str:
    """`message`, cut (ending in "...") so that it takes at most
    MAX_STATUS_MESSAGE_BYTES percent-encoded."""
    if len(message) * 12 <= MAX_STATUS_MESSAGE_BYTES:  # fits whatever its characters
        return message
    budget = MAX_STATUS_MESSAGE_BYTES - 3
    used = 0
    for index, char in enumerate(message):
        used += _wire_bytes(char)
        if used > budget:
            return message[:index] + "..."
    return message


async def abort(context: Context, code: str, message: str) -> NoReturn:
    """End the call with `code` and `message` (cut to fit the trailers).

    A call whose client has already gone (its deadline passed a moment before
    the server's own timer, or it cancelled) cannot take a status any more:
    grpc's abort then fails inside its C core with ExecuteBatchError, which
    grpc would log with a traceback; the call ends as cancelled instead.
    """
    if not context.done():
        try:
            await context.abort(grpc.StatusCode[code], status_message(message))
        except aio.AbortError:
            raise
        except Exception as err:  # noqa: BLE001 - the status could not be sent: the call is gone
            log.debug("gRPC call ended before its %s status could be sent: %s", code, err)
    raise asyncio.CancelledError


def route_of(kind: p.Kind, request: Any) -> p.Route:
    """The model, version or label a request's ModelSpec addresses."""
    if not request.HasField("model_spec"):
        raise invalid_argument("Missing ModelSpec")
    return route_of_spec(kind, request.model_spec)


def route_of_spec(kind: p.Kind, spec: Any) -> p.Route:
    choice = spec.WhichOneof("version_choice")
    version = int(spec.version.value) if choice == "version" else None
    label = spec.version_label if choice == "version_label" else None
    return p.Route(kind, spec.name, version, label)


#: What a call's frame catches: the one error type.
ERRORS = (ServingError,)


def code_name(err: ServingError) -> str:
    """The gRPC code of an error: its canonical code's name, as it is (no status between)."""
    return err.code.name


class Calls:
    """What both services share: admission, timeouts, errors, metrics."""

    def __init__(self, state: ServingCore, config: ServeConfig) -> None:
        self.state = state
        self.config = config
        self.manager = state.manager
        #: The one call into the core per request (core/calls.py).
        self.core = state.call
        #: gRPC's own series (by method and code); the core counts the rest.
        self.metrics = GrpcMetrics.of(state.metrics)
        #: Calls whose message did not arrive in time: logged, a line at most every minute.
        self.late = LateMessages()

    def timeout(self, context: Context) -> float:
        """Seconds the request may wait and run: --request-timeout or the deadline."""
        limits = [self.config.request_timeout or float("inf")]
        remaining = context.time_remaining()
        if remaining is not None:
            limits.append(max(remaining, 0.001))
        limit = min(limits)
        return 0.0 if limit == float("inf") else limit

    async def call(
        self,
        method: str,
        route: Callable[[], p.Route | None],
        context: Context,
        answer: Callable[[p.Route | None], Any],
    ) -> Any:
        """Run one RPC: `answer` gives the response or raises ServingError."""
        started = time.perf_counter()
        target: p.Route | None = None
        cutoff = self.state.cutoff
        try:
            if self.state.draining:
                raise ServingError(Code.UNAVAILABLE, "Server is shutting down")
            with cutoff.track():
                target = route()
                response = answer(target)
                if asyncio.iscoroutine(response):
                    response = await response
            code, message = "OK", ""
        except ERRORS as err:
            log_server_fault(err, f"gRPC {method}")
            code, message = code_name(err), err.message
        except ConfigError as err:
            code, message = "INVALID_ARGUMENT", str(err)
        except asyncio.CancelledError:
            if not cutoff.fired:  # the client went away or its deadline passed
                self.observe(method, "CANCELLED", started, target)
                raise
            cutoff.absorb()  # still running when the grace period ended
            code, message = "UNAVAILABLE", cutoff.message
        except Exception as err:  # a bug of ours: logged, answered INTERNAL, never hidden
            log.error("internal error in gRPC %s", method, exc_info=err)
            code, message = "INTERNAL", f"Internal error: {type(err).__name__}"
        self.observe(method, code, started, target)
        if code != "OK":
            await abort(context, code, message)
        return response

    async def admitted(
        self, method: str, context: Context, handle: Callable[[Any, Admission], Awaitable[Any]]
    ) -> Any:
        """Predict, Classify, Regress, MultiInference: the admission place, then the message.

        These are registered as stream-unary methods (the same single message
        on the wire), so that grpc has not read the message when this runs (`handle` gets it
        and the admission place); a
        call refused here (RESOURCE_EXHAUSTED, or UNAVAILABLE while draining)
        never has its message read. The message is awaited within the call's
        deadline, and a call still awaiting it may lose its place to a newcomer
        when every place is taken (:meth:`_read`): a stream that sends nothing
        holds no place that another call wants (docs/robustness.md).
        """
        started = time.perf_counter()
        try:
            if self.state.draining:
                raise ServingError(Code.UNAVAILABLE, "Server is shutting down")
            admission = self.state.pool.admit()
        except ERRORS as err:
            self.observe(method, code_name(err), started, None)
            await abort(context, code_name(err), err.message)
        try:
            request = await self._read(method, context, admission, started)
            if request is aio.EOF:  # none sent, or none read: cancelled, or too large
                # (then grpc has already answered RESOURCE_EXHAUSTED itself)
                request = invalid_argument(f"{method}: no request message was received")
            elif isinstance(request, Undecodable):
                request = invalid_argument(request.message)
            if isinstance(request, ERRORS):
                if request.refusal is Refusal.AT_CAPACITY:
                    self.state.metrics.rejected.inc()
                self.observe(method, code_name(request), started, None)
                await abort(context, code_name(request), request.message)
            return await handle(request, admission)
        finally:
            admission.close()

    async def _read(
        self, method: str, context: Context, admission: Admission, started: float
    ) -> Any:
        """The call's message, or the ServingError that ends the call instead: its
        deadline passed first (DEADLINE_EXCEEDED), its place went to a newcomer while
        it waited (RESOURCE_EXHAUSTED, see Admission.awaiting), the grace period
        ended (UNAVAILABLE). Raises CancelledError when the client went away."""
        cutoff = self.state.cutoff
        timeout = self.timeout(context)
        eviction = Eviction(admission)
        try:
            with cutoff.track():  # a message still arriving when the grace period ends
                request = await within(context.read(), timeout)
        except TIMEOUT_ERRORS:
            eviction.reading = False
            return self._late_message(method, context, timeout)
        except asyncio.CancelledError:
            eviction.reading = False
            if eviction.fired:  # its place went to a newcomer (InferencePool.admit)
                task = asyncio.current_task()
                if task is not None and hasattr(task, "uncancel"):  # Python 3.11+
                    task.uncancel()
                return eviction.refusal()
            if not cutoff.fired:  # the client went away, or its deadline passed
                remaining = context.time_remaining()
                passed = remaining is not None and remaining < 0.01
                if passed:
                    self.late.note(method, timeout, client=True)
                code = "DEADLINE_EXCEEDED" if passed else "CANCELLED"
                self.observe(method, code, started, None)
                raise
            cutoff.absorb()
            return ServingError(Code.UNAVAILABLE, cutoff.message)
        except ERRORS as err:  # arrived after the cut-off
            eviction.reading = False
            return err
        eviction.reading = False
        if not admission.arrived():  # it came as its place went to a newcomer
            return eviction.refusal()
        return request

    def _late_message(self, method: str, context: Context, timeout: float) -> ServingError:
        """The DEADLINE_EXCEEDED of a call whose message did not arrive within `timeout`."""
        client = timeout < (self.config.request_timeout or float("inf"))
        self.late.note(method, timeout, client=client)
        if client:  # the client's own deadline: the words its other calls get
            return ServingError(Code.DEADLINE_EXCEEDED, "Deadline Exceeded")
        return ServingError(
            Code.DEADLINE_EXCEEDED,
            f"Request message not received within {timeout:g} s (--request-timeout)",
        )

    async def infer(
        self,
        route: p.Route,
        context: Context,
        work: Callable[[], R],
        admission: Admission | None = None,
        size: int = 0,
    ) -> R:
        """Check the route, then run `work` on an inference worker within the timeout.

        `admission`: the place taken before the message was read (else taken now);
        `size`: the request message's bytes (a large one never runs inline).
        """
        self.manager.check(route)  # unknown model or not loaded: no worker needed
        timeout = self.timeout(context)
        with self._deadline_words(timeout):
            return await self.state.pool.run(work, timeout, admission, model=route.model, size=size)

    def queues(self, size: int) -> bool:
        """Whether a predict of `size` bytes is queued from the loop (:meth:`predict_queued`)."""
        return self.state.queued and size <= QUEUED_MAX_BYTES

    async def predict_queued(
        self,
        route: p.Route,
        context: Context,
        decode: Callable[[Servable], Ask[N]],
        admission: Admission | None = None,
    ) -> Predicted[N]:
        """A predict decoded, checked and queued on this loop (core/queued.py): for its
        batch (--enable_batching) or the engine (a front-end); no thread waits for it.
        Only for a small message (:meth:`queues`): its decoding runs on the loop."""
        self.manager.check(route)
        timeout = self.timeout(context)
        place = self.state.pool.admit() if admission is None else admission
        start = queued_start(self.state.pool, timeout, place)
        try:
            with self._deadline_words(timeout):
                return await self.core.predict_started(route, "Predict", decode, start)
        finally:
            if admission is None:
                place.close()

    @contextlib.contextmanager
    def _deadline_words(self, timeout: float) -> Iterator[None]:
        """A DEADLINE_EXCEEDED at the client's own deadline says what gRPC says then."""
        try:
            yield
        except ERRORS as err:
            if code_name(err) == "DEADLINE_EXCEEDED" and timeout < (
                self.config.request_timeout or float("inf")
            ):
                raise ServingError(Code.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
            raise

    def observe(self, method: str, code: str, started: float, route: p.Route | None) -> None:
        """Count one call: by method here, by canonical code in the core (TF Serving's
        request_count counts Predict, Classify and Regress only)."""
        seconds = time.perf_counter() - started
        protocol = "v2" if method in V2_METHODS else "v1"
        self.metrics.observe(method, code, seconds, self.state.model_label(route), protocol)
        if method in TFS_METHODS:
            self.core.answered(route, method, monitoring.ENTRYPOINT_GRPC, code, seconds)


class Eviction:
    """What :meth:`Admission.awaiting` calls when a newcomer takes the place of a call
    still awaiting its message: the call's read is cancelled on its own event loop
    (from whichever thread admitted the newcomer), unless it has ended meanwhile."""

    __slots__ = ("fired", "loop", "reading", "started", "task")

    def __init__(self, admission: Admission) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.started = time.monotonic()
        self.fired = False
        self.reading = True
        admission.awaiting(self)

    def __call__(self) -> None:  # any thread
        self.fired = True
        with contextlib.suppress(RuntimeError):  # the loop has closed: the call is gone
            self.loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:  # on the call's loop
        if self.reading and self.task is not None:
            self.task.cancel()

    def refusal(self) -> ServingError:
        return ServingError(
            Code.RESOURCE_EXHAUSTED,
            EVICTED.format(seconds=round(time.monotonic() - self.started, 1)),
            refusal=Refusal.AT_CAPACITY,
            retry_after=1,
        )


class LateMessages:
    """The log of calls whose request message did not arrive before their deadline.

    One line for the first, then at most one line every LOG_EVERY seconds
    counting those since: a client holding thousands of stalled streams must
    not flood the log (the metrics count each call, code DEADLINE_EXCEEDED).
    """

    LOG_EVERY = 60.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: float | None = None
        self._unlogged = 0

    def note(self, method: str, timeout: float, *, client: bool) -> None:
        self._unlogged += 1
        now = self._clock()
        if self._last is not None and now - self._last < self.LOG_EVERY:
            return
        count, self._unlogged, self._last = self._unlogged, 0, now
        within_what = "the client's deadline" if client else "--request-timeout"
        log.warning(
            "gRPC %s: %d call(s) ended DEADLINE_EXCEEDED because the request message did "
            "not arrive within %s (%g s), their admission places given back%s",
            method,
            count,
            within_what,
            timeout,
            f" (lines at most every {self.LOG_EVERY:g} s)" if count > 1 else "",
        )


class Undecodable:
    """A request message that does not parse: what :class:`ParseCheck`'s deserializers
    return instead of raising (grpc would log a traceback and answer UNKNOWN)."""

    __slots__ = ("message",)

    def __init__(self, type_name: str) -> None:
        self.message = f"Failed to parse the request message as {type_name}"


def tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """`deserializer` (a message class's FromString), returning Undecodable on bad bytes."""
    message_class = getattr(deserializer, "__self__", None)
    descriptor = getattr(message_class, "DESCRIPTOR", None)
    type_name = getattr(descriptor, "full_name", "the method's request type")

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError:
            return Undecodable(type_name)

    return parse


def checked_handler(method: str, handler: Any, observe: Callable[[str, str, float], None]) -> Any:
    """`handler` (a method's RpcMethodHandler) whose request never fails to parse.

    Its deserializer returns :class:`Undecodable` instead of raising; a method
    whose request is a stream (Predict, Classify, Regress and MultiInference,
    admitted before their message is read) checks the message when it reads
    it (:meth:`Calls.admitted`); the others are answered INVALID_ARGUMENT
    naming the type here, before their behaviour runs. `observe(method, code,
    started)` counts such a call in the metrics (methods of METHODS only).
    """
    if handler is None or handler.request_deserializer is None:
        return handler
    handler = handler._replace(request_deserializer=tolerant(handler.request_deserializer))
    if handler.request_streaming:
        return handler
    name = method.rpartition("/")[2]
    field = "unary_stream" if handler.response_streaming else "unary_unary"
    behavior = getattr(handler, field)

    async def refuse(request: Undecodable, context: Context) -> NoReturn:
        if name in METHODS:
            observe(name, "INVALID_ARGUMENT", time.perf_counter())
        await abort(context, "INVALID_ARGUMENT", request.message)

    if inspect.isasyncgenfunction(behavior):

        async def checked_stream(request: Any, context: Context) -> Any:
            if isinstance(request, Undecodable):
                await refuse(request, context)
            async for response in behavior(request, context):
                yield response

        return handler._replace(**{field: checked_stream})

    async def checked(request: Any, context: Context) -> Any:
        if isinstance(request, Undecodable):
            await refuse(request, context)
        response = behavior(request, context)
        if inspect.isawaitable(response):
            response = await response
        return response

    return handler._replace(**{field: checked})


class ParseCheck(grpc.GenericRpcHandler):
    """A service's generic handler, each of its methods checked (:func:`checked_handler`).

    The checked handler of a method is made on its first call and kept: a
    per-call interceptor did this work again on every call (issue 24's
    profile). Handlers without a deserializer (the profiler's, which take any
    method name under its prefix) pass through unchanged and are not kept.
    """

    def __init__(self, inner: Any, observe: Callable[[str, str, float], None]) -> None:
        self.inner = inner
        self.observe = observe
        self._checked: dict[str, Any] = {}

    def service(self, handler_call_details: Any) -> Any:
        method: str = handler_call_details.method
        found = self._checked.get(method)
        if found is not None:
            return found
        handler = self.inner.service(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        found = self._checked[method] = checked_handler(method, handler, self.observe)
        return found


class CheckingServer:
    """Stands for the grpc.aio server where services register (the stubs'
    `add_..._to_server`): every method they register is checked."""

    def __init__(self, server: aio.Server, observe: Callable[[str, str, float], None]) -> None:
        self.server = server
        self.observe = observe

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.server.add_generic_rpc_handlers(
            tuple(ParseCheck(handler, self.observe) for handler in handlers)
        )

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.server.add_registered_method_handlers(
            service,
            {
                name: checked_handler(f"/{service}/{name}", handler, self.observe)
                for name, handler in handlers.items()
            },
        )
