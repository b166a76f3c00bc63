"""TF Serving's command line read into a ServeConfig (serving/config/__init__.py's parse_config)."""

from __future__ import annotations

import functools
import re
import sys
import types
from pathlib import Path

import pytest

from tf_entrypoint.serving import main
from tf_entrypoint.serving.config import (
    FLAGS,
    Flag,
    PlannedCpus,
    ServeConfig,
    ShowText,
    UsageError,
    parse_config,
)
from tf_entrypoint.serving.config.model_config import ConfigError
from tf_entrypoint.serving.core.submission import LoadRetries

BUDGET = PlannedCpus(2, "test")
#: KServe's TensorFlow runtime runs exactly this (its ServingRuntime `command:`).
KSERVE = [
    "--model_name=flowers",
    "--port=9000",
    "--rest_api_port=8080",
    "--model_base_path=/mnt/models",
    "--rest_api_timeout_in_ms=60000",
]


def parse(*argv: str, env: dict[str, str] | None = None) -> ServeConfig:
    return parse_config(list(argv), env or {}, budget=BUDGET)


def by_name(name: str) -> Flag:
    return next(flag for flag in FLAGS if flag.name == name)


def test_kserves_command_line() -> None:
    conf = parse(*KSERVE)
    assert [(m.name, str(m.base_path)) for m in conf.models.models] == [("flowers", "/mnt/models")]
    assert (conf.grpc_port, conf.rest_port, conf.request_timeout) == (9000, 8080, 60.0)
    assert conf.notes == ()


@pytest.mark.parametrize(
    ("flag", "value", "field", "expected"),
    [
        ("--model_name", "m", "model", "m"),
        ("--model-name", "m", "model", "m"),
        ("--port", "9000", "grpc_port", 9000),
        ("--grpc-port", "9000", "grpc_port", 9000),
        ("--rest_api_port", "8080", "rest_port", 8080),
        ("--rest-api-port", "8080", "rest_port", 8080),
        ("--rest_api_timeout_in_ms", "1500", "request_timeout", 1.5),
        ("--request-timeout", "1.5", "request_timeout", 1.5),
        ("--file_system_poll_wait_seconds", "7", "file_system_poll_wait", 7.0),
        ("--model_config_file_poll_wait_seconds", "3", "model_config_file_poll_wait", 3.0),
        ("--grpc_socket_path", "/tmp/grpc.sock", "grpc_socket_path", "/tmp/grpc.sock"),
        ("--workers", "3", "workers", 3),
        ("--host", "127.0.0.1", "host", "127.0.0.1"),
        ("--log-level", "debug", "log_level", "debug"),
    ],
)
def test_equals_and_space_forms_agree(flag: str, value: str, field: str, expected: object) -> None:
    for argv in ([f"{flag}={value}"], [flag, value]):
        conf = parse(*argv)
        got = conf.models.models[0].name if field == "model" else getattr(conf, field)
        assert got == expected, argv


def test_bare_booleans() -> None:
    assert parse().enable_model_warmup is True
    assert parse("--enable_model_warmup=false").enable_model_warmup is False
    assert parse("--enable_model_warmup=0").enable_model_warmup is False
    assert parse("--enable_model_warmup=false", "--enable_model_warmup").enable_model_warmup
    assert parse("--access-log").access_log is True
    assert parse("--access-log=no").access_log is False


def test_a_bare_boolean_never_takes_the_next_argument() -> None:
    with pytest.raises(UsageError, match=r"unexpected argument 'false' \(a boolean takes its "
                       r"value as --enable_model_warmup=VALUE"):  # fmt: skip
        parse("--enable_model_warmup", "false")
    with pytest.raises(UsageError, match=r"--access-log='maybe' is invalid: expected true or"):
        parse("--access-log=maybe")


def test_a_value_flag_needs_its_value() -> None:
    for argv in (["--model_name"], ["--model_name", "--port=1"]):
        with pytest.raises(UsageError, match=r"--model_name needs a value"):
            parse(*argv)


def test_unknown_flags_are_named_with_a_suggestion() -> None:
    with pytest.raises(UsageError, match=r"unknown flag --modle_name \(did you mean --model_name"):
        parse("--modle_name=x")
    with pytest.raises(UsageError, match=r"unexpected argument 'serve'"):
        parse("serve")


LIMITED = [flag for flag in FLAGS if flag.kind == "limited"]


def refused_value(flag: Flag) -> str:
    if flag.boolean:
        return "false" if "true" in flag.accepts else "true"
    return "7" if "0" in flag.accepts or not flag.accepts else "x"


