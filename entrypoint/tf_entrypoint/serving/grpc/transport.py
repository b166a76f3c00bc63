"""The gRPC transport: a grpc.aio server on its own thread and event loop.

It runs next to REST's and shares with it, through the serving core,
everything that matters: the models, the inference workers and their
admission limit, the request timeout, the message size limit and the drain
on SIGTERM. TensorFlow's profiler service (`tensorflow.ProfilerService`) is
answered here, recording with TensorFlow's profiler in this process
(profiler.py), unless --enable_profiler=false.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, cast

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2_grpc
from tensorflow_serving.apis import (
    model_service_pb2_grpc,
)

from tf_entrypoint.serving.codec.v2_proto import SERVICE as V2_SERVICE
from tf_entrypoint.serving.config import ServeConfig, channel_args
from tf_entrypoint.serving.core.drain import EXIT_MARGIN
from tf_entrypoint.serving.core.serving_core import ServingCore
from tf_entrypoint.serving.grpc import profiler
from tf_entrypoint.serving.grpc.calls import Calls, CheckingServer
from tf_entrypoint.serving.grpc.health import (
    HEALTH_EVERY,
    NOT_SERVING,
    SERVING,
    TF_SERVING_SERVICES,
    Health,
)
from tf_entrypoint.serving.grpc.inference_v2 import InferenceService, add_inference_service
from tf_entrypoint.serving.grpc.model_service import ModelService
from tf_entrypoint.serving.grpc.prediction import PredictionService, add_prediction_service

log = logging.getLogger("tf_entrypoint.serving")


def server_options(config: ServeConfig) -> list[tuple[str, int | str]]:
    """grpc's options: the message limit (--max-body-bytes; a response has none, as in
    TF Serving), no SO_REUSEPORT (a second server on the port is an error, not a
    silent split of the connections) unless this is one of several front-ends
    (serving/processes.py: the supervisor checked the port first), then
    --grpc_channel_arguments, which win."""
    ours: tuple[tuple[str, int | str], ...] = (
        ("grpc.max_receive_message_length", config.max_body_bytes),
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 1 if config.reuse_port else 0),
    )
    return channel_args.server_options(ours, config.grpc_channel_arguments)


class GrpcServer:
    """The gRPC server on its own thread and event loop.

    :meth:`start` returns once the port is bound (or raises OSError);
    :meth:`drain` (any thread) turns health NOT_SERVING, refuses new calls
    and gives calls in flight `grace` seconds; :meth:`join` waits for that.
    """

    name = "gRPC"

    def __init__(
        self, state: ServingCore, config: ServeConfig, ended: Callable[[], None] = lambda: None
    ) -> None:
        self.state = state
        self.config = config
        #: Called when the server stops on its own after start-up, not drained.
        self._ended = ended
        self._draining = False
        self.health: Health | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain: asyncio.Event | None = None
        self._bound = threading.Event()
        self._failure: BaseException | None = None
        #: Every model name health has reported on.
        self._models: set[str] = set()

    def addresses(self) -> list[str]:
        config = self.config
        found = []
        if config.grpc_port:
            found.append(f"{config.host}:{config.grpc_port}")
        if config.grpc_socket_path:
            found.append(f"unix:{config.grpc_socket_path}")
        return found

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="grpc", daemon=True)
        self._thread.start()
        self._bound.wait()
        if self._failure is not None:
            raise self._failure
        tls = self.config.ssl
        log.info("gRPC (TF Serving's PredictionService, ModelService; the Open Inference "
                 "Protocol's GRPCInferenceService; health) on %s%s",
                 ", ".join(self.addresses()),
                 "" if tls is None else f" with {tls.describe()}")  # fmt: skip

    def drain(self) -> None:
        """Start the drain (idempotent; a no-op once the server has stopped)."""
        self._draining = True
        loop, event = self._loop, self._drain
        if loop is None or event is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: already stopped
            loop.call_soon_threadsafe(event.set)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def stopped(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as err:
            self._failure = err
            if self._bound.is_set():  # after start-up: nobody is waiting to hear it
                log.error("the gRPC server stopped: %s", err, exc_info=err)
                if not self._draining:
                    self._ended()
        finally:
            self._bound.set()
            loop.close()

    async def _serve(self) -> None:
        config = self.config
        self._drain = asyncio.Event()
        handlers = Calls(self.state, config)
        server = aio.server(options=server_options(config))
        # Where the services register: each method's request is parsed without
        # raising (calls.checked_handler), decided once per method, not per call.
        services = cast(
            "aio.Server",
            CheckingServer(
                server, lambda method, code, started: handlers.observe(method, code, started, None)
            ),
        )
        profiling = self._profiler(handlers)
        services.add_generic_rpc_handlers((profiling,))
        add_prediction_service(PredictionService(handlers), services)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(handlers), services)
        add_inference_service(InferenceService(handlers), services)
        self.health = Health(refresh=self._update_health)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, services)
        credentials = self._credentials()
        for address in self.addresses():
            try:
                if credentials is None:
                    bound = server.add_insecure_port(address)
                else:  # TF Serving's credentials go on the port and the socket alike
                    bound = server.add_secure_port(address, credentials)
            except RuntimeError as err:
                raise OSError(f"cannot listen for gRPC on {address}: {err}") from None
            if not bound and not address.startswith("unix:"):
                raise OSError(f"cannot listen for gRPC on {address} (in use?)")
        await self._update_health()
        for name in (*TF_SERVING_SERVICES, V2_SERVICE):
            await self.health.set(name, SERVING)
        await server.start()
        self._bound.set()
        watcher = asyncio.create_task(self._watch_health())
        await self._drain.wait()
        watcher.cancel()
        await self.health.close()
        # Calls still running when the grace period ends are answered
        # UNAVAILABLE by the server's cut-off (drain.CutOff), before grpc
        # would cancel them (CANCELLED) at the end of this longer wait.
        await server.stop(config.grace_period + EXIT_MARGIN + 1)

    def _credentials(self) -> grpc.ServerCredentials | None:
        """TLS from --ssl_config_file (as TF Serving's BuildServerCredentials: client
        certificates required and verified with client_verify, else not asked for)."""
        tls = self.config.ssl
        if tls is None:
            return None
        return grpc.ssl_server_credentials(
            [(tls.server_key, tls.server_cert)],
            root_certificates=tls.custom_ca,
            require_client_auth=tls.client_verify,
        )

    def _profiler(self, handlers: Calls) -> profiler.ProfilerHandler:
        """tensorflow.ProfilerService on this server (TF Serving's --enable_profiler)."""

        def wrap(method: str, forward: Callable[[], Awaitable[bytes]], context: Any) -> Any:
            return handlers.call(method, lambda: None, context, lambda _route: forward())

        if not self.config.enable_profiler:
            return profiler.ProfilerHandler(None, profiler.OFF, wrap, off=True)
        backend = self.state.profiler
        if backend is None:
            why = "this server's backend has no profiler"
            log.warning("%s; tensorflow.ProfilerService calls are answered UNAVAILABLE", why)
            return profiler.ProfilerHandler(None, why, wrap, off=False)
        where = self.config.profile_dir
        log.info(
            "profiler: tensorflow.ProfilerService calls on the gRPC port are captured in this "
            "process (no port of its own; --enable_profiler=false turns it off); %s",
            f"traces are written only under {where} (--profile-dir)"
            if where
            else "no trace is written (--profile-dir is not set): emit_xspace only",
        )
        return profiler.ProfilerHandler(backend, "", wrap, off=False, profile_dir=where)

    async def _watch_health(self) -> None:
        while True:
            await self._update_health()
            await asyncio.sleep(HEALTH_EVERY)

    async def _update_health(self) -> None:
        assert self.health is not None  # noqa: S101 - made in _serve
        pending, serving = self.state.manager.readiness()
        ready = not pending and not self.state.draining
        await self.health.set("", SERVING if ready else NOT_SERVING)
        for name, versions in serving.items():
            await self.health.set(name, SERVING if versions else NOT_SERVING)
        for name in self._models - set(serving):  # removed from the configuration
            await self.health.set(name, NOT_SERVING)
        self._models |= set(serving)
