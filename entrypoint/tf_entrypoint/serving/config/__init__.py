"""The server's settings: command line first, then environment, then defaults.

The flags are tf_entrypoint.server_flags's table, read with its tokenizer;
this module turns their values into a :class:`ServeConfig`, refusing what is
not implemented and calling the readers of the files TF Serving reads
(model_config, monitoring_config, batching_config). The CPU sizing is
sizing.py's; ``--help``, the docs' table and ``--version`` are help.py's.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from tf_entrypoint.server_flags import (
    BOOLEAN_EXPECTED,
    BY_SPELLING,
    DEFAULT_FILE_SYSTEM_POLL_WAIT,
    DEFAULT_GRACE_PERIOD,
    DEFAULT_GRPC_PORT,
    DEFAULT_HOST,
    DEFAULT_LOAD_RETRY_INTERVAL_MICROS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_GRAPH_BYTES,
    DEFAULT_MAX_NUM_LOAD_RETRIES,
    DEFAULT_MODEL_BASE_PATH,
    DEFAULT_MODEL_CONFIG_FILE_POLL_WAIT,
    DEFAULT_MODEL_NAME,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_REST_PORT,
    FLAGS,
    LOG_LEVELS,
    SAVED_MODEL_LOADERS,
    Flag,
    boolean,
    tokenize,
)
from tf_entrypoint.serving.config import channel_args
from tf_entrypoint.serving.config.batching_config import read_batching_parameters
from tf_entrypoint.serving.config.help import ShowText, help_text, markdown_table, version_text
from tf_entrypoint.serving.config.model_config import (
    ConfigError,
    read_model_config,
    single_model,
    store_url,
)
from tf_entrypoint.serving.config.monitoring_config import MonitoringConfig, read_monitoring_config
from tf_entrypoint.serving.config.sizing import (
    MAX_FRONTENDS,
    PlannedCpus,
    cpu_budget,
    default_max_queue,
    size_frontends,
    size_workers,
)
from tf_entrypoint.serving.config.ssl_config import SslConfig, read_ssl_config
from tf_entrypoint.serving.core import model_cache, trace_paths
from tf_entrypoint.serving.core.batching import BatchingParameters
from tf_entrypoint.serving.core.model_specs import ServingConfig
from tf_entrypoint.serving.core.submission import LoadRetries

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "FLAGS",
    "ConfigError",
    "Flag",
    "PlannedCpus",
    "ServeConfig",
    "ShowText",
    "UsageError",
    "cpu_budget",
    "help_text",
    "markdown_table",
    "parse_config",
    "read_flags",
    "size_frontends",
    "size_workers",
    "version_text",
]

T = TypeVar("T")

INTERVAL = DEFAULT_LOAD_RETRY_INTERVAL_MICROS
#: TF Serving's retries of a failed load: 5, a minute apart (server_flags).
TF_SERVING_RETRIES = LoadRetries(DEFAULT_MAX_NUM_LOAD_RETRIES, INTERVAL / 1e6)


@dataclass(frozen=True)
class ServeConfig:
    #: The models to serve: from --model-config-file, or the one model of
    #: --model-name / --model-base-path.
    models: ServingConfig
    host: str
    #: TF Serving's --port: gRPC (0: no gRPC).
    grpc_port: int
    #: TF Serving's --rest_api_port: REST, health and metrics (0: no HTTP).
    rest_port: int
    #: Inference threads: requests running in TensorFlow at once.
    workers: int
    #: Requests admitted (running + waiting for a worker) before 503s.
    max_queue: int
    max_body_bytes: int
    request_timeout: float
    grace_period: float
    #: Seconds to wait for a first version before exiting 1; None: wait (TF Serving's way).
    wait_for_model: float | None
    #: Seconds between scans of the models' directories (0: load once).
    file_system_poll_wait: float
    #: Seconds between reads of the model config file (0: read once).
    model_config_file_poll_wait: float
    access_log: bool
    log_level: str
    budget: PlannedCpus
    #: TF Serving's --monitoring_config_file (text MonitoringConfig), or None.
    monitoring_config_file: Path | None = None
    #: TF Serving's --grpc_socket_path: also serve gRPC on this UNIX socket.
    grpc_socket_path: str | None = None
    #: --frontends: front-end processes over one engine process (serving/processes.py); 1: one
    #: process. Its default is the CPU budget from 2 CPUs (config/sizing.py).
    frontends: int = 1
    #: Listen with SO_REUSEPORT: set for each front-end of several (serving/processes.py).
    reuse_port: bool = False
    #: TF Serving's --enable_model_warmup: warm a version up before it serves.
    enable_model_warmup: bool = True
    #: TF Serving's --num_request_iterations_for_warmup: replays of each warm-up record.
    warmup_iterations: int = 1
    #: TF Serving's --max_num_load_retries and --load_retry_interval_micros (in seconds).
    load_retries: LoadRetries = TF_SERVING_RETRIES
    #: TF Serving's --enable_profiler: tensorflow.ProfilerService on the gRPC port.
    enable_profiler: bool = True
    #: TF Serving's --enable_signature_method_name_check (Classify/Regress).
    enable_signature_method_name_check: bool = False
    #: TF Serving's --rest_api_enable_cors_support: CORS headers and preflights (rest/cors.py).
    enable_cors_support: bool = False
    #: SERVE_SAVED_MODEL_LOADER / --saved-model-loader: "session" (TF Serving's) or "tf2".
    saved_model_loader: str = SAVED_MODEL_LOADERS[0]
    #: What that file asks for (no Prometheus page without one).
    monitoring: MonitoringConfig = field(default_factory=MonitoringConfig)
    #: TF Serving's --grpc_channel_arguments, checked (channel_args.py).
    grpc_channel_arguments: channel_args.ChannelArguments = field(
        default_factory=channel_args.ChannelArguments
    )
    #: TF Serving's --enable_batching: its parameters (from
    #: --batching_parameters_file, else the defaults); None when off.
    batching: BatchingParameters | None = None
    #: TF Serving's --ssl_config_file, read and checked: TLS on the gRPC
    #: listeners (port and socket, as TF Serving); None: plaintext.
    ssl: SslConfig | None = None
    #: Where versions from object storage are copied (--model-cache-dir), and its
    #: limit in bytes (--model-cache-bytes; 0: the file system's free space).
    model_cache_dir: Path = model_cache.DEFAULT_CACHE_DIR
    model_cache_bytes: int = 0
    #: Largest saved_model.pb (or .pbtxt) a version may have (--max-graph-bytes).
    max_graph_bytes: int = DEFAULT_MAX_GRAPH_BYTES
    #: The one directory (normalised local real path, or gs:// / s3:// prefix) the
    #: profiler service may write traces under (--profile-dir); None: it writes none.
    profile_dir: str | None = None
    #: Things to tell the operator at start (flags that a config file overrides,
    #: flags accepted with no effect).
    notes: tuple[str, ...] = field(default=())


class UsageError(Exception):
    pass


def read_flags(argv: Sequence[str]) -> dict[str, str]:
    """The flags given, by table name -> value as written (booleans: "true"/"false").

    The command line as server_flags.tokenize reads it. A flag given twice:
    the last wins. Raises ShowText for -h/--help, and UsageError naming the
    flag for anything else it cannot read.
    """
    given: dict[str, str] = {}
    previous: Flag | None = None
    for token in tokenize(argv):
        arg = token.args[0]
        if arg in ("-h", "--help"):
            raise ShowText(help_text())
        flag, spelling, value = token.flag, token.spelling, token.value
        if flag is None:
            raise UsageError(_unknown(arg, previous))
        if value is None:
            raise UsageError(f"{spelling} needs a value ({spelling}=VALUE or {spelling} VALUE)")
        if flag.boolean:
            read = boolean(value)
            if read is None:
                raise UsageError(f"{spelling}={value!r} is invalid: expected {BOOLEAN_EXPECTED}")
            value = "true" if read else "false"
        given[flag.name] = value
        previous = flag
    return given


def _unknown(arg: str, previous: Flag | None) -> str:
    if not arg.startswith("-"):
        hint = ""
        if previous is not None and previous.boolean:
            hint = (
                f" (a boolean takes its value as --{previous.name}=VALUE, not as the next argument)"
            )
        return f"unexpected argument {arg!r}{hint}"
    spelling = arg.partition("=")[0]
    close = difflib.get_close_matches(spelling, list(BY_SPELLING), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown flag {spelling}{hint}"


def check_limits(given: Mapping[str, str]) -> list[str]:
    """Refuse what is not implemented (UsageError); notes for the "noted" flags."""
    notes = []
    for name, value in given.items():
        flag = BY_SPELLING[f"--{name}"]
        if flag.kind == "plan":
            raise UsageError(
                f"--{name} is read by tf-entrypoint before the server starts (it becomes "
                f"{flag.why}): run `tf-entrypoint serve` or `tensorflow_model_server` (both "
                "plan first)"
            )
        if flag.kind == "limited" and value.strip().lower() not in flag.accepts:
            shown = f"--{name}" if flag.boolean and value == "true" else f"--{name}={value}"
            raise UsageError(f"{shown} is not supported: {flag.why}")
        if flag.kind == "noted":
            notes.append(f"--{name}={value} has no effect here: {flag.why}")
    return notes


@dataclass(frozen=True)
class Converter(Generic[T]):
    """A value's reading and, for the error message, what it expects."""

    read: Callable[[str], T]
    #: "... is invalid: expected {expected}".
    expected: str


