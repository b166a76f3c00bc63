"""The user's settings: the environment variables tf-entrypoint reads, parsed.

:func:`parse_settings` turns an environment mapping into a :class:`ParsedSettings`
without any I/O and without ever raising: every invalid value becomes a
:class:`~entrypoint.problems.Problem` (all of them at once, in the order of
:data:`VARIABLES`), and the :class:`Settings` it returns are always usable,
with each invalid variable replaced by its default.

Decisions where the spec was silent (a demanding user's view):

* Whitespace: only ASCII whitespace (space, tab, CR, LF, VT, FF) around a value
  is ignored. A no-break space pasted from a web page is reported, not
  silently dropped; ``repr`` in the message shows it as ``'\\xa0'``.
* Empty means "not set" for every variable, including the thread counts: an
  empty ``TF_NUM_INTRAOP_THREADS`` (``ENV TF_NUM_INTRAOP_THREADS=`` in a base
  image, ``${VAR:-}`` in a compose file) never conflicts with its alias. An
  explicit ``0`` does take part: it is "automatic", which differs from ``4``.
* Thread aliases: a variable whose value is invalid is reported and then
  ignored, so its alias, if valid, still gives the value; two valid but
  different values are one Problem and the setting falls back to automatic
  (neither is trusted). When both agree, :attr:`ThreadSetting.variable` is
  Rasa's name.
* Numbers are written with the ASCII digits 0-9 only, no sign, no ``_``, no
  exponent; leading zeros are fine (``007`` is 7).
* ``TF_GPU_MEMORY_ALLOC``: every faulty entry is reported (an entry can give
  two Problems, e.g. ``-1:0``), and when there is any Problem the whole
  variable falls back to unset: a partial set of limits is never applied.
  MB is TensorFlow's unit for ``memory_limit`` (MiB, 2**20 bytes).
* ``TF_ENTRYPOINT_CPUS`` accepts ``.5`` and ``2.``, not ``1.5m`` (Kubernetes
  has no sub-millicore CPU) and nothing below one millicore, 0.001 CPUs.
  ``1500M`` gets a hint (``M`` is mega), so do ``1,5`` and ``1e3``.
* ``TF_ENTRYPOINT_CPU_LIMIT_MILLICORES`` rejects ``1500m`` with a hint (the
  value is already in millicores) and caps at 4096 CPUs like
  ``TF_ENTRYPOINT_CPUS``. Below 100 millicores is accepted with a Notice: it is
  almost always the downward API without ``divisor: 1m``, which gives whole
  CPUs rounded up (``2`` for a 1500m limit).
* Notices: besides the one above, a Notice says that ``TF_ENTRYPOINT_CPUS``
  wins when it and ``TF_ENTRYPOINT_CPU_LIMIT_MILLICORES`` are both valid.
* Booleans and roundings are matched case-insensitively on ASCII only, so
  look-alikes such as the Kelvin sign never match.
"""

from __future__ import annotations

from entrypoint.common import ROUNDINGS, Rounding
from entrypoint.frozen import frozen
from entrypoint.problems import Notice, Problem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import TypeAlias, TypeVar

    #: Where the TF_GPU_MEMORY_ALLOC helpers put the reason of each Problem.
    _ProblemSink: TypeAlias = Callable[[str], None]
    _T = TypeVar("_T")

__all__ = [
    "ALLOW_GROWTH",
    "AUTOMATIC",
    "CPUS",
    "CPU_LIMIT_MILLICORES",
    "CPU_ROUNDING",
    "DEFAULT_ROUNDING",
    "DEFAULT_SETTINGS",
    "DOCS",
    "GPU_MEMORY_ALLOC",
    "INTER_OP",
    "INTER_OP_ALIAS",
    "INTRA_OP",
    "INTRA_OP_ALIAS",
    "MAX_CPUS",
    "MAX_GPU_ID",
    "MAX_GPU_MEMORY_MB",
    "MAX_THREADS",
    "QUIET",
    "ROUNDINGS",
    "VARIABLES",
    "ParsedSettings",
    "Rounding",
    "Settings",
    "ThreadSetting",
    "VariableDoc",
    "is_blank",
    "parse_bool",
    "parse_cpu_limit_millicores",
    "parse_cpus",
    "parse_gpu_memory_alloc",
    "parse_rounding",
    "parse_settings",
    "parse_thread_count",
]

