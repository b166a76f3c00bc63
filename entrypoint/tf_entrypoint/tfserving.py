"""``tensorflow_model_server``: TF Serving's real binary, or ours.

TF Serving's binary runs no Python, so the plan reaches it as command-line
flags, appended only when the user did not pass the flag in any form
(``--a=1``, ``--a 1``, ``--a``); not the session flags when the user owns the
session configuration. ``--rest_api_num_threads`` is TF Serving's own 4 x CPUs
applied to the budget. Our own ``tensorflow_model_server`` (a console script,
recognised by its content, see :func:`is_our_server`) gets no flags: it is
``tf-entrypoint serve``, and its thread flags become the plan
(:func:`plan_flags`, with ``--per_process_gpu_memory_fraction``, which becomes
the plan's GPU memory caps). Pure but for :func:`find_command` and
:func:`is_our_server`. docs/configuration.md: "What is applied where" (TF Serving's
flags); docs/tf-serving.md: "TF Serving's command line".
"""

from __future__ import annotations

import os

from tf_entrypoint.frozen import frozen
from tf_entrypoint.plan import MemoryFraction
from tf_entrypoint.problems import Problem
from tf_entrypoint.server_flags import tokenize
from tf_entrypoint.settings import (
    INTER_OP,
    INTER_OP_ALIAS,
    INTRA_OP,
    INTRA_OP_ALIAS,
    parse_thread_count,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

SERVER = "tensorflow_model_server"
INTRA_OP_FLAG = "tensorflow_intra_op_parallelism"
INTER_OP_FLAG = "tensorflow_inter_op_parallelism"
REST_THREADS_FLAG = "rest_api_num_threads"
GPU_FRACTION_FLAG = "per_process_gpu_memory_fraction"
#: Flags by which the user takes over the session configuration.
SESSION_FLAG = "tensorflow_session_parallelism"
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


#: What our console script's file says (pip's and uv's script templates both
#: write ``from tf_entrypoint.cli import model_server_main``). A real binary, or
#: any other script, does not carry both.
OUR_SCRIPT_MARKERS = (b"tf_entrypoint.cli", b"model_server_main")
_HEAD_BYTES = 4096


def find_command(command: str, path: str) -> str | None:
    """The file execvp would run for `command` with PATH=`path`, or None."""
    if "/" in command:
        return command
    for directory in path.split(os.pathsep):
        candidate = os.path.join(directory or ".", command)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def is_our_server(file: str | None) -> bool:
    """True when `file` is our ``tensorflow_model_server`` console script."""
    if file is None:
        return False
    try:
        with open(file, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except OSError:
        return False
    return head.startswith(b"#!") and all(marker in head for marker in OUR_SCRIPT_MARKERS)


@frozen
class PlanFlags:
    """TF Serving's flags that the plan applies (threads, GPU memory), out of a command line."""

    #: The command line without them.
    args: tuple[str, ...]
    #: Variables to set before planning (the flags win over the environment).
    env: tuple[tuple[str, str], ...]
    #: One sentence each: what was overridden or ignored.
    notes: tuple[str, ...]
    #: --per_process_gpu_memory_fraction, for the plan (None: not given, or 0).
    fraction: MemoryFraction | None = None


#: The most characters read in a fraction, and the largest power of ten used.
_FRACTION_MAX_CHARS = 64
_FRACTION_MAX_EXPONENT = 64


def parse_gpu_fraction(spelling: str, raw: str) -> MemoryFraction | str | None:
    """--per_process_gpu_memory_fraction's value, exactly: None for 0 (TensorFlow's default).

    A decimal from 0 to 1 (``0.5``, ``.25``, ``1``, ``5e-1``); no sign, no
    nan/inf. A str is the usage error, naming the flag and the range.
    """
    text = raw.strip()
    expected = (
        "expected a number from 0 to 1: the share of each visible GPU's memory "
        "(e.g. 0.5; 0 leaves TensorFlow's default)"
    )
    mantissa, e, exponent = text.lower().partition("e")
    whole, _, decimals = mantissa.partition(".")
    digits = whole + decimals
    sign, unsigned = (exponent[:1], exponent[1:]) if exponent[:1] in "+-" else ("", exponent)
    well_formed = (
        0 < len(text) <= _FRACTION_MAX_CHARS
        and text.isascii()
        and digits.isdigit()
        and (not whole or whole.isdigit())
        and (not decimals or decimals.isdigit())
        and (not e or unsigned.isdigit())
    )
    if not well_formed:
        what = "negative" if text.startswith("-") else "not a number"
        return f"{spelling}={raw!r} is invalid ({what}): {expected}"
    # Powers beyond the limit change nothing: above it any non-zero value is
    # over 1, below it any value is under 1 MB of any GPU.
    power = min(int(unsigned) if e else 0, _FRACTION_MAX_EXPONENT)
    numerator, denominator = int(digits), 10 ** len(decimals)
    if sign == "-":
        denominator *= 10**power
    else:
        numerator *= 10**power
    if numerator > denominator:
        return (
            f"{spelling}={raw!r} is invalid (above 1; TensorFlow's over-subscription of GPU "
            f"memory through CUDA unified memory is not supported): {expected}"
        )
    if numerator == 0:
        return None
    return MemoryFraction(spelling, text, numerator, denominator)


def plan_flags(args: Sequence[str], env: Mapping[str, str]) -> PlanFlags | str:
    """Take TF Serving's plan flags out of `args`: their values become the plan's.

    ``--tensorflow_intra_op_parallelism`` / ``--tensorflow_inter_op_parallelism``
    set the intra-op / inter-op threads, as TF_INTRA_OP_PARALLELISM_THREADS /
    TF_INTER_OP_PARALLELISM_THREADS would (same rules; 0 = automatic, which
    leaves the variable or the CPU budget to decide); ``--tensorflow_session_parallelism``
    sets both, unless one of the other two is given (TF Serving's rule; all
    three at once is refused, as TF Serving does). ``--per_process_gpu_memory_fraction``
    becomes `fraction` (:func:`parse_gpu_fraction`), which the plan turns into
    per-GPU caps. ``--flag=N`` and ``--flag N``. A str is the usage error.
    """
    taken = _take_plan_flags(args)
    if isinstance(taken, str):
        return taken
    given, rest = taken
    fraction: MemoryFraction | None = None
    if GPU_FRACTION_FLAG in given:
        read = parse_gpu_fraction(f"--{GPU_FRACTION_FLAG}", given.pop(GPU_FRACTION_FLAG))
        if isinstance(read, str):
            return read
        fraction = read
    values: dict[str, int | None] = {}
    for flag, raw in given.items():
        parsed = parse_thread_count(f"--{flag}", raw)
        if isinstance(parsed, Problem):
            return str(parsed)
        values[flag] = parsed
    intra, inter = values.get(INTRA_OP_FLAG), values.get(INTER_OP_FLAG)
    session = values.get(SESSION_FLAG)
    notes: list[str] = []
    if intra and inter and session:
        return (
            f"give --{SESSION_FLAG} or --{INTRA_OP_FLAG} / --{INTER_OP_FLAG}, not all three "
            "(TF Serving refuses the same)"
        )
    if session and (intra or inter):
        notes.append(
            f"--{SESSION_FLAG}={session} is ignored: --{INTRA_OP_FLAG} or --{INTER_OP_FLAG} "
            "is given (TF Serving's rule)"
        )
    elif session:
        intra = inter = session
    overrides: list[tuple[str, str]] = []
    for value, flag, variable, alias in (
        (intra, INTRA_OP_FLAG, INTRA_OP, INTRA_OP_ALIAS),
        (inter, INTER_OP_FLAG, INTER_OP, INTER_OP_ALIAS),
    ):
        if not value:
            continue
        shown = f"--{flag}={value}" if flag in given else f"--{SESSION_FLAG}={value}"
        for name in (variable, alias):
            current = env.get(name, "")
            if current.strip() and current.strip() != str(value):
                notes.append(f"{shown} overrides {name}={current!r} from the environment")
            overrides.append((name, str(value)))
    return PlanFlags(tuple(rest), tuple(overrides), tuple(notes), fraction)


def _take_plan_flags(args: Sequence[str]) -> tuple[dict[str, str], list[str]] | str:
    """(thread flag -> raw value, the other arguments as written), or the usage error.

    The command line as server_flags.tokenize reads it (the server reads the
    rest with the same rules); the thread flags are the table's "plan" flags.
    """
    given: dict[str, str] = {}
    rest: list[str] = []
    for token in tokenize(args):
        if token.flag is None or token.flag.kind != "plan":
            rest.extend(token.args)
        elif token.value is None:
            return f"{token.spelling} needs a value ({token.spelling}=N or {token.spelling} N)"
        else:
            given[token.flag.name] = token.value
    return given, rest


def user_flags(args: Sequence[str]) -> frozenset[str]:
    """Names of the flags in args, as server_flags.tokenize reads them: '--a=1',
    '--a 1' and '--a' all give 'a'; '-a' is no flag (TF Serving's parser reads
    only '--', docs/tf-serving.md)."""
    return frozenset(token.spelling[2:] for token in tokenize(args) if token.spelling)


def rest_api_threads(cpus: int) -> int:
    """--rest_api_num_threads for a CPU budget: TF Serving's 4 x CPUs, on the budget."""
    return REST_THREADS_PER_CPU * cpus


def format_fraction(fraction: float) -> str:
    """A fraction in (0, 1] as TF Serving's float flag, rounded down to 6 decimals.

    Rounded down so that fraction x GPU memory never exceeds the cap it came
    from (gpu_memory_fraction never gives less than 1e-6, which would be 0:
    "no limit").
    """
    micro = round(fraction * _FRACTION_SCALE)
    if micro / _FRACTION_SCALE > fraction:
        micro -= 1
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
