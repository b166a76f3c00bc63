"""TF Serving's --ssl_config_file: TLS on the gRPC listeners.

The file is TF Serving's text-format `SSLConfig`
(tensorflow_serving/config/ssl_config.proto): `server_key`, `server_cert`
and `custom_ca` hold the PEM text itself (not a path), `client_verify` asks
every client for a certificate signed by `custom_ca`. `tensorflow-serving-api`
ships no `ssl_config_pb2`, so the message is built here and the file parsed
with protobuf's `text_format`, as TF Serving's `ParseProtoTextFile` does.

TF Serving checks nothing before gRPC does (a bad key fails the listener);
here every PEM is loaded with the standard library's `ssl` at start, so a
missing field, a path where PEM text belongs, a key that is not the
certificate's, or `client_verify` without a CA is a ConfigError naming the
file and the field, before any port is bound.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tf_entrypoint.serving.config import textproto
from tf_entrypoint.serving.config.textproto import ConfigError

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----")


@dataclass(frozen=True)
class SslConfig:
    """What --ssl_config_file asks for, checked: PEM text as bytes for grpc."""

    server_key: bytes
    server_cert: bytes
    #: The CA that signs client certificates (None: none given).
    custom_ca: bytes | None
    #: Whether a client must show a certificate signed by custom_ca.
    client_verify: bool
    #: The file it was read from, for messages.
    source: Path | None = field(default=None, compare=False)

    def describe(self) -> str:
        clients = (
            "client certificates required, signed by custom_ca"
            if self.client_verify
            else "no client certificates asked for"
        )
        return f"TLS from {self.source}: {clients}"


def _message_class() -> Any:
    """SSLConfig's class, built from ssl_config.proto's definition."""
    from google.protobuf import descriptor_pb2  # noqa: PLC0415 - only when a file is given

    kind = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/config/ssl_config.proto",
        package="tensorflow.serving",
        syntax="proto3",
    )
    message = proto.message_type.add(name="SSLConfig")
    for number, name in enumerate(("server_key", "server_cert", "custom_ca"), start=1):
        message.field.add(
            name=name, number=number, type=kind.TYPE_STRING, label=kind.LABEL_OPTIONAL
        )
    message.field.add(
        name="client_verify", number=4, type=kind.TYPE_BOOL, label=kind.LABEL_OPTIONAL
    )
    return textproto.message_class(proto, "tensorflow.serving.SSLConfig")


def _where(text: str, path: Path, name: str) -> str:
    line = textproto.field_line(text, name)
    return f"{path}:{line}" if line else str(path)


def _pem(text: str, path: Path, name: str, value: str, expected: tuple[str, ...]) -> bytes:
    """`value` as PEM bytes, or ConfigError if it holds no PEM block of an `expected` kind."""
    where = _where(text, path, name)
    if not value.strip():
        raise ConfigError(f"{where}: {name} is empty: expected the PEM text of the {expected[0]}")
    kinds = _PEM_BLOCK.findall(value)
    if not kinds:
        hint = ""
        if "\n" not in value.strip() and len(value) < 4096:
            hint = (
                " (it looks like a path: as in TF Serving, the field holds the PEM text "
                'itself, e.g. server_key: "-----BEGIN PRIVATE KEY-----\\n...")'
            )
        raise ConfigError(
            f"{where}: {name} holds no PEM block (-----BEGIN {expected[0]}-----){hint}"
        )
    if not any(kind.endswith(expected) for kind in kinds):
        raise ConfigError(
            f"{where}: {name} holds a PEM {kinds[0]}, expected a {' or '.join(expected)}"
        )
    return value.encode("utf-8")


@contextlib.contextmanager
def _memory_file(data: bytes) -> Iterator[str]:
    """A path to `data` held in memory (no disk; the image's root is read-only)."""
    fd = os.memfd_create("tf-entrypoint-tls", 0)
    try:
        os.write(fd, data)
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _no_password() -> str:
    raise ValueError("the key is encrypted (TF Serving takes no passphrase)")


def _check_loads(text: str, path: Path, config: SslConfig) -> None:
    """Load the key, certificate and CA with `ssl`, as grpc's TLS will at the listener."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with _memory_file(config.server_cert) as cert, _memory_file(config.server_key) as key:
        try:
            context.load_cert_chain(cert, key, password=_no_password)
        except (ssl.SSLError, ValueError, OSError) as err:
            reason = getattr(err, "reason", None) or str(err)
            raise ConfigError(
                f"{_where(text, path, 'server_key')}: server_key and server_cert cannot be "
                f"loaded as a TLS key and its certificate: {reason}"
            ) from None
    if config.custom_ca is not None:
        try:
            context.load_verify_locations(cadata=config.custom_ca.decode("utf-8"))
        except (ssl.SSLError, ValueError) as err:
            reason = getattr(err, "reason", None) or str(err)
            raise ConfigError(
                f"{_where(text, path, 'custom_ca')}: custom_ca cannot be loaded as CA "
                f"certificates: {reason}"
            ) from None


def parse_ssl_config(text: str, path: Path) -> SslConfig:
    """An SslConfig from the text of TF Serving's SSL config file at `path`.

    Raises ConfigError naming the file, line and field: a syntax error or an
    unknown field (protobuf's message), server_key or server_cert missing or
    not PEM, a key that does not load or is not the certificate's, a custom_ca
    that does not load, and client_verify without custom_ca (there would be
    nothing to verify client certificates against; grpc refuses it too).
    """
    message = textproto.parse(text, _message_class()(), path)
    key = _pem(text, path, "server_key", message.server_key, ("PRIVATE KEY",))
    cert = _pem(text, path, "server_cert", message.server_cert, ("CERTIFICATE",))
    ca = None
    if message.custom_ca.strip():
        ca = _pem(text, path, "custom_ca", message.custom_ca, ("CERTIFICATE",))
    if message.client_verify and ca is None:
        raise ConfigError(
            f"{_where(text, path, 'client_verify')}: client_verify is true but custom_ca is "
            "empty: give the PEM text of the CA that signs the client certificates"
        )
    config = SslConfig(key, cert, ca, bool(message.client_verify), path)
    _check_loads(text, path, config)
    return config


def read_ssl_config(path: Path) -> SslConfig:
    """parse_ssl_config() of the file at `path`; ConfigError if it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(f"{path}: cannot read the SSL config file: {reason}") from None
    return parse_ssl_config(text, path)
