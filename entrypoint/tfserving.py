"""Flags for TensorFlow Serving's binary, which reads no Python and few variables.

``tensorflow_model_server`` is C++: the in-process hook never runs there, and
its own defaults are quota-blind (``--rest_api_num_threads`` is 4 x the CPUs
in the affinity mask, the session pools one thread per such CPU). When the
command handed off to is that binary, :func:`serving_argv` appends the plan as
command-line flags, each only when the user did not pass it:

* ``--tensorflow_intra_op_parallelism=N`` / ``--tensorflow_inter_op_parallelism=N``
  (the plan's thread counts). Not added when the user passed
  ``--tensorflow_session_parallelism`` (TF Serving refuses to start when that
  and both per-pool flags are > 0), ``--tensorflow_session_config_file`` (the
  user's ConfigProto; the flags would override its thread counts) or
  ``--platform_config_file`` (TF Serving then ignores the flags).
* ``--rest_api_num_threads=M`` with M = 4 x the CPU budget: TF Serving's own
  formula (4 x ``port::NumSchedulableCPUs()``, which honours a cpuset) applied
  to the real budget, so a CFS quota of N CPUs gets what a cpuset of N CPUs
  already gets, and a container without a limit gets exactly TF Serving's
  default. The REST threads parse and serialise JSON and then block while the
  session runs on the intra/inter pools, so a few per CPU keep the CPUs busy;
  4 x host CPUs under a small quota (256 threads under ``--cpus=2`` on a
  64-core node) only adds contention and memory.
* ``--per_process_gpu_memory_fraction=F`` when a fraction is given (see
  :func:`gpu_memory_fraction`); not added with a session or platform config
  file either.

TF Serving parses flags with ``tensorflow::Flags``, which accepts only
``--name=value``. A user's ``--name value`` (which TF Serving would reject)
and ``-name``/``-name=value`` still count as "passed": we never add a second
copy of a flag the user wrote in any form. Appending at the end keeps the
user's arguments in order.

Pure functions: no I/O, stdlib only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from entrypoint.frozen import frozen

__all__ = [
    "GPU_FRACTION_FLAG",
    "INTER_OP_FLAG",
    "INTRA_OP_FLAG",
    "REST_THREADS_FLAG",
    "SERVER",
    "GpuMemoryFraction",
    "format_fraction",
    "gpu_memory_fraction",
    "is_model_server",
    "rest_api_threads",
    "serving_argv",
    "user_flags",
]

SERVER = "tensorflow_model_server"
INTRA_OP_FLAG = "tensorflow_intra_op_parallelism"
INTER_OP_FLAG = "tensorflow_inter_op_parallelism"
REST_THREADS_FLAG = "rest_api_num_threads"
GPU_FRACTION_FLAG = "per_process_gpu_memory_fraction"
#: Flags by which the user takes over the session configuration.
SESSION_CONFIG_FLAGS = frozenset(
    {"tensorflow_session_parallelism", "tensorflow_session_config_file", "platform_config_file"}
)
#: TF Serving's own factor: --rest_api_num_threads defaults to 4 x CPUs.
REST_THREADS_PER_CPU = 4
#: Fractions are written with at most this many decimals, rounded down.
_FRACTION_SCALE = 1_000_000


def is_model_server(argv: Sequence[str]) -> bool:
    """True when argv runs TF Serving's binary (by basename, any directory)."""
    return bool(argv) and os.path.basename(argv[0]) == SERVER


def user_flags(args: Sequence[str]) -> frozenset[str]:
    """Names of the flags in args: '--a=1', '--a 1', '-a', '-a=1' all give 'a'."""
    names = set()
    for arg in args:
        if arg.startswith("-") and arg not in ("-", "--"):
            names.add(arg.lstrip("-").partition("=")[0])
    return frozenset(names)


def rest_api_threads(cpus: int) -> int:
    """--rest_api_num_threads for a CPU budget: TF Serving's 4 x CPUs, on the budget."""
    if cpus < 1:
        raise ValueError(f"the CPU budget must be at least 1, got {cpus}")
    return REST_THREADS_PER_CPU * cpus


