"""Throwaway TLS material for tests: a CA, a server certificate for
localhost/127.0.0.1 and a client certificate, all signed by the CA, made with
the `openssl` command (the dev venv has no `cryptography`)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: str
    server_key: str
    server_cert: str
    client_key: str
    client_cert: str
    #: A second CA (and a client certificate it signs) that the server does not trust.
    other_ca: str
    other_client_key: str
    other_client_cert: str


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(name: str, cwd: Path) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=cwd,
    )  # fmt: skip


def _signed(name: str, ca: str, cwd: Path, extensions: str = "") -> None:
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=cwd,
    )  # fmt: skip
    (cwd / f"{name}.ext").write_text(extensions or "basicConstraints=CA:FALSE\n")
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
        cwd=cwd,
    )  # fmt: skip


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    _ca("ca", directory)
    _ca("otherca", directory)
    _signed("server", "ca", directory, "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _signed("client", "ca", directory)
    _signed("stranger", "otherca", directory)

    def read(name: str) -> str:
        return (directory / name).read_text()

    return Certs(
        ca=read("ca.pem"),
        server_key=read("server.key"),
        server_cert=read("server.pem"),
        client_key=read("client.key"),
        client_cert=read("client.pem"),
        other_ca=read("otherca.pem"),
        other_client_key=read("stranger.key"),
        other_client_cert=read("stranger.pem"),
    )


def quoted(pem: str) -> str:
    """`pem` as a text-format string literal."""
    return '"' + pem.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def ssl_config_text(certs: Certs, *, client_verify: bool = False, custom_ca: bool = True) -> str:
    """TF Serving's SSLConfig text for `certs`."""
    lines = [f"server_key: {quoted(certs.server_key)}", f"server_cert: {quoted(certs.server_cert)}"]
    if custom_ca:
        lines.append(f"custom_ca: {quoted(certs.ca)}")
    if client_verify:
        lines.append("client_verify: true")
    return "\n".join(lines) + "\n"