@pytest.mark.parametrize("flag", LIMITED, ids=lambda flag: flag.name)
def test_what_is_not_implemented_is_refused_by_name(flag: Flag) -> None:
    value = refused_value(flag)
    assert value not in flag.accepts
    with pytest.raises(UsageError, match=rf"^--{flag.name}(={value})? is not supported: ") as err:
        parse(f"--{flag.name}={value}")
    assert flag.why in str(err.value)


@pytest.mark.parametrize("flag", LIMITED, ids=lambda flag: flag.name)
def test_what_this_server_does_anyway_is_accepted(flag: Flag) -> None:
    for value in flag.accepts:
        parse(f"--{flag.name}={value}")


def test_batching_is_off_by_default_and_on_with_the_flag_or_variable(tmp_path: Path) -> None:
    assert parse().batching is None
    on = parse("--enable_batching", "--workers=3").batching
    assert on is not None
    assert (on.num_batch_threads, on.max_batch_size, on.batch_timeout_micros) == (3, 1000, 0)
    assert (on.max_enqueued_batches, on.allowed_batch_sizes, on.source) == (10, (), None)
    assert parse_config([], {"SERVE_ENABLE_BATCHING": "true"}, BUDGET).batching is not None
    assert parse_config([], {"SERVE_ENABLE_BATCHING": "false"}, BUDGET).batching is None
    params = tmp_path / "batching.txt"
    params.write_text("max_batch_size { value: 64 }\nallowed_batch_sizes: 16\n"
                      "allowed_batch_sizes: 64\n")  # fmt: skip
    from_file = parse("--enable_batching", f"--batching_parameters_file={params}").batching
    assert from_file is not None
    assert (from_file.max_batch_size, from_file.allowed_batch_sizes) == (64, (16, 64))
    env = {"SERVE_ENABLE_BATCHING": "1", "SERVE_BATCHING_PARAMETERS_FILE": str(params)}
    from_env = parse_config([], env, BUDGET).batching
    assert from_env is not None
    assert from_env.source == params
    ignored = parse(f"--batching_parameters_file={params}")
    assert ignored.batching is None
    assert any("is ignored: batching is off" in note for note in ignored.notes)


def test_a_bad_batching_parameters_file_is_a_config_error(tmp_path: Path) -> None:
    params = tmp_path / "batching.txt"
    params.write_text("max_batch_size { value: 8 }\nmax_batch_sise { value: 8 }\n")
    syntax = "Error parsing text-format tensorflow.serving.BatchingParameters: "
    with pytest.raises(
        ConfigError, match=rf"^{syntax}{re.escape(str(params))}:2:1: .*max_batch_sise"
    ):
        parse("--enable_batching", f"--batching_parameters_file={params}")
    with pytest.raises(ConfigError, match="cannot read the batching parameters file"):
        parse("--enable_batching", f"--batching_parameters_file={tmp_path / 'none'}")


@pytest.mark.parametrize(
    "flag", [flag for flag in FLAGS if flag.kind == "noted"], ids=lambda flag: flag.name
)
def test_flags_without_effect_are_accepted_and_said(flag: Flag) -> None:
    value = "true" if flag.boolean else "4"
    conf = parse(f"--{flag.name}={value}")
    assert conf.notes == (f"--{flag.name}={value} has no effect here: {flag.why}",)


def test_rest_api_num_threads_does_not_size_the_inference_threads() -> None:
    conf = parse("--rest_api_num_threads=64")
    assert conf.workers == BUDGET.cpus
    assert "--workers" in conf.notes[0]


@pytest.mark.parametrize(
    "name", [flag.name for flag in FLAGS if flag.kind == "plan"]
)  # fmt: skip
def test_thread_flags_reaching_the_server_are_refused(name: str) -> None:
    # tf-entrypoint takes them out of the command line into the plan; the server
    # only sees them when it was started without the entrypoint.
    with pytest.raises(UsageError, match=rf"^--{name} is read by tf-entrypoint"):
        parse(f"--{name}=2")


def test_timeout_in_ms() -> None:
    assert parse("--rest_api_timeout_in_ms=0").request_timeout == 0
    assert parse("--rest_api_timeout_in_ms=-5").request_timeout == 0  # TF Serving: no limit
    assert parse("--rest_api_timeout_in_ms=250").request_timeout == 0.25
    env = {"SERVE_REQUEST_TIMEOUT": "9"}
    assert parse("--rest_api_timeout_in_ms=250", env=env).request_timeout == 0.25
    assert parse(env=env).request_timeout == 9
    with pytest.raises(UsageError, match="both given"):
        parse("--rest_api_timeout_in_ms=250", "--request-timeout=1")
    with pytest.raises(UsageError, match=r"--rest_api_timeout_in_ms='1.5' is invalid"):
        parse("--rest_api_timeout_in_ms=1.5")