class _Values:
    """A flag's value: the command line first, then its variable, then a default."""

    def __init__(self, given: Mapping[str, str], env: Mapping[str, str]) -> None:
        self.given = given
        self.env = env

    def raw(self, name: str) -> tuple[str, str] | None:
        """(what to call it in a message, raw value), or None when not given."""
        if name in self.given:
            return f"--{name}", self.given[name]
        flag = BY_SPELLING[f"--{name}"]
        if flag.env:
            value = self.env.get(flag.env, "").strip()
            if value:
                return flag.env, value
        return None

    def get(self, name: str, convert: Converter[T], fallback: T) -> T:
        found = self.raw(name)
        if found is None:
            return fallback
        source, raw = found
        try:
            return convert.read(raw)
        except ValueError:
            raise UsageError(f"{source}={raw!r} is invalid: expected {convert.expected}") from None


def _checked(value: T, ok: bool, text: str) -> T:
    if not ok:
        raise ValueError(text)
    return value


def _boolean(text: str) -> bool:
    read = boolean(text)
    if read is None:
        raise ValueError(text)
    return read


def _int_from(least: int) -> Callable[[str], int]:
    def read(text: str) -> int:
        value = int(text)
        return _checked(value, value >= least, text)

    return read


def _int_within(least: int, bits: int) -> Callable[[str], int]:
    def read(text: str) -> int:
        value = int(text)
        return _checked(value, least <= value < 2 ** (bits - 1), text)

    return read


