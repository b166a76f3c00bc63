"""Clients of a server under test: TF Serving's own gRPC stubs in a sidecar.

The gRPC client is tests/container/grpc_client.py (tensorflow-serving-api's
stubs with TensorFlow's make_tensor_proto/make_ndarray, as a program written
for TF Serving uses them). It runs in the image, in the server's network
namespace, as a sidecar would. `GrpcSidecar` starts it once per server, in
--listen mode, and sends each call over a UNIX socket in a shared folder:
a call costs a connection, not a container and a TensorFlow import.
REST needs no helper (httpx2 against the server's published port);
the Open Inference Protocol clients run from .venv-clients
(tests/container/v2clients).
"""

from __future__ import annotations

import json
import socket
import tempfile
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


class GrpcSidecar:
    """One grpc_client.py --listen beside `server`, with its `volumes` too."""

    def __init__(
        self,
        containers: Containers,
        server: Container,
        volumes: dict[str, dict[str, str]] | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.containers = containers
        self.server = server
        self.volumes = dict(volumes or {})
        self.folder = Path(tempfile.mkdtemp(prefix="sidecar-", dir=workdir))
        self.folder.chmod(0o777)
        self.container: Container | None = None

    def _start(self) -> None:
        self.container = self.containers.start(
            ["python", "/t/grpc_client.py", "--listen", f"/sidecar/{SOCKET}"],
            network_mode=f"container:{self.server.id}",
            volumes={
                str(CLIENTS): {"bind": "/t", "mode": "ro"},
                str(self.folder): {"bind": "/sidecar", "mode": "rw"},
                **self.volumes,
            },
            environment={"TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        wait_for_log(self.container, "listening", 180)

    def call(
        self,
        operations: Sequence[dict[str, Any]],
        address: str = "127.0.0.1:8500",
        timeout: float = 300,
    ) -> list[dict[str, Any]]:
        """The operations in order on a new channel to `address`; their results."""
        if self.container is None:
            self._start()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(self.folder / SOCKET))
            conn.sendall(json.dumps({"address": address, "ops": list(operations)}).encode() + b"\n")
            answer = conn.makefile("rb").readline()
        assert answer, f"the gRPC sidecar closed without an answer: {self.logs()}"
        results: Any = json.loads(answer)
        assert not isinstance(results, dict), results.get("error")
        return list(results)

    def logs(self) -> str:
        return self.container.logs().decode(errors="replace") if self.container else ""

    def close(self) -> None:
        if self.container is not None:
            remove(self.container)
            self.container = None
