"""TF Serving's model config file, parsed with its own message definitions (no TensorFlow)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tf_entrypoint.serving.config import PlannedCpus, UsageError, parse_config
from tf_entrypoint.serving.config.model_config import (
    ConfigError,
    config_from_message,
    parse_model_config,
    read_model_config,
)
from tf_entrypoint.serving.core.model_specs import (
    All,
    Latest,
    ModelSpec,
    Specific,
    StoreURL,
    aspired_versions,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.config"
    path.write_text(text)
    return path


def dirs(tmp_path: Path, *names: str) -> None:
    for name in names:
        (tmp_path / name).mkdir()


TWO_MODELS = """
# Two models, as TF Serving's docs write them.
model_config_list {
  config {
    name: 'half'
    base_path: '%(root)s/half'
    model_platform: 'tensorflow'
    model_version_policy { specific { versions: 1 versions: 2 } }
    version_labels { key: 'stable' value: 1 }
    version_labels { key: 'canary' value: 2 }
  }
  config {
    name: "mlp"
    base_path: "mlp"
    model_version_policy: { all: {} }
  }
  config: { name: "newest" base_path: "%(root)s/newest" model_version_policy { latest { num_versions: 2 } } }
}
"""  # noqa: E501 - one-line form on purpose


def test_two_models_with_policies_labels_and_a_relative_base_path(tmp_path: Path) -> None:
    dirs(tmp_path, "half", "mlp", "newest")
    path = write(tmp_path, TWO_MODELS % {"root": tmp_path})
    config = read_model_config(path)
    assert config.path == path
    half, mlp, newest = config.models
    assert half == ModelSpec(
        "half",
        tmp_path / "half",
        Specific((1, 2)),
        {"canary": 2, "stable": 1},
        origin=f"{path}:4 (model 'half')",
    )
    assert (mlp.base_path, mlp.policy, mlp.labels) == (tmp_path / "mlp", All(), {})
    assert mlp.origin == f"{path}:12 (model 'mlp')"
    assert newest.policy == Latest(2)
    assert newest.origin.startswith(f"{path}:17 ")


def test_latest_without_a_count_is_one(tmp_path: Path) -> None:
    dirs(tmp_path, "m")
    text = f'model_config_list {{ config {{ name: "m" base_path: "{tmp_path}/m" '
    text += "model_version_policy { latest {} } } }"
    assert read_model_config(write(tmp_path, text)).models[0].policy == Latest(1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model_config_list {\n config {\n nme: 'a' } }", ":3:2: Message type "),
        ("model_config_list { config { name: 'a' ", ":1:"),
        ("", "no models: expected model_config_list"),
        ("model_config_list {}", "no models"),
        (
            "custom_model_config { type_url: 'x' }",
            "custom_model_config is not supported",
        ),
        (
            "model_config_list {\n config { name: 'a' base_path: '%(root)s/a' }\n"
            " config { name: 'a' base_path: '%(root)s/a' } }",
            ":3: name 'a' is listed twice (first at %(path)s:2)",
        ),
        (
            "model_config_list { config { name: 'a' base_path: '%(root)s/nowhere' } }",
            ":1 (model 'a'): base_path '%(root)s/nowhere' is not a directory",
        ),
        (
            "model_config_list { config { name: 'a' base_path: 'rel' } }",
            "base_path 'rel' (from the file's directory: %(root)s/rel) is not a directory",
        ),
        ("model_config_list { config { name: 'a' } }", "base_path is missing"),
        ("model_config_list { config { base_path: '/' } }", "name '' is invalid"),
        (
            "model_config_list { config { name: '..' base_path: '/' } }",
            "name '..' is invalid: '..' cannot be part of a URL: HTTP clients remove it",
        ),
        (
            "model_config_list { config { name: 'a' base_path: '/' model_platform: 'tflite' } }",
            "model_platform 'tflite' is not supported",
        ),
        (
            "model_config_list { config { name: 'a' base_path: '/' "
            "model_version_policy { specific {} } } }",
            "model_version_policy.specific lists no versions",
        ),
        (
            "model_config_list { config { name: 'a' base_path: '/' "
            "model_version_policy { specific { versions: -1 } } } }",
            "model_version_policy.specific.versions has -1",
        ),
        (
            "model_config_list { config { name: 'a' base_path: '/' "
            "model_version_policy { latest { num_versions: -2 } } } }",
            "Value out of range: -2",  # protobuf's own check (uint32)
        ),
        (
            "model_config_list { config { name: 'a' base_path: '/' "
            "version_labels { key: '.' value: 1 } } }",
            "version_labels key '.' is invalid",
        ),
        (
            "model_config_list { config { name: 'a' base_path: '/' "
            "logging_config { sampling_config { sampling_rate: 1 } } } }",
            "logging_config (request logging) is not supported",
        ),
    ],
)
def test_bad_files_name_the_file_line_and_field(tmp_path: Path, text: str, expected: str) -> None:
    dirs(tmp_path, "a")
    path = write(tmp_path, text % {"root": tmp_path})
    with pytest.raises(ConfigError) as caught:
        read_model_config(path)
    message = str(caught.value)
    # What protobuf cannot parse is said in TF Serving's words first (test below).
    assert message.removeprefix(SYNTAX).startswith(str(path))
    assert expected % {"root": tmp_path, "path": path} in message


#: TF Serving's words for a file protobuf cannot parse (ParseProtoTextFile: protobuf's
#: C++ parser logs them); its tests and users grep for them.
SYNTAX = "Error parsing text-format tensorflow.serving.ModelServerConfig: "


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("improperly formatted file", ":1:1: "),
        ("model_config_list {\n config {\n nme: 'a' } }", ":3:2: "),
        ("model_config_list { config { name: 'a' ", ":1:"),
        (
            "model_config_list { config { name: 'a' base_path: '/' "
            "model_version_policy { latest { num_versions: -2 } } } }",
            ":1:",
        ),
    ],
)
def test_what_protobuf_cannot_parse_is_said_as_tf_serving_says_it(
    tmp_path: Path, text: str, where: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        read_model_config(path)
    assert str(caught.value).startswith(f"{SYNTAX}{path}{where}")


def test_what_protobuf_parses_is_not_said_to_be_a_parse_error(tmp_path: Path) -> None:
    path = write(tmp_path, "model_config_list {}")
    with pytest.raises(ConfigError) as caught:
        read_model_config(path)
    assert str(caught.value).startswith(f"{path}: no models")


def test_an_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the model config file"):
        read_model_config(tmp_path / "missing.config")


def test_line_numbers_skip_comments_and_strings(tmp_path: Path) -> None:
    dirs(tmp_path, "a", "b")
    text = (
        "# config { in a comment\n"
        "model_config_list {\n"
        f"  config {{ name: 'a' base_path: '{tmp_path}/a' }}  # config {{\n"
        "  config {\n"
        f"    name: 'b' base_path: '{tmp_path}/b'\n"
        "  }\n"
        "}\n"
    )
    a, b = parse_model_config(text, tmp_path / "f").models
    assert (a.origin, b.origin) == (f"{tmp_path}/f:3 (model 'a')", f"{tmp_path}/f:4 (model 'b')")


@given(
    st.lists(st.integers(0, 50), unique=True, max_size=8),
    st.integers(1, 5),
    st.lists(st.integers(0, 50), min_size=1, max_size=5),
)
def test_aspired_versions_follow_tf_servings_policies(
    on_disk: list[int], count: int, specific: list[int]
) -> None:
    assert aspired_versions(Latest(count), on_disk) == set(sorted(on_disk)[-count:])
    assert aspired_versions(All(), on_disk) == set(on_disk)
    assert aspired_versions(Specific(tuple(sorted(set(specific)))), on_disk) == set(specific) & set(
        on_disk
    )


def test_the_server_reads_the_file_from_the_flag_in_both_spellings_or_the_variable(
    tmp_path: Path,
) -> None:
    dirs(tmp_path, "half", "mlp", "newest")
    path = write(tmp_path, TWO_MODELS % {"root": tmp_path})
    budget = PlannedCpus(1, "test")
    for argv, env in (
        ([f"--model_config_file={path}"], {}),
        (["--model_config_file", str(path)], {}),
        ([f"--model-config-file={path}"], {}),
        ([], {"MODEL_CONFIG_FILE": str(path)}),
    ):
        conf = parse_config(argv, env, budget=budget)
        assert conf.models.names() == ["half", "mlp", "newest"]
        assert conf.notes == ()
    conf = parse_config(
        [
            "--model_config_file",
            str(path),
            "--model-name",
            "x",
            "--model_config_file_poll_wait_seconds=5",
            "--file_system_poll_wait_seconds",
            "0",
        ],
        {},
        budget=budget,
    )
    assert (conf.model_config_file_poll_wait, conf.file_system_poll_wait) == (5.0, 0.0)
    assert conf.notes == (
        f"--model_name is ignored: the model config file {path} lists the models",
    )


def test_a_bad_file_is_a_config_error_and_a_bad_flag_a_usage_error(tmp_path: Path) -> None:
    path = write(tmp_path, "model_config_list { config { name: 'a' } }")
    with pytest.raises(ConfigError, match="base_path is missing"):
        parse_config([f"--model_config_file={path}"], {}, budget=PlannedCpus(1, "t"))
    with pytest.raises(UsageError):
        parse_config(["--file_system_poll_wait_seconds=-1"], {}, budget=PlannedCpus(1, "t"))


def test_names_with_url_characters_are_accepted(tmp_path: Path) -> None:
    # TF Serving accepts any name, and its REST API reaches it percent-encoded
    # (the route is matched, then the name decoded): so does this server.
    dirs(tmp_path, "a")
    names = ["team/model", "m:v2", "a?b", "c#d", "e\\\\f", "100%", "with space", "modèle"]
    text = (
        "model_config_list {"
        + "".join(
            f" config {{ name: '{n}' base_path: '{tmp_path}/a' "
            f"version_labels {{ key: '{n}' value: 1 }} }}"
            for n in names
        )
        + " }"
    )
    config = read_model_config(write(tmp_path, text))
    assert config.names() == [n.replace("\\\\", "\\") for n in names]


def test_a_base_path_that_cannot_be_looked_at_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python 3.11's Path.is_dir() re-raises EACCES, ESTALE, EIO: a ConfigError,
    # never a traceback at start or a dead control thread on a live re-read.
    dirs(tmp_path, "a")
    real_is_dir = Path.is_dir

    def is_dir(self: Path) -> bool:
        if self.name == "a":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_is_dir(self)

    monkeypatch.setattr(Path, "is_dir", is_dir)
    path = write(
        tmp_path, f"model_config_list {{ config {{ name: 'a' base_path: '{tmp_path}/a' }} }}"
    )
    with pytest.raises(ConfigError) as caught:
        read_model_config(path)
    assert str(caught.value) == (
        f"{path}:1 (model 'a'): base_path '{tmp_path}/a' cannot be read: Permission denied"
    )


@pytest.mark.parametrize(
    ("url", "where"),
    [("gs://bucket/models/m", StoreURL("gs", "bucket", "models/m")),
     ("s3://bucket/m/", StoreURL("s3", "bucket", "m"))],
)  # fmt: skip
def test_object_store_urls_are_model_paths(tmp_path: Path, url: str, where: StoreURL) -> None:
    """Read from object storage (core/object_store.py) wherever a local path works."""
    budget = PlannedCpus(1, "t")
    config = parse_config([f"--model_base_path={url}"], {}, budget=budget)
    assert config.models.models[0].base_path == where
    config = parse_config([], {"MODEL_BASE_PATH": url, "MODEL_NAME": "x"}, budget=budget)
    assert config.models.models[0].base_path == where / "x"
    path = write(tmp_path, f"model_config_list {{ config {{ name: 'a' base_path: '{url}' }} }}")
    config = parse_config([f"--model_config_file={path}"], {}, budget=budget)
    assert config.models.models[0].base_path == where


def test_a_reload_request_takes_object_store_urls_and_refuses_other_schemes() -> None:
    """HandleReloadConfigRequest's config (gRPC: INVALID_ARGUMENT for a ConfigError)."""
    from tensorflow_serving.config import model_server_config_pb2  # noqa: PLC0415

    message = model_server_config_pb2.ModelServerConfig()
    config = message.model_config_list.config.add(name="m", base_path="s3://b/models/m")
    wanted = config_from_message(message, origin="ReloadConfigRequest", base_dir=Path("/"))
    assert wanted.models[0].base_path == StoreURL("s3", "b", "models/m")
    config.base_path = "ftp://host/models/m"
    with pytest.raises(ConfigError, match=r"'ftp://host/models/m': ftp:// is not a model store"):
        config_from_message(message, origin="ReloadConfigRequest", base_dir=Path("/"))


def test_other_urls_are_refused_at_start_naming_them(tmp_path: Path) -> None:
    """Instead of waiting for a local directory called hdfs:/nn/... that never appears."""
    budget = PlannedCpus(1, "t")
    url, expected = "hdfs://nn/m", r"hdfs:// is not a model store this server reads .* s3://, gs://"
    with pytest.raises(UsageError, match=rf"--model_base_path: '{url}': {expected}"):
        parse_config([f"--model_base_path={url}"], {}, budget=budget)
    with pytest.raises(UsageError, match=rf"MODEL_BASE_PATH\): '{url}': {expected}"):
        parse_config([], {"MODEL_BASE_PATH": url}, budget=budget)
    path = write(tmp_path, f"model_config_list {{ config {{ name: 'a' base_path: '{url}' }} }}")
    with pytest.raises(ConfigError, match=rf"base_path: '{url}': {expected}"):
        parse_config([f"--model_config_file={path}"], {}, budget=budget)
    with pytest.raises(UsageError, match=r"'s3:///m' names no bucket: expected s3://BUCKET/PATH"):
        parse_config(["--model_base_path=s3:///m"], {}, budget=budget)
