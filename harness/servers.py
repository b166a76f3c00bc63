"""Model servers for tests: one `Server` type, started from a `ServerSpec`, and a pool.

A ServerSpec says everything that makes a server what it is: its arguments,
the library models under /models (harness/models.py), files written beside
them (model config files), its environment, CPUs and docker options.
`ServerPool.shared(spec)` starts a server once and hands the same one to
every test that asks for an equal spec, for the whole session (of one pytest
worker), as TF Serving's own end-to-end test reuses servers. A test that
changes a server's state (reloads its config, swaps versions, stops it, holds
calls it does not release) asks for a private one: `ServerPool.private(spec)`
or `serving(...)`.

Every server runs under --cpus 1 by default, publishes REST's port on
127.0.0.1 and is ready (GET /readyz is 200) when handed out; gRPC is reached
through the pool's one client at the server's address on Docker's bridge, or
from a sidecar in its network namespace where a call needs one
(harness/clients.py).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from docker.models.containers import Container

from harness import web
from harness.clients import GrpcSidecar, SessionClient
from harness.docker import Containers, metric_value, poll, remove
from harness.models import ModelLibrary

READY_TIMEOUT = 180.0
#: The server's two shapes (docs/serving.md, "Processes"), for the tests that run in
#: both: name -> (the arguments that make it, the CPUs it gets). One process; a
#: supervisor with an engine and two front-ends under 2 CPUs.
SHAPES: dict[str, tuple[tuple[str, ...], float]] = {
    "one process": ((), 1.0),
    "two front-ends": (("--frontends=2",), 2.0),
}
#: Set to N: every server the harness starts runs N front-ends over one engine
#: (SERVE_FRONTENDS, unless its spec sets it) under at least N CPUs, to run the
#: container tier in that shape (docs/development.md).
FRONTENDS_SWITCH = "TF_ENTRYPOINT_TEST_FRONTENDS"
#: TF Serving's binary name in the image (our server, for platforms that replace the ENTRYPOINT).
MODEL_SERVER = "/usr/bin/tensorflow_model_server"

ModelSource = str | tuple[str, tuple[int, ...]]


@dataclass(frozen=True)
class ServerSpec:
    """A server: `args` after the entrypoint (`serve ...`, or flags of `entrypoint`),
    `models` /models/NAME -> library source (or (source, versions)), `files`
    /models/NAME -> text, `env`, `cpus`, docker `options` (items), `entrypoint`
    (e.g. (MODEL_SERVER,)), `volumes` (host path, bind, mode) mounted in the
    server and its gRPC sidecar, `ready` (wait for /readyz), `publish_grpc`
    (gRPC's port on 127.0.0.1 too, for clients on the host: Server.grpc_address),
    `rest_port` (the container's REST port, published on 127.0.0.1: 8501 unless
    the args say another)."""

    args: tuple[str, ...] = ()
    models: tuple[tuple[str, ModelSource], ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cpus: float = 1.0
    options: tuple[tuple[str, Any], ...] = ()
    entrypoint: tuple[str, ...] = ()
    volumes: tuple[tuple[str, str, str], ...] = ()
    models_mode: str = "ro"
    ready: bool = True
    publish_grpc: bool = False
    rest_port: int = 8501

    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:12]


def serve(
    *args: str,
    models: Mapping[str, ModelSource] | None = None,
    files: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    **more: Any,
) -> ServerSpec:
    """`tf-entrypoint serve --wait-for-model 60 ARGS` (the image's default command)."""
    return ServerSpec(
        args=("serve", "--wait-for-model", "60", *args),
        models=tuple(sorted((models or {}).items())),
        files=tuple(sorted((files or {}).items())),
        env=tuple(sorted((env or {}).items())),
        **more,
    )


@dataclass
class Server:
    """A running, ready server: REST at `rest` (also `url`), gRPC through `grpc(...)`
    (and at `grpc_address`, host:port on the host, when its spec publishes it)."""

    containers: Containers
    container: Container
    rest: str
    models: Path
    sidecar: GrpcSidecar
    spec: ServerSpec = field(default_factory=ServerSpec)
    grpc_address: str = ""

    @property
    def url(self) -> str:
        return self.rest

    def get(self, path: str, **kwargs: Any) -> httpx2.Response:
        return web.get(self.rest + path, timeout=kwargs.pop("timeout", 30), **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> httpx2.Response:
        return web.post(self.rest + path, json=body, timeout=kwargs.pop("timeout", 30), **kwargs)

    def predict(self, path: str, x: float = 0.0) -> float:
        response = self.post(path, {"instances": [x]})
        assert response.status_code == 200, response.text
        value: float = response.json()["predictions"][0]
        return value

    def grpc(
        self, *operations: dict[str, Any], timeout: float = 300, address: str = "127.0.0.1:8500"
    ) -> list[dict[str, Any]]:
        """TF Serving's stubs (tests/container/grpc_client.py operations) against the server."""
        return self.sidecar.call(operations, address=address, timeout=timeout)

    def metric(self, name: str, **labels: str) -> float:
        """The sample `name` with exactly `labels` on /metrics (0 when absent)."""
        return metric_value(self.get("/metrics", timeout=10).text, name, **labels)

    def states(self, model: str) -> dict[int, str]:
        """Each version's state on REST's model status ({} while none)."""
        response = self.get(f"/v1/models/{model}", timeout=10)
        if response.status_code != 200:
            return {}
        return {int(v["version"]): v["state"] for v in response.json()["model_version_status"]}

    def state(self, model: str) -> str:
        """The newest version's state ("" while none)."""
        states = self.states(model)
        return states[max(states)] if states else ""

    def idle(self) -> bool:
        return self.metric("serving_predict_in_flight") == 0

    def running(self) -> bool:
        with suppress(Exception):
            self.container.reload()
            return bool(self.container.status == "running")
        return False

    def logs(self) -> str:
        return self.container.logs().decode(errors="replace")

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until /readyz answers 200; the server must keep running meanwhile."""

        def ready() -> bool:
            self.container.reload()
            assert self.container.status == "running", self.logs()
            try:
                return self.get("/readyz", timeout=5).status_code == 200
            except httpx2.TransportError:
                return False

        assert poll(ready, timeout, 0.25), self.logs()


def write_models(spec: ServerSpec, library: ModelLibrary, root: Path) -> Path:
    """The /models folder of `spec` under `root`."""
    library.tree(root, dict(spec.models))
    for name, text in spec.files:
        (root / name).write_text(text)
    return root


def switched_frontends(spec: ServerSpec) -> str:
    """The front-ends FRONTENDS_SWITCH gives a server of `spec` ("": none, or its spec
    sets SERVE_FRONTENDS itself)."""
    frontends = os.environ.get(FRONTENDS_SWITCH, "")
    return "" if "SERVE_FRONTENDS" in dict(spec.env) else frontends


def cpus_of(spec: ServerSpec) -> float:
    """The CPUs a server of `spec` runs under: its own, or at least N under FRONTENDS_SWITCH
    (unless its spec sets SERVE_FRONTENDS)."""
    frontends = switched_frontends(spec)
    return max(spec.cpus, float(frontends)) if frontends else spec.cpus


@contextmanager
def started(
    containers: Containers,
    spec: ServerSpec,
    models: Path,
    workdir: Path | None = None,
    session: SessionClient | None = None,
) -> Iterator[Server]:
    """A server of `spec` on the /models folder `models`; ready unless spec.ready is False;
    removed (with its sidecar) at the end. Its gRPC calls go through `session` where
    they can (harness/clients.py)."""
    volumes = {str(models): {"bind": "/models", "mode": spec.models_mode}}
    extra = {host: {"bind": bind, "mode": mode} for host, bind, mode in spec.volumes}
    options: dict[str, Any] = dict(spec.options)
    if spec.entrypoint:
        options["entrypoint"] = list(spec.entrypoint)
    environment = dict(spec.env)
    cpus = cpus_of(spec)
    frontends = switched_frontends(spec)
    if frontends:  # the whole tier in that shape
        environment["SERVE_FRONTENDS"] = frontends
    if environment:
        options["environment"] = environment
    ports = {f"{spec.rest_port}/tcp": ("127.0.0.1", None)}
    if spec.publish_grpc:
        ports["8500/tcp"] = ("127.0.0.1", None)
    container = containers.start(
        list(spec.args),
        volumes={**volumes, **extra},
        nano_cpus=int(cpus * 1e9),
        ports=ports,
        **options,
    )
    sidecar = GrpcSidecar(
        containers, container, extra, workdir, session=session, rest_port=spec.rest_port
    )
    try:
        container.reload()
        published = container.attrs["NetworkSettings"]["Ports"]
        port = published[f"{spec.rest_port}/tcp"][0]["HostPort"]
        server = Server(containers, container, f"http://127.0.0.1:{port}", models, sidecar, spec)
        if spec.publish_grpc:
            server.grpc_address = f"127.0.0.1:{published['8500/tcp'][0]['HostPort']}"
        if spec.ready:
            server.wait_ready()
        yield server
    finally:
        sidecar.close()
        remove(container)


class ServerPool:
    """Servers shared by spec for a session; private ones on request."""

    def __init__(self, containers: Containers, library: ModelLibrary, workdir: Path) -> None:
        self.containers = containers
        self.library = library
        self.workdir = workdir
        self._shared: dict[ServerSpec, tuple[Server, Any]] = {}
        self.client = SessionClient(containers, workdir)  # its container starts on first use

    def shared(self, spec: ServerSpec) -> Server:
        """The session's server of `spec` (started on first use, restarted if it died)."""
        if spec in self._shared:
            server, context = self._shared[spec]
            if server.running():
                return server
            context.__exit__(None, None, None)
            del self._shared[spec]
        models = write_models(spec, self.library, self.workdir / f"shared-{spec.key()}")
        context = started(self.containers, spec, models, self.workdir, self.client)
        server = context.__enter__()
        self._shared[spec] = (server, context)
        return server

    @contextmanager
    def private(self, spec: ServerSpec, models: Path | None = None) -> Iterator[Server]:
        """A server of `spec` for one test (or fixture) alone; `models` instead of spec.models."""
        root = models or write_models(
            spec, self.library, Path(tempfile.mkdtemp(prefix="private-", dir=self.workdir))
        )
        with started(self.containers, spec, root, self.workdir, self.client) as server:
            yield server

    def close(self) -> None:
        for _, context in self._shared.values():
            with suppress(Exception):
                context.__exit__(None, None, None)
        self._shared.clear()
        self.client.close()
