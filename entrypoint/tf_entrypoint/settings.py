"""The variables tf-entrypoint reads: one table (name, parser, default, doc), parsed at once.

:func:`parse_settings` never raises: every invalid value is a Problem (all of
them, in table order) and the Settings are always usable (an invalid variable
gives its default). the README's table. Beyond its rules:

* Only ASCII whitespace around a value is ignored; a no-break space is reported.
* Empty means unset everywhere; an explicit thread count ``0`` is "automatic"
  and takes part in the alias check (two valid but different values: one
  Problem, automatic). ``ThreadSetting.variable`` is Rasa's name when both agree.
* ``TF_GPU_MEMORY_ALLOC`` with any Problem is unset as a whole.
* ``TF_ENTRYPOINT_CPUS`` takes ``.5`` and ``2.``, not ``1.5m`` or below 0.001;
  ``1500M``, ``1,5`` and ``1e3`` get hints. ``TF_ENTRYPOINT_CPU_LIMIT_MILLICORES``
  below 100 gets a Notice (the downward API without ``divisor: 1m``).
* Words are matched case-insensitively on ASCII only (no Kelvin-sign look-alikes).
"""

from __future__ import annotations

from tf_entrypoint.common import (
    FALSE_WORDS,
    ROUNDINGS,
    TRUE_WORDS,
    Rounding,
    digits_value,
    is_blank,
    is_decimal,
    is_digits,
    not_whole_reason,
    odd_space_reason,
    strip,
    word,
)
from tf_entrypoint.frozen import frozen
from tf_entrypoint.problems import Notice, Problem

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeAlias

    #: Where the TF_GPU_MEMORY_ALLOC helpers put the reason of each Problem.
    _ProblemSink: TypeAlias = Callable[[str], None]

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


@frozen
class ParsedSettings:
    """Settings plus what is wrong with the environment they came from."""

    #: Always usable: invalid variables fall back to their defaults here.
    settings: Settings
    #: Every invalid value, in the order of VARIABLES (then of entries).
    problems: tuple[Problem, ...]
    notices: tuple[Notice, ...]


# --- one variable each ------------------------------------------------------


def parse_bool(variable: str, raw: str) -> bool | Problem:
    """Parse a boolean: true/false, 1/0, yes/no, on/off, any case.

    ASCII whitespace around the value is ignored. An empty value is a Problem
    here (reason "empty"): what empty means differs per variable, so callers
    check :func:`is_blank` first.
    """
    text = strip(raw)
    if not text:
        return Problem(variable, raw, EXPECTED_BOOL, "empty")
    if word(text) in TRUE_WORDS:
        return True
    if word(text) in FALSE_WORDS:
        return False
    return Problem(variable, raw, EXPECTED_BOOL, odd_space_reason(text))


def parse_thread_count(variable: str, raw: str) -> int | Problem | None:
    """Parse a thread count: None = automatic (empty, whitespace or 0)."""
    text = strip(raw)
    if not text:
        return None
    if not is_digits(text):
        return Problem(variable, raw, EXPECTED_THREADS, not_whole_reason(text))
    value = digits_value(text)
    if value > MAX_THREADS:
        return Problem(variable, raw, EXPECTED_THREADS, f"more than {MAX_THREADS}")
    return value or None


def parse_rounding(variable: str, raw: str) -> Rounding | Problem:
    """Parse floor | ceil | nearest, any case; empty = floor."""
    text = strip(raw)
    if not text:
        return DEFAULT_ROUNDING
    for rounding in ROUNDINGS:
        if word(text) == rounding:
            return rounding
    return Problem(variable, raw, EXPECTED_ROUNDING, odd_space_reason(text))


def parse_cpus(variable: str, raw: str) -> float | Problem | None:
    """Parse a CPU count: a decimal ('1.5', '.5') or whole millicores ('1500m').

    None when empty. No sign, exponent, nan/inf, or decimal comma; at least one
    millicore (0.001) and at most MAX_CPUS, compared exactly on the digits.
    """
    text = strip(raw)
    if not text:
        return None
    reason = _cpus_syntax_reason(text)
    if reason is None:
        millicores = text.endswith("m")
        number = text[:-1] if millicores else text
        if millicores:
            thousandths, remainder = digits_value(number), False
        else:
            whole, _, fraction = number.partition(".")
            thousandths = digits_value(whole or "0") * 1000 + int(fraction[:3].ljust(3, "0"))
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
    if suffix == "M" and is_decimal(number):
        return "'M' means mega in Kubernetes quantities; millicores take a lowercase 'm'"
    if suffix == "m" and is_decimal(number) and not is_digits(number):
        return "millicores must be a whole number"
    if not is_decimal(number):
        return _cpus_format_reason(body)
    return "negative" if negative else None


def _cpus_format_reason(body: str) -> str:
    """Why a TF_ENTRYPOINT_CPUS value (sign removed) is not a number."""
    if body.isascii():
        lowered = body.lower()
        if lowered in ("nan", "inf", "infinity"):
            return "not a finite number"
        mantissa, e, exponent = lowered.partition("e")
        if e and is_decimal(mantissa) and is_digits(exponent.lstrip("+-")):
            return "exponent notation is not accepted"
        if body.count(",") == 1 and is_decimal(body.replace(",", ".")):
            return "use '.' as the decimal point"
    return odd_space_reason(body) or "not a number written with digits 0-9 and '.'"