def _int_between(least: int, most: int) -> Callable[[str], int]:
    def read(text: str) -> int:
        value = int(text)
        return _checked(value, least <= value <= most, text)

    return read


def _port(text: str) -> int:
    value = int(text)
    return _checked(value, 0 <= value <= 65535, text)


def _seconds(text: str) -> float:
    value = float(text)
    return _checked(value, value >= 0 and value != float("inf"), text)


def _milliseconds(text: str) -> float:
    """TF Serving's --rest_api_timeout_in_ms: an int32; 0 or less is no limit."""
    value = int(text)
    return _checked(max(0, value) / 1000, -(2**31) <= value < 2**31, text)


def _one_of(words: Sequence[str]) -> Callable[[str], str]:
    def read(text: str) -> str:
        return _checked(text, text in words, text)

    return read


def _path(text: str) -> str | None:
    return text or None


BOOLEAN = Converter(_boolean, BOOLEAN_EXPECTED)
POSITIVE_INT = Converter(_int_from(1), "a whole number from 1")
FRONTENDS = Converter(_int_between(1, MAX_FRONTENDS), f"a whole number from 1 to {MAX_FRONTENDS}")
PORT = Converter(_port, "a port (0-65535)")
#: TF Serving's int32 and int64 flags.
INT32 = Converter(_int_within(-(2**31), 32), "a whole number (int32)")
INT64 = Converter(_int_within(-(2**63), 64), "a whole number of microseconds (int64)")
BYTES = Converter(_int_from(0), "a whole number of bytes (0: no limit)")
POSITIVE_BYTES = Converter(_int_from(1), "a whole number of bytes from 1")
RETRIES = Converter(_int_within(0, 32), "a whole number from 0 (int32)")
SECONDS = Converter(_seconds, "a number of seconds (0 or more)")
MAYBE_SECONDS: Converter[float | None] = Converter(_seconds, SECONDS.expected)
MILLISECONDS = Converter(_milliseconds, "a whole number of milliseconds (0 or less: no limit)")
LOG_LEVEL = Converter(_one_of(LOG_LEVELS), ", ".join(LOG_LEVELS))
LOADER = Converter(_one_of(SAVED_MODEL_LOADERS), " or ".join(SAVED_MODEL_LOADERS))
PATH = Converter(_path, "a path")
PROFILE_DIR: Converter[str | None] = Converter(
    trace_paths.normalise_dir, "a directory, or a gs:// or s3:// prefix (gs://BUCKET/PATH)"
)
TEXT = Converter(str, "text")


