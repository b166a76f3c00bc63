"""TF Serving's --grpc_channel_arguments, read as TF Serving reads it and checked.

TF Serving (model_servers/server.cc, parseGrpcChannelArgs) splits the flag's
value at commas into `key=value` items and hands each to grpc's ServerBuilder:
as an integer when the value parses as a 32-bit integer (absl::SimpleAtoi:
surrounding spaces and a sign allowed), else as a string. grpc ignores, with
a log line at most, a key it does not know or a value of the wrong type; an
item without "=" crashes TF Serving (it reads the missing value past the end).

This server reads the same syntax and hands the arguments to grpc's Python
server as options, but checks them first, so a typo is an error at start-up
rather than a setting that silently does nothing:

- the key must be one of grpc's channel argument names (:data:`KNOWN`,
  grpc's include/grpc/impl/channel_arg_names.h and compression_types.h);
- an integer argument needs an integer value (a string argument takes the
  value as written, digits too);
- arguments that take a C pointer cannot be given as text;
- `grpc.max_receive_message_length` is --max-body-bytes's (it bounds what a
  request may make the server build, docs/robustness.md): refused, naming it;
- `grpc.so_reuseaddr` is no grpc argument (grpc always sets SO_REUSEADDR on
  its listening sockets) but TF Serving's own test harness passes it: it is
  accepted, with a note.

Spaces around keys and values are dropped and empty items skipped; a key
given twice keeps its last value. Client-side arguments
(`grpc.lb_policy_name`, ...) are accepted and do nothing on a server, as in
TF Serving.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Literal

Kind = Literal["int", "string", "pointer"]

#: grpc's channel argument names and what each takes (grpc 1.7x-1.8x:
#: include/grpc/impl/channel_arg_names.h, compression_types.h).
KNOWN: dict[str, Kind] = {
    "grpc.census": "int",
    "grpc.loadreporting": "int",
    "grpc.server_call_metric_recording": "int",
    "grpc.minimal_stack": "int",
    "grpc.max_concurrent_streams": "int",
    "grpc.max_receive_message_length": "int",
    "grpc.max_send_message_length": "int",
    "grpc.max_connection_idle_ms": "int",
    "grpc.max_connection_age_ms": "int",
    "grpc.max_connection_age_grace_ms": "int",
    "grpc.client_idle_timeout_ms": "int",
    "grpc.per_message_compression": "int",
    "grpc.per_message_decompression": "int",
    "grpc.http2.initial_sequence_number": "int",
    "grpc.http2.lookahead_bytes": "int",
    "grpc.http2.hpack_table_size.decoder": "int",
    "grpc.http2.hpack_table_size.encoder": "int",
    "grpc.http2.max_frame_size": "int",
    "grpc.http2.bdp_probe": "int",
    "grpc.http2.min_time_between_pings_ms": "int",
    "grpc.http2.min_ping_interval_without_data_ms": "int",
    "grpc.server_max_unrequested_time_in_server": "int",
    "grpc.http2_scheme": "string",
    "grpc.http2.max_pings_without_data": "int",
    "grpc.http2.max_ping_strikes": "int",
    "grpc.http2.write_buffer_size": "int",
    "grpc.http2.true_binary": "int",
    "grpc.experimental.http2.enable_preferred_frame_size": "int",
    "grpc.keepalive_time_ms": "int",
    "grpc.keepalive_timeout_ms": "int",
    "grpc.keepalive_permit_without_calls": "int",
    "grpc.default_authority": "string",
    "grpc.primary_user_agent": "string",
    "grpc.secondary_user_agent": "string",
    "grpc.min_reconnect_backoff_ms": "int",
    "grpc.max_reconnect_backoff_ms": "int",
    "grpc.initial_reconnect_backoff_ms": "int",
    "grpc.dns_min_time_between_resolutions_ms": "int",
    "grpc.server_handshake_timeout_ms": "int",
    "grpc.ssl_target_name_override": "string",
    "grpc.ssl_session_cache": "pointer",
    "grpc.tsi.max_frame_size": "int",
    "grpc.max_metadata_size": "int",
    "grpc.absolute_max_metadata_size": "int",
    "grpc.so_reuseport": "int",
    "grpc.resource_quota": "pointer",
    "grpc.expand_wildcard_addrs": "int",
    "grpc.service_config": "string",
    "grpc.service_config_disable_resolution": "int",
    "grpc.lb_policy_name": "string",
    "grpc.lb.ring_hash.ring_size_cap": "int",
    "grpc.socket_mutator": "pointer",
    "grpc.socket_factory": "pointer",
    "grpc.max_channel_trace_event_memory_per_node": "int",
    "grpc.enable_channelz": "int",
    "grpc.use_cronet_packet_coalescing": "int",
    "grpc.experimental.tcp_read_chunk_size": "int",
    "grpc.experimental.tcp_min_read_chunk_size": "int",
    "grpc.experimental.tcp_max_read_chunk_size": "int",
    "grpc.experimental.tcp_tx_zerocopy_enabled": "int",
    "grpc.experimental.tcp_tx_zerocopy_send_bytes_threshold": "int",
    "grpc.experimental.tcp_tx_zerocopy_max_simultaneous_sends": "int",
    "grpc.tcp_receive_buffer_size": "int",
    "grpc.grpclb_call_timeout_ms": "int",
    "grpc.TEST_ONLY_DO_NOT_USE_IN_PROD.xds_bootstrap_config": "string",
    "grpc.grpclb_fallback_timeout_ms": "int",
    "grpc.experimental.grpclb_channel_args": "pointer",
    "grpc.priority_failover_timeout_ms": "int",
    "grpc.workaround.cronet_compression": "int",
    "grpc.optimization_target": "string",
    "grpc.enable_retries": "int",
    "grpc.experimental.enable_hedging": "int",
    "grpc.per_rpc_retry_buffer_size": "int",
    "grpc.mobile_log_context": "pointer",
    "grpc.disable_client_authority_filter": "int",
    "grpc.enable_http_proxy": "int",
    "grpc.http_proxy": "string",
    "grpc.address_http_proxy": "string",
    "grpc.address_http_proxy_enabled_addresses": "string",
    "grpc.surface_user_agent": "int",
    "grpc.inhibit_health_checking": "int",
    "grpc.dns_enable_srv_queries": "int",
    "grpc.dns_ares_query_timeout": "int",
    "grpc.use_local_subchannel_pool": "int",
    "grpc.channel_pooling_domain": "string",
    "grpc.channel_id": "int",
    "grpc.authorization_policy_provider": "pointer",
    "grpc.experimental.server_config_change_drain_grace_time_ms": "int",
    "grpc.dscp": "int",
    "grpc.happy_eyeballs_connection_attempt_delay_ms": "int",
    "grpc.event_engine_use_memory_allocator_factory": "pointer",
    "grpc.max_allowed_incoming_connections": "int",
    "grpc.experimental.stats_plugins": "pointer",
    "grpc.security_frame_allowed": "int",
    # compression_types.h
    "grpc.default_compression_algorithm": "int",
    "grpc.default_compression_level": "int",
    "grpc.compression_enabled_algorithms_bitset": "int",
}

#: Set by this server from its own flag: refused, naming the flag.
OWNED = {
    "grpc.max_receive_message_length": (
        "the gRPC message limit is --max-body-bytes (REST bodies and gRPC messages alike; "
        "what a request may make the server build is bounded by 8 times it): give "
        "--max-body-bytes=N instead"
    ),
}
#: Not grpc's, accepted because TF Serving's own tooling passes them (the note says why).
TOLERATED = {
    "grpc.so_reuseaddr": (
        "grpc.so_reuseaddr is not a gRPC channel argument and has no effect (grpc sets "
        "SO_REUSEADDR on its listening sockets anyway); accepted because TF Serving's test "
        "harness passes it"
    ),
}

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
#: absl::SimpleAtoi's syntax: optional ASCII spaces, an optional sign, decimal digits.
_INTEGER = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)[ \t\n\v\f\r]*")


@dataclass(frozen=True)
class ChannelArguments:
    """What --grpc_channel_arguments asks for: grpc options in the order given, and notes."""

    options: tuple[tuple[str, int | str], ...] = ()
    notes: tuple[str, ...] = ()


def as_int32(text: str) -> int | None:
    """The value as TF Serving's absl::SimpleAtoi reads it into an int32, or None."""
    match = _INTEGER.fullmatch(text)
    if match is None:
        return None
    value = int(match.group(1))
    return value if INT32_MIN <= value <= INT32_MAX else None


