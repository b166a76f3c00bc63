"""TF Serving's flags: which are added, which are left to the user, and the GPU fraction."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tf_entrypoint.tfserving import (
    GpuMemoryFraction,
    format_fraction,
    gpu_memory_fraction,
    is_model_server,
    rest_api_threads,
    serving_argv,
    user_flags,
)

SERVER = "tensorflow_model_server"
MODEL = ("--model_name=m", "--model_base_path=/models/m")


def flags(intra: int = 1, inter: int = 1, rest: int = 4) -> tuple[str, ...]:
    return (
        f"--tensorflow_intra_op_parallelism={intra}",
        f"--tensorflow_inter_op_parallelism={inter}",
        f"--rest_api_num_threads={rest}",
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ((SERVER,), True),
        (("/usr/bin/tensorflow_model_server", "--port=8500"), True),
        (("./tensorflow_model_server",), True),
        (("tensorflow_model_server.sh",), False),
        (("python", "tensorflow_model_server"), False),
        (("tf_serving_entrypoint.sh",), False),
        ((), False),
    ],
)
def test_is_model_server(argv: tuple[str, ...], expected: bool) -> None:
    assert is_model_server(argv) is expected


@pytest.mark.parametrize(
    ("args", "names"),
    [
        ((), set()),
        # A single dash is no flag: TF Serving's parser reads only "--" (docs/tf-serving.md).
        (("--a=1", "--b", "2", "-c", "-d=4"), {"a", "b"}),
        (("--a=x=y", "--", "-", "value"), {"a"}),
        (("--per_process_gpu_memory_fraction=",), {"per_process_gpu_memory_fraction"}),
    ],
)
def test_user_flags(args: tuple[str, ...], names: set[str]) -> None:
    assert user_flags(args) == names


@pytest.mark.parametrize(("cpus", "threads"), [(1, 4), (2, 8), (3, 12), (64, 256)])
def test_rest_api_threads_is_tf_servings_formula_on_the_budget(cpus: int, threads: int) -> None:
    assert rest_api_threads(cpus) == threads


ONE_CPU = {"intra": 1, "inter": 1, "cpus": 1, "gpu_fraction": None}


@pytest.mark.parametrize(
    ("argv", "kwargs", "expected"),
    [
        # Not TF Serving: untouched.
        (("python", "serve.py"), ONE_CPU, ("python", "serve.py")),
        ((), ONE_CPU, ()),
        # The flags, appended after the user's arguments.
        ((SERVER, *MODEL), ONE_CPU, (SERVER, *MODEL, *flags())),
        (
            ("/usr/local/bin/" + SERVER,),
            {"intra": 3, "inter": 2, "cpus": 3, "gpu_fraction": None},
            ("/usr/local/bin/" + SERVER, *flags(3, 2, 12)),
        ),
        (
            (SERVER,),
            {**ONE_CPU, "gpu_fraction": 0.25},
            (SERVER, *flags(), "--per_process_gpu_memory_fraction=0.25"),
        ),
        # None = leave TF Serving's default for that pool.
        (
            (SERVER,),
            {**ONE_CPU, "intra": None},
            (SERVER, "--tensorflow_inter_op_parallelism=1", "--rest_api_num_threads=4"),
        ),
        (
            (SERVER,),
            {**ONE_CPU, "intra": None, "inter": None},
            (SERVER, "--rest_api_num_threads=4"),
        ),
        # The user's flags are kept, in both forms, and never duplicated.
        (
            (SERVER, "--rest_api_num_threads=16", *MODEL),
            ONE_CPU,
            (SERVER, "--rest_api_num_threads=16", *MODEL, *flags()[:2]),
        ),
        (
            (SERVER, "--tensorflow_intra_op_parallelism", "6"),
            ONE_CPU,
            (
                SERVER,
                "--tensorflow_intra_op_parallelism",
                "6",
                "--tensorflow_inter_op_parallelism=1",
                "--rest_api_num_threads=4",
            ),
        ),
        (
            (SERVER, "--tensorflow_intra_op_parallelism=0"),  # 0 = TF Serving decides
            ONE_CPU,
            (
                SERVER,
                "--tensorflow_intra_op_parallelism=0",
                "--tensorflow_inter_op_parallelism=1",
                "--rest_api_num_threads=4",
            ),
        ),
        (
            (SERVER, "--per_process_gpu_memory_fraction=0.9"),
            {**ONE_CPU, "gpu_fraction": 0.25},
            (SERVER, "--per_process_gpu_memory_fraction=0.9", *flags()),
        ),
        (
            # Not a flag to TF Serving (it refuses it as an unknown argument): the plan's go on.
            (SERVER, "-rest_api_num_threads=2"),
            ONE_CPU,
            (SERVER, "-rest_api_num_threads=2", *flags()),
        ),
        # The user owns the session configuration: no pool flags, no fraction.
        (
            (SERVER, "--tensorflow_session_parallelism=4"),
            {**ONE_CPU, "gpu_fraction": 0.5},
            (SERVER, "--tensorflow_session_parallelism=4", "--rest_api_num_threads=4"),
        ),
        (
            (SERVER, "--tensorflow_session_config_file", "/cfg/session.pbtxt"),
            {**ONE_CPU, "gpu_fraction": 0.5},
            (
                SERVER,
                "--tensorflow_session_config_file",
                "/cfg/session.pbtxt",
                "--rest_api_num_threads=4",
            ),
        ),
        (
            (SERVER, "--platform_config_file=/cfg/platform.pbtxt"),
            ONE_CPU,
            (SERVER, "--platform_config_file=/cfg/platform.pbtxt", "--rest_api_num_threads=4"),
        ),
    ],
)
def test_serving_argv(
    argv: tuple[str, ...], kwargs: dict[str, object], expected: tuple[str, ...]
) -> None:
    assert serving_argv(argv, **kwargs) == expected  # type: ignore[arg-type]


def test_serving_argv_accepts_any_sequence() -> None:
    assert serving_argv([SERVER], **ONE_CPU) == (SERVER, *flags())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fraction", "text"),
    [
        (1.0, "1.0"),
        (0.5, "0.5"),
        (0.25, "0.25"),
        (0.29, "0.29"),
        (1 / 3, "0.333333"),
        (2 / 3, "0.666666"),  # rounded down: never above the cap
        (0.000001, "0.000001"),
        (0.9999999, "0.999999"),
    ],
)
def test_format_fraction(fraction: float, text: str) -> None:
    assert format_fraction(fraction) == text


@given(st.floats(min_value=0.000001, max_value=1.0))
def test_format_fraction_never_rounds_up(fraction: float) -> None:
    # TF Serving parses the text back into a float: compare as floats.
    assert 0 < float(format_fraction(fraction)) <= fraction


@given(st.integers(1, 10**6), st.integers(1, 10**6))
def test_fraction_of_a_cap_never_exceeds_it(cap: int, total: int) -> None:
    result = gpu_memory_fraction({0: cap}, {0: total})
    if cap >= total:
        assert result.fraction is None
    else:
        assert result.fraction is not None
        # Exact arithmetic on the flag's text, as written.
        assert Fraction(format_fraction(result.fraction)) * total <= cap or result.fraction == 1e-6


@pytest.mark.parametrize(
    ("caps", "totals", "fraction", "gpu", "notes"),
    [
        ({}, {0: 16384}, None, None, []),
        ({0: 4096}, {0: 16384}, 0.25, 0, []),
        ({0: 1000}, {0: 3000}, 0.333333, 0, []),
        # Several caps: the smallest ratio wins, and the note says what the others get.
        (
            {0: 8192, 1: 4096},
            {0: 16384, 1: 32768},
            0.125,
            1,
            ["GPU 0 gets 2048 MB instead of 8192 MB"],
        ),
        # An uncapped GPU is limited too.
        ({0: 4096}, {0: 16384, 1: 16384}, 0.25, 0, ["GPU 1 gets 4096 MB (no cap asked)"]),
        # A cap at or above the GPU's size is no cap.
        ({0: 16384}, {0: 16384}, None, None, ["GPU 0: the 16384 MB cap is not below its 16384 MB"]),
        ({0: 99999}, {0: 16384}, None, None, ["not below"]),
        # Size unknown (no NVML): that cap cannot become a fraction.
        ({0: 4096}, {0: None}, None, None, ["GPU 0: its memory size is unknown"]),
        ({1: 4096}, {0: 16384}, None, None, ["GPU 1: its memory size is unknown"]),
        (
            {0: 4096, 1: 1024},
            {0: 16384, 1: None},
            0.25,
            0,
            ["GPU 1: its memory size is unknown", "GPU 1 gets that share instead of 1024 MB"],
        ),
        # Tiny caps never become 0 ("no limit" for TF Serving).
        ({0: 1}, {0: 10**7}, 0.000001, 0, []),
    ],
)
def test_gpu_memory_fraction(
    caps: dict[int, int],
    totals: dict[int, int | None],
    fraction: float | None,
    gpu: int | None,
    notes: list[str],
) -> None:
    result = gpu_memory_fraction(caps, totals)
    assert isinstance(result, GpuMemoryFraction)
    assert (result.fraction, result.gpu) == (fraction, gpu)
    for expected in notes:
        assert any(expected in note for note in result.notes), (expected, result.notes)
    if not notes:
        assert result.notes == ()
    if len(totals) > 1 and fraction is not None:
        assert any("TF Serving applies one memory fraction to every GPU" in n for n in result.notes)


def test_fraction_feeds_serving_argv() -> None:
    result = gpu_memory_fraction({0: 1000}, {0: 3000})
    assert result.fraction is not None
    argv = serving_argv((SERVER,), intra=2, inter=2, cpus=2, gpu_fraction=result.fraction)
    assert argv[-1] == "--per_process_gpu_memory_fraction=0.333333"