#: Upper bound for the thread-count variables. TensorFlow starts one OS thread
#: per unit in each pool, and no pool benefits from more threads than logical
#: CPUs; 1024 is above the logical CPU count of nearly every machine (a
#: two-socket server today has at most a few hundred) yet low enough to catch
#: typos and unit mix-ups (millicores such as 2000, or 10000 for 10) before they
#: run into a container's pids limit (often 1024-4096) as an obscure
#: "Resource temporarily unavailable" from pthread_create.
MAX_THREADS = 1024
#: Highest TensorFlow GPU index accepted in TF_GPU_MEMORY_ALLOC. No machine has
#: 1024 GPUs; a bigger number is a typo or a PCI/UUID mix-up.
MAX_GPU_ID = 1023
#: Largest per-GPU limit in TF_GPU_MEMORY_ALLOC: 16 TiB in MB (MiB). The
#: largest GPUs have a few hundred GB; this mainly catches limits given in
#: bytes or KB instead of MB.
MAX_GPU_MEMORY_MB = 16 * 1024 * 1024
#: Largest CPU budget accepted (TF_ENTRYPOINT_CPUS and, in millicores,
#: TF_ENTRYPOINT_CPU_LIMIT_MILLICORES): more CPUs than any single machine has,
#: so a bigger number is a mistake, typically millicores without the 'm'.
MAX_CPUS = 4096
#: Below this many millicores TF_ENTRYPOINT_CPU_LIMIT_MILLICORES gets a Notice
#: (likely the downward API without ``divisor: 1m``).
_SUSPICIOUS_MILLICORES = 100

DEFAULT_ROUNDING: Rounding = "floor"

INTRA_OP = "TF_INTRA_OP_PARALLELISM_THREADS"
INTRA_OP_ALIAS = "TF_NUM_INTRAOP_THREADS"
INTER_OP = "TF_INTER_OP_PARALLELISM_THREADS"
INTER_OP_ALIAS = "TF_NUM_INTEROP_THREADS"
ALLOW_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"
GPU_MEMORY_ALLOC = "TF_GPU_MEMORY_ALLOC"
CPUS = "TF_ENTRYPOINT_CPUS"
CPU_ROUNDING = "TF_ENTRYPOINT_CPU_ROUNDING"
CPU_LIMIT_MILLICORES = "TF_ENTRYPOINT_CPU_LIMIT_MILLICORES"
QUIET = "TF_ENTRYPOINT_QUIET"

# What each Problem says is expected: the accepted form, short.
EXPECTED_THREADS = f"a whole number from 0 to {MAX_THREADS} (0 or empty = automatic)"
EXPECTED_BOOL = "true/false, yes/no, on/off or 1/0 (any case)"
EXPECTED_GPU_MEMORY_ALLOC = (
    f"comma-separated ID:MB pairs such as '0:1024, 1:2048' "
    f"(ID = TensorFlow GPU index 0-{MAX_GPU_ID}, MB = 1-{MAX_GPU_MEMORY_MB})"
)
EXPECTED_CPUS = (
    f"a number of CPUs from 0.001 to {MAX_CPUS}, "
    "as a decimal ('2', '1.5') or in Kubernetes millicores ('1500m')"
)
EXPECTED_ROUNDING = "floor, ceil or nearest (any case; empty = floor)"
EXPECTED_MILLICORES = (
    f"a whole number of millicores from 1 to {MAX_CPUS * 1000} ('1500' = 1.5 CPUs)"
)


