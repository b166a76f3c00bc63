"""--ssl_config_file in the real image: TLS on gRPC, called by real TLS clients.

A throwaway CA signs the server's certificate (localhost, 127.0.0.1) and a
client certificate; a second CA, which the server does not trust, signs
another (tests/tls_certs.py, made with openssl). The clients are TF
Serving's stubs on grpc's TLS channels (grpc_client.py's "tls" op) in a
sidecar sharing the server's network namespace. As in TF Serving, the UNIX
socket (--grpc_socket_path) gets the same TLS as the port and REST stays
plain HTTP.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import web
from harness.docker import Containers
from harness.models import ModelLibrary
from harness.servers import Server, ServerPool, ServerSpec, serve
from tests.container.grpc_models import x_tensor
from tests.tls_certs import Certs, make_certs, ssl_config_text

IMAGE_FLAVORS = ("cpu",)

SOCKET = "/sock/grpc.sock"
#: Where the PEM files are in the sidecar (the clients read files; the server reads its config).
CERTS = "/certs"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Certs, Path]:
    folder = tmp_path_factory.mktemp("tls")
    made = make_certs(folder / "certs")
    config = folder / "config"
    config.mkdir()
    (config / "tls.config").write_text(ssl_config_text(made))
    (config / "verify.config").write_text(ssl_config_text(made, client_verify=True))
    (config / "nocert.config").write_text(ssl_config_text(made).split("server_cert")[0])
    for path in (folder, config, folder / "certs"):
        path.chmod(0o755)
    for path in [*config.iterdir(), *(folder / "certs").iterdir()]:
        path.chmod(0o644)
    return made, folder


@pytest.fixture(scope="module")
def models(model_library: ModelLibrary, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_library.tree(tmp_path_factory.mktemp("tls-models"), {"plus": ("plus", (1,))})


def mounts(folder: Path) -> dict[str, dict[str, str]]:
    sock = folder / "sock"
    sock.mkdir(exist_ok=True)
    sock.chmod(0o777)
    return {
        str(folder / "config"): {"bind": "/config", "mode": "ro"},
        str(sock): {"bind": "/sock", "mode": "rw"},
    }


def tls(*ops: dict[str, Any], client: str = "", ca: str = "ca", **more: Any) -> dict[str, Any]:
    """The ops on a TLS channel trusting `ca`, showing certificate `client` (none if "")."""
    op: dict[str, Any] = {"op": "tls", "ca": f"{CERTS}/{ca}.pem", "ops": list(ops), **more}
    if client:
        op |= {"cert": f"{CERTS}/{client}.pem", "key": f"{CERTS}/{client}.key"}
    return op


def spec(folder: Path, *args: str) -> ServerSpec:
    """A server of plus/1 with `args`; /config and /sock mounted in it and in its gRPC
    sidecar, with the PEM files at /certs (where the clients read them)."""
    volumes = {**mounts(folder), str(folder / "certs"): {"bind": CERTS, "mode": "ro"}}
    return serve(
        "--model_name=plus",
        "--model_base_path=/models/plus",
        *args,
        models={"plus": ("plus", (1,))},
        volumes=tuple((host, m["bind"], m["mode"]) for host, m in volumes.items()),
    )


STATUS = {"op": "status", "model": "plus"}
PREDICT = {"op": "predict", "model": "plus", "inputs": {"x": x_tensor(1.0, 2.5)}}


@pytest.fixture(scope="module")
def tls_server(servers: ServerPool, certs: tuple[Certs, Path]) -> Server:
    args = ("--ssl_config_file=/config/tls.config", f"--grpc_socket_path={SOCKET}")
    return servers.shared(spec(certs[1], *args))


def test_a_tls_client_trusting_the_ca_is_answered(
    tls_server: Server, certs: tuple[Certs, Path]
) -> None:
    (result,) = tls_server.grpc(tls(STATUS, PREDICT))
    status, predict = result["results"]
    assert status["code"] == "OK", status
    assert status["response"]["model_version_status"][0]["state"] == "AVAILABLE"
    assert predict["code"] == "OK", predict
    assert predict["outputs"] == {"y": [2.0, 3.5]}
    assert "with TLS from /config/tls.config" in tls_server.logs()


def test_plaintext_and_untrusting_clients_fail(
    tls_server: Server, certs: tuple[Certs, Path]
) -> None:
    plain, untrusting = tls_server.grpc(STATUS, tls(STATUS, ca="otherca"))
    assert plain["code"] == "UNAVAILABLE", plain
    assert untrusting["results"][0]["code"] == "UNAVAILABLE", untrusting


def test_the_socket_has_the_same_tls(tls_server: Server, certs: tuple[Certs, Path]) -> None:
    """TF Serving's server.cc gives the UNIX socket the port's credentials."""
    secure, plain = tls_server.grpc(
        tls(STATUS, address=f"unix:{SOCKET}", server_name="localhost"),
        {"op": "via", "address": f"unix:{SOCKET}", "ops": [STATUS]},
    )  # fmt: skip
    assert secure["results"][0]["code"] == "OK", secure
    assert plain["results"][0]["code"] == "UNAVAILABLE", plain


def test_rest_stays_plain_http(tls_server: Server) -> None:
    answer = web.get(f"{tls_server.rest}/v1/models/plus", timeout=10)
    assert answer.status_code == 200
    assert answer.json()["model_version_status"][0]["state"] == "AVAILABLE"


def test_client_verify_requires_a_certificate_from_the_ca(
    servers: ServerPool, certs: tuple[Certs, Path]
) -> None:
    with servers.private(spec(certs[1], "--ssl_config_file=/config/verify.config")) as server:
        without, stranger, client = server.grpc(
            tls(STATUS), tls(STATUS, client="stranger"), tls(PREDICT, client="client")
        )
    assert without["results"][0]["code"] == "UNAVAILABLE", without
    assert stranger["results"][0]["code"] == "UNAVAILABLE", stranger
    assert client["results"][0]["code"] == "OK", client
    assert client["results"][0]["outputs"] == {"y": [2.0, 3.5]}


def test_a_file_without_server_cert_exits_78(
    containers: Containers, models: Path, certs: tuple[Certs, Path]
) -> None:
    ran = containers.run(
        ["serve", "--model_name=plus", "--model_base_path=/models/plus",
         "--ssl_config_file=/config/nocert.config"],
        volumes={str(models): {"bind": "/models", "mode": "ro"}, **mounts(certs[1])},
        timeout=120,
    )  # fmt: skip
    assert ran.exit_code == 78, ran.stderr
    assert "error: /config/nocert.config: server_cert is empty" in ran.stderr
    assert "Traceback" not in ran.stderr
