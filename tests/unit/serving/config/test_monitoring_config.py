"""--monitoring_config_file (config/monitoring_config.py): TF Serving's MonitoringConfig."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tf_entrypoint.serving import main as server
from tf_entrypoint.serving.config import monitoring_config
from tf_entrypoint.serving.config.model_config import ConfigError

UPSTREAM_PROTO = Path(__file__).parents[2] / "data" / "monitoring_config.proto"
PAGE = "/monitoring/prometheus/metrics"


def test_the_messages_match_tf_servings_proto() -> None:
    """The runtime-built classes have upstream's package, messages, fields, numbers, types."""
    text = re.sub(r"//.*", "", UPSTREAM_PROTO.read_text())
    package = re.search(r"^package\s+([\w.]+);", text, re.MULTILINE)
    assert package is not None
    upstream: dict[str, set[tuple[str, str, int]]] = {}
    for name, body in re.findall(r"message\s+(\w+)\s*\{([^}]*)\}", text):
        fields = re.findall(r"^\s*(\w+)\s+(\w+)\s*=\s*(\d+)\s*;", body, re.MULTILINE)
        upstream[name] = {(kind, field, int(number)) for kind, field, number in fields}
    assert upstream  # the regexes found something to compare

    file = monitoring_config._message_classes().DESCRIPTOR.file
    types = {8: "bool", 9: "string"}  # FieldDescriptor.TYPE_BOOL, TYPE_STRING
    built = {
        name: {
            (f.message_type.name if f.message_type else types[f.type], f.name, f.number)
            for f in message.fields
        }
        for name, message in file.message_types_by_name.items()
    }
    assert (file.package, built) == (package.group(1), upstream)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "monitoring.config"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "page"),
    [
        ("prometheus_config { enable: true }", PAGE),
        ('prometheus_config { enable: true, path: "" }', PAGE),
        ('prometheus_config: {\n  enable: true\n  path: "/prom"\n}\n', "/prom"),
        ("# only a comment\n", None),
        ("", None),
        ('prometheus_config { enable: false path: "/prom" }', None),
        ('prometheus_config { path: "/v1/not-checked-when-off" }', None),
    ],
)
def test_config_file(tmp_path: Path, text: str, page: str | None) -> None:
    path = write(tmp_path, text)
    expected = monitoring_config.MonitoringConfig(page, path)
    assert monitoring_config.read_monitoring_config(path) == expected


#: TF Serving's words for a file protobuf cannot parse (ParseProtoTextFile).
SYNTAX = "Error parsing text-format tensorflow.serving.MonitoringConfig: "


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (
            "prometheus_config {\n  enable: true\n  port: 9090\n}",
            f"{SYNTAX}PATH:3:3:",
            'no field named "port"',
        ),
        ("prometheus_config { enable: yes }", f"{SYNTAX}PATH:1:", "enable"),
        ("prometheus_config { enable: true", f"{SYNTAX}PATH:1:", 'Expected "}"'),
        ('prometheus_config {\n enable: true\n path: "prom" }', ":3:", 'starting with "/"'),
        ('prometheus_config {\n enable: true\n path: "/v1/x" }', ":3:", "under /v1/"),
        ('prometheus_config {\n enable: true\n path: "/V1/models" }', ":3:", "under /v1/"),
        ('prometheus_config { enable: true path: "/metrics" }', ":1:", "own routes"),
        ('prometheus_config { enable: true path: "/healthz/" }', ":1:", "own routes"),
        ('prometheus_config { enable: true path: "/readyz" }', ":1:", "own routes"),
        ('prometheus_config { enable: true path: "/a?b=1" }', ":1:", "plain URL path"),
        ('prometheus_config { enable: true path: "/{name}" }', ":1:", "plain URL path"),
    ],
)
def test_config_file_errors_name_file_line_and_field(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        monitoring_config.read_monitoring_config(path)
    where = where if "PATH" in where else f"PATH{where}"
    assert str(caught.value).startswith(where.replace("PATH", str(path)))
    assert message in str(caught.value)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.config: cannot read the monitoring config"):
        monitoring_config.read_monitoring_config(tmp_path / "missing.config")


def test_a_bad_file_exits_78_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, 'prometheus_config { enable: true path: "/metrics" }')
    argv = ["--model-base-path", str(tmp_path), "--monitoring_config_file", str(path)]
    assert server.main(argv) == server.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:1: prometheus_config.path '/metrics'")
    assert "Traceback" not in err


def test_the_variable_reads_the_file_too(tmp_path: Path) -> None:
    path = write(tmp_path, "prometheus_config { enable: true }")
    from tf_entrypoint.serving.config import PlannedCpus, parse_config  # noqa: PLC0415

    conf = parse_config(
        ["--model-base-path", str(tmp_path)],
        {"SERVE_MONITORING_CONFIG_FILE": str(path)},
        budget=PlannedCpus(1, "test"),
    )
    assert conf.monitoring == monitoring_config.MonitoringConfig(PAGE, path)
