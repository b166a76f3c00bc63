"""The server's settings: command line first, then environment, then defaults.

One table, :data:`FLAGS`, lists every flag: ours and every one of TF Serving's
``tensorflow_model_server`` (its main.cc), each implemented, read by the
entrypoint into the plan, accepted with no effect (and a warning), or refused
with the reason. It drives the parsing, ``--help`` and docs/tf-serving.md's table.

Concurrency is sized from the container's CPU budget, the same number the
entrypoint gives TensorFlow's pools (see :func:`size_workers`).
"""

from __future__ import annotations

import difflib
import os
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Literal, TypeVar

from tf_entrypoint.serving.config import channel_args
from tf_entrypoint.serving.config.model_config import (
    ConfigError,
    read_model_config,
    single_model,
)
from tf_entrypoint.serving.core.batching import BatchingParameters, read_batching_parameters
from tf_entrypoint.serving.core.model_specs import ServingConfig
from tf_entrypoint.serving.core.tfs_metrics import MonitoringConfig, read_monitoring_config

T = TypeVar("T")

DEFAULT_MODEL_NAME = "model"
DEFAULT_MODEL_BASE_PATH = "/models"
#: TF Serving's ports as its image runs them: --port (gRPC) and --rest_api_port.
DEFAULT_GRPC_PORT = 8500
DEFAULT_REST_PORT = 8501
DEFAULT_HOST = "0.0.0.0"  # noqa: S104 - a container's server listens on its interface
#: Largest request body accepted (bytes); larger ones get 413. 8 MiB holds
#: about a million JSON floats, far beyond what one REST call should carry.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
#: TF Serving's --rest_api_timeout_in_ms default.
DEFAULT_REQUEST_TIMEOUT = 30.0
#: Below Docker's 10 s between SIGTERM and SIGKILL (Kubernetes gives 30 s).
DEFAULT_GRACE_PERIOD = 8.0
DEFAULT_WAIT_FOR_MODEL = 300.0
#: TF Serving's --file_system_poll_wait_seconds default.
DEFAULT_FILE_SYSTEM_POLL_WAIT = 1.0
#: TF Serving's --model_config_file_poll_wait_seconds default (0: read once).
DEFAULT_MODEL_CONFIG_FILE_POLL_WAIT = 0.0
#: Requests admitted per worker (running + queued) before 503s.
DEFAULT_QUEUE_PER_WORKER = 32

ENV_MODEL_NAME = "MODEL_NAME"
ENV_MODEL_BASE_PATH = "MODEL_BASE_PATH"
#: The REST port's variable keeps its name (Cloud Run's and Knative's HTTP port).
ENV_REST_PORT = "PORT"
ENV_GRPC_PORT = "SERVE_GRPC_PORT"
ENV_MONITORING_CONFIG_FILE = "SERVE_MONITORING_CONFIG_FILE"
ENV_HOST = "SERVE_HOST"
ENV_WORKERS = "SERVE_WORKERS"
ENV_MAX_QUEUE = "SERVE_MAX_QUEUE"
ENV_MAX_BODY_BYTES = "SERVE_MAX_BODY_BYTES"
ENV_REQUEST_TIMEOUT = "SERVE_REQUEST_TIMEOUT"
ENV_GRACE_PERIOD = "SERVE_GRACE_PERIOD"
ENV_WAIT_FOR_MODEL = "SERVE_WAIT_FOR_MODEL"
ENV_ACCESS_LOG = "SERVE_ACCESS_LOG"
ENV_LOG_LEVEL = "SERVE_LOG_LEVEL"
ENV_MODEL_CONFIG_FILE = "MODEL_CONFIG_FILE"
ENV_FILE_SYSTEM_POLL_WAIT = "SERVE_FILE_SYSTEM_POLL_WAIT_SECONDS"
ENV_MODEL_CONFIG_FILE_POLL_WAIT = "SERVE_MODEL_CONFIG_FILE_POLL_WAIT_SECONDS"
ENV_ENABLE_BATCHING = "SERVE_ENABLE_BATCHING"
ENV_BATCHING_PARAMETERS_FILE = "SERVE_BATCHING_PARAMETERS_FILE"


