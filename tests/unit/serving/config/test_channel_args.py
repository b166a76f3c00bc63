"""--grpc_channel_arguments: TF Serving's syntax, grpc's names, clear refusals."""

from __future__ import annotations

import re

import pytest

from tf_entrypoint.serving.config import (
    PlannedCpus,
    ServeConfig,
    UsageError,
    channel_args,
    parse_config,
)

#: What TF Serving's test harness passes to every server since 2026-05, and
#: what its testGoodGrpcChannelArgs adds.
HARNESS = "grpc.so_reuseaddr=1"
GOOD_ARGS = "grpc.max_connection_age_ms=2000,grpc.lb_policy_name=grpclb"


def parse(*argv: str) -> ServeConfig:
    return parse_config(["--model_base_path=/models/m", *argv], {}, budget=PlannedCpus(2, "t"))


def test_tf_servings_own_arguments_are_accepted() -> None:
    given = channel_args.parse(f"{GOOD_ARGS},{HARNESS}")
    assert given.options == (
        ("grpc.max_connection_age_ms", 2000),
        ("grpc.lb_policy_name", "grpclb"),
        ("grpc.so_reuseaddr", 1),
    )
    (note,) = given.notes
    assert "grpc.so_reuseaddr is not a gRPC channel argument" in note


def test_numbers_are_integers_as_absl_simple_atoi_reads_them() -> None:
    assert channel_args.as_int32("2000") == 2000
    assert channel_args.as_int32(" -7 ") == -7
    assert channel_args.as_int32("+3") == 3
    assert channel_args.as_int32(str(2**31 - 1)) == 2**31 - 1
    for text in (str(2**31), "1.5", "0x10", "1e3", "", "12a", "- 1"):
        assert channel_args.as_int32(text) is None, text


def test_a_string_argument_keeps_digits_as_text() -> None:
    given = channel_args.parse("grpc.primary_user_agent=123,grpc.optimization_target=latency")
    assert given.options == (
        ("grpc.primary_user_agent", "123"),
        ("grpc.optimization_target", "latency"),
    )


def test_spaces_empty_items_and_repeats() -> None:
    given = channel_args.parse(
        " grpc.keepalive_time_ms = 60000 ,, grpc.max_concurrent_streams=4,grpc.keepalive_time_ms=5,"
    )
    assert given.options == (("grpc.max_concurrent_streams", 4), ("grpc.keepalive_time_ms", 5))
    assert channel_args.parse("").options == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("grpc.max_connection_age_ms", "'grpc.max_connection_age_ms': expected key=value"),
        ("=5", "'=5': the key is empty: expected key=value"),
        ("grpc.service_config=a=b", "more than one '='"),
        (
            "grpc.no_such_argument=1",
            "grpc.no_such_argument is not a gRPC channel argument: expected one of grpc's names",
        ),
        (
            "grpc.max_conection_age_ms=1",
            "grpc.max_conection_age_ms is not a gRPC channel argument (did you mean "
            "grpc.max_connection_age_ms?)",
        ),
        ("max_connection_age_ms=1", "max_connection_age_ms is not a gRPC channel argument"),
        (
            "grpc.max_connection_age_ms=2s",
            "grpc.max_connection_age_ms='2s': expected a whole number from -2147483648 to "
            "2147483647",
        ),
        (
            "grpc.keepalive_time_ms=3000000000",
            "grpc.keepalive_time_ms='3000000000': expected a whole number",
        ),
        ("grpc.socket_mutator=1", "grpc.socket_mutator takes a C pointer"),
        (
            "grpc.max_receive_message_length=1000",
            "grpc.max_receive_message_length is not accepted here: the gRPC message limit is "
            "--max-body-bytes",
        ),
    ],
)
def test_what_grpc_would_ignore_or_tf_serving_would_crash_on_is_refused(
    text: str, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        channel_args.parse(text)
    with pytest.raises(UsageError) as usage:
        parse(f"--grpc_channel_arguments={text}")
    assert str(usage.value).startswith("--grpc_channel_arguments: ")
    assert message in str(usage.value)


def test_the_flag_reaches_the_config_and_its_notes() -> None:
    config = parse(f"--grpc_channel_arguments={GOOD_ARGS},{HARNESS}")
    assert dict(config.grpc_channel_arguments.options) == {
        "grpc.max_connection_age_ms": 2000,
        "grpc.lb_policy_name": "grpclb",
        "grpc.so_reuseaddr": 1,
    }
    assert any(note.startswith("--grpc_channel_arguments: grpc.so_reuseaddr") for note in
               config.notes)  # fmt: skip
    assert parse().grpc_channel_arguments.options == ()


def test_the_flags_arguments_win_over_the_servers_own_but_the_message_limit() -> None:
    ours = (("grpc.max_receive_message_length", 8), ("grpc.so_reuseport", 0))
    given = channel_args.parse("grpc.so_reuseport=1,grpc.keepalive_time_ms=9")
    assert channel_args.server_options(ours, given) == [
        ("grpc.max_receive_message_length", 8),
        ("grpc.so_reuseport", 1),
        ("grpc.keepalive_time_ms", 9),
    ]


def test_every_known_argument_has_a_kind_and_grpcs_prefix() -> None:
    assert len(channel_args.KNOWN) > 80
    for name, kind in channel_args.KNOWN.items():
        assert name.startswith("grpc."), name
        assert kind in ("int", "string", "pointer"), name
    assert set(channel_args.OWNED) <= set(channel_args.KNOWN)
    assert not set(channel_args.TOLERATED) & set(channel_args.KNOWN)
