"""Which client a server's gRPC call goes through (harness/clients.py), without Docker.

The session's one client reaches a server at its bridge address; a call that
needs the server's own network namespace or volumes goes through the server's
sidecar. The container tests show both paths against real servers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import clients

PREDICT = {"op": "predict", "model": "plus", "inputs": {"x": {"values": [1.0]}}}


class FakeServer:
    """What GrpcSidecar reads of a server's container: its id and networks."""

    def __init__(self, networks: dict[str, Any]) -> None:
        self.id = "c0ffee"
        self.reloads = 0
        self.attrs = {"NetworkSettings": {"Networks": networks}}

    def reload(self) -> None:
        self.reloads += 1


def routed(
    tmp_path: Path,
    server: FakeServer,
    operations: list[dict[str, Any]],
    *,
    address: str = "127.0.0.1:8500",
    volumes: dict[str, dict[str, str]] | None = None,
    session: bool = True,
) -> tuple[str, dict[str, Any]]:
    """("session" or "own", the request that client got)."""
    got: list[tuple[str, dict[str, Any]]] = []

    def recorder(name: str) -> Any:
        def call(request: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
            got.append((name, request))
            return [{"code": "OK"}]

        return call

    shared = clients.SessionClient(None, tmp_path) if session else None  # type: ignore[arg-type]
    sidecar = clients.GrpcSidecar(
        None,  # type: ignore[arg-type]
        server,  # type: ignore[arg-type]
        volumes,
        tmp_path,
        session=shared,
        rest_port=8601,
    )
    if shared is not None:
        shared.call = recorder("session")  # type: ignore[method-assign]
    sidecar.own.call = recorder("own")  # type: ignore[method-assign]
    assert sidecar.call(operations, address=address) == [{"code": "OK"}]
    ((name, request),) = got
    return name, request


BRIDGE = {"bridge": {"IPAddress": "172.17.0.9"}}


def test_a_plain_call_goes_to_the_server_at_its_bridge_address(tmp_path: Path) -> None:
    server = FakeServer(BRIDGE)
    name, request = routed(tmp_path, server, [PREDICT])
    assert name == "session"
    assert request == {
        "address": "172.17.0.9:8500",
        "ops": [PREDICT],
        "rest": "http://172.17.0.9:8601",
    }
    assert server.reloads == 1  # asked at each call: a restarted container may move


def test_another_port_of_the_server_keeps_its_number(tmp_path: Path) -> None:
    name, request = routed(tmp_path, FakeServer(BRIDGE), [PREDICT], address="127.0.0.1:9000")
    assert (name, request["address"]) == ("session", "172.17.0.9:9000")


VIA = {"op": "via", "address": "unix:/s", "ops": []}


@pytest.mark.parametrize(
    ("kwargs", "networks"),
    [
        pytest.param({"volumes": {"/h": {"bind": "/c", "mode": "ro"}}}, BRIDGE, id="volumes"),
        pytest.param({"ops": [VIA]}, BRIDGE, id="an op's address"),
        pytest.param({"ops": [{"op": "parallel", "ops": [VIA]}]}, BRIDGE, id="a nested op's"),
        pytest.param({"address": "unix:/sockets/grpc.sock"}, BRIDGE, id="a UNIX socket"),
        pytest.param({}, {"none": {"IPAddress": ""}}, id="off the bridge"),
        pytest.param({"session": False}, BRIDGE, id="no session client"),
    ],
)
def test_what_needs_the_servers_namespace_goes_through_its_sidecar(
    tmp_path: Path, kwargs: dict[str, Any], networks: dict[str, Any]
) -> None:
    operations = kwargs.pop("ops", [PREDICT])
    name, request = routed(tmp_path, FakeServer(networks), operations, **kwargs)
    assert name == "own"
    assert request["address"] == kwargs.get("address", "127.0.0.1:8500")
    assert request["rest"] == "http://127.0.0.1:8601"  # the sidecar's own loopback


class FakeClientContainer:
    def __init__(self, status: str) -> None:
        self.status = status

    def reload(self) -> None:
        pass


@pytest.mark.parametrize("status", ["exited", "running"])
def test_a_session_client_that_is_gone_is_replaced_at_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: str
) -> None:
    shared = clients.SessionClient(None, tmp_path)  # type: ignore[arg-type]
    started: list[FakeClientContainer] = []
    closed: list[object] = []

    def start() -> None:
        shared.container = FakeClientContainer("running")  # type: ignore[assignment]
        started.append(shared.container)  # type: ignore[arg-type]

    def close() -> None:
        closed.append(shared.container)
        shared.container = None

    answers: list[Any] = [ConnectionRefusedError(), [{"code": "OK"}]]

    def listener_call(self: Any, request: dict[str, Any], timeout: float) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(shared, "_start", start)
    monkeypatch.setattr(shared, "close", close)
    monkeypatch.setattr(clients._Listener, "call", listener_call)
    shared._start()
    started[0].status = status  # the first client's process ended (or did not)
    if status == "running":  # a refusal from a client that still runs is the test's to see
        with pytest.raises(ConnectionRefusedError):
            shared.call({"address": "a", "ops": []}, 10)
        assert (len(started), closed) == (1, [])
    else:
        assert shared.call({"address": "a", "ops": []}, 10) == [{"code": "OK"}]
        assert len(started) == 2
        assert closed == [started[0]]