def parse_cpu_limit_millicores(variable: str, raw: str) -> int | Problem | None:
    """Parse a positive whole number of millicores; None when empty."""
    text = strip(raw)
    if not text:
        return None

    def problem(reason: str) -> Problem:
        return Problem(variable, raw, EXPECTED_MILLICORES, reason)

    if text.endswith("m") and is_digits(text[:-1]):
        return problem("the value is already in millicores: drop the 'm'")
    if not is_digits(text):
        return problem(not_whole_reason(text))
    value = digits_value(text)
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
    entries = [strip(entry) for entry in raw.split(",")]
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
    id_text, _, mb_text = (strip(part) for part in entry.partition(":"))
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
    if is_digits(text):
        return digits_value(text)
    reason = not_whole_reason(text, f"{what} {text!r} in entry {entry!r}")
    if what == "MB" and is_digits(text[:1]) and text[-1:].isalpha():
        reason += "; write the number of MB without a unit"
    problem(reason)
    return None


# --- the table ------------------------------------------------------------------


@frozen
class Variable:
    """One variable: how it is read and how --help, explain and the README describe it."""

    name: str
    #: The accepted values, short (Markdown: `code` in backticks).
    accepted: str
    #: What happens when it is unset or empty.
    default: str
    #: What it does, one or two sentences (Markdown).
    doc: str
    #: (variable, raw) -> the value, a Problem or a list of Problems, for a
    #: value that is not blank. None: read elsewhere (the hook, TF_CONFIG's check).
    parse: Callable[[str, str], Any] | None = None
    #: The value when unset, blank or invalid.
    fallback: Any = None


#: What a thread variable holds when it gives no value (unset, blank or invalid).
_NO_VALUE = object()
_THREADS_ACCEPTED = f"whole number 0-{MAX_THREADS}; 0 or empty = automatic"
_BOOL_ACCEPTED = "true/false, yes/no, on/off, 1/0 (any case)"


def _alloc(variable: str, raw: str) -> tuple[tuple[int, int], ...] | list[Problem]:
    pairs, problems = parse_gpu_memory_alloc(variable, raw)
    return list(problems) if problems else pairs


#: Every variable a user sets, in the order problems are reported. The README's
#: table is this table (tests/unit/project/test_readme.py).
TABLE: tuple[Variable, ...] = (
    Variable(
        INTRA_OP,
        _THREADS_ACCEPTED,
        "automatic",
        "Threads TensorFlow uses inside one operation (e.g. a matrix multiply). "
        "Automatic sizes the pool to the container's CPU budget.",
        parse_thread_count,
        _NO_VALUE,
    ),
    Variable(
        INTRA_OP_ALIAS,
        f"as `{INTRA_OP}`",
        "automatic",
        f"TensorFlow's own name for `{INTRA_OP}`. If both are set they must agree.",
        parse_thread_count,
        _NO_VALUE,
    ),
    Variable(
        INTER_OP,
        _THREADS_ACCEPTED,
        "automatic",
        "Threads TensorFlow uses to run independent operations at the same time. "
        "Automatic sizes the pool to the container's CPU budget.",
        parse_thread_count,
        _NO_VALUE,
    ),
    Variable(
        INTER_OP_ALIAS,
        f"as `{INTER_OP}`",
        "automatic",
        f"TensorFlow's own name for `{INTER_OP}`. If both are set they must agree.",
        parse_thread_count,
        _NO_VALUE,
    ),
    Variable(
        ALLOW_GROWTH,
        _BOOL_ACCEPTED,
        "unset (TensorFlow's default: reserve up front)",
        "true: allocate GPU memory as it is needed instead of reserving nearly all "
        "of it at start-up; false: reserve it up front.",
        parse_bool,
    ),
    Variable(
        GPU_MEMORY_ALLOC,
        f"`ID:MB[, ID:MB ...]`, e.g. `0:1024, 1:2048` (ID 0-{MAX_GPU_ID}, "
        f"MB 1-{MAX_GPU_MEMORY_MB})",
        "unset (no limit)",
        "Limit the memory TensorFlow may use on each listed GPU, in MB (MiB). "
        "ID is the TensorFlow GPU index (0 = first visible GPU); it must be visible.",
        _alloc,
        (),
    ),
    Variable(
        CPUS,
        f"decimal 0.001-{MAX_CPUS} (`2`, `1.5`) or millicores (`1500m`)",
        "detected",
        "Override the CPU budget the thread pools are sized to, instead of "
        "detecting it from the container's cgroup limits and CPU set.",
        parse_cpus,
    ),
    Variable(
        CPU_ROUNDING,
        "floor, ceil, nearest (any case)",
        "floor",
        "How a fractional CPU budget (e.g. 1.5) becomes a whole number of threads.",
        parse_rounding,
        DEFAULT_ROUNDING,
    ),
    Variable(
        CPU_LIMIT_MILLICORES,
        f"whole number 1-{MAX_CPUS * 1000}",
        "unset",
        "The CPU limit as the Kubernetes downward API gives it "
        "(`resourceFieldRef: {resource: limits.cpu, divisor: 1m}`); "
        f"a hint for the CPU budget. `{CPUS}` wins over it.",
        parse_cpu_limit_millicores,
    ),
    Variable(
        QUIET,
        _BOOL_ACCEPTED,
        "false",
        "true: no summary line at hand-off. Warnings and configuration errors are still printed.",
        parse_bool,
        False,
    ),
    Variable(
        "TF_CONFIG",
        'JSON: `{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", '
        '"index": 0}}`',
        "unset (not distributed)",
        "The multi-worker cluster and this process's task, as Kubeflow's TFJob sets it for "
        "`MultiWorkerMirroredStrategy`. Checked before the command starts (JSON; the task's "
        "job is in the cluster, except `evaluator`; the index is in range; addresses are "
        "`host:port`; at most one chief and one evaluator), then passed on unchanged. Set but "
        "empty: a warning (TensorFlow cannot read it).",
    ),
    Variable(
        "TF_ENTRYPOINT_HOOK",
        "off/false/0/no to disable",
        "on",
        "The in-process hook (see [What is applied where]"
        "(docs/configuration.md#what-is-applied-where)). Read by the hook in every Python "
        "process; an unknown value keeps it on, with one warning when TensorFlow is imported.",
    ),
    Variable(
        "TF_ENTRYPOINT_HOOK_VERBOSE",
        "true/1/yes/on",
        "off",
        "The hook prints one line saying what it applied.",
    ),
)

