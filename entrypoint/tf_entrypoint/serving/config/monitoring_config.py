"""TF Serving's --monitoring_config_file: what Prometheus page to serve.

The file is TF Serving's text-format `MonitoringConfig`
(tensorflow_serving/config/monitoring_config.proto). `tensorflow-serving-api`
ships no `monitoring_config_pb2`, so its two messages are built here from a
FileDescriptorProto and the file is parsed with protobuf's `text_format`, as
TF Serving's `ParseProtoTextFile` does: an unknown field or a syntax error is
refused with the file, line and column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tf_entrypoint.serving.config import textproto
from tf_entrypoint.serving.config.textproto import ConfigError

#: PrometheusExporter::kPrometheusPath: the page's path when `path` is empty.
DEFAULT_PATH = "/monitoring/prometheus/metrics"
#: Paths of this server's own routes, which the page may not take.
RESERVED_PATHS = ("/healthz", "/readyz", "/metrics")


@dataclass(frozen=True)
class MonitoringConfig:
    """What --monitoring_config_file asks for: the page's path, or None for no page."""

    prometheus_path: str | None = None
    #: The file it was read from, for messages.
    source: Path | None = None


def _message_classes() -> Any:
    """MonitoringConfig's class, built from monitoring_config.proto's definitions."""
    from google.protobuf import descriptor_pb2  # noqa: PLC0415 - only when a file is given

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/config/monitoring_config.proto",
        package="tensorflow.serving",
        syntax="proto3",
    )
    prometheus = proto.message_type.add(name="PrometheusConfig")
    prometheus.field.add(
        name="enable", json_name="enable", number=1,
        type=field.TYPE_BOOL, label=field.LABEL_OPTIONAL,
    )  # fmt: skip
    prometheus.field.add(
        name="path", json_name="path", number=2,
        type=field.TYPE_STRING, label=field.LABEL_OPTIONAL,
    )  # fmt: skip
    monitoring = proto.message_type.add(name="MonitoringConfig")
    monitoring.field.add(
        name="prometheus_config", json_name="prometheusConfig", number=1,
        type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
        type_name=".tensorflow.serving.PrometheusConfig",
    )  # fmt: skip
    return textproto.message_class(proto, "tensorflow.serving.MonitoringConfig")


def check_path(path: str) -> str | None:
    """Why `path` cannot be the page's path on this server, or None."""
    if not path.startswith("/"):
        return 'expected an absolute URL path starting with "/"'
    if re.search(r"[\s?#{}%]", path) or not path.isascii():
        return "expected a plain URL path: ASCII, no spaces, '?', '#', '%', '{' or '}'"
    if path.lower().startswith("/v1/"):
        return "it is under /v1/, the REST API's paths"
    if path.rstrip("/") in RESERVED_PATHS:
        return "it is one of this server's own routes (/healthz, /readyz, /metrics)"
    return None


def parse_monitoring_config(text: str, path: Path) -> MonitoringConfig:
    """A MonitoringConfig from the text of TF Serving's monitoring config file at `path`.

    Raises ConfigError naming the file, line and field for a syntax error or
    an unknown field (protobuf's message) and for a page path this server
    cannot serve. An empty file, or `enable: false`, serves no page (as in
    TF Serving); an empty `path` is TF Serving's default.
    """
    message = textproto.parse(text, _message_classes()(), path)
    prometheus = message.prometheus_config
    if not prometheus.enable:
        return MonitoringConfig(None, path)
    page = prometheus.path or DEFAULT_PATH
    problem = check_path(page)
    if problem:
        line = textproto.field_line(text, "path")
        where = f"{path}:{line}" if line else str(path)
        raise ConfigError(f"{where}: prometheus_config.path {page!r} cannot be served: {problem}")
    return MonitoringConfig(page, path)


def read_monitoring_config(path: Path) -> MonitoringConfig:
    """parse_monitoring_config() of the file at `path`; ConfigError if it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(f"{path}: cannot read the monitoring config file: {reason}") from None
    return parse_monitoring_config(text, path)