def _models(values: _Values) -> tuple[ServingConfig, list[str]]:
    """The models to serve, and notes on flags the config file overrides."""
    name = values.get("model_name", TEXT, DEFAULT_MODEL_NAME)
    config_file = values.get("model_config_file", PATH, None)
    model_dir = values.given.get("model_base_path")  # TF Serving's: the model's own directory
    if config_file is None:
        if model_dir is not None and "model-base-path" in values.given:
            raise UsageError(
                "--model_base_path (the model's own directory, as in TF Serving) and "
                "--model-base-path (the directory holding MODEL_NAME) are both given: give one"
            )
        if model_dir:
            url = store_url("--model_base_path", model_dir)
            return single_model(name, url or Path(model_dir)), []
        base = values.get("model-base-path", TEXT, DEFAULT_MODEL_BASE_PATH)
        url = store_url("--model-base-path (MODEL_BASE_PATH)", base)
        return single_model(name, url / name if url else Path(base) / name), []
    notes = [
        f"--{flag} is ignored: the model config file {config_file} lists the models"
        for flag in ("model_name", "model_base_path", "model-base-path")
        if flag in values.given
    ]
    return read_model_config(Path(config_file)), notes


def parse_config(
    argv: Sequence[str], env: Mapping[str, str], budget: PlannedCpus | None = None
) -> ServeConfig:
    """Raises UsageError for a bad or unsupported flag or variable, ShowText
    for --help and --version, and ConfigError (naming file, line and field) for
    a model or monitoring configuration that cannot be served."""
    given = read_flags(argv)
    values = _Values(given, env)
    if values.get("version", BOOLEAN, False):
        raise ShowText(version_text())
    notes = check_limits(given)
    try:
        models, model_notes = _models(values)
    except ConfigError as err:
        if values.raw("model_config_file") is None:  # a bad --model_name: the command line
            raise UsageError(str(err)) from None
        raise
    grpc_port = values.get("port", PORT, DEFAULT_GRPC_PORT)
    rest_port = values.get("rest_api_port", PORT, DEFAULT_REST_PORT)
    socket_path = values.get("grpc_socket_path", PATH, None)
    if grpc_port == 0 and rest_port == 0 and socket_path is None:
        raise UsageError("--port and --rest_api_port are both 0: nothing to serve")
    if grpc_port == rest_port != 0:
        raise UsageError(
            f"--port and --rest_api_port are both {grpc_port}: --port is the gRPC port, "
            "as in TF Serving (it was the REST port before gRPC was served); give REST "
            "its own with --rest_api_port (env PORT)"
        )
    if "rest_api_timeout_in_ms" in given and "request-timeout" in given:
        raise UsageError(
            "--rest_api_timeout_in_ms and --request-timeout are both given: they are the same "
            "limit (milliseconds and seconds); give one"
        )
    try:
        channel_arguments = channel_args.parse(given.get("grpc_channel_arguments", ""))
    except ValueError as err:
        raise UsageError(f"--grpc_channel_arguments: {err}") from None
    notes.extend(f"--grpc_channel_arguments: {note}" for note in channel_arguments.notes)
    timeout = values.get("request-timeout", SECONDS, DEFAULT_REQUEST_TIMEOUT)
    timeout = values.get("rest_api_timeout_in_ms", MILLISECONDS, timeout)
    budget = budget or cpu_budget(env)
    workers = values.get("workers", POSITIVE_INT, size_workers(budget))
    monitoring = values.get("monitoring_config_file", PATH, None)
    monitoring_file = None if monitoring is None else Path(monitoring)
    prometheus = (
        MonitoringConfig() if monitoring_file is None else read_monitoring_config(monitoring_file)
    )
    batching = None
    batching_file = values.get("batching_parameters_file", PATH, None)
    if values.get("enable_batching", BOOLEAN, False):
        batching = (
            BatchingParameters(num_batch_threads=workers)
            if batching_file is None
            else read_batching_parameters(Path(batching_file), workers)
        )
    elif batching_file is not None:
        notes.append(
            f"the batching parameters file {batching_file} is ignored: batching is off "
            "(--enable_batching, SERVE_ENABLE_BATCHING)"
        )
    ssl_file = values.get("ssl_config_file", PATH, None)
    tls = None if ssl_file is None else read_ssl_config(Path(ssl_file))
    if tls is not None and grpc_port == 0 and socket_path is None:
        notes.append(
            f"the SSL config file {ssl_file} is not used: gRPC is off (--port 0) and TLS "
            "applies to gRPC only, as in TF Serving"
        )
    if prometheus.prometheus_path is not None and rest_port == 0:
        notes.append(
            f"the monitoring config file {monitoring_file} enables the Prometheus page "
            f"{prometheus.prometheus_path}, but --rest_api_port is 0: no page is served"
        )
    return ServeConfig(
        models=models,
        host=values.get("host", TEXT, DEFAULT_HOST),
        grpc_port=grpc_port,
        rest_port=rest_port,
        workers=workers,
        max_queue=values.get("max-queue", POSITIVE_INT, default_max_queue(workers)),
        frontends=values.get("frontends", FRONTENDS, size_frontends(budget)),
        max_body_bytes=values.get("max-body-bytes", POSITIVE_INT, DEFAULT_MAX_BODY_BYTES),
        request_timeout=timeout,
        grace_period=values.get("grace-period", SECONDS, DEFAULT_GRACE_PERIOD),
        wait_for_model=values.get("wait-for-model", MAYBE_SECONDS, None),
        file_system_poll_wait=values.get(
            "file_system_poll_wait_seconds", SECONDS, DEFAULT_FILE_SYSTEM_POLL_WAIT
        ),
        model_config_file_poll_wait=values.get(
            "model_config_file_poll_wait_seconds", SECONDS, DEFAULT_MODEL_CONFIG_FILE_POLL_WAIT
        ),
        access_log=values.get("access-log", BOOLEAN, False),
        log_level=values.get("log-level", LOG_LEVEL, "info"),
        saved_model_loader=values.get("saved-model-loader", LOADER, SAVED_MODEL_LOADERS[0]),
        budget=budget,
        monitoring_config_file=monitoring_file,
        monitoring=prometheus,
        batching=batching,
        ssl=tls,
        grpc_socket_path=socket_path,
        grpc_channel_arguments=channel_arguments,
        enable_model_warmup=values.get("enable_model_warmup", BOOLEAN, True),
        warmup_iterations=max(1, values.get("num_request_iterations_for_warmup", INT32, 0)),
        load_retries=LoadRetries(
            values.get("max_num_load_retries", RETRIES, DEFAULT_MAX_NUM_LOAD_RETRIES),
            max(0, values.get("load_retry_interval_micros", INT64, INTERVAL)) / 1e6,
        ),
        enable_profiler=values.get("enable_profiler", BOOLEAN, True),
        enable_signature_method_name_check=values.get(
            "enable_signature_method_name_check", BOOLEAN, False
        ),
        enable_cors_support=values.get("rest_api_enable_cors_support", BOOLEAN, False),
        model_cache_dir=Path(
            values.get("model-cache-dir", PATH, None) or model_cache.DEFAULT_CACHE_DIR
        ),
        model_cache_bytes=values.get("model-cache-bytes", BYTES, 0),
        max_graph_bytes=values.get("max-graph-bytes", POSITIVE_BYTES, DEFAULT_MAX_GRAPH_BYTES),
        profile_dir=values.get("profile-dir", PROFILE_DIR, None),
        notes=(*notes, *model_notes),
    )