def format_fraction(fraction: float) -> str:
    """A fraction in (0, 1] as TF Serving's float flag, rounded down to 6 decimals.

    Rounded down so that fraction x GPU memory never exceeds the cap it came
    from; never 0, which TF Serving reads as "no limit".
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"a GPU memory fraction must be in (0, 1], got {fraction!r}")
    micro = round(fraction * _FRACTION_SCALE)
    if micro / _FRACTION_SCALE > fraction:
        micro -= 1
    if micro < 1:
        raise ValueError(f"GPU memory fraction {fraction!r} is below 1e-6")
    whole, part = divmod(micro, _FRACTION_SCALE)
    return f"{whole}.{part:06d}".rstrip("0") if part else f"{whole}.0"


def serving_argv(
    argv: Sequence[str],
    *,
    intra: int | None,
    inter: int | None,
    cpus: int,
    gpu_fraction: float | None,
) -> tuple[str, ...]:
    """argv with the plan's flags appended when argv[0] is tensorflow_model_server.

    Any other command comes back unchanged. `intra`/`inter` None = leave TF
    Serving's default; `cpus` is the CPU budget (>= 1); `gpu_fraction` is
    per_process_gpu_memory_fraction in (0, 1] or None.
    """
    command = tuple(argv)
    if not is_model_server(command):
        return command
    given = user_flags(command[1:])
    session_owned = bool(given & SESSION_CONFIG_FLAGS)
    wanted: list[tuple[str, str]] = []
    if not session_owned:
        for flag, value in ((INTRA_OP_FLAG, intra), (INTER_OP_FLAG, inter)):
            if value is not None:
                if value < 1:
                    raise ValueError(f"--{flag} must be at least 1, got {value}")
                wanted.append((flag, str(value)))
    wanted.append((REST_THREADS_FLAG, str(rest_api_threads(cpus))))
    if gpu_fraction is not None and not session_owned:
        wanted.append((GPU_FRACTION_FLAG, format_fraction(gpu_fraction)))
    return command + tuple(f"--{flag}={value}" for flag, value in wanted if flag not in given)


@frozen
class GpuMemoryFraction:
    """What --per_process_gpu_memory_fraction should be, and what it means."""

    #: None: no flag (no usable cap).
    fraction: float | None
    #: The GPU whose cap/total ratio was chosen.
    gpu: int | None
    #: One sentence each, for the entrypoint's report (may be empty).
    notes: tuple[str, ...]


def gpu_memory_fraction(
    caps_mb: Mapping[int, int], totals_mb: Mapping[int, int | None]
) -> GpuMemoryFraction:
    """The fraction for TF Serving from per-GPU caps (MB) and GPU sizes (MB).

    `caps_mb` and `totals_mb` are keyed by TensorFlow GPU index (after
    CUDA_VISIBLE_DEVICES); `totals_mb` lists every visible GPU (None = size
    unknown). TF Serving applies ONE fraction to every GPU, so with several
    capped GPUs the smallest cap/total ratio wins (no GPU goes over its cap;
    the others get less than theirs), and uncapped GPUs are limited too. A
    cap at or above its GPU's size is no cap. Ratios are rounded down to 6
    decimals and never below 1e-6 (0 would mean "no limit").
    """
    notes: list[str] = []
    ratios: dict[int, int] = {}  # index -> fraction in millionths
    for index, cap in sorted(caps_mb.items()):
        total = totals_mb.get(index)
        if not total or total < 1:
            notes.append(
                f"GPU {index}: its memory size is unknown, so its {cap} MB cap cannot be "
                "turned into TF Serving's memory fraction"
            )
        elif cap >= total:
            notes.append(f"GPU {index}: the {cap} MB cap is not below its {total} MB: no limit")
        else:
            ratios[index] = max(1, cap * _FRACTION_SCALE // total)
    if not ratios:
        return GpuMemoryFraction(None, None, tuple(notes))
    gpu = min(ratios, key=lambda index: (ratios[index], index))
    fraction = ratios[gpu] / _FRACTION_SCALE
    shown = format_fraction(fraction)
    others = sorted(set(totals_mb) - {gpu})
    if others:
        effects = []
        for index in others:
            size = totals_mb[index]
            share = f"{size * ratios[gpu] // _FRACTION_SCALE} MB" if size else "that share"
            wanted = caps_mb.get(index)
            instead = f" instead of {wanted} MB" if wanted is not None else " (no cap asked)"
            effects.append(f"GPU {index} gets {share}{instead}")
        notes.append(
            f"TF Serving applies one memory fraction to every GPU: {shown} (GPU {gpu}'s cap over "
            f"its size, the smallest ratio); {'; '.join(effects)}"
        )
    return GpuMemoryFraction(fraction, gpu, tuple(notes))