def test_model_base_path_has_tf_servings_meaning_and_ours_is_the_parent() -> None:
    def path(*argv: str, env: dict[str, str] | None = None) -> str:
        return str(parse(*argv, env=env).models.models[0].base_path)

    assert path("--model_base_path=/mnt/models") == "/mnt/models"
    assert path("--model-base-path=/srv", "--model_name=m") == "/srv/m"
    assert path(env={"MODEL_BASE_PATH": "/srv", "MODEL_NAME": "m"}) == "/srv/m"
    # The flag (the model's own directory) wins over the variable (the parent).
    assert path("--model_base_path=/mnt/models", env={"MODEL_BASE_PATH": "/srv"}) == "/mnt/models"
    with pytest.raises(UsageError, match="give one"):
        parse("--model_base_path=/a", "--model-base-path=/b")


def test_variables_are_named_when_invalid() -> None:
    with pytest.raises(UsageError, match=r"^SERVE_WORKERS='0' is invalid: expected a whole"):
        parse(env={"SERVE_WORKERS": "0"})
    with pytest.raises(UsageError, match=r"^PORT='http' is invalid: expected a port"):
        parse(env={"PORT": "http"})


def test_a_socket_alone_is_something_to_serve() -> None:
    conf = parse("--port=0", "--rest_api_port=0", "--grpc_socket_path=/tmp/s")
    assert (conf.grpc_port, conf.rest_port, conf.grpc_socket_path) == (0, 0, "/tmp/s")
    with pytest.raises(UsageError, match="nothing to serve"):
        parse("--port=0", "--rest_api_port=0")


def test_the_last_of_repeated_flags_wins() -> None:
    assert parse("--port=1", "--grpc-port", "2").grpc_port == 2


def test_version_prints_tf_servings_two_lines() -> None:
    with pytest.raises(ShowText) as shown:
        parse("--version", "--enable_batching")  # before anything is checked, as TF Serving
    lines = shown.value.text.splitlines()
    assert lines[0].startswith("TensorFlow ModelServer: tf-entrypoint ")
    assert lines[1].startswith("TensorFlow Library: ")


def test_warm_up_and_the_method_name_check_reach_the_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[Path, int, bool, bool, object, str]] = []
    iterations: list[int] = []
    graph_limits: list[object] = []
    fake = types.ModuleType("tf_entrypoint.serving.model")

    def load(
        directory: Path,
        version: int,
        *,
        warmup: bool = True,
        warmup_iterations: int = 1,
        method_name_check: bool = False,
        batching: object = None,
        batch_hooks: object = None,
        max_body_bytes: object = None,
        loader: str = "session",
        max_graph_bytes: object = None,
    ) -> object:
        calls.append((directory, version, warmup, method_name_check, max_body_bytes, loader))
        iterations.append(warmup_iterations)
        graph_limits.append(max_graph_bytes)
        return object()

    fake.load = load  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tf_entrypoint.serving.model", fake)
    import tf_entrypoint.serving as package  # noqa: PLC0415

    monkeypatch.setattr(package, "model", fake, raising=False)
    mib8 = 8 * 1024 * 1024
    for argv, warmup, check, body_bytes, chosen in (
        ([], True, False, mib8, "session"),
        (["--enable_model_warmup=false"], False, False, mib8, "session"),
        (["--enable_signature_method_name_check"], True, True, mib8, "session"),
        # it bounds what a warm-up record and a gRPC request may decode to
        (["--max-body-bytes=1234"], True, False, 1234, "session"),
        (["--saved-model-loader=tf2"], True, False, mib8, "tf2"),
    ):
        conf = parse(f"--model_base_path={tmp_path}", *argv)
        loader = main.build_core(conf).manager._loader  # type: ignore[attr-defined]
        assert isinstance(loader, functools.partial)
        loader(tmp_path, 1)
        assert calls[-1] == (tmp_path, 1, warmup, check, body_bytes, chosen)
        assert iterations[-1] == 1
    # TF Serving's --num_request_iterations_for_warmup: used only when above 0.
    for given, replays in (("3", 3), ("0", 1), ("-2", 1)):
        conf = parse(
            f"--model_base_path={tmp_path}", f"--num_request_iterations_for_warmup={given}"
        )
        main.build_core(conf).manager._loader(tmp_path, 1)  # type: ignore[attr-defined]
        assert iterations[-1] == replays
    # --max-graph-bytes (SERVE_MAX_GRAPH_BYTES): the graph file's limit, checked before a read.
    assert graph_limits[-1] == 64 * 1024 * 1024
    main.build_core(
        parse(f"--model_base_path={tmp_path}", "--max-graph-bytes=4096")
    ).manager._loader(tmp_path, 1)  # type: ignore[attr-defined]
    assert graph_limits[-1] == 4096


