"""The server's settings: command line first, then environment, then defaults.

Concurrency is sized from the container's CPU budget, the same number the
entrypoint gives TensorFlow's pools (see :func:`size_workers`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tf_entrypoint.serving.model_config import (
    ConfigError,
    ServingConfig,
    read_model_config,
    single_model,
)
from tf_entrypoint.serving.monitoring import MonitoringConfig, read_monitoring_config

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
    #: What that file asks for (no Prometheus page without one).
    monitoring: MonitoringConfig = field(default_factory=MonitoringConfig)
    #: Things to tell the operator at start (flags that a config file overrides).
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


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


class UsageError(Exception):
    pass


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


def _flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(text)


_positive_int.__name__ = "positive integer"
_port.__name__ = "port (0-65535)"
_seconds.__name__ = "number of seconds"
_flag.__name__ = "boolean"


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    def default(name: str, fallback: str) -> str:
        value = env.get(name, "").strip()
        return value or fallback

    parser = _Parser(
        prog="python -m tf_entrypoint.serving",
        description=(
            "Serve SavedModels over TF Serving's REST API, sized to the container's CPU "
            "budget: the model MODEL_BASE_PATH/MODEL_NAME, or every model of TF Serving's "
            "model config file. New versions are loaded, warmed up and swapped in while "
            "serving. Every option also reads the environment variable shown."
        ),
        epilog=(
            "exit codes: 0 stopped by SIGTERM/SIGINT after draining; 1 a model had no "
            "version within --wait-for-model, or its first load failed; 64 a bad option or "
            "variable; 78 a model or monitoring config file that cannot be served (file, "
            "line and field on stderr)."
        ),
    )
    add = parser.add_argument
    add("--model-name", default=None,
        help=f"model to serve (env {ENV_MODEL_NAME}; default {DEFAULT_MODEL_NAME})")  # fmt: skip
    add("--model-base-path", default=None,
        help=f"directory holding NAME/<version>/saved_model.pb (env {ENV_MODEL_BASE_PATH}; "
        f"default {DEFAULT_MODEL_BASE_PATH})")  # fmt: skip
    add("--model-config-file", "--model_config_file", metavar="PATH",
        default=env.get(ENV_MODEL_CONFIG_FILE, "").strip() or None,
        help=f"TF Serving's model config file (text ModelServerConfig): serve every model "
        f"it lists, instead of --model-name (env {ENV_MODEL_CONFIG_FILE})")  # fmt: skip
    add("--model-config-file-poll-wait-seconds", "--model_config_file_poll_wait_seconds",
        type=_seconds, metavar="SECONDS",
        default=default(ENV_MODEL_CONFIG_FILE_POLL_WAIT,
                        f"{DEFAULT_MODEL_CONFIG_FILE_POLL_WAIT:g}"),
        help=f"re-read the model config file this often and add, change or remove "
        f"models live; 0 reads it once (env {ENV_MODEL_CONFIG_FILE_POLL_WAIT}; "
        "default %(default)s)")  # fmt: skip
    add("--file-system-poll-wait-seconds", "--file_system_poll_wait_seconds",
        type=_seconds, metavar="SECONDS",
        default=default(ENV_FILE_SYSTEM_POLL_WAIT, f"{DEFAULT_FILE_SYSTEM_POLL_WAIT:g}"),
        help=f"look for new versions this often; 0 loads once (env "
        f"{ENV_FILE_SYSTEM_POLL_WAIT}; default %(default)s)")  # fmt: skip
    add("--host", default=default(ENV_HOST, DEFAULT_HOST),
        help=f"address to listen on (env {ENV_HOST}; default %(default)s)")  # fmt: skip
    add("--port", "--grpc-port", dest="grpc_port", type=_port,
        default=default(ENV_GRPC_PORT, str(DEFAULT_GRPC_PORT)),
        help=f"gRPC port, as TF Serving's --port; 0 serves no gRPC (env {ENV_GRPC_PORT}; "
        "default %(default)s)")  # fmt: skip
    add("--rest_api_port", "--rest-api-port", dest="rest_port", type=_port,
        default=default(ENV_REST_PORT, str(DEFAULT_REST_PORT)),
        help=f"REST port (also /healthz, /readyz, /metrics); 0 serves no HTTP "
        f"(env {ENV_REST_PORT}; default %(default)s)")  # fmt: skip
    add("--monitoring_config_file", "--monitoring-config-file", metavar="PATH",
        default=env.get(ENV_MONITORING_CONFIG_FILE, "").strip() or None,
        help=f"TF Serving's monitoring config file (text MonitoringConfig): "
        "'prometheus_config { enable: true path: \"/monitoring/prometheus/metrics\" }' "
        "serves TF Serving's metrics (:tensorflow:serving:request_count, ...) at that "
        f"path on the REST port (env {ENV_MONITORING_CONFIG_FILE})")  # fmt: skip
    add("--workers", type=_positive_int, default=env.get(ENV_WORKERS, "").strip() or None,
        help=f"inference threads (env {ENV_WORKERS}; default: the CPU budget)")  # fmt: skip
    add("--max-queue", type=_positive_int, default=env.get(ENV_MAX_QUEUE, "").strip() or None,
        help=f"requests admitted (running + waiting) before 503 (env {ENV_MAX_QUEUE}; "
        f"default {DEFAULT_QUEUE_PER_WORKER} per worker)")  # fmt: skip
    add("--max-body-bytes", type=_positive_int,
        default=default(ENV_MAX_BODY_BYTES, str(DEFAULT_MAX_BODY_BYTES)),
        help=f"largest request body; larger gets 413 (env {ENV_MAX_BODY_BYTES}; "
        "default %(default)s)")  # fmt: skip
    add("--request-timeout", type=_seconds,
        default=default(ENV_REQUEST_TIMEOUT, str(DEFAULT_REQUEST_TIMEOUT)),
        help=f"seconds a predict may wait and run before 504, 0 for no limit "
        f"(env {ENV_REQUEST_TIMEOUT}; default %(default)s)")  # fmt: skip
    add("--grace-period", type=_seconds,
        default=default(ENV_GRACE_PERIOD, str(DEFAULT_GRACE_PERIOD)),
        help=f"seconds in-flight requests get after SIGTERM (env {ENV_GRACE_PERIOD}; "
        "default %(default)s)")  # fmt: skip
    add("--wait-for-model", type=_seconds,
        default=default(ENV_WAIT_FOR_MODEL, str(DEFAULT_WAIT_FOR_MODEL)),
        help=f"seconds to wait for a first version to appear before exiting 1 "
        f"(env {ENV_WAIT_FOR_MODEL}; default %(default)s)")  # fmt: skip
    add("--access-log", type=_flag, default=default(ENV_ACCESS_LOG, "false"),
        help=f"log every request (env {ENV_ACCESS_LOG}; default %(default)s)")  # fmt: skip
    add("--log-level", default=default(ENV_LOG_LEVEL, "info"),
        choices=["critical", "error", "warning", "info", "debug"],
        help=f"(env {ENV_LOG_LEVEL}; default %(default)s)")  # fmt: skip
    return parser


def _models(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[ServingConfig, list[str]]:
    """The models to serve, and notes on flags the config file overrides."""
    name = args.model_name or env.get(ENV_MODEL_NAME, "").strip() or DEFAULT_MODEL_NAME
    base = args.model_base_path or env.get(ENV_MODEL_BASE_PATH, "").strip()
    if args.model_config_file is None:
        return single_model(name, Path(base or DEFAULT_MODEL_BASE_PATH) / name), []
    notes = [
        f"{flag} is ignored: the model config file {args.model_config_file} lists the models"
        for flag, given in (
            ("--model-name", args.model_name), ("--model-base-path", args.model_base_path)
        )
        if given
    ]  # fmt: skip
    return read_model_config(Path(args.model_config_file)), notes


def parse_config(
    argv: Sequence[str], env: Mapping[str, str], budget: PlannedCpus | None = None
) -> ServeConfig:
    """Raises UsageError (argparse's message) for a bad flag or variable, and
    ConfigError (naming file, line and field) for a model or monitoring
    configuration that cannot be served."""
    args = build_parser(env).parse_args(list(argv))
    try:
        models, notes = _models(args, env)
    except ConfigError as err:
        if args.model_config_file is None:  # a bad --model-name is a command-line mistake
            raise UsageError(str(err)) from None
        raise
    if args.grpc_port == 0 and args.rest_port == 0:
        raise UsageError("--port and --rest_api_port are both 0: nothing to serve")
    if args.grpc_port == args.rest_port:
        raise UsageError(
            f"--port and --rest_api_port are both {args.grpc_port}: --port is the gRPC port, "
            "as in TF Serving (it was the REST port before gRPC was served); give REST "
            "its own with --rest_api_port (env PORT)"
        )
    monitoring_file = (
        None if args.monitoring_config_file is None else Path(args.monitoring_config_file)
    )
    monitoring = (
        MonitoringConfig() if monitoring_file is None else read_monitoring_config(monitoring_file)
    )
    if monitoring.prometheus_path is not None and args.rest_port == 0:
        notes.append(
            f"the monitoring config file {monitoring_file} enables the Prometheus page "
            f"{monitoring.prometheus_path}, but --rest_api_port is 0: no page is served"
        )
    budget = budget or cpu_budget(env)
    workers: int = args.workers or size_workers(budget)
    return ServeConfig(
        models=models,
        host=args.host,
        grpc_port=args.grpc_port,
        rest_port=args.rest_port,
        workers=workers,
        max_queue=args.max_queue or DEFAULT_QUEUE_PER_WORKER * workers,
        max_body_bytes=args.max_body_bytes,
        request_timeout=args.request_timeout,
        grace_period=args.grace_period,
        wait_for_model=args.wait_for_model,
        file_system_poll_wait=args.file_system_poll_wait_seconds,
        model_config_file_poll_wait=args.model_config_file_poll_wait_seconds,
        access_log=args.access_log,
        log_level=args.log_level,
        budget=budget,
        monitoring_config_file=monitoring_file,
        monitoring=monitoring,
        notes=tuple(notes),
    )