#: The variables parse_settings reads, in table order.
VARIABLES: tuple[str, ...] = tuple(v.name for v in TABLE if v.parse is not None)


def plain(text: str) -> str:
    """A table cell for a terminal: no backticks, links as their text."""
    text = text.replace("`", "")
    while "](" in text:
        middle = text.index("](")
        start, end = text.rindex("[", 0, middle), text.index(")", middle)
        text = text[:start] + text[start + 1 : middle] + text[end + 1 :]
    return text


# --- everything ---------------------------------------------------------------


def _thread_setting(
    env: Mapping[str, str], values: dict[str, Any], name: str, alias: str
) -> tuple[ThreadSetting, Problem | None]:
    """One pool from Rasa's name and TensorFlow's alias: the setting, and a conflict."""
    valid = [(v, env[v], values[v]) for v in (name, alias) if values[v] is not _NO_VALUE]
    if not valid:
        return AUTOMATIC, None
    (variable, raw, value), *others = valid
    for other_variable, other_raw, other_value in others:
        if other_value != value:
            conflict = Problem(
                variable,
                raw,
                "the same number of threads in both (they are aliases), or only one of them set",
                f"conflicts with {other_variable}={other_raw!r}",
            )
            return AUTOMATIC, conflict
    return ThreadSetting(value, variable), None


def parse_settings(env: Mapping[str, str]) -> ParsedSettings:
    """Read every variable in VARIABLES from ``env``; never raises."""
    problems: list[Problem] = []
    values: dict[str, Any] = {}
    threads: dict[str, ThreadSetting] = {}
    for variable in TABLE:
        if variable.parse is None:
            continue
        name = variable.name
        raw = env.get(name)
        values[name] = variable.fallback
        if raw is not None and not is_blank(raw):
            parsed = variable.parse(name, raw)
            if isinstance(parsed, Problem):
                problems.append(parsed)
            elif isinstance(parsed, list):
                problems.extend(parsed)
            else:
                values[name] = parsed
        if name in (INTRA_OP_ALIAS, INTER_OP_ALIAS):
            rasa = INTRA_OP if name == INTRA_OP_ALIAS else INTER_OP
            threads[rasa], conflict = _thread_setting(env, values, rasa, name)
            problems.extend([conflict] if conflict else [])

    millicores = values[CPU_LIMIT_MILLICORES]
    notices: list[Notice] = []
    if millicores is not None and millicores < _SUSPICIOUS_MILLICORES:
        notices.append(
            Notice(
                CPU_LIMIT_MILLICORES,
                f"{millicores} millicores is only {millicores / 1000:g} "
                "CPUs; if it comes from the Kubernetes downward API, set divisor: 1m on its "
                "resourceFieldRef (without it Kubernetes gives whole CPUs, rounded up)",
            )
        )
    if values[CPUS] is not None and millicores is not None:
        notices.append(
            Notice(CPUS, f"overrides {CPU_LIMIT_MILLICORES}={env[CPU_LIMIT_MILLICORES]!r}")
        )

    settings = Settings(
        intra_op=threads[INTRA_OP],
        inter_op=threads[INTER_OP],
        allow_growth=values[ALLOW_GROWTH],
        gpu_memory_alloc=values[GPU_MEMORY_ALLOC],
        cpus_override=values[CPUS],
        cpu_rounding=values[CPU_ROUNDING],
        cpu_limit_millicores=millicores,
        quiet=values[QUIET],
    )
    return ParsedSettings(settings, tuple(problems), tuple(notices))