@frozen
class VariableDoc:
    """One variable as --help and the README describe it."""

    name: str
    #: The accepted values, short.
    accepted: str
    #: What happens when the variable is unset or empty.
    default: str
    #: What it does, one or two sentences.
    description: str


#: Every variable this module reads, in the order problems are reported.
DOCS: tuple[VariableDoc, ...] = (
    VariableDoc(
        INTRA_OP,
        f"whole number 0-{MAX_THREADS}; 0 or empty = automatic",
        "automatic",
        "Threads TensorFlow uses inside one operation (e.g. a matrix multiply). "
        "Automatic sizes the pool to the container's CPU budget.",
    ),
    VariableDoc(
        INTRA_OP_ALIAS,
        f"as {INTRA_OP}",
        "automatic",
        f"TensorFlow's own name for {INTRA_OP}. If both are set they must agree.",
    ),
    VariableDoc(
        INTER_OP,
        f"whole number 0-{MAX_THREADS}; 0 or empty = automatic",
        "automatic",
        "Threads TensorFlow uses to run independent operations at the same time. "
        "Automatic sizes the pool to the container's CPU budget.",
    ),
    VariableDoc(
        INTER_OP_ALIAS,
        f"as {INTER_OP}",
        "automatic",
        f"TensorFlow's own name for {INTER_OP}. If both are set they must agree.",
    ),
    VariableDoc(
        ALLOW_GROWTH,
        "true/false, yes/no, on/off, 1/0 (any case)",
        "unset (TensorFlow's default: reserve up front)",
        "true: allocate GPU memory as it is needed instead of reserving nearly all "
        "of it at start-up; false: reserve it up front.",
    ),
    VariableDoc(
        GPU_MEMORY_ALLOC,
        f"ID:MB[, ID:MB ...], e.g. 0:1024, 1:2048 (ID 0-{MAX_GPU_ID}, MB 1-{MAX_GPU_MEMORY_MB})",
        "unset (no limit)",
        "Limit the memory TensorFlow may use on each listed GPU, in MB (MiB). "
        "ID is the TensorFlow GPU index (0 = first visible GPU); it must be visible.",
    ),
    VariableDoc(
        CPUS,
        f"decimal 0.001-{MAX_CPUS} (2, 1.5) or millicores (1500m)",
        "detected",
        "Override the CPU budget the thread pools are sized to, instead of "
        "detecting it from the container's cgroup limits and CPU set.",
    ),
    VariableDoc(
        CPU_ROUNDING,
        "floor, ceil, nearest (any case)",
        "floor",
        "How a fractional CPU budget (e.g. 1.5) becomes a whole number of threads.",
    ),
    VariableDoc(
        CPU_LIMIT_MILLICORES,
        f"whole number 1-{MAX_CPUS * 1000}",
        "unset",
        "The CPU limit as the Kubernetes downward API gives it "
        "(resourceFieldRef: {resource: limits.cpu, divisor: 1m}); "
        f"a hint for the CPU budget. {CPUS} wins over it.",
    ),
    VariableDoc(
        QUIET,
        "true/false, yes/no, on/off, 1/0 (any case)",
        "false",
        "true: no summary line at hand-off. Warnings and configuration errors are still printed.",
    ),
)

#: Every environment variable this module reads.
VARIABLES: tuple[str, ...] = tuple(doc.name for doc in DOCS)


@frozen
class ThreadSetting:
    """A thread-pool size asked for by the user, or automatic."""

    #: None = automatic (unset, empty or 0), else 1..MAX_THREADS.
    value: int | None
    #: The variable that gave the value (for explanations); None when automatic
    #: because nothing valid was set.
    variable: str | None


AUTOMATIC = ThreadSetting(None, None)


