"""Clients of a server under test: TF Serving's own gRPC stubs, in the image.

The gRPC client is tests/container/grpc_client.py (tensorflow-serving-api's
stubs with TensorFlow's make_tensor_proto/make_ndarray, as a program written
for TF Serving uses them). It runs in the image, in --listen mode, and takes
each call over a UNIX socket in a shared folder: a call costs a connection,
not a container and a TensorFlow import. Two shapes:

- `SessionClient`: one for every server of a test session (a ServerPool's),
  on Docker's default bridge network, calling each server at its container's
  own address (REST's metrics too, for the ops that read them). Starting it
  costs one TensorFlow import per session instead of one per server: about
  5 CPU-seconds each, on 30-odd servers of the container tier.
- `GrpcSidecar`: one beside one server, in its network namespace (127.0.0.1,
  as a sidecar would), with the server's extra volumes (UNIX sockets, TLS
  certificates). A server's calls go through it when they need what only a
  sidecar has: those volumes, an address of their own inside an op (`via`,
  `tls`), a server off the default bridge, or no SessionClient at all.

REST needs no helper (httpx2 against the server's published port);
the Open Inference Protocol clients run from .venv-clients
(tests/container/v2clients).
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from docker.models.containers import Container

from harness.docker import REPO, Containers, remove, wait_for_log

CLIENTS = REPO / "tests" / "container"
SOCKET = "grpc.sock"


def grpc_sidecar(
    containers: Containers,
    server_container: Container,
    operations: Sequence[dict[str, Any]],
    address: str = "127.0.0.1:8500",
    timeout: float = 300,
) -> list[dict[str, Any]]:
    """The operations in a one-shot grpc_client.py container in `server_container`'s
    network namespace (removed after): for a server started without harness.servers
    (a long-lived GrpcSidecar, `Server.grpc`, saves each call a container start)."""
    ran = containers.run(
        ["python", "/t/grpc_client.py", address, json.dumps(list(operations))],
        network_mode=f"container:{server_container.id}",
        volumes={str(CLIENTS): {"bind": "/t", "mode": "ro"}},
        timeout=timeout,
    )
    assert ran.exit_code == 0, ran.stderr
    results: list[dict[str, Any]] = json.loads(ran.stdout.strip().splitlines()[-1])
    return results


class _Listener:
    """grpc_client.py --listen in a container of the image, started on its first call."""

    def __init__(
        self,
        containers: Containers,
        workdir: Path | None,
        volumes: dict[str, dict[str, str]],
        **options: Any,
    ) -> None:
        self.containers = containers
        self.volumes = volumes
        self.options = options
        self.folder = Path(tempfile.mkdtemp(prefix="sidecar-", dir=workdir))
        self.folder.chmod(0o777)
        self.container: Container | None = None

    def _start(self) -> None:
        self.container = self.containers.start(
            ["python", "/t/grpc_client.py", "--listen", f"/sidecar/{SOCKET}"],
            volumes={
                str(CLIENTS): {"bind": "/t", "mode": "ro"},
                str(self.folder): {"bind": "/sidecar", "mode": "rw"},
                **self.volumes,
            },
            environment={"TF_CPP_MIN_LOG_LEVEL": "2"},
            **self.options,
        )
        wait_for_log(self.container, "listening", 180)

    def call(self, request: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
        if self.container is None:
            self._start()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(self.folder / SOCKET))
            conn.sendall(json.dumps(request).encode() + b"\n")
            answer = conn.makefile("rb").readline()
        assert answer, f"the gRPC client closed without an answer: {self.logs()}"
        results: Any = json.loads(answer)
        assert not isinstance(results, dict), results.get("error")
        return list(results)

    def logs(self) -> str:
        return self.container.logs().decode(errors="replace") if self.container else ""

    def close(self) -> None:
        if self.container is not None:
            remove(self.container)
            self.container = None


class SessionClient(_Listener):
    """One client for every server of a session, on Docker's default bridge network.

    Every server's test depends on it, so one that is gone (an op took it down,
    and that test failed) is replaced by a new one at the next call."""

    def __init__(self, containers: Containers, workdir: Path | None = None) -> None:
        super().__init__(containers, workdir, {})
        self._lock = threading.Lock()

    def call(self, request: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
        with self._lock:
            if self.container is None:
                self._start()
        try:
            return super().call(request, timeout)
        except (FileNotFoundError, ConnectionRefusedError):
            with self._lock:
                if self.container is not None:
                    self.container.reload()
                    if self.container.status == "running":
                        raise
                    self.close()
                self._start()
            return super().call(request, timeout)


def _names_an_address(operations: Sequence[dict[str, Any]]) -> bool:
    """True if an op (or one nested in it) says where to connect itself."""
    return any("address" in op or _names_an_address(op.get("ops", ())) for op in operations)


class GrpcSidecar:
    """The gRPC client of one server: the session's client where it can reach the server
    as the sidecar would, else a grpc_client.py --listen beside `server`, with its
    `volumes` too."""

    def __init__(
        self,
        containers: Containers,
        server: Container,
        volumes: dict[str, dict[str, str]] | None = None,
        workdir: Path | None = None,
        *,
        session: SessionClient | None = None,
        rest_port: int = 8501,
    ) -> None:
        self.server = server
        self.rest_port = rest_port
        self.volumes = dict(volumes or {})
        self.session = session
        self.own = _Listener(
            containers, workdir, self.volumes, network_mode=f"container:{server.id}"
        )

    def _bridge_address(self) -> str:
        """The server's address on the default bridge ("" off it); asked at each call, as
        a container that was restarted may have another."""
        self.server.reload()
        networks = self.server.attrs["NetworkSettings"].get("Networks") or {}
        bridge = networks.get("bridge") or {}
        return str(bridge.get("IPAddress") or "")

    def call(
        self,
        operations: Sequence[dict[str, Any]],
        address: str = "127.0.0.1:8500",
        timeout: float = 300,
    ) -> list[dict[str, Any]]:
        """The operations in order on a new channel to `address`; their results."""
        request: dict[str, Any] = {
            "address": address,
            "ops": list(operations),
            "rest": f"http://127.0.0.1:{self.rest_port}",
        }
        loopback, _, port = address.partition(":")
        if (
            self.session is not None
            and not self.volumes
            and loopback == "127.0.0.1"
            and not _names_an_address(operations)
        ):
            host = self._bridge_address()
            if host:
                request.update(address=f"{host}:{port}", rest=f"http://{host}:{self.rest_port}")
                return self.session.call(request, timeout)
        return self.own.call(request, timeout)

    def logs(self) -> str:
        return self.own.logs()

    def close(self) -> None:
        self.own.close()