def test_max_graph_bytes_is_read_from_the_flag_or_its_variable_and_checked() -> None:
    """--max-graph-bytes (SERVE_MAX_GRAPH_BYTES): 64 MiB by default, a whole number from 1."""
    assert parse().max_graph_bytes == 64 * 1024 * 1024
    assert parse("--max-graph-bytes=1000").max_graph_bytes == 1000
    assert parse(env={"SERVE_MAX_GRAPH_BYTES": "2000"}).max_graph_bytes == 2000
    assert (
        parse("--max-graph-bytes", "3000", env={"SERVE_MAX_GRAPH_BYTES": "2000"}).max_graph_bytes
        == 3000
    )
    for bad in ("0", "-1", "1e6", "lots"):
        with pytest.raises(
            UsageError,
            match=r"--max-graph-bytes=.* is invalid: expected a whole number of bytes from 1",
        ):
            parse(f"--max-graph-bytes={bad}")


def test_profile_dir_is_read_from_the_flag_or_its_variable_and_normalised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--profile-dir (SERVE_PROFILE_DIR): not set by default (no trace is written); a
    local path is made absolute and real, a gs:// or s3:// prefix normalised."""
    assert parse().profile_dir is None
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    real = str((tmp_path / "real").resolve())
    assert parse(f"--profile-dir={tmp_path}/link/").profile_dir == real
    monkeypatch.chdir(tmp_path)
    assert parse(env={"SERVE_PROFILE_DIR": "real/x/.."}).profile_dir == real
    assert parse("--profile-dir=gs://b/logs/", env={"SERVE_PROFILE_DIR": "/x"}).profile_dir == (
        "gs://b/logs"
    )
    assert parse("--profile-dir", "S3://b//a/./c").profile_dir == "s3://b/a/c"
    for bad in ("", "gs://", "ftp://b/x"):
        with pytest.raises(
            UsageError, match=r"--profile-dir=.* is invalid: expected a directory, or a gs://"
        ):
            parse(f"--profile-dir={bad}")


def test_load_retries_default_to_tf_servings_and_are_checked() -> None:
    """--max_num_load_retries (5) and --load_retry_interval_micros (a minute), as
    TF Serving's server.h; a negative interval does not wait (its retrier.cc)."""
    assert parse_config([], {}, BUDGET).load_retries == LoadRetries(5, 60.0)
    read = parse_config(
        ["--max_num_load_retries=2", "--load_retry_interval_micros=1500000"], {}, BUDGET
    )
    assert read.load_retries == LoadRetries(2, 1.5)
    read = parse_config(["--max_num_load_retries=0", "--load_retry_interval_micros=-1"], {}, BUDGET)
    assert read.load_retries == LoadRetries(0, 0.0)
    with pytest.raises(UsageError) as bad:
        parse_config(["--max_num_load_retries=-1"], {}, BUDGET)
    assert str(bad.value) == (
        "--max_num_load_retries='-1' is invalid: expected a whole number from 0 (int32)"
    )
    with pytest.raises(UsageError, match="--load_retry_interval_micros='1m' is invalid"):
        parse_config(["--load_retry_interval_micros=1m"], {}, BUDGET)


def test_wait_for_model_is_none_unless_given() -> None:
    """Not given: wait for a first version as TF Serving does; given: exit after it."""
    assert parse_config([], {}, BUDGET).wait_for_model is None
    assert parse_config(["--wait-for-model=5"], {}, BUDGET).wait_for_model == 5.0
    assert parse_config([], {"SERVE_WAIT_FOR_MODEL": "0"}, BUDGET).wait_for_model == 0.0


def test_the_loader_variable_is_checked_at_start() -> None:
    """SERVE_SAVED_MODEL_LOADER is read once, at start: a bad value is a usage
    error naming the variable and the values it takes, not a failed load."""
    env = {"SERVE_SAVED_MODEL_LOADER": "tf2"}
    assert parse_config([], env, BUDGET).saved_model_loader == "tf2"
    assert parse_config([], {}, BUDGET).saved_model_loader == "session"
    with pytest.raises(UsageError) as bad:
        parse_config([], {"SERVE_SAVED_MODEL_LOADER": "bogus"}, BUDGET)
    assert str(bad.value) == (
        "SERVE_SAVED_MODEL_LOADER='bogus' is invalid: expected session or tf2"
    )
    with pytest.raises(UsageError, match="--saved-model-loader='TF2' is invalid"):
        parse_config(["--saved-model-loader=TF2"], {}, BUDGET)