@frozen
class Settings:
    """What the user asked for; every field has a usable value."""

    intra_op: ThreadSetting
    inter_op: ThreadSetting
    #: TF_FORCE_GPU_ALLOW_GROWTH; None = unset.
    allow_growth: bool | None
    #: TF_GPU_MEMORY_ALLOC as (TensorFlow GPU index, MB), in the order given
    #: (ids unique); () when unset. Whether the ids exist is checked later.
    gpu_memory_alloc: tuple[tuple[int, int], ...]
    #: TF_ENTRYPOINT_CPUS in CPUs; None = detect.
    cpus_override: float | None
    #: TF_ENTRYPOINT_CPU_ROUNDING.
    cpu_rounding: Rounding
    #: TF_ENTRYPOINT_CPU_LIMIT_MILLICORES (Kubernetes downward API hint).
    cpu_limit_millicores: int | None
    #: TF_ENTRYPOINT_QUIET.
    quiet: bool


DEFAULT_SETTINGS = Settings(
    intra_op=AUTOMATIC,
    inter_op=AUTOMATIC,
    allow_growth=None,
    gpu_memory_alloc=(),
    cpus_override=None,
    cpu_rounding=DEFAULT_ROUNDING,
    cpu_limit_millicores=None,
    quiet=False,
)


@frozen
class ParsedSettings:
    """Settings plus what is wrong with the environment they came from."""

    #: Always usable: invalid variables fall back to their defaults here.
    settings: Settings
    #: Every invalid value, in the order of VARIABLES (then of entries).
    problems: tuple[Problem, ...]
    notices: tuple[Notice, ...]


# --- small text helpers -------------------------------------------------------

_WHITESPACE = " \t\n\r\v\f"
_DIGITS = frozenset("0123456789")
#: Digit strings longer than this (after leading zeros) are not converted with
#: int() (which refuses more than 4300 digits); they are above every bound here.
_MAX_SIGNIFICANT_DIGITS = 18
_HUGE: int = 10**_MAX_SIGNIFICANT_DIGITS


def _strip(raw: str) -> str:
    return raw.strip(_WHITESPACE)


def is_blank(raw: str) -> bool:
    """True for an empty value or one of ASCII whitespace only ("unset")."""
    return not _strip(raw)


def _is_digits(text: str) -> bool:
    """Only ASCII 0-9, at least one (str.isdigit also accepts '١٢' and '²')."""
    return bool(text) and all(c in _DIGITS for c in text)


def _digits_value(text: str) -> int:
    """The value of an ASCII digit string, capped at _HUGE (see above)."""
    significant = text.lstrip("0")
    if len(significant) > _MAX_SIGNIFICANT_DIGITS:
        return _HUGE
    return int(significant or "0")


def _is_decimal(text: str) -> bool:
    """Digits with at most one '.', at least one digit: '2', '1.5', '.5', '2.'."""
    whole, _, fraction = text.partition(".")
    digits = whole + fraction
    return bool(digits) and all(c in _DIGITS for c in digits)


def _odd_space_reason(text: str) -> str:
    """A reason for a value with non-ASCII whitespace in it, else ''."""
    if any(c.isspace() and c not in _WHITESPACE for c in text):
        return "contains a non-ASCII space such as a no-break space"
    return ""


def _not_whole_reason(text: str, subject: str = "") -> str:
    """Why ``text`` failed the digits check, about ``subject`` when given."""
    is_ = f"{subject} is " if subject else ""
    if text.startswith("-") and _is_decimal(text[1:]):
        return f"{is_}negative"
    if odd := _odd_space_reason(text):
        return f"{subject} {odd}" if subject else odd
    return f"{is_}not a whole number written with digits 0-9"


# --- one variable each ------------------------------------------------------


def parse_bool(variable: str, raw: str) -> bool | Problem:
    """Parse a boolean: true/false, 1/0, yes/no, on/off, any case.

    ASCII whitespace around the value is ignored. An empty value is a Problem
    here (reason "empty"): what empty means differs per variable, so callers
    check :func:`is_blank` first.
    """
    text = _strip(raw)
    if not text:
        return Problem(variable, raw, EXPECTED_BOOL, "empty")
    if text.isascii():
        word = text.lower()
        if word in ("true", "1", "yes", "on"):
            return True
        if word in ("false", "0", "no", "off"):
            return False
    return Problem(variable, raw, EXPECTED_BOOL, _odd_space_reason(text))


