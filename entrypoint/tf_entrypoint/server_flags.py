"""TF Serving's ``tensorflow_model_server`` flags and ours: the one table and the one tokenizer.

:data:`FLAGS` lists every flag: ours and every one of TF Serving's (its
main.cc), each implemented, read by the entrypoint into the plan, accepted with
no effect (and a warning), or refused with the reason. It drives the server's
parsing (serving/config), ``serve --help`` and docs/tf-serving.md's flag table.
:func:`tokenize` is the one reading of a command line, used by the entrypoint
(tfserving.py takes the thread flags out for the plan) and by the server.

Stdlib-only and cheap to import: the entrypoint imports it before every
``tensorflow_model_server`` (tests/unit/project/test_startup_imports.py).
"""

from __future__ import annotations

from tf_entrypoint.common import FALSE_WORDS, TRUE_WORDS, word
from tf_entrypoint.frozen import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` costs start-up time; at run time Kind is plain `str`
    from collections.abc import Sequence
    from typing import Literal, TypeAlias

    Kind: TypeAlias = Literal["serve", "plan", "noted", "limited"]
else:
    Kind = str

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
#: TF Serving's --max_num_load_retries and --load_retry_interval_micros defaults
#: (model_servers/server.h): a failed load is tried 5 more times, a minute apart.
DEFAULT_MAX_NUM_LOAD_RETRIES = 5
DEFAULT_LOAD_RETRY_INTERVAL_MICROS = 60 * 1000 * 1000
#: TF Serving's --file_system_poll_wait_seconds default.
DEFAULT_FILE_SYSTEM_POLL_WAIT = 1.0
#: TF Serving's --model_config_file_poll_wait_seconds default (0: read once).
DEFAULT_MODEL_CONFIG_FILE_POLL_WAIT = 0.0
#: Requests admitted per worker (running + queued) before 503s.
DEFAULT_QUEUE_PER_WORKER = 32
#: Largest saved_model.pb (or .pbtxt) a version may have: a larger one fails its
#: load (DATA_LOSS) before a byte of it is read. Graphs are KB to MB (the weights
#: are in variables/); a version's load and first call take up to 9 times its
#: graph at the peak (TensorFlow's import and Session), so 64 MiB fits a 1 GiB
#: container with the idle server (docs/robustness.md, "Memory per request").
DEFAULT_MAX_GRAPH_BYTES = 64 * 1024 * 1024

ENV_MODEL_NAME = "MODEL_NAME"
ENV_MODEL_BASE_PATH = "MODEL_BASE_PATH"
#: The REST port's variable keeps its name (Cloud Run's and Knative's HTTP port).
ENV_REST_PORT = "PORT"
ENV_GRPC_PORT = "SERVE_GRPC_PORT"
ENV_MONITORING_CONFIG_FILE = "SERVE_MONITORING_CONFIG_FILE"
ENV_HOST = "SERVE_HOST"
ENV_WORKERS = "SERVE_WORKERS"
ENV_FRONTENDS = "SERVE_FRONTENDS"
ENV_MAX_QUEUE = "SERVE_MAX_QUEUE"
ENV_MAX_BODY_BYTES = "SERVE_MAX_BODY_BYTES"
ENV_MAX_GRAPH_BYTES = "SERVE_MAX_GRAPH_BYTES"
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
#: Picks the SavedModel loader: "session" (the default, TF Serving's) or "tf2"
#: (tf.saved_model.load for every export, as this server did before; for
#: benchmarks and diagnosis). See docs/tf-serving.md.
ENV_SAVED_MODEL_LOADER = "SERVE_SAVED_MODEL_LOADER"
#: Where versions read from object storage are copied to load them, and its size limit.
ENV_MODEL_CACHE_DIR = "SERVE_MODEL_CACHE_DIR"
ENV_MODEL_CACHE_BYTES = "SERVE_MODEL_CACHE_BYTES"
#: The one directory (or gs:// / s3:// prefix) profiler traces may be written under.
ENV_PROFILE_DIR = "SERVE_PROFILE_DIR"
SAVED_MODEL_LOADERS = ("session", "tf2")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


@frozen
class Flag:
    """One command-line flag: how it is read and what it does here.

    `kind`: "serve" the server implements it; "plan" tf-entrypoint reads it
    into the plan before the server starts (TF Serving's thread flags and
    GPU memory fraction; `why` says what it becomes);
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
    #: "limited"/"noted": why (and what to use instead); "plan": what it becomes.
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
        """The flag's line in --help and the docs: its meaning, or its limits."""
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
#: "plan" flags: what tf-entrypoint makes of them (the server's refusal says it).
_THREAD_COUNT = (
    "the plan's thread count, as TF_INTRA_OP_PARALLELISM_THREADS / "
    "TF_INTER_OP_PARALLELISM_THREADS would"
)

FLAGS: tuple[Flag, ...] = (
    # --- the models
    Flag("model_name", "the model to serve (ignored with --model_config_file)",
         aliases=("model-name",), env=ENV_MODEL_NAME, default=DEFAULT_MODEL_NAME),
    Flag("model_base_path", "TF Serving's meaning: the model's own directory, holding "
         "VERSION/saved_model.pb, or an s3:// or gs:// URL (docs/object-storage.md; "
         "ignored with --model_config_file)",
         default="MODEL_BASE_PATH/MODEL_NAME"),
    Flag("model-base-path", "the directory (or s3:// or gs:// URL) holding "
         "MODEL_NAME/VERSION/saved_model.pb (as TF Serving's image reads MODEL_BASE_PATH); "
         "not with --model_base_path",
         env=ENV_MODEL_BASE_PATH, default=DEFAULT_MODEL_BASE_PATH, tf_serving=False),
    Flag("model_config_file", "TF Serving's model config file (text ModelServerConfig): "
         "serve every model it lists, instead of --model_name",
         aliases=("model-config-file",), env=ENV_MODEL_CONFIG_FILE, default="none"),
    Flag("model_config_file_poll_wait_seconds", "re-read the model config file this often "
         "and add, change or remove models live; 0 reads it once; negative (TF Serving's testing "
         "value) is refused",
         aliases=("model-config-file-poll-wait-seconds",), env=ENV_MODEL_CONFIG_FILE_POLL_WAIT,
         default=f"{DEFAULT_MODEL_CONFIG_FILE_POLL_WAIT:g}"),
    Flag("file_system_poll_wait_seconds", "look for new versions this often; 0 loads once; "
         "negative (TF Serving's testing value: never poll) is refused",
         aliases=("file-system-poll-wait-seconds",), env=ENV_FILE_SYSTEM_POLL_WAIT,
         default=f"{DEFAULT_FILE_SYSTEM_POLL_WAIT:g}"),
    Flag("enable_model_warmup", "replay the model's warm-up records (or run zeros) before a "
         "version serves; false serves it cold", boolean=True, default="true"),
    Flag("saved_model_tags", "the MetaGraph's tags", kind="limited", accepts=("serve", ""),
         why="only the 'serve' MetaGraph is loaded: export the model with it "
         "(tf.saved_model.save and Keras write it)"),
    Flag("allow_version_labels_for_unavailable_models", "labels may always point at versions "
         "that are not loaded yet (requests for them get 404 until they are)",
         kind="limited", boolean=True, accepts=("true",),
         why="this server always allows it (a warning at start names each label whose "
         "version is not available)"),
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
    Flag("request-timeout", "seconds a request may wait and run, its body or gRPC message "
         "included, before 504 (gRPC: DEADLINE_EXCEEDED); 0: no limit "
         "(not with --rest_api_timeout_in_ms)", env=ENV_REQUEST_TIMEOUT,
         default=f"{DEFAULT_REQUEST_TIMEOUT:g}", tf_serving=False),
    Flag("rest_api_num_threads", "", kind="noted",
         why="HTTP runs on one event loop; predicts run on --workers threads, sized to the "
         "CPU budget (TF Serving's 4 x CPUs would oversubscribe it)"),
    Flag("grpc_max_threads", "", kind="noted",
         why="predicts run on --workers threads, sized to the CPU budget"),
    Flag("rest_api_enable_cors_support", "CORS on the REST port, as TF Serving's: every "
         "answer (errors too) carries Access-Control-Allow-Origin: *, -Allow-Methods: POST, GET "
         "and -Allow-Headers: Content-Type (here also Content-Encoding and "
         "Inference-Header-Content-Length); an OPTIONS request is a preflight, answered 200 with "
         "no body (400 without an http(s) Origin); here on every path, not only under /v1/",
         boolean=True, default="false"),
    Flag("enable_grpc_healthcheck_service", "the standard gRPC health service", kind="limited",
         boolean=True, accepts=("true",), why="it is always served (grpc.health.v1.Health, "
         "which Kubernetes' grpc probes call; TF Serving serves it only with this flag) and "
         "cannot be turned off"),
    Flag("grpc_channel_arguments", "gRPC server arguments, TF Serving's comma-separated "
         "key=value list (e.g. grpc.max_connection_age_ms=2000): a whole number is passed as "
         "an integer; a key that is not one of grpc's channel arguments, or a value of the "
         "wrong type, is refused; grpc.max_receive_message_length is --max-body-bytes's",
         default="none"),
    Flag("use_alts_credentials", "", kind="limited", boolean=True, accepts=("false",),
         why="ALTS is not implemented: use --ssl_config_file for TLS on gRPC"),
    Flag("ssl_config_file", "TLS on gRPC (port and --grpc_socket_path, as TF Serving): a "
         "text SSLConfig whose server_key, server_cert and custom_ca hold the PEM text; "
         "client_verify: true requires client certificates signed by custom_ca; REST stays "
         "plain HTTP, as in TF Serving", default="none"),
    Flag("enable_serialization_as_tensor_content", "", kind="limited", boolean=True,
         accepts=("false",), why="responses use the typed value fields (float_val, ...), "
         "which tf.make_ndarray and TF Serving's clients read as they read tensor_content"),
    # --- TensorFlow
    Flag("tensorflow_intra_op_parallelism", "intra-op threads: tf-entrypoint makes it the "
         "plan's, as TF_INTRA_OP_PARALLELISM_THREADS (same rules; the flag wins); 0: automatic",
         kind="plan", default="the CPU budget", why=_THREAD_COUNT),
    Flag("tensorflow_inter_op_parallelism", "inter-op threads, as "
         "TF_INTER_OP_PARALLELISM_THREADS (see --tensorflow_intra_op_parallelism)",
         kind="plan", default="the CPU budget", why=_THREAD_COUNT),
    Flag("tensorflow_session_parallelism", "both pools' threads, unless "
         "--tensorflow_intra_op_parallelism or --tensorflow_inter_op_parallelism is given "
         "(TF Serving's rule; all three is refused)", kind="plan", default="0",
         why=_THREAD_COUNT),
    Flag("tensorflow_session_config_file", "", kind="limited", accepts=("",),
         why="not read; the plan configures TensorFlow (TF_INTRA_OP_PARALLELISM_THREADS, "
         "TF_GPU_MEMORY_ALLOC, TF_FORCE_GPU_ALLOW_GROWTH)"),
    Flag("platform_config_file", "", kind="limited", accepts=("",),
         why="only TensorFlow SavedModels are served, configured by the plan"),
    Flag("per_process_gpu_memory_fraction", "the share of each visible GPU's memory "
         "TensorFlow may take, from 0 to 1: tf-entrypoint makes it the plan's GPU memory caps, "
         "floor(share x each GPU's MB), as TF_GPU_MEMORY_ALLOC would (not both; with "
         "TF_FORCE_GPU_ALLOW_GROWTH memory grows up to the cap); 0: TensorFlow's default; "
         "ignored when no GPU is visible", kind="plan", default="0",
         why="the plan's GPU memory caps, as TF_GPU_MEMORY_ALLOC would"),
    Flag("xla_cpu_compilation_enabled", "XLA JIT", kind="limited", boolean=True,
         accepts=("true",), why="XLA follows TensorFlow's defaults (functions saved with "
         "jit_compile=True are compiled, where TF Serving, which turns XLA off unless this "
         "flag is given, fails their first call); it cannot be turned off here"),
    Flag("xla_gpu_compilation_enabled", "XLA JIT", kind="limited", boolean=True,
         accepts=("true",), why="as --xla_cpu_compilation_enabled"),
    Flag("mixed_precision", "", kind="limited", accepts=("",),
         why="TF Serving's bfloat16 mode (oneDNN's auto mixed precision graph rewrite) is not "
         "implemented: export the model in the precision it should run in"),
    Flag("enable_profiler", "TensorFlow's profiler service (tensorflow.ProfilerService) on "
         "the gRPC port, as in TF Serving: TensorBoard's profile plugin and "
         "tf.profiler.experimental.client.trace capture a trace of the server; false answers "
         "its calls UNIMPLEMENTED", boolean=True, default="true"),
    Flag("thread_pool_factory_config_file", "", kind="limited", accepts=("",),
         why="thread pools come from the plan (TF_INTRA_OP_PARALLELISM_THREADS, "
         "TF_INTER_OP_PARALLELISM_THREADS, --workers)"),
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
    Flag("max_num_load_retries", "times a failed load is tried again before the version "
         "fails (END); it stays LOADING meanwhile, its status showing the error; 0 tries "
         "once (negative is refused); a version that failed is tried again once its directory "
         "changes",
         default=str(DEFAULT_MAX_NUM_LOAD_RETRIES)),
    Flag("load_retry_interval_micros", "microseconds between those tries; negative: no "
         "wait", default=str(DEFAULT_LOAD_RETRY_INTERVAL_MICROS)),
    Flag("num_request_iterations_for_warmup", "times each warm-up record is replayed; "
         "0 or less: once", default="0"),
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
    Flag("frontends", "REST and gRPC front-end processes over one engine process that "
         "holds TensorFlow and the models (docs/serving.md, \"Processes\"); 1: one process",
         env=ENV_FRONTENDS, default="the CPU budget from 2 CPUs (at most 8), 1 under 2",
         tf_serving=False),
    Flag("max-queue", "requests admitted (running + waiting) before 503", env=ENV_MAX_QUEUE,
         default=f"{DEFAULT_QUEUE_PER_WORKER} per worker", tf_serving=False),
    Flag("max-body-bytes", "largest request body or gRPC message (larger gets 413); what "
         "one request may make the server build is 8 times it", env=ENV_MAX_BODY_BYTES,
         default=str(DEFAULT_MAX_BODY_BYTES), tf_serving=False),
    Flag("max-graph-bytes", "largest saved_model.pb (or .pbtxt) a version may have: a larger "
         "one fails that version's load (DATA_LOSS) before it is read; a load and its first "
         "call take up to 9 times the graph at the peak", env=ENV_MAX_GRAPH_BYTES,
         default=str(DEFAULT_MAX_GRAPH_BYTES), tf_serving=False),
    Flag("grace-period", "seconds in-flight requests get after SIGTERM; those still running "
         "then get 503 and the process exits within 1 s", env=ENV_GRACE_PERIOD,
         default=f"{DEFAULT_GRACE_PERIOD:g}", tf_serving=False),
    Flag("wait-for-model", "seconds to wait for a first version of each model to appear "
         "before exiting 1; not given: wait as TF Serving does (not ready until one serves)",
         env=ENV_WAIT_FOR_MODEL, default="wait", tf_serving=False),
    Flag("access-log", "log every REST request; the client is the `X-Forwarded-For` address "
         "when a proxy on 127.0.0.1 (a mesh sidecar) sends one (without the access log that "
         "header is not read)", boolean=True, env=ENV_ACCESS_LOG,
         default="false", tf_serving=False),
    Flag("log-level", "critical, error, warning, info or debug", env=ENV_LOG_LEVEL,
         default="info", tf_serving=False),
    Flag("saved-model-loader", "how versions are loaded: `session` (TF Serving's way, a "
         "Session bundle) or `tf2` (tf.saved_model.load and its signature functions, for "
         "benchmarks and to tell a loader problem from a model problem; TF1 exports do not "
         "load with it)", env=ENV_SAVED_MODEL_LOADER, default=SAVED_MODEL_LOADERS[0],
         tf_serving=False),
    Flag("model-cache-dir", "where versions read from object storage (s3://, gs://) are "
         "copied to be loaded; each copy is deleted when its version is unloaded",
         env=ENV_MODEL_CACHE_DIR, default="$TMPDIR/tf-entrypoint-models", tf_serving=False),
    Flag("model-cache-bytes", "most bytes of copies held at once (a version that would not "
         "fit fails its load with RESOURCE_EXHAUSTED); 0: what the file system has free",
         env=ENV_MODEL_CACHE_BYTES, default="0", tf_serving=False),
    Flag("profile-dir", "the one directory (or gs:// or s3:// prefix) under which the "
         "profiler service (--enable_profiler) may write traces: a Profile whose logdir is not "
         "inside it is refused (PERMISSION_DENIED), as is every one that asks the server to "
         "write when it is not set (TF Serving writes wherever the client says); a Profile "
         "asking for emit_xspace writes nothing and needs none", env=ENV_PROFILE_DIR,
         default="none (no trace is written)", tf_serving=False),
    Flag("version", "print the version and exit", boolean=True, default="false"),
)  # fmt: skip

#: Every spelling ("--model_name", "--model-name") -> its flag.
BY_SPELLING: dict[str, Flag] = {spelling: flag for flag in FLAGS for spelling in flag.spellings}
#: What a boolean flag's value may be (any case), for messages.
BOOLEAN_EXPECTED = "true or false (also 1/0, yes/no, on/off)"


def boolean(text: str) -> bool | None:
    """A boolean flag's or variable's value (common.TRUE_WORDS / FALSE_WORDS), or None."""
    lowered = word(text)
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    return None


@frozen
class Token:
    """One item of a command line: a flag with its value, or an argument that is none."""

    #: The arguments as written: one, or a flag and the value that followed it.
    args: tuple[str, ...]
    #: "--name" as written (before any "="); "" for an argument that is not a flag.
    spelling: str = ""
    #: The table's flag; None for an argument that is not a flag, or an unknown one.
    flag: Flag | None = None
    #: The value as written (a boolean given alone: "true"); None when there is
    #: none (not a flag, an unknown flag without "=", a flag missing its value).
    value: str | None = None


def tokenize(argv: Sequence[str]) -> tuple[Token, ...]:
    """The command line read with the table, one rule for the entrypoint and the server.

    A flag starts with ``--``: ``--flag=VALUE`` (TF Serving's form) or
    ``--flag VALUE`` (also accepted; the value never starts with ``--``). A
    boolean is ``--flag`` (true) or ``--flag=VALUE``: it never takes the next
    argument, so ``--enable_batching false`` is ``--enable_batching`` and a
    stray ``false`` (TF Serving reads it the same way). A single dash is not a
    flag (``-port=1``: TF Serving's parser does not read it either), nor is
    ``--`` alone. An unknown ``--flag`` takes no next argument (its type is
    unknown). Never raises: what to refuse is the reader's decision.
    """
    tokens: list[Token] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        if not arg.startswith("--") or arg == "--":
            tokens.append(Token((arg,)))
            continue
        spelling, equals, value = arg.partition("=")
        flag = BY_SPELLING.get(spelling)
        if equals:
            tokens.append(Token((arg,), spelling, flag, value))
        elif flag is None:
            tokens.append(Token((arg,), spelling))
        elif flag.boolean:
            tokens.append(Token((arg,), spelling, flag, "true"))
        elif index < len(argv) and not argv[index].startswith("--"):
            tokens.append(Token((arg, argv[index]), spelling, flag, argv[index]))
            index += 1
        else:
            tokens.append(Token((arg,), spelling, flag))
    return tuple(tokens)