@dataclass(frozen=True)
class PlannedCpus:
    """The CPU budget the entrypoint planned (tf_entrypoint.plan.planned_cpus)."""

    cpus: int
    #: Where the number came from, for the start-up log line.
    source: str


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
    wait_for_model: float
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
    #: TF Serving's --enable_model_warmup: warm a version up before it serves.
    enable_model_warmup: bool = True
    #: TF Serving's --enable_profiler: tensorflow.ProfilerService on the gRPC port.
    enable_profiler: bool = True
    #: TF Serving's --enable_signature_method_name_check (Classify/Regress).
    enable_signature_method_name_check: bool = False
    #: What that file asks for (no Prometheus page without one).
    monitoring: MonitoringConfig = field(default_factory=MonitoringConfig)
    #: TF Serving's --grpc_channel_arguments, checked (channel_args.py).
    grpc_channel_arguments: channel_args.ChannelArguments = field(
        default_factory=channel_args.ChannelArguments
    )
    #: TF Serving's --enable_batching: its parameters (from
    #: --batching_parameters_file, else the defaults); None when off.
    batching: BatchingParameters | None = None
    #: Things to tell the operator at start (flags that a config file overrides,
    #: flags accepted with no effect).
    notes: tuple[str, ...] = field(default=())


def cpu_budget(env: Mapping[str, str]) -> PlannedCpus:
    """The container's CPU budget as the entrypoint computes it (quota, cpuset, override)."""
    try:
        from tf_entrypoint.plan import planned_cpus  # noqa: PLC0415 - stdlib-only, cheap

        return PlannedCpus(*planned_cpus(env))
    except Exception:  # noqa: BLE001 - never refuse to serve over the sizing
        return PlannedCpus(max(1, len(os.sched_getaffinity(0))), "affinity (planning failed)")


def size_workers(budget: PlannedCpus) -> int:
    """Inference threads for a CPU budget: one per CPU.

    TensorFlow's intra-op and inter-op pools are process-wide and already
    sized to the budget by the entrypoint, so extra callers do not add
    compute threads; they add queueing inside TensorFlow and the GIL. One
    caller per CPU keeps every CPU busy with small models (where Python and
    per-call overhead dominate) while large ops still fan out over the
    shared intra-op pool. The event loop (HTTP parsing) is one more thread,
    mostly idle next to inference. See the README for the measurement.
    """
    return max(1, budget.cpus)


class UsageError(Exception):
    pass