def parse_thread_count(variable: str, raw: str) -> int | Problem | None:
    """Parse a thread count: None = automatic (empty, whitespace or 0)."""
    text = _strip(raw)
    if not text:
        return None
    if not _is_digits(text):
        return Problem(variable, raw, EXPECTED_THREADS, _not_whole_reason(text))
    value = _digits_value(text)
    if value > MAX_THREADS:
        return Problem(variable, raw, EXPECTED_THREADS, f"more than {MAX_THREADS}")
    return value or None


def parse_rounding(variable: str, raw: str) -> Rounding | Problem:
    """Parse floor | ceil | nearest, any case; empty = floor."""
    text = _strip(raw)
    if not text:
        return DEFAULT_ROUNDING
    if text.isascii():
        word = text.lower()
        for rounding in ROUNDINGS:
            if word == rounding:
                return rounding
    return Problem(variable, raw, EXPECTED_ROUNDING, _odd_space_reason(text))


def parse_cpus(variable: str, raw: str) -> float | Problem | None:
    """Parse a CPU count: a decimal ('1.5', '.5') or whole millicores ('1500m').

    None when empty. No sign, exponent, nan/inf, or decimal comma; at least one
    millicore (0.001) and at most MAX_CPUS, compared exactly on the digits.
    """
    text = _strip(raw)
    if not text:
        return None
    reason = _cpus_syntax_reason(text)
    if reason is None:
        millicores = text.endswith("m")
        number = text[:-1] if millicores else text
        if millicores:
            thousandths, remainder = _digits_value(number), False
        else:
            whole, _, fraction = number.partition(".")
            thousandths = _digits_value(whole or "0") * 1000 + int(fraction[:3].ljust(3, "0"))
            remainder = any(c != "0" for c in fraction[3:])
        if thousandths == 0:
            reason = "less than one millicore, 0.001" if remainder else "zero"
        elif thousandths > MAX_CPUS * 1000 or (thousandths == MAX_CPUS * 1000 and remainder):
            reason = f"more than {MAX_CPUS} CPUs"
        else:
            return thousandths / 1000 if millicores else float(number)
    return Problem(variable, raw, EXPECTED_CPUS, reason)


def _cpus_syntax_reason(text: str) -> str | None:
    """Why a stripped TF_ENTRYPOINT_CPUS value is not a CPU count, or None."""
    negative = text.startswith("-")
    body = text[1:] if negative else text
    suffix = body[-1:]
    number = body[:-1] if suffix in ("m", "M") else body
    if suffix == "M" and _is_decimal(number):
        return "'M' means mega in Kubernetes quantities; millicores take a lowercase 'm'"
    if suffix == "m" and _is_decimal(number) and not _is_digits(number):
        return "millicores must be a whole number"
    if not _is_decimal(number):
        return _cpus_format_reason(body)
    return "negative" if negative else None


def _cpus_format_reason(body: str) -> str:
    """Why a TF_ENTRYPOINT_CPUS value (sign removed) is not a number."""
    if body.isascii():
        lowered = body.lower()
        if lowered in ("nan", "inf", "infinity"):
            return "not a finite number"
        mantissa, e, exponent = lowered.partition("e")
        if e and _is_decimal(mantissa) and _is_digits(exponent.lstrip("+-")):
            return "exponent notation is not accepted"
        if body.count(",") == 1 and _is_decimal(body.replace(",", ".")):
            return "use '.' as the decimal point"
    return _odd_space_reason(body) or "not a number written with digits 0-9 and '.'"


