"""Which models to serve: TF Serving's `--model_config_file`, or one model from flags.

The file is TF Serving's own text-format `ModelServerConfig`, parsed with its
message definitions (`tensorflow-serving-api`'s `model_server_config_pb2`)
and protobuf's `text_format`, so a file TF Serving accepts is accepted here
and a misspelt field is refused the same way. What this module adds are the
checks TF Serving makes later or not at all, each reported with the file,
the line of the model's `config {` block and the field (README: "Several
models: the model config file").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tf_entrypoint.serving.config import textproto
from tf_entrypoint.serving.config.textproto import ConfigError as ConfigError  # noqa: PLC0414 - re-exported
from tf_entrypoint.serving.core import object_store
from tf_entrypoint.serving.core.model_specs import (
    All,
    Latest,
    ModelPath,
    ModelSpec,
    Policy,
    ServingConfig,
    Specific,
    StoreURL,
)


def check_model_name(name: str) -> str | None:
    """Why `name` cannot be a model name or label, or None.

    Any other name is reachable over REST: URLs carry it percent-encoded
    (`a/b` as `a%2Fb`, `a?b` as `a%3Fb`), decoded after the route is
    matched, as in TF Serving. An empty name is unreachable (REST and gRPC
    both need one), and HTTP clients rewrite `.` and `..` path segments.
    """
    if not name:
        return "it is empty: expected a name (it is part of every request)"
    if name in (".", ".."):
        return f"{name!r} cannot be part of a URL: HTTP clients remove it from the path"
    return None


def store_url(where: str, path: str) -> StoreURL | None:
    """The object store location `path` names (s3://, gs://), None for a local path;
    ConfigError naming `where` for a URL this server cannot read, or whose client
    is not installed."""
    try:
        url = object_store.parse_url(path)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None
    if url is not None:
        problem = object_store.check_client(url.scheme)
        if problem:
            raise ConfigError(f"{where}: {path!r}: {problem}")
    return url


def single_model(name: str, base_path: ModelPath) -> ServingConfig:
    """The model given on the command line: BASE_PATH is its version directory's parent."""
    problem = check_model_name(name)
    if problem:
        raise ConfigError(f"invalid model name {name!r}: {problem}")
    return ServingConfig((ModelSpec(name, base_path, origin="--model-name"),))


def _config_lines(text: str) -> list[int]:
    """The 1-based line of each `config` block, in order (comments and strings skipped)."""
    lines: list[int] = []
    for number, line in enumerate(text.split("\n"), start=1):
        code = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|#.*', "", line)
        lines.extend(number for _ in re.finditer(r"\bconfig\s*:?\s*[{<]", code))
    return lines


def _policy(proto: Any, where: str) -> Policy:
    which = proto.WhichOneof("policy_choice")
    if which is None:
        return Latest()
    if which == "latest":
        # uint32: protobuf refuses negative counts; TF Serving reads 0 (unset) as 1.
        return Latest(proto.latest.num_versions or 1)
    if which == "all":
        return All()
    versions = tuple(sorted(set(proto.specific.versions)))
    if not versions:
        raise ConfigError(
            f"{where}: model_version_policy.specific lists no versions: expected "
            "`specific { versions: N }` with at least one version"
        )
    if versions[0] < 0:
        raise ConfigError(
            f"{where}: model_version_policy.specific.versions has {versions[0]}: "
            "expected non-negative version numbers"
        )
    return Specific(versions)


def _model(proto: Any, where: str, base_dir: Path) -> ModelSpec:
    problem = check_model_name(proto.name)
    if problem:
        raise ConfigError(f"{where}: name {proto.name!r} is invalid: {problem}")
    where = f"{where} (model {proto.name!r})"
    platform = proto.model_platform or "tensorflow"
    if platform != "tensorflow":
        raise ConfigError(
            f"{where}: model_platform {proto.model_platform!r} is not supported: "
            'expected "tensorflow" (SavedModel)'
        )
    if proto.HasField("logging_config"):
        raise ConfigError(
            f"{where}: logging_config (request logging) is not supported by this server; remove it"
        )
    if not proto.base_path:
        raise ConfigError(f"{where}: base_path is missing: expected the model's directory")
    url = store_url(f"{where}: base_path", proto.base_path)
    if url is not None:
        return _spec(proto, where, url)
    base_path = Path(proto.base_path)
    if not base_path.is_absolute():
        base_path = base_dir / base_path
    shown = repr(proto.base_path)
    if str(base_path) != proto.base_path:
        shown += f" (from the file's directory: {base_path})"
    try:
        is_dir = base_path.is_dir()
    except OSError as err:  # EACCES on a parent, a stale NFS handle, EIO on FUSE
        reason = err.strerror or str(err)
        raise ConfigError(f"{where}: base_path {shown} cannot be read: {reason}") from None
    if not is_dir:
        raise ConfigError(
            f"{where}: base_path {shown} is not a directory: expected the directory holding "
            "the model's numbered version directories"
        )
    return _spec(proto, where, base_path)


def _spec(proto: Any, where: str, base_path: ModelPath) -> ModelSpec:
    labels: dict[str, int] = {}
    for label, version in sorted(proto.version_labels.items()):
        problem = check_model_name(label)
        if problem:
            raise ConfigError(f"{where}: version_labels key {label!r} is invalid: {problem}")
        if version < 0:
            raise ConfigError(
                f"{where}: version_labels {label!r} -> {version}: expected a version number"
            )
        labels[label] = int(version)
    return ModelSpec(
        name=proto.name,
        base_path=base_path,
        policy=_policy(proto.model_version_policy, where),
        labels=labels,
        origin=where,
    )


def parse_model_config(text: str, path: Path) -> ServingConfig:
    """A ServingConfig from the text of TF Serving's model config file at `path`.

    Raises ConfigError naming the file, line and field for anything this
    server cannot serve: a syntax error or unknown field (protobuf's own
    message), a custom_model_config, no models, a name listed twice, a
    missing base path, an empty `specific` policy, an unsupported platform.
    Relative base paths are taken from the file's directory.
    """
    from tensorflow_serving.config import model_server_config_pb2  # noqa: PLC0415

    message = textproto.parse(text, model_server_config_pb2.ModelServerConfig(), path)
    return config_from_message(
        message, origin=str(path), base_dir=path.parent, lines=_config_lines(text), path=path
    )


def config_from_message(
    message: Any,
    *,
    origin: str,
    base_dir: Path,
    lines: Sequence[int] = (),
    path: Path | None = None,
) -> ServingConfig:
    """A ServingConfig from a parsed ModelServerConfig message.

    `origin` names it in errors (the file, or "ReloadConfigRequest"), `lines`
    are the lines of its `config {` blocks when it came from text, relative
    base paths are taken from `base_dir`, and `path` is the file it was read
    from (None for a configuration sent over gRPC).
    """
    which = message.WhichOneof("config")
    if which == "custom_model_config":
        raise ConfigError(
            f"{origin}: custom_model_config is not supported: expected model_config_list"
        )
    configs = list(message.model_config_list.config) if which else []
    if not configs:
        raise ConfigError(
            f"{origin}: no models: expected model_config_list {{ config {{ name: ... "
            "base_path: ... }} }}"
        )
    models: list[ModelSpec] = []
    seen: dict[str, str] = {}
    for index, proto in enumerate(configs):
        line = lines[index] if index < len(lines) else None
        where = f"{origin}:{line}" if line else f"{origin} (config #{index + 1})"
        spec = _model(proto, where, base_dir)
        if spec.name in seen:
            raise ConfigError(
                f"{where}: name {spec.name!r} is listed twice (first at {seen[spec.name]}): "
                "TF Serving refuses this too (Illegal to list model "
                f"{spec.name} multiple times in config list)"
            )
        seen[spec.name] = where.split(" (", maxsplit=1)[0]
        models.append(spec)
    return ServingConfig(tuple(models), path)


def read_model_config(path: Path) -> ServingConfig:
    """parse_model_config() of the file at `path`; ConfigError if it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(f"{path}: cannot read the model config file: {reason}") from None
    return parse_model_config(text, path)