def test_with_batching_every_admitted_request_gets_a_thread() -> None:
    off = parse("--workers=2", "--max-queue=40")
    on = parse("--workers=2", "--max-queue=40", "--enable_batching")
    assert main.request_threads(off) == 2
    assert main.request_threads(on) == 40


def only_model(conf: ServeConfig) -> tuple[str, str]:
    (model,) = conf.models.models
    return model.name, str(model.base_path)


def test_config_defaults_follow_the_cpu_budget() -> None:
    conf = parse_config([], {}, budget=PlannedCpus(3, "cgroup v1 quota"))
    assert (conf.workers, conf.max_queue) == (3, 96)
    assert (*only_model(conf), conf.grpc_port, conf.rest_port) == (
        "model",
        "/models/model",
        8500,
        8501,
    )
    assert (conf.file_system_poll_wait, conf.model_config_file_poll_wait) == (1.0, 0.0)
    env = {"MODEL_NAME": "m", "MODEL_BASE_PATH": "/x", "PORT": "9000", "SERVE_WORKERS": "1"}
    conf = parse_config([], env, budget=PlannedCpus(3, "test"))
    assert (*only_model(conf), conf.rest_port, conf.workers) == ("m", "/x/m", 9000, 1)
    conf = parse_config(["--port", "1234", "--model-name", "n"], env, budget=PlannedCpus(3, "t"))
    assert (conf.grpc_port, conf.rest_port, only_model(conf)) == (1234, 9000, ("n", "/x/n"))
    conf = parse_config(["--rest_api_port=0"], env, budget=PlannedCpus(3, "t"))
    assert (conf.grpc_port, conf.rest_port) == (8500, 0)


@pytest.mark.parametrize(("cpus", "frontends"), [(1, 1), (2, 2), (3, 3), (8, 8), (64, 8)])
def test_front_ends_follow_the_cpu_budget_from_two_cpus(cpus: int, frontends: int) -> None:
    """One process under 2 CPUs; from 2, a front-end per CPU over one engine, at
    most 8 (a pod without a CPU limit plans for its node's CPUs); the flag or
    SERVE_FRONTENDS sets another number, 1 pins one process."""
    assert parse_config([], {}, budget=PlannedCpus(cpus, "test")).frontends == frontends
    pinned = parse_config(["--frontends", "1"], {}, budget=PlannedCpus(cpus, "test"))
    assert pinned.frontends == 1
    env = {"SERVE_FRONTENDS": "3"}
    assert parse_config([], env, budget=PlannedCpus(cpus, "test")).frontends == 3


def test_front_ends_are_at_most_what_the_shared_page_counts() -> None:
    """--frontends above the board's words (ipc/board.py) is a usage error naming the bound,
    not a supervisor that fails when it makes the page."""
    from tf_entrypoint.serving.config import UsageError  # noqa: PLC0415
    from tf_entrypoint.serving.config.sizing import MAX_FRONTENDS  # noqa: PLC0415
    from tf_entrypoint.serving.ipc import board  # noqa: PLC0415

    assert MAX_FRONTENDS == board.MAX_FRONTENDS
    budget = PlannedCpus(2, "test")
    assert parse_config(["--frontends", str(MAX_FRONTENDS)], {}, budget=budget).frontends == 510
    with pytest.raises(UsageError, match=r"--frontends='511' is invalid: expected a whole number"):
        parse_config(["--frontends", "511"], {}, budget=budget)


def test_config_refuses_one_port_for_both_protocols() -> None:
    from tf_entrypoint.serving.config import UsageError  # noqa: PLC0415

    with pytest.raises(UsageError, match="--port is the gRPC port, as in TF Serving"):
        parse_config(["--port", "8501"], {}, budget=PlannedCpus(1, "t"))
    with pytest.raises(UsageError, match="nothing to serve"):
        parse_config(["--port=0", "--rest_api_port=0"], {}, budget=PlannedCpus(1, "t"))


@pytest.mark.parametrize(
    "argv",
    [["--port", "70000"], ["--workers", "0"], ["--model-name", ".."], ["--grace-period", "-1"]],
)
def test_config_rejects_bad_values(argv: list[str]) -> None:
    from tf_entrypoint.serving.config import UsageError  # noqa: PLC0415

    with pytest.raises(UsageError):
        parse_config(argv, {}, budget=PlannedCpus(1, "t"))