def parse_cpu_limit_millicores(variable: str, raw: str) -> int | Problem | None:
    """Parse a positive whole number of millicores; None when empty."""
    text = _strip(raw)
    if not text:
        return None

    def problem(reason: str) -> Problem:
        return Problem(variable, raw, EXPECTED_MILLICORES, reason)

    if text.endswith("m") and _is_digits(text[:-1]):
        return problem("the value is already in millicores: drop the 'm'")
    if not _is_digits(text):
        return problem(_not_whole_reason(text))
    value = _digits_value(text)
    if value == 0:
        return problem("zero")
    if value > MAX_CPUS * 1000:
        return problem(f"more than {MAX_CPUS} CPUs")
    return value


def parse_gpu_memory_alloc(
    variable: str, raw: str
) -> tuple[tuple[tuple[int, int], ...], tuple[Problem, ...]]:
    """Parse ``ID:MB[, ID:MB ...]`` into ((id, MB), ...) and its Problems.

    Whitespace is allowed around every token. Each faulty entry gives its own
    Problem(s), whose reason quotes the entry. With any Problem the result is
    () (unset): limits are applied all together or not at all.
    """
    if is_blank(raw):
        return (), ()
    reasons: list[str] = []
    entries = [_strip(entry) for entry in raw.split(",")]
    pairs: list[tuple[int, int]] = []
    first_entry: dict[int, str] = {}
    for index, entry in enumerate(entries):
        if not entry:
            reasons.append(_empty_entry_reason(entries, index))
            continue
        gpu, mb = _parse_alloc_entry(entry, reasons.append)
        if gpu is None:
            continue
        if gpu in first_entry:
            reasons.append(f"GPU id {gpu} appears twice: {first_entry[gpu]!r} and {entry!r}")
            continue
        first_entry[gpu] = entry
        if mb is not None:
            pairs.append((gpu, mb))
    if reasons:
        return (), tuple(Problem(variable, raw, EXPECTED_GPU_MEMORY_ALLOC, r) for r in reasons)
    return tuple(pairs), ()


def _empty_entry_reason(entries: list[str], index: int) -> str:
    if index == len(entries) - 1:
        return "trailing comma: empty entry at the end"
    if index == 0:
        return "leading comma: empty entry at the start"
    return f"two commas in a row: empty entry after {entries[index - 1]!r}"


def _parse_alloc_entry(entry: str, problem: _ProblemSink) -> tuple[int | None, int | None]:
    """(GPU id, MB) of one non-empty entry; None for each part with a Problem."""
    colons = entry.count(":")
    if colons != 1:
        problem(
            f"entry {entry!r} has no ':' between GPU id and MB"
            if colons == 0
            else f"entry {entry!r} has more than one ':'; separate entries with ','"
        )
        return None, None
    id_text, _, mb_text = (_strip(part) for part in entry.partition(":"))
    gpu = _parse_entry_number(id_text, entry, "GPU id", problem)
    if gpu is not None and gpu > MAX_GPU_ID:
        problem(f"GPU id {id_text} in entry {entry!r} is more than {MAX_GPU_ID}")
        gpu = None
    mb = _parse_entry_number(mb_text, entry, "MB", problem)
    if mb == 0:
        problem(f"entry {entry!r} gives 0 MB; the minimum is 1")
        mb = None
    elif mb is not None and mb > MAX_GPU_MEMORY_MB:
        problem(f"{mb_text} MB in entry {entry!r} is more than 16 TiB; the unit is MB, not bytes")
        mb = None
    return gpu, mb


def _parse_entry_number(text: str, entry: str, what: str, problem: _ProblemSink) -> int | None:
    """A whole number in a TF_GPU_MEMORY_ALLOC entry, or None after a Problem."""
    if not text:
        where = "before" if what == "GPU id" else "after"
        problem(f"entry {entry!r} has no {what} {where} ':'")
        return None
    if _is_digits(text):
        return _digits_value(text)
    reason = _not_whole_reason(text, f"{what} {text!r} in entry {entry!r}")
    if what == "MB" and text[:1] in _DIGITS and text[-1:].isalpha():
        reason += "; write the number of MB without a unit"
    problem(reason)
    return None