class ShowText(Exception):
    """--help or --version: print `text` on stdout and exit 0."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


# --- the flag table -----------------------------------------------------------

Kind = Literal["serve", "plan", "noted", "limited"]


@dataclass(frozen=True)
class Flag:
    """One command-line flag: how it is read and what it does here.

    `kind`: "serve" the server implements it; "plan" tf-entrypoint reads it
    into the plan before the server starts (TF Serving's thread flags);
    "noted" accepted, no effect here, a warning at start says why; "limited"
    only the values in `accepts` (what this server does anyway) are accepted,
    any other value is refused with `why` (no `accepts`: always refused).
    """

    name: str
    meaning: str
    kind: Kind = "serve"
    aliases: tuple[str, ...] = ()
    boolean: bool = False
    env: str | None = None
    default: str = ""
    #: "limited": the accepted values, normalised (booleans "true"/"false").
    accepts: tuple[str, ...] = ()
    #: "limited"/"noted": why (and what to use instead).
    why: str = ""
    #: One of TF Serving's flags (main.cc); False: only ours.
    tf_serving: bool = True

    @property
    def spellings(self) -> tuple[str, ...]:
        return (f"--{self.name}", *(f"--{alias}" for alias in self.aliases))

    @property
    def refused(self) -> bool:
        return self.kind == "limited" and not self.accepts

    def what_it_does(self) -> str:
        """The flag's line in --help and the README: its meaning, or its limits."""
        if self.kind == "limited":
            shown = " or ".join(f"`{value}`" if value else "empty" for value in self.accepts)
            if not self.accepts:
                return f"refused: {self.why}"
            meaning = f": {self.meaning}" if self.meaning else ""
            return f"only {shown}{meaning}; other values are refused: {self.why}"
        if self.kind == "noted":
            return f"accepted, no effect (a warning says so): {self.why}"
        return self.meaning


_NO_PER_MODEL_BATCHING = (
    "per-model batching parameters are not implemented; --batching_parameters_file applies "
    "to every model"
)
_NO_TFLITE = "TensorFlow Lite models are not served; the SavedModel is"

FLAGS: tuple[Flag, ...] = (
    # --- the models
    Flag("model_name", "the model to serve (ignored with --model_config_file)",
         aliases=("model-name",), env=ENV_MODEL_NAME, default=DEFAULT_MODEL_NAME),
    Flag("model_base_path", "TF Serving's meaning: the model's own directory, holding "
         "VERSION/saved_model.pb (ignored with --model_config_file)",
         default="MODEL_BASE_PATH/MODEL_NAME"),
    Flag("model-base-path", "the directory holding MODEL_NAME/VERSION/saved_model.pb (as "
         "TF Serving's image reads MODEL_BASE_PATH); not with --model_base_path",
         env=ENV_MODEL_BASE_PATH, default=DEFAULT_MODEL_BASE_PATH, tf_serving=False),
    Flag("model_config_file", "TF Serving's model config file (text ModelServerConfig): "
         "serve every model it lists, instead of --model_name",
         aliases=("model-config-file",), env=ENV_MODEL_CONFIG_FILE, default="none"),
    Flag("model_config_file_poll_wait_seconds", "re-read the model config file this often "
         "and add, change or remove models live; 0 reads it once",
         aliases=("model-config-file-poll-wait-seconds",), env=ENV_MODEL_CONFIG_FILE_POLL_WAIT,
         default=f"{DEFAULT_MODEL_CONFIG_FILE_POLL_WAIT:g}"),
    Flag("file_system_poll_wait_seconds", "look for new versions this often; 0 loads once",
         aliases=("file-system-poll-wait-seconds",), env=ENV_FILE_SYSTEM_POLL_WAIT,
         default=f"{DEFAULT_FILE_SYSTEM_POLL_WAIT:g}"),
    Flag("enable_model_warmup", "replay the model's warm-up records (or run zeros) before a "
         "version serves; false serves it cold", boolean=True, default="true"),
    Flag("saved_model_tags", "the MetaGraph's tags", kind="limited", accepts=("serve", ""),
         why="only the 'serve' MetaGraph is loaded"),
    Flag("allow_version_labels_for_unavailable_models", "labels may always point at versions "
         "that are not loaded yet (requests for them get 404 until they are)",
         kind="limited", boolean=True, accepts=("true",),
         why="this server always allows it (it warns at start)"),
    # --- listening
    Flag("port", "gRPC port, as TF Serving's; 0 serves no gRPC", aliases=("grpc-port",),
         env=ENV_GRPC_PORT, default=str(DEFAULT_GRPC_PORT)),
    Flag("grpc_socket_path", "also serve gRPC on this UNIX socket", default="none"),
    Flag("rest_api_port", "REST port (also /healthz, /readyz, /metrics); 0 serves no HTTP; "
         "must differ from --port", aliases=("rest-api-port",), env=ENV_REST_PORT,
         default=str(DEFAULT_REST_PORT)),
    Flag("host", "address to listen on", env=ENV_HOST, default=DEFAULT_HOST, tf_serving=False),
    Flag("rest_api_timeout_in_ms", "milliseconds a REST predict may wait and run before 504; "
         "0 or less: no limit (same as --request-timeout, in ms; not both)",
         default=f"{DEFAULT_REQUEST_TIMEOUT * 1000:g}"),
    Flag("request-timeout", "seconds a predict may wait and run before 504; 0: no limit "
         "(not with --rest_api_timeout_in_ms)", env=ENV_REQUEST_TIMEOUT,
         default=f"{DEFAULT_REQUEST_TIMEOUT:g}", tf_serving=False),
    Flag("rest_api_num_threads", "", kind="noted",
         why="HTTP runs on one event loop; predicts run on --workers threads, sized to the "
         "CPU budget (TF Serving's 4 x CPUs would oversubscribe it)"),
    Flag("grpc_max_threads", "", kind="noted",
         why="predicts run on --workers threads, sized to the CPU budget"),
    Flag("rest_api_enable_cors_support", "CORS headers", kind="limited", boolean=True,
         accepts=("false",), why="CORS headers are not sent; add them in a proxy in front"),
    Flag("enable_grpc_healthcheck_service", "the standard gRPC health service", kind="limited",
         boolean=True, accepts=("true",), why="it is always served"),
    Flag("grpc_channel_arguments", "gRPC server arguments, TF Serving's comma-separated "
         "key=value list (e.g. grpc.max_connection_age_ms=2000): a whole number is passed as "
         "an integer; a key that is not one of grpc's channel arguments, or a value of the "
         "wrong type, is refused; grpc.max_receive_message_length is --max-body-bytes's",
         default="none"),
    Flag("use_alts_credentials", "", kind="limited", boolean=True, accepts=("false",),
         why="ALTS is not implemented"),
    Flag("ssl_config_file", "", kind="limited", accepts=("",),
         why="TLS is not served; terminate it in front (ingress, service mesh)"),
    Flag("enable_serialization_as_tensor_content", "", kind="limited", boolean=True,
         accepts=("false",), why="responses use the typed value fields"),
    # --- TensorFlow
    Flag("tensorflow_intra_op_parallelism", "intra-op threads: tf-entrypoint makes it the "
         "plan's, as TF_INTRA_OP_PARALLELISM_THREADS (same rules; the flag wins); 0: automatic",
         kind="plan", default="the CPU budget"),
    Flag("tensorflow_inter_op_parallelism", "inter-op threads, as "
         "TF_INTER_OP_PARALLELISM_THREADS (see --tensorflow_intra_op_parallelism)",
         kind="plan", default="the CPU budget"),
    Flag("tensorflow_session_parallelism", "both pools' threads, unless "
         "--tensorflow_intra_op_parallelism or --tensorflow_inter_op_parallelism is given "
         "(TF Serving's rule; all three is refused)", kind="plan", default="0"),
    Flag("tensorflow_session_config_file", "", kind="limited", accepts=("",),
         why="not read; the plan configures TensorFlow (TF_INTRA_OP_PARALLELISM_THREADS, "
         "TF_GPU_MEMORY_ALLOC, TF_FORCE_GPU_ALLOW_GROWTH)"),
    Flag("platform_config_file", "", kind="limited", accepts=("",),
         why="only TensorFlow SavedModels are served, configured by the plan"),
    Flag("per_process_gpu_memory_fraction", "", kind="limited", accepts=("0",),
         why="cap GPU memory in MB with TF_GPU_MEMORY_ALLOC (and TF_FORCE_GPU_ALLOW_GROWTH)"),
    Flag("xla_cpu_compilation_enabled", "XLA JIT", kind="limited", boolean=True,
         accepts=("true",), why="XLA follows TensorFlow's defaults (functions saved with "
         "jit_compile=True are compiled); it cannot be turned off here"),
    Flag("xla_gpu_compilation_enabled", "XLA JIT", kind="limited", boolean=True,
         accepts=("true",), why="as --xla_cpu_compilation_enabled"),
    Flag("mixed_precision", "", kind="limited", accepts=("",),
         why="mixed precision is not implemented"),
    Flag("enable_profiler", "TensorFlow's profiler service (tensorflow.ProfilerService) on "
         "the gRPC port, as in TF Serving: TensorBoard's profile plugin and "
         "tf.profiler.experimental.client.trace capture a trace of the server; false answers "
         "its calls UNIMPLEMENTED", boolean=True, default="true"),
    Flag("thread_pool_factory_config_file", "", kind="limited", accepts=("",),
         why="thread pools come from the plan"),
    Flag("remove_unused_fields_from_bundle_metagraph", "", kind="noted",
         why="a memory optimisation of TF Serving's loader"),
    Flag("flush_filesystem_caches", "", kind="noted",
         why="the page cache is left to the kernel"),
    Flag("skip_initialize_tpu", "", kind="noted", why="TPUs are not supported"),
    Flag("prefer_tflite_model", "", kind="limited", boolean=True, accepts=("false",),
         why=_NO_TFLITE),
    Flag("num_tflite_pools", "", kind="noted", why=_NO_TFLITE),
    Flag("num_tflite_interpreters_per_pool", "", kind="noted", why=_NO_TFLITE),
    Flag("enable_signature_method_name_check", "Classify and Regress only run signatures "
         "whose method_name says classify or regress", boolean=True, default="false"),
    # --- loading
    Flag("num_load_threads", "versions load one at a time, on one thread", kind="limited",
         accepts=("0", "1"), why="loads are not parallel"),
    Flag("num_unload_threads", "versions unload one at a time", kind="limited",
         accepts=("0", "1"), why="unloads are not parallel"),
    Flag("max_num_load_retries", "a failed version is not retried on a timer",
         kind="limited", accepts=("0",),
         why="a failed version is retried when its directory is replaced"),
    Flag("load_retry_interval_micros", "", kind="limited",
         why="a failed version is retried when its directory is replaced, not on a timer"),
    Flag("num_request_iterations_for_warmup", "each warm-up record runs once",
         kind="limited", accepts=("0", "1"), why="records are replayed once"),
    # --- batching (issue 15)
    Flag("enable_batching", "server-side batching: concurrent predicts of one model "
         "version and signature run as one TensorFlow call (docs/batching.md)",
         aliases=("enable-batching",), boolean=True, env=ENV_ENABLE_BATCHING, default="false"),
    Flag("batching_parameters_file", "TF Serving's batching parameters file (text "
         "BatchingParameters: max_batch_size, batch_timeout_micros, max_enqueued_batches, "
         "num_batch_threads, allowed_batch_sizes); read with --enable_batching",
         aliases=("batching-parameters-file",), env=ENV_BATCHING_PARAMETERS_FILE,
         default="TF Serving's defaults, num_batch_threads = --workers"),
    Flag("enable_per_model_batching_parameters", "", kind="limited", boolean=True,
         accepts=("false",), why=_NO_PER_MODEL_BATCHING),
    # --- monitoring, sizing, logs
    Flag("monitoring_config_file", "TF Serving's monitoring config file (text "
         "MonitoringConfig): 'prometheus_config { enable: true path: "
         "\"/monitoring/prometheus/metrics\" }' serves TF Serving's metrics "
         "(:tensorflow:serving:request_count, ...) at that path on the REST port",
         aliases=("monitoring-config-file",),
         env=ENV_MONITORING_CONFIG_FILE, default="none"),
    Flag("workers", "inference threads", env=ENV_WORKERS, default="the CPU budget",
         tf_serving=False),
    Flag("max-queue", "requests admitted (running + waiting) before 503", env=ENV_MAX_QUEUE,
         default=f"{DEFAULT_QUEUE_PER_WORKER} per worker", tf_serving=False),
    Flag("max-body-bytes", "largest request body or gRPC message (larger gets 413); what "
         "one request may make the server build is 8 times it", env=ENV_MAX_BODY_BYTES,
         default=str(DEFAULT_MAX_BODY_BYTES), tf_serving=False),
    Flag("grace-period", "seconds in-flight requests get after SIGTERM; those still running "
         "then get 503 and the process exits within 1 s", env=ENV_GRACE_PERIOD,
         default=f"{DEFAULT_GRACE_PERIOD:g}", tf_serving=False),
    Flag("wait-for-model", "seconds to wait for a first version to appear before exiting 1",
         env=ENV_WAIT_FOR_MODEL, default=f"{DEFAULT_WAIT_FOR_MODEL:g}", tf_serving=False),
    Flag("access-log", "log every request", boolean=True, env=ENV_ACCESS_LOG,
         default="false", tf_serving=False),
    Flag("log-level", "critical, error, warning, info or debug", env=ENV_LOG_LEVEL,
         default="info", tf_serving=False),
    Flag("version", "print the version and exit", boolean=True, default="false"),
)  # fmt: skip

_BY_SPELLING: dict[str, Flag] = {spelling: flag for flag in FLAGS for spelling in flag.spellings}
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise ValueError(text)


_boolean.__name__ = "true or false (also 1/0, yes/no, on/off)"


def read_flags(argv: Sequence[str]) -> dict[str, str]:
    """The flags given, by table name -> value as written (booleans: "true"/"false").

    ``--flag=value`` and ``--flag value`` (a value never starts with ``--``);
    a boolean is ``--flag`` (true) or ``--flag=VALUE``: it never takes the
    next argument, so ``--enable_model_warmup false`` is ``--enable_model_warmup``
    and a stray ``false``, which is refused (TF Serving reads it the same way).
    A flag given twice: the last wins. Raises ShowText for -h/--help, and
    UsageError naming the flag for anything else it cannot read.
    """
    given: dict[str, str] = {}
    index = 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg in ("-h", "--help"):
            raise ShowText(help_text())
        spelling, equals, value = arg.partition("=")
        flag = _BY_SPELLING.get(spelling)
        if flag is None:
            raise UsageError(_unknown(arg, given))
        if flag.boolean:
            if equals:
                try:
                    value = "true" if _boolean(value) else "false"
                except ValueError:
                    raise UsageError(
                        f"{spelling}={value!r} is invalid: expected {_boolean.__name__}"
                    ) from None
            else:
                value = "true"
        elif not equals:
            if index >= len(argv) or argv[index].startswith("--"):
                raise UsageError(f"{spelling} needs a value ({spelling}=VALUE or {spelling} VALUE)")
            value = argv[index]
            index += 1
        given[flag.name] = value
    return given


def _unknown(arg: str, given: Mapping[str, str]) -> str:
    if not arg.startswith("-"):
        after = list(given)[-1] if given else ""
        hint = ""
        if after and _BY_SPELLING[f"--{after}"].boolean:
            hint = f" (a boolean takes its value as --{after}=VALUE, not as the next argument)"
        return f"unexpected argument {arg!r}{hint}"
    spelling = arg.partition("=")[0]
    close = difflib.get_close_matches(spelling, list(_BY_SPELLING), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown flag {spelling}{hint}"


def check_limits(given: Mapping[str, str]) -> list[str]:
    """Refuse what is not implemented (UsageError); notes for the "noted" flags."""
    notes = []
    for name, value in given.items():
        flag = _BY_SPELLING[f"--{name}"]
        if flag.kind == "plan":
            raise UsageError(
                f"--{name} is read by tf-entrypoint, which makes it the plan's thread count "
                "before the server starts: run `tf-entrypoint serve` or `tensorflow_model_server` "
                "(both plan first), or set TF_INTRA_OP_PARALLELISM_THREADS / "
                "TF_INTER_OP_PARALLELISM_THREADS"
            )
        if flag.kind == "limited" and value.strip().lower() not in flag.accepts:
            shown = f"--{name}" if flag.boolean and value == "true" else f"--{name}={value}"
            raise UsageError(f"{shown} is not supported: {flag.why}")
        if flag.kind == "noted":
            notes.append(f"--{name}={value} has no effect here: {flag.why}")
    return notes


def _row_spellings(flag: Flag) -> str:
    value = "" if flag.boolean else "=VALUE"
    return ", ".join(f"{spelling}{value}" for spelling in flag.spellings)


def help_text() -> str:
    """--help: usage, then every flag of the table."""
    lines = []
    for flag in FLAGS:
        extra = [f"env {flag.env}"] if flag.env else []
        if flag.default and flag.kind in ("serve", "plan"):
            extra.append(f"default {flag.default}")
        suffix = f" [{'; '.join(extra)}]" if extra else ""
        text = textwrap.fill(
            f"{flag.what_it_does()}{suffix}", 88, initial_indent="      ",
            subsequent_indent="      ", break_on_hyphens=False,
        )  # fmt: skip
        lines.append(f"  {_row_spellings(flag)}\n{text}\n")
    return f"""\
usage: tensorflow_model_server [FLAGS...]
       tf-entrypoint serve [FLAGS...]

Serve SavedModels over TF Serving's gRPC (--port, 8500) and REST (--rest_api_port,
8501) APIs, sized to the container's CPU budget: the model --model_name from
--model_base_path, or every model of TF Serving's --model_config_file. New versions
are loaded, warmed up and swapped in while serving. Takes TF Serving's flags
(--flag=VALUE or --flag VALUE; a boolean alone is true, or --flag=false); a flag
TF Serving has but this server does not implement is refused, never ignored.
Flags win over the environment variables shown.

flags:
{"".join(lines)}
exit codes: 0 stopped by SIGTERM/SIGINT after draining (or --help, --version); 1 a
model had no version within --wait-for-model, or its first load failed; 64 a bad
or unsupported flag or variable; 78 a model or monitoring config file that cannot
be served (file, line and field on stderr).
"""


def markdown_table() -> str:
    """docs/tf-serving.md's flag table (tests/unit/test_serving_flags.py keeps them equal)."""
    rows = ["| Flag | Variable | Default | What it does here |", "|---|---|---|---|"]
    for flag in FLAGS:
        spellings = " ".join(f"`{spelling}`" for spelling in flag.spellings)
        default = flag.default if flag.kind in ("serve", "plan") and flag.default else ""
        env = f"`{flag.env}`" if flag.env else ""
        what = flag.what_it_does().replace("|", "\\|")
        rows.append(f"| {spellings} | {env} | {default} | {what} |")
    return "\n".join(rows)


def version_text() -> str:
    """--version, in TF Serving's two lines."""
    from tf_entrypoint import __version__  # noqa: PLC0415

    tensorflow = "not installed"
    for distribution in ("tensorflow", "tensorflow-cpu"):
        try:
            tensorflow = metadata.version(distribution)
            break
        except metadata.PackageNotFoundError:
            continue
    return (
        f"TensorFlow ModelServer: tf-entrypoint {__version__}\nTensorFlow Library: {tensorflow}\n"
    )


class _Values:
    """A flag's value: the command line first, then its variable, then a default."""

    def __init__(self, given: Mapping[str, str], env: Mapping[str, str]) -> None:
        self.given = given
        self.env = env

    def raw(self, name: str) -> tuple[str, str] | None:
        """(what to call it in a message, raw value), or None when not given."""
        if name in self.given:
            return f"--{name}", self.given[name]
        flag = _BY_SPELLING[f"--{name}"]
        if flag.env:
            value = self.env.get(flag.env, "").strip()
            if value:
                return flag.env, value
        return None

    def get(self, name: str, convert: Callable[[str], T], fallback: T) -> T:
        found = self.raw(name)
        if found is None:
            return fallback
        source, raw = found
        try:
            return convert(raw)
        except ValueError:
            raise UsageError(f"{source}={raw!r} is invalid: expected {convert.__name__}") from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(text)
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError(text)
    return value


def _milliseconds(text: str) -> float:
    """TF Serving's --rest_api_timeout_in_ms: an int32; 0 or less is no limit."""
    value = int(text)
    if not -(2**31) <= value < 2**31:
        raise ValueError(text)
    return max(0, value) / 1000


def _log_level(text: str) -> str:
    if text not in LOG_LEVELS:
        raise ValueError(text)
    return text


def _path(text: str) -> str | None:
    return text or None


_positive_int.__name__ = "a whole number from 1"
_port.__name__ = "a port (0-65535)"
_seconds.__name__ = "a number of seconds (0 or more)"
_milliseconds.__name__ = "a whole number of milliseconds (0 or less: no limit)"
_log_level.__name__ = ", ".join(LOG_LEVELS)
_path.__name__ = "a path"


def _models(values: _Values) -> tuple[ServingConfig, list[str]]:
    """The models to serve, and notes on flags the config file overrides."""
    name = values.get("model_name", str, DEFAULT_MODEL_NAME)
    config_file = values.get("model_config_file", _path, None)
    model_dir = values.given.get("model_base_path")  # TF Serving's: the model's own directory
    if config_file is None:
        if model_dir is not None and "model-base-path" in values.given:
            raise UsageError(
                "--model_base_path (the model's own directory, as in TF Serving) and "
                "--model-base-path (the directory holding MODEL_NAME) are both given: give one"
            )
        if model_dir:
            return single_model(name, Path(model_dir)), []
        base = values.get("model-base-path", str, DEFAULT_MODEL_BASE_PATH)
        return single_model(name, Path(base) / name), []
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
    if values.get("version", _boolean, False):
        raise ShowText(version_text())
    notes = check_limits(given)
    try:
        models, model_notes = _models(values)
    except ConfigError as err:
        if values.raw("model_config_file") is None:  # a bad --model_name: the command line
            raise UsageError(str(err)) from None
        raise
    grpc_port = values.get("port", _port, DEFAULT_GRPC_PORT)
    rest_port = values.get("rest_api_port", _port, DEFAULT_REST_PORT)
    socket_path = values.get("grpc_socket_path", _path, None)
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
    timeout = values.get("request-timeout", _seconds, DEFAULT_REQUEST_TIMEOUT)
    timeout = values.get("rest_api_timeout_in_ms", _milliseconds, timeout)
    budget = budget or cpu_budget(env)
    workers = values.get("workers", _positive_int, size_workers(budget))
    monitoring = values.get("monitoring_config_file", _path, None)
    monitoring_file = None if monitoring is None else Path(monitoring)
    prometheus = (
        MonitoringConfig() if monitoring_file is None else read_monitoring_config(monitoring_file)
    )
    batching = None
    batching_file = values.get("batching_parameters_file", _path, None)
    if values.get("enable_batching", _boolean, False):
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
    if prometheus.prometheus_path is not None and rest_port == 0:
        notes.append(
            f"the monitoring config file {monitoring_file} enables the Prometheus page "
            f"{prometheus.prometheus_path}, but --rest_api_port is 0: no page is served"
        )
    return ServeConfig(
        models=models,
        host=values.get("host", str, DEFAULT_HOST),
        grpc_port=grpc_port,
        rest_port=rest_port,
        workers=workers,
        max_queue=values.get("max-queue", _positive_int, DEFAULT_QUEUE_PER_WORKER * workers),
        max_body_bytes=values.get("max-body-bytes", _positive_int, DEFAULT_MAX_BODY_BYTES),
        request_timeout=timeout,
        grace_period=values.get("grace-period", _seconds, DEFAULT_GRACE_PERIOD),
        wait_for_model=values.get("wait-for-model", _seconds, DEFAULT_WAIT_FOR_MODEL),
        file_system_poll_wait=values.get(
            "file_system_poll_wait_seconds", _seconds, DEFAULT_FILE_SYSTEM_POLL_WAIT
        ),
        model_config_file_poll_wait=values.get(
            "model_config_file_poll_wait_seconds", _seconds, DEFAULT_MODEL_CONFIG_FILE_POLL_WAIT
        ),
        access_log=values.get("access-log", _boolean, False),
        log_level=values.get("log-level", _log_level, "info"),
        budget=budget,
        monitoring_config_file=monitoring_file,
        monitoring=prometheus,
        batching=batching,
        grpc_socket_path=socket_path,
        grpc_channel_arguments=channel_arguments,
        enable_model_warmup=values.get("enable_model_warmup", _boolean, True),
        enable_profiler=values.get("enable_profiler", _boolean, True),
        enable_signature_method_name_check=values.get(
            "enable_signature_method_name_check", _boolean, False
        ),
        notes=(*notes, *model_notes),
    )
