"""Tests for tf_entrypoint.settings: every variable, every error kind, and properties."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tf_entrypoint.common import ROUNDINGS, is_blank
from tf_entrypoint.frozen import replace
from tf_entrypoint.problems import Notice, Problem
from tf_entrypoint.settings import (
    ALLOW_GROWTH,
    AUTOMATIC,
    CPU_LIMIT_MILLICORES,
    CPU_ROUNDING,
    CPUS,
    EXPECTED_THREADS,
    GPU_MEMORY_ALLOC,
    INTER_OP,
    INTER_OP_ALIAS,
    INTRA_OP,
    INTRA_OP_ALIAS,
    MAX_CPUS,
    MAX_GPU_ID,
    MAX_GPU_MEMORY_MB,
    MAX_THREADS,
    QUIET,
    TABLE,
    VARIABLES,
    ParsedSettings,
    Settings,
    ThreadSetting,
    parse_bool,
    parse_cpu_limit_millicores,
    parse_cpus,
    parse_gpu_memory_alloc,
    parse_rounding,
    parse_settings,
    parse_thread_count,
)

REPO = Path(__file__).resolve().parents[2]
THREAD_VARIABLES = (INTRA_OP, INTRA_OP_ALIAS, INTER_OP, INTER_OP_ALIAS)
#: (Rasa's name, TensorFlow's alias, the Settings field they set)
THREAD_PAIRS = ((INTRA_OP, INTRA_OP_ALIAS, "intra_op"), (INTER_OP, INTER_OP_ALIAS, "inter_op"))


def only(parsed: ParsedSettings) -> Problem:
    """The single Problem of ``parsed``."""
    assert len(parsed.problems) == 1, parsed.problems
    return parsed.problems[0]


#: What an empty environment gives (the table's fallbacks; spelled out below).
DEFAULT_SETTINGS = parse_settings({}).settings


def thread_setting(parsed: ParsedSettings, field: str) -> ThreadSetting:
    value = getattr(parsed.settings, field)
    assert isinstance(value, ThreadSetting)
    return value


# --- the variable list and its documentation ---------------------------------


def test_variables_are_the_documented_names_in_order() -> None:
    assert tuple(doc.name for doc in TABLE if doc.parse is not None) == VARIABLES
    assert len(set(VARIABLES)) == len(VARIABLES)
    assert VARIABLES == (
        "TF_INTRA_OP_PARALLELISM_THREADS",
        "TF_NUM_INTRAOP_THREADS",
        "TF_INTER_OP_PARALLELISM_THREADS",
        "TF_NUM_INTEROP_THREADS",
        "TF_FORCE_GPU_ALLOW_GROWTH",
        "TF_GPU_MEMORY_ALLOC",
        "TF_ENTRYPOINT_CPUS",
        "TF_ENTRYPOINT_CPU_ROUNDING",
        "TF_ENTRYPOINT_CPU_LIMIT_MILLICORES",
        "TF_ENTRYPOINT_QUIET",
    )
    for doc in TABLE:
        assert doc.accepted
        assert doc.default
        assert doc.doc.endswith(".")
        assert "|" not in doc.accepted + doc.default + doc.doc  # Markdown tables


class RecordingEnv(Mapping[str, str]):
    """An environment that remembers which names were looked up."""

    def __init__(self, values: dict[str, str]) -> None:
        self.data = values
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("parse_settings must not scan the whole environment")

    def __len__(self) -> int:
        return len(self.data)


def test_reads_exactly_the_listed_variables() -> None:
    env = RecordingEnv(dict.fromkeys(VARIABLES, "1"))
    env.data[GPU_MEMORY_ALLOC] = "0:1"
    parse_settings(env)
    assert env.read == set(VARIABLES)


def test_empty_environment_gives_the_defaults() -> None:
    assert parse_settings({}) == ParsedSettings(DEFAULT_SETTINGS, (), ())
    assert (
        Settings(
            intra_op=ThreadSetting(None, None),
            inter_op=ThreadSetting(None, None),
            allow_growth=None,
            gpu_memory_alloc=(),
            cpus_override=None,
            cpu_rounding="floor",
            cpu_limit_millicores=None,
            quiet=False,
        )
        == DEFAULT_SETTINGS
    )


def test_other_variables_are_ignored() -> None:
    env = {"PATH": "/bin", "TF_CPP_MIN_LOG_LEVEL": "x", "TF_ENTRYPOINT_CPU": "nonsense"}
    assert parse_settings(env) == ParsedSettings(DEFAULT_SETTINGS, (), ())


@pytest.mark.parametrize("value", ["", " ", "\t\n\r\v\f "])
def test_empty_or_whitespace_is_unset_for_every_variable(value: str) -> None:
    assert parse_settings(dict.fromkeys(VARIABLES, value)) == ParsedSettings(
        DEFAULT_SETTINGS, (), ()
    )


@pytest.mark.parametrize(
    ("raw", "blank"),
    [("", True), (" \t\n", True), ("\xa0", False), ("0", False), (" x ", False)],
)
def test_is_blank(raw: str, blank: bool) -> None:
    assert is_blank(raw) is blank


# --- thread counts ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("1", 1),
        ("4", 4),
        (" 4 ", 4),
        ("\t16\n", 16),
        ("007", 7),
        (str(MAX_THREADS), MAX_THREADS),
        ("0", None),
        (" 000 ", None),
    ],
)
def test_thread_count_valid(raw: str, value: int | None) -> None:
    for name, alias, field in THREAD_PAIRS:
        for variable in (name, alias):
            parsed = parse_settings({variable: raw})
            assert parsed.problems == ()
            # An explicit 0 is automatic but still names the variable that said so.
            assert thread_setting(parsed, field) == ThreadSetting(value, variable)
            assert parse_thread_count(variable, raw) == value


@pytest.mark.parametrize("raw", ["", "   ", "\t\n"])
def test_thread_count_empty_is_automatic_from_nothing(raw: str) -> None:
    assert parse_thread_count(INTRA_OP, raw) is None
    assert parse_settings({INTRA_OP: raw}).settings.intra_op == AUTOMATIC


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("-1", "negative"),
        (" -4 ", "negative"),
        ("-0", "negative"),
        ("1.0", "not a whole number written with digits 0-9"),
        ("1e3", "not a whole number written with digits 0-9"),
        ("0x10", "not a whole number written with digits 0-9"),
        ("+3", "not a whole number written with digits 0-9"),
        ("1_000", "not a whole number written with digits 0-9"),
        ("\u0661\u0662", "not a whole number written with digits 0-9"),  # Arabic-Indic 12
        ("\uff14", "not a whole number written with digits 0-9"),  # fullwidth 4
        ("\u00b2", "not a whole number written with digits 0-9"),  # superscript 2
        ("1 2", "not a whole number written with digits 0-9"),
        ("four", "not a whole number written with digits 0-9"),
        ("4\x00", "not a whole number written with digits 0-9"),
        ("4\xa0", "contains a non-ASCII space such as a no-break space"),
        ("\u20034", "contains a non-ASCII space such as a no-break space"),
        (str(MAX_THREADS + 1), f"more than {MAX_THREADS}"),
        ("99999999999999999999999999", f"more than {MAX_THREADS}"),
        ("9" * 5000, f"more than {MAX_THREADS}"),  # beyond int()'s 4300-digit limit
    ],
)
def test_thread_count_invalid(raw: str, reason: str) -> None:
    for variable in THREAD_VARIABLES:
        expected = Problem(variable, raw, EXPECTED_THREADS, reason)
        assert parse_thread_count(variable, raw) == expected
        parsed = parse_settings({variable: raw})
        assert parsed.problems == (expected,)
        assert parsed.settings == DEFAULT_SETTINGS


def test_thread_count_messages() -> None:
    assert str(only(parse_settings({INTRA_OP: "-1"}))) == (
        "TF_INTRA_OP_PARALLELISM_THREADS='-1' is invalid (negative): "
        "expected a whole number from 0 to 1024 (0 or empty = automatic)"
    )
    assert str(only(parse_settings({INTER_OP_ALIAS: "2.5"}))) == (
        "TF_NUM_INTEROP_THREADS='2.5' is invalid (not a whole number written with digits "
        "0-9): expected a whole number from 0 to 1024 (0 or empty = automatic)"
    )


@dataclass(frozen=True)
class AliasCase:
    """Rasa's name set to ``rasa``, TensorFlow's alias to ``tf`` (None = unset)."""

    rasa: str | None
    tf: str | None
    value: int | None
    #: Which variable ThreadSetting names: "rasa", "tf" or None.
    source: str | None
    #: How many of the two values are invalid on their own.
    invalid: int = 0
    conflict: bool = False


ALIAS_CASES = [
    AliasCase("4", None, 4, "rasa"),
    AliasCase(None, "4", 4, "tf"),
    AliasCase("4", "4", 4, "rasa"),
    AliasCase(" 4", "4", 4, "rasa"),
    AliasCase("04", "4\n", 4, "rasa"),
    AliasCase("0", "0", None, "rasa"),
    AliasCase("0", "", None, "rasa"),
    AliasCase("", "4", 4, "tf"),  # empty is unset: no conflict
    AliasCase("4", "   ", 4, "rasa"),
    AliasCase("", "", None, None),
    AliasCase("0", "4", None, None, conflict=True),  # automatic counts as 0
    AliasCase("4", "0", None, None, conflict=True),
    AliasCase("4", "8", None, None, conflict=True),
    AliasCase("abc", "4", 4, "tf", invalid=1),  # the invalid one is ignored after its Problem
    AliasCase("4", "-1", 4, "rasa", invalid=1),
    AliasCase("abc", "-1", None, None, invalid=2),
]


@pytest.mark.parametrize(("name", "alias", "field"), THREAD_PAIRS)
@pytest.mark.parametrize("case", ALIAS_CASES, ids=repr)
def test_thread_aliases(name: str, alias: str, field: str, case: AliasCase) -> None:
    env = {k: v for k, v in ((name, case.rasa), (alias, case.tf)) if v is not None}
    parsed = parse_settings(env)
    variable = {"rasa": name, "tf": alias, None: None}[case.source]
    assert thread_setting(parsed, field) == ThreadSetting(case.value, variable)
    assert len(parsed.problems) == case.invalid + case.conflict
    if case.conflict:
        problem = only(parsed)
        assert (problem.variable, problem.value) == (name, case.rasa)
        assert problem.reason == f"conflicts with {alias}={case.tf!r}"
    assert parsed.notices == ()


def test_thread_alias_conflict_message_names_both() -> None:
    parsed = parse_settings({INTRA_OP: "4", INTRA_OP_ALIAS: "8"})
    assert str(only(parsed)) == (
        "TF_INTRA_OP_PARALLELISM_THREADS='4' is invalid "
        "(conflicts with TF_NUM_INTRAOP_THREADS='8'): expected the same number of threads "
        "in both (they are aliases), or only one of them set"
    )


def test_thread_pools_are_independent() -> None:
    parsed = parse_settings({INTRA_OP_ALIAS: "6", INTER_OP: "2"})
    assert parsed.settings.intra_op == ThreadSetting(6, INTRA_OP_ALIAS)
    assert parsed.settings.inter_op == ThreadSetting(2, INTER_OP)
    assert parsed.problems == ()


# --- booleans --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        *[(word, True) for word in ("true", "1", "yes", "on", "TRUE", "True", "YeS", "ON")],
        *[(word, False) for word in ("false", "0", "no", "off", "FALSE", "No", "oFF")],
        (" true ", True),
        ("\toff\n", False),
    ],
)
def test_bool_valid(raw: str, value: bool) -> None:
    assert parse_bool("X", raw) is value
    parsed = parse_settings({ALLOW_GROWTH: raw, QUIET: raw})
    assert parsed.problems == ()
    assert parsed.settings.allow_growth is value
    assert parsed.settings.quiet is value


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("2", ""),
        ("t", ""),
        ("y", ""),
        ("enable", ""),
        ("truee", ""),
        ("true false", ""),
        ("-1", ""),
        ("\u0074\u0072\u0075\u0065\u0307", ""),  # 'true' with a combining dot
        ("\uff54rue", ""),  # fullwidth t
        ("\xa0true", "contains a non-ASCII space such as a no-break space"),
        ("", "empty"),
        ("  ", "empty"),
    ],
)
def test_parse_bool_invalid(raw: str, reason: str) -> None:
    expected = "true/false, yes/no, on/off or 1/0 (any case)"
    assert parse_bool("SOME_FLAG", raw) == Problem("SOME_FLAG", raw, expected, reason)


def test_bool_empty_means_unset_or_false() -> None:
    parsed = parse_settings({ALLOW_GROWTH: "", QUIET: " "})
    assert (parsed.settings.allow_growth, parsed.settings.quiet) == (None, False)
    assert parsed.problems == ()


def test_bool_messages() -> None:
    parsed = parse_settings({ALLOW_GROWTH: "maybe", QUIET: "yes please"})
    assert [str(p) for p in parsed.problems] == [
        "TF_FORCE_GPU_ALLOW_GROWTH='maybe' is invalid: "
        "expected true/false, yes/no, on/off or 1/0 (any case)",
        "TF_ENTRYPOINT_QUIET='yes please' is invalid: "
        "expected true/false, yes/no, on/off or 1/0 (any case)",
    ]
    assert (parsed.settings.allow_growth, parsed.settings.quiet) == (None, False)


# --- TF_GPU_MEMORY_ALLOC ---------------------------------------------------------


EXPECTED_ALLOC = (
    "comma-separated ID:MB pairs such as '0:1024, 1:2048' "
    "(ID = TensorFlow GPU index 0-1023, MB = 1-16777216)"
)


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("0:1024", ((0, 1024),)),
        ("0:1024, 1:2048", ((0, 1024), (1, 2048))),
        ("0:1024,1:2048", ((0, 1024), (1, 2048))),
        (" 1 : 2048 ,\t0:1024 \n", ((1, 2048), (0, 1024))),  # order kept
        ("00:0100", ((0, 100),)),
        (f"{MAX_GPU_ID}:{MAX_GPU_MEMORY_MB}", ((MAX_GPU_ID, MAX_GPU_MEMORY_MB),)),
        ("3:1", ((3, 1),)),  # ids are not checked against the visible GPUs here
        ("", ()),
        (" \t ", ()),
    ],
)
def test_gpu_memory_alloc_valid(raw: str, value: tuple[tuple[int, int], ...]) -> None:
    assert parse_gpu_memory_alloc(GPU_MEMORY_ALLOC, raw) == (value, ())
    parsed = parse_settings({GPU_MEMORY_ALLOC: raw})
    assert parsed.problems == ()
    assert parsed.settings.gpu_memory_alloc == value


@pytest.mark.parametrize(
    ("raw", "reasons"),
    [
        ("0:1024,", ["trailing comma: empty entry at the end"]),
        ("0:1024, ", ["trailing comma: empty entry at the end"]),
        (",0:1024", ["leading comma: empty entry at the start"]),
        ("0:1024,,1:2048", ["two commas in a row: empty entry after '0:1024'"]),
        (
            ",",
            ["leading comma: empty entry at the start", "trailing comma: empty entry at the end"],
        ),
        ("1024", ["entry '1024' has no ':' between GPU id and MB"]),
        ("0:1024, 2048", ["entry '2048' has no ':' between GPU id and MB"]),
        ("0:1:1024", ["entry '0:1:1024' has more than one ':'; separate entries with ','"]),
        (
            "0:1024;1:2048",
            ["entry '0:1024;1:2048' has more than one ':'; separate entries with ','"],
        ),
        (":1024", ["entry ':1024' has no GPU id before ':'"]),
        ("0:", ["entry '0:' has no MB after ':'"]),
        (
            "1.5:1024",
            ["GPU id '1.5' in entry '1.5:1024' is not a whole number written with digits 0-9"],
        ),
        ("0:1.5", ["MB '1.5' in entry '0:1.5' is not a whole number written with digits 0-9"]),
        ("0:1e3", ["MB '1e3' in entry '0:1e3' is not a whole number written with digits 0-9"]),
        (
            "gpu0:1024",
            ["GPU id 'gpu0' in entry 'gpu0:1024' is not a whole number written with digits 0-9"],
        ),
        (
            "0:1GB",
            [
                "MB '1GB' in entry '0:1GB' is not a whole number written with digits 0-9; "
                "write the number of MB without a unit"
            ],
        ),
        ("-1:1024", ["GPU id '-1' in entry '-1:1024' is negative"]),
        ("0:-5", ["MB '-5' in entry '0:-5' is negative"]),
        (
            "0:1024\xa0",
            [
                "MB '1024\\xa0' in entry '0:1024\\xa0' contains a non-ASCII space "
                "such as a no-break space"
            ],
        ),
        ("0:0", ["entry '0:0' gives 0 MB; the minimum is 1"]),
        (
            "-1:0",  # one entry, two mistakes
            [
                "GPU id '-1' in entry '-1:0' is negative",
                "entry '-1:0' gives 0 MB; the minimum is 1",
            ],
        ),
        (f"{MAX_GPU_ID + 1}:1", [f"GPU id 1024 in entry '1024:1' is more than {MAX_GPU_ID}"]),
        (
            "0:4294967296",
            [
                "4294967296 MB in entry '0:4294967296' is more than 16 TiB; "
                "the unit is MB, not bytes"
            ],
        ),
        ("0:1024, 0:2048", ["GPU id 0 appears twice: '0:1024' and '0:2048'"]),
        ("0:1024, 00:2048", ["GPU id 0 appears twice: '0:1024' and '00:2048'"]),
        (
            "0:1024, 0:2048, 0:1",
            [
                "GPU id 0 appears twice: '0:1024' and '0:2048'",
                "GPU id 0 appears twice: '0:1024' and '0:1'",
            ],
        ),
        (
            "0:1024,, 1, 2:3:4, -1:0, 0:7",
            [
                "two commas in a row: empty entry after '0:1024'",
                "entry '1' has no ':' between GPU id and MB",
                "entry '2:3:4' has more than one ':'; separate entries with ','",
                "GPU id '-1' in entry '-1:0' is negative",
                "entry '-1:0' gives 0 MB; the minimum is 1",
                "GPU id 0 appears twice: '0:1024' and '0:7'",
            ],
        ),
    ],
)
def test_gpu_memory_alloc_invalid(raw: str, reasons: list[str]) -> None:
    expected = tuple(Problem(GPU_MEMORY_ALLOC, raw, EXPECTED_ALLOC, r) for r in reasons)
    assert parse_gpu_memory_alloc(GPU_MEMORY_ALLOC, raw) == ((), expected)
    parsed = parse_settings({GPU_MEMORY_ALLOC: raw})
    assert parsed.problems == expected
    assert parsed.settings.gpu_memory_alloc == ()  # all or nothing


def test_gpu_memory_alloc_message() -> None:
    assert str(only(parse_settings({GPU_MEMORY_ALLOC: "0:1024,"}))) == (
        "TF_GPU_MEMORY_ALLOC='0:1024,' is invalid (trailing comma: empty entry at the end): "
        "expected comma-separated ID:MB pairs such as '0:1024, 1:2048' "
        "(ID = TensorFlow GPU index 0-1023, MB = 1-16777216)"
    )


# --- TF_ENTRYPOINT_CPUS ----------------------------------------------------------


EXPECTED_CPUS_TEXT = (
    "a number of CPUs from 0.001 to 4096, as a decimal ('2', '1.5') "
    "or in Kubernetes millicores ('1500m')"
)


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("2", 2.0),
        ("1.5", 1.5),
        ("0.25", 0.25),
        (" 1500m ", 1.5),
        ("250m", 0.25),
        ("1m", 0.001),
        ("0.001", 0.001),
        (".5", 0.5),
        ("2.", 2.0),
        ("002.500", 2.5),
        ("0.0010000", 0.001),
        ("4096", 4096.0),
        ("4096.000", 4096.0),
        ("4096000m", 4096.0),
        ("", None),
        ("  ", None),
    ],
)
def test_cpus_valid(raw: str, value: float | None) -> None:
    assert parse_cpus(CPUS, raw) == value
    parsed = parse_settings({CPUS: raw})
    assert parsed.problems == ()
    assert parsed.settings.cpus_override == value


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("0", "zero"),
        ("0.0", "zero"),
        ("0m", "zero"),
        ("-0", "negative"),
        ("-1", "negative"),
        ("-1.5", "negative"),
        ("-500m", "negative"),
        ("0.0009", "less than one millicore, 0.001"),
        ("0.00000000000000000001", "less than one millicore, 0.001"),
        ("4096.0001", "more than 4096 CPUs"),
        ("4097", "more than 4096 CPUs"),
        ("4096001m", "more than 4096 CPUs"),
        ("9" * 5000, "more than 4096 CPUs"),
        ("nan", "not a finite number"),
        ("NaN", "not a finite number"),
        ("inf", "not a finite number"),
        ("-Infinity", "not a finite number"),
        ("1e3", "exponent notation is not accepted"),
        ("1.5E-2", "exponent notation is not accepted"),
        ("1,5", "use '.' as the decimal point"),
        ("1.5m", "millicores must be a whole number"),
        ("1500M", "'M' means mega in Kubernetes quantities; millicores take a lowercase 'm'"),
        ("+2", "not a number written with digits 0-9 and '.'"),
        ("1.2.3", "not a number written with digits 0-9 and '.'"),
        ("two", "not a number written with digits 0-9 and '.'"),
        ("2 cpus", "not a number written with digits 0-9 and '.'"),
        ("1500 m", "not a number written with digits 0-9 and '.'"),
        ("2k", "not a number written with digits 0-9 and '.'"),
        (".", "not a number written with digits 0-9 and '.'"),
        ("m", "not a number written with digits 0-9 and '.'"),
        ("-", "not a number written with digits 0-9 and '.'"),
        ("\u0662", "not a number written with digits 0-9 and '.'"),
        ("1_000", "not a number written with digits 0-9 and '.'"),
        ("2\xa0", "contains a non-ASCII space such as a no-break space"),
    ],
)
def test_cpus_invalid(raw: str, reason: str) -> None:
    expected = Problem(CPUS, raw, EXPECTED_CPUS_TEXT, reason)
    assert parse_cpus(CPUS, raw) == expected
    parsed = parse_settings({CPUS: raw})
    assert parsed.problems == (expected,)
    assert parsed.settings.cpus_override is None


def test_cpus_message() -> None:
    assert str(only(parse_settings({CPUS: "1500M"}))) == (
        "TF_ENTRYPOINT_CPUS='1500M' is invalid ('M' means mega in Kubernetes quantities; "
        "millicores take a lowercase 'm'): expected a number of CPUs from 0.001 to 4096, "
        "as a decimal ('2', '1.5') or in Kubernetes millicores ('1500m')"
    )


# --- TF_ENTRYPOINT_CPU_ROUNDING --------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("floor", "floor"),
        ("ceil", "ceil"),
        ("nearest", "nearest"),
        ("CEIL", "ceil"),
        (" Nearest\n", "nearest"),
        ("", "floor"),
        ("  ", "floor"),
    ],
)
def test_rounding_valid(raw: str, value: str) -> None:
    assert parse_rounding(CPU_ROUNDING, raw) == value
    parsed = parse_settings({CPU_ROUNDING: raw})
    assert parsed.problems == ()
    assert parsed.settings.cpu_rounding == value


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("round", ""),
        ("up", ""),
        ("floor ceil", ""),
        ("\uff46loor", ""),  # fullwidth f
        ("floor\xa0", "contains a non-ASCII space such as a no-break space"),
    ],
)
def test_rounding_invalid(raw: str, reason: str) -> None:
    expected = Problem(
        CPU_ROUNDING, raw, "floor, ceil or nearest (any case; empty = floor)", reason
    )
    assert parse_rounding(CPU_ROUNDING, raw) == expected
    parsed = parse_settings({CPU_ROUNDING: raw})
    assert parsed.problems == (expected,)
    assert parsed.settings.cpu_rounding == "floor"


def test_roundings() -> None:
    assert ROUNDINGS == ("floor", "ceil", "nearest")


# --- TF_ENTRYPOINT_CPU_LIMIT_MILLICORES ------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [("1500", 1500), (" 250\n", 250), ("100", 100), ("0100", 100), ("4096000", 4096000)],
)
def test_millicores_valid(raw: str, value: int) -> None:
    assert parse_cpu_limit_millicores(CPU_LIMIT_MILLICORES, raw) == value
    parsed = parse_settings({CPU_LIMIT_MILLICORES: raw})
    assert parsed == ParsedSettings(replace(DEFAULT_SETTINGS, cpu_limit_millicores=value), (), ())


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("0", "zero"),
        ("000", "zero"),
        ("-1", "negative"),
        ("1500m", "the value is already in millicores: drop the 'm'"),
        ("1.5", "not a whole number written with digits 0-9"),
        ("1e3", "not a whole number written with digits 0-9"),
        ("1.5k", "not a whole number written with digits 0-9"),
        ("4096001", "more than 4096 CPUs"),
        ("9" * 5000, "more than 4096 CPUs"),
    ],
)
def test_millicores_invalid(raw: str, reason: str) -> None:
    expected = Problem(
        CPU_LIMIT_MILLICORES,
        raw,
        "a whole number of millicores from 1 to 4096000 ('1500' = 1.5 CPUs)",
        reason,
    )
    assert parse_cpu_limit_millicores(CPU_LIMIT_MILLICORES, raw) == expected
    parsed = parse_settings({CPU_LIMIT_MILLICORES: raw})
    assert parsed.problems == (expected,)
    assert parsed.settings.cpu_limit_millicores is None


def test_millicores_without_divisor_gets_a_notice() -> None:
    parsed = parse_settings({CPU_LIMIT_MILLICORES: "2"})
    assert parsed.problems == ()
    assert parsed.settings.cpu_limit_millicores == 2
    assert parsed.notices == (
        Notice(
            CPU_LIMIT_MILLICORES,
            "2 millicores is only 0.002 CPUs; if it comes from the Kubernetes downward API, "
            "set divisor: 1m on its resourceFieldRef (without it Kubernetes gives whole CPUs, "
            "rounded up)",
        ),
    )
    assert parse_settings({CPU_LIMIT_MILLICORES: "99"}).notices != ()
    assert parse_settings({CPU_LIMIT_MILLICORES: "100"}).notices == ()


def test_cpus_override_wins_over_millicores_with_a_notice() -> None:
    parsed = parse_settings({CPUS: "2", CPU_LIMIT_MILLICORES: "1500"})
    assert (parsed.settings.cpus_override, parsed.settings.cpu_limit_millicores) == (2.0, 1500)
    assert parsed.problems == ()
    assert [str(n) for n in parsed.notices] == [
        "TF_ENTRYPOINT_CPUS: overrides TF_ENTRYPOINT_CPU_LIMIT_MILLICORES='1500'"
    ]
    # No notice when either is invalid: the Problem says enough.
    assert parse_settings({CPUS: "x", CPU_LIMIT_MILLICORES: "1500"}).notices == ()
    assert parse_settings({CPUS: "2", CPU_LIMIT_MILLICORES: "x"}).notices == ()


# --- everything at once ----------------------------------------------------------

ALL_BAD = {
    INTRA_OP: "many",
    INTRA_OP_ALIAS: "-2",
    INTER_OP: "1.5",
    INTER_OP_ALIAS: "2000",
    ALLOW_GROWTH: "sometimes",
    GPU_MEMORY_ALLOC: "0:1024,",
    CPUS: "0",
    CPU_ROUNDING: "up",
    CPU_LIMIT_MILLICORES: "1.5",
    QUIET: "shh",
}


def test_all_problems_are_reported_at_once_in_variable_order() -> None:
    # dict order must not matter: build the environment in reverse
    env = dict(reversed(list(ALL_BAD.items())))
    parsed = parse_settings(env)
    assert tuple(p.variable for p in parsed.problems) == VARIABLES
    assert all(p.value == ALL_BAD[p.variable] for p in parsed.problems)
    assert parsed.settings == DEFAULT_SETTINGS
    assert parsed.notices == ()


def test_valid_variables_survive_invalid_neighbours() -> None:
    parsed = parse_settings(
        {INTRA_OP: "4", INTER_OP: "x", ALLOW_GROWTH: "on", CPUS: "1500m", QUIET: "nope"}
    )
    assert [p.variable for p in parsed.problems] == [INTER_OP, QUIET]
    assert parsed.settings == Settings(
        intra_op=ThreadSetting(4, INTRA_OP),
        inter_op=AUTOMATIC,
        allow_growth=True,
        gpu_memory_alloc=(),
        cpus_override=1.5,
        cpu_rounding="floor",
        cpu_limit_millicores=None,
        quiet=False,
    )


def test_a_full_valid_environment() -> None:
    parsed = parse_settings(
        {
            INTRA_OP: "8",
            INTRA_OP_ALIAS: "8",
            INTER_OP_ALIAS: " 2 ",
            ALLOW_GROWTH: "True",
            GPU_MEMORY_ALLOC: "0:1024, 1:2048",
            CPUS: "7.5",
            CPU_ROUNDING: "Nearest",
            CPU_LIMIT_MILLICORES: "",
            QUIET: "1",
        }
    )
    assert parsed == ParsedSettings(
        Settings(
            intra_op=ThreadSetting(8, INTRA_OP),
            inter_op=ThreadSetting(2, INTER_OP_ALIAS),
            allow_growth=True,
            gpu_memory_alloc=((0, 1024), (1, 2048)),
            cpus_override=7.5,
            cpu_rounding="nearest",
            cpu_limit_millicores=None,
            quiet=True,
        ),
        (),
        (),
    )


# --- properties ------------------------------------------------------------------

#: Text that reaches the parsers' deeper branches far more often than st.text().
near_valid = st.text(alphabet=" \t0123456789:,.-+mMeE", max_size=30)
any_text = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(exclude_categories=())),  # lone surrogates too
    near_valid,
    st.sampled_from(["0", "1", "4", "1024", "1025", "true", "off", "1500m", "0:1024", ""]),
)
environments = st.dictionaries(st.sampled_from(VARIABLES), any_text)


def check_invariants(env: Mapping[str, str], parsed: ParsedSettings) -> None:
    for problem in parsed.problems:
        assert problem.variable in VARIABLES
        assert problem.value == env[problem.variable]
        assert problem.expected
        assert str(problem).startswith(f"{problem.variable}={problem.value!r} is invalid")
    for notice in parsed.notices:
        assert notice.variable in VARIABLES
    settings = parsed.settings
    for pool in (settings.intra_op, settings.inter_op):
        assert pool.value is None or 1 <= pool.value <= MAX_THREADS
        assert pool.variable is None or pool.variable in THREAD_VARIABLES
    ids = [gpu for gpu, _ in settings.gpu_memory_alloc]
    assert len(set(ids)) == len(ids)
    for gpu, mb in settings.gpu_memory_alloc:
        assert 0 <= gpu <= MAX_GPU_ID
        assert 1 <= mb <= MAX_GPU_MEMORY_MB
    assert settings.cpus_override is None or 0.001 <= settings.cpus_override <= MAX_CPUS
    assert settings.cpu_rounding in ROUNDINGS
    limit = settings.cpu_limit_millicores
    assert limit is None or 1 <= limit <= MAX_CPUS * 1000
    assert isinstance(settings.quiet, bool)


@given(environments)
def test_any_environment_parses_without_raising(env: dict[str, str]) -> None:
    check_invariants(env, parse_settings(env))


@given(st.sampled_from(VARIABLES), any_text)
def test_any_single_value_parses_without_raising(variable: str, raw: str) -> None:
    env = {variable: raw}
    parsed = parse_settings(env)
    check_invariants(env, parsed)
    assert {p.variable for p in parsed.problems} <= {variable}


@given(environments, st.dictionaries(st.text(), st.text(), max_size=4))
def test_other_variables_change_nothing(env: dict[str, str], noise: dict[str, str]) -> None:
    noisy = {**{k: v for k, v in noise.items() if k not in VARIABLES}, **env}
    assert parse_settings(noisy) == parse_settings(env)


whitespace = st.text(alphabet=" \t\n\r\v\f", max_size=3)


@given(st.integers(0, MAX_THREADS), whitespace, whitespace, st.integers(0, 3))
def test_thread_counts_round_trip(n: int, before: str, after: str, zeros: int) -> None:
    assert parse_thread_count(INTRA_OP, f"{before}{'0' * zeros}{n}{after}") == (n or None)


@given(st.integers(MAX_THREADS + 1, 10**30))
def test_thread_counts_above_the_limit(n: int) -> None:
    problem = parse_thread_count(INTER_OP, str(n))
    assert isinstance(problem, Problem)
    assert problem.reason == f"more than {MAX_THREADS}"


@given(st.sampled_from(THREAD_PAIRS), any_text, any_text)
def test_thread_aliases_are_symmetric(pair: tuple[str, str, str], a: str, b: str) -> None:
    name, alias, field = pair
    one = parse_settings({name: a, alias: b})
    other = parse_settings({name: b, alias: a})
    assert thread_setting(one, field).value == thread_setting(other, field).value
    assert len(one.problems) == len(other.problems)
    separately = [parse_thread_count(name, a), parse_thread_count(alias, b)]
    conflict = (
        not is_blank(a)
        and not is_blank(b)
        and not any(isinstance(p, Problem) for p in separately)
        and separately[0] != separately[1]
    )
    if conflict:
        assert only(one).reason == f"conflicts with {alias}={b!r}"
        assert thread_setting(one, field) == AUTOMATIC


@given(
    st.lists(
        st.tuples(st.integers(0, MAX_GPU_ID), st.integers(1, MAX_GPU_MEMORY_MB), whitespace),
        min_size=1,
        max_size=8,
        unique_by=lambda entry: entry[0],
    )
)
def test_gpu_memory_alloc_round_trips(entries: list[tuple[int, int, str]]) -> None:
    raw = ",".join(f"{pad}{gpu}{pad}:{pad}{mb}{pad}" for gpu, mb, pad in entries)
    pairs = [(gpu, mb) for gpu, mb, _ in entries]
    assert parse_gpu_memory_alloc(GPU_MEMORY_ALLOC, raw) == (tuple(pairs), ())


@given(st.integers(1, MAX_CPUS * 1000), whitespace)
def test_cpus_decimal_and_millicores_agree(millicores: int, space: str) -> None:
    decimal = f"{space}{millicores // 1000}.{millicores % 1000:03d}{space}"
    assert parse_cpus(CPUS, decimal) == millicores / 1000
    assert parse_cpus(CPUS, f"{space}{millicores}m{space}") == millicores / 1000
    assert parse_cpu_limit_millicores(CPU_LIMIT_MILLICORES, f"{millicores}") == millicores


@given(st.sampled_from(["true", "1", "yes", "on", "false", "0", "no", "off"]), st.data())
def test_bools_ignore_case(word: str, data: st.DataObject) -> None:
    flips = data.draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    raw = "".join(c.upper() if flip else c for c, flip in zip(word, flips, strict=True))
    assert parse_bool(QUIET, raw) is (word in ("true", "1", "yes", "on"))