# --- everything ---------------------------------------------------------------


def _thread_setting(
    env: Mapping[str, str], name: str, alias: str, problems: list[Problem]
) -> ThreadSetting:
    """One pool from Rasa's name and TensorFlow's alias (see module docstring)."""
    valid: list[tuple[str, str, int | None]] = []
    for variable in (name, alias):
        raw = env.get(variable)
        if raw is None or is_blank(raw):
            continue
        parsed = parse_thread_count(variable, raw)
        if isinstance(parsed, Problem):
            problems.append(parsed)
        else:
            valid.append((variable, raw, parsed))
    if not valid:
        return AUTOMATIC
    (variable, raw, value), *others = valid
    for other_variable, other_raw, other_value in others:
        if other_value != value:
            problems.append(
                Problem(
                    variable,
                    raw,
                    "the same number of threads in both (they are aliases), "
                    "or only one of them set",
                    f"conflicts with {other_variable}={other_raw!r}",
                )
            )
            return AUTOMATIC
    return ThreadSetting(value, variable)


def _parse_one(
    env: Mapping[str, str],
    variable: str,
    parse: Callable[[str, str], _T | Problem],
    default: _T,
    problems: list[Problem],
) -> _T:
    """``parse`` the variable unless unset or blank; its default after a Problem."""
    raw = env.get(variable)
    if raw is None or is_blank(raw):
        return default
    parsed = parse(variable, raw)
    if isinstance(parsed, Problem):
        problems.append(parsed)
        return default
    return parsed


def parse_settings(env: Mapping[str, str]) -> ParsedSettings:
    """Read every variable in VARIABLES from ``env``; never raises."""
    problems: list[Problem] = []
    notices: list[Notice] = []

    intra_op = _thread_setting(env, INTRA_OP, INTRA_OP_ALIAS, problems)
    inter_op = _thread_setting(env, INTER_OP, INTER_OP_ALIAS, problems)
    allow_growth = _parse_one(env, ALLOW_GROWTH, parse_bool, None, problems)
    gpu_memory_alloc: tuple[tuple[int, int], ...] = ()
    if (raw := env.get(GPU_MEMORY_ALLOC)) is not None:
        gpu_memory_alloc, alloc_problems = parse_gpu_memory_alloc(GPU_MEMORY_ALLOC, raw)
        problems.extend(alloc_problems)
    cpus_override = _parse_one(env, CPUS, parse_cpus, None, problems)
    cpu_rounding = _parse_one(env, CPU_ROUNDING, parse_rounding, DEFAULT_ROUNDING, problems)
    cpu_limit_millicores = _parse_one(
        env, CPU_LIMIT_MILLICORES, parse_cpu_limit_millicores, None, problems
    )
    quiet = _parse_one(env, QUIET, parse_bool, False, problems)

    if cpu_limit_millicores is not None and cpu_limit_millicores < _SUSPICIOUS_MILLICORES:
        notices.append(
            Notice(
                CPU_LIMIT_MILLICORES,
                f"{cpu_limit_millicores} millicores is only {cpu_limit_millicores / 1000:g} "
                "CPUs; if it comes from the Kubernetes downward API, set divisor: 1m on its "
                "resourceFieldRef (without it Kubernetes gives whole CPUs, rounded up)",
            )
        )
    if cpus_override is not None and cpu_limit_millicores is not None:
        notices.append(
            Notice(CPUS, f"overrides {CPU_LIMIT_MILLICORES}={env[CPU_LIMIT_MILLICORES]!r}")
        )

    settings = Settings(
        intra_op=intra_op,
        inter_op=inter_op,
        allow_growth=allow_growth,
        gpu_memory_alloc=gpu_memory_alloc,
        cpus_override=cpus_override,
        cpu_rounding=cpu_rounding,
        cpu_limit_millicores=cpu_limit_millicores,
        quiet=quiet,
    )
    return ParsedSettings(settings, tuple(problems), tuple(notices))