def parse(text: str) -> ChannelArguments:
    """The flag's value as grpc options; ValueError naming the item and what is expected."""
    found: dict[str, int | str] = {}
    notes: list[str] = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, equals, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not equals:
            raise ValueError(
                f"{item.strip()!r}: expected key=value (e.g. grpc.keepalive_time_ms=60000)"
            )
        if not key:
            raise ValueError(f"{item.strip()!r}: the key is empty: expected key=value")
        if "=" in raw:
            raise ValueError(
                f"{item.strip()!r}: more than one '=': expected key=value (a value cannot "
                "hold '=' or ',')"
            )
        found.pop(key, None)  # given twice: the last one, at its place
        found[key] = _value(key, raw, notes)
    return ChannelArguments(tuple(found.items()), tuple(dict.fromkeys(notes)))


def _value(key: str, raw: str, notes: list[str]) -> int | str:
    if key in OWNED:
        raise ValueError(f"{key} is not accepted here: {OWNED[key]}")
    if key in TOLERATED:
        notes.append(TOLERATED[key])
        number = as_int32(raw)
        return raw if number is None else number
    kind = KNOWN.get(key)
    if kind is None:
        close = difflib.get_close_matches(key, [*KNOWN, *TOLERATED], n=1, cutoff=0.85)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(
            f"{key} is not a gRPC channel argument{hint}: expected one of grpc's names, such "
            "as grpc.max_connection_age_ms, grpc.keepalive_time_ms or "
            "grpc.max_concurrent_streams (https://grpc.github.io/grpc/core/group__grpc__arg__keys.html)"
        )
    if kind == "pointer":
        raise ValueError(f"{key} takes a C pointer, which cannot be given on the command line")
    if kind == "string":
        return raw
    number = as_int32(raw)
    if number is None:
        raise ValueError(f"{key}={raw!r}: expected a whole number from {INT32_MIN} to {INT32_MAX}")
    return number


def server_options(
    ours: tuple[tuple[str, int | str], ...], given: ChannelArguments
) -> list[tuple[str, int | str]]:
    """grpc.aio.server's options: this server's own, then the flag's (which win on a
    key both set: grpc.max_send_message_length, grpc.so_reuseport)."""
    merged = dict(ours)
    merged.update(given.options)
    return list(merged.items())
