"""The flag table (FLAGS, against TF Serving's main.cc) and the one tokenizer
(tf_entrypoint.server_flags.tokenize): the entrypoint and the server read a command
line with the same rules (docs/tf-serving.md, "How flags are read")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tf_entrypoint.server_flags import BY_SPELLING, FLAGS, Token, boolean, tokenize
from tf_entrypoint.tfserving import plan_flags, user_flags

DATA = Path(__file__).resolve().parent / "data"


def test_every_spelling_is_one_flags() -> None:
    spellings = [spelling for flag in FLAGS for spelling in flag.spellings]
    assert len(spellings) == len(set(spellings)) == len(BY_SPELLING)
    assert all(spelling.startswith("--") for spelling in spellings)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # --flag=VALUE, and --flag VALUE where VALUE does not start with "--"
        (["--port=1"], [(("--port=1",), "--port", "port", "1")]),
        (["--port", "1"], [(("--port", "1"), "--port", "port", "1")]),
        (["--port", "--rest_api_port=2"],
         [(("--port",), "--port", "port", None),
          (("--rest_api_port=2",), "--rest_api_port", "rest_api_port", "2")]),
        (["--port"], [(("--port",), "--port", "port", None)]),
        # a boolean never takes the next argument
        (["--enable_batching", "false"],
         [(("--enable_batching",), "--enable_batching", "enable_batching", "true"),
          (("false",), "", None, None)]),
        (["--enable_batching=false"],
         [(("--enable_batching=false",), "--enable_batching", "enable_batching", "false")]),
        # aliases are the same flag
        (["--grpc-port", "9"], [(("--grpc-port", "9"), "--grpc-port", "port", "9")]),
        # unknown flags take no value; a single dash and "--" are no flags
        (["--bogus", "3"], [(("--bogus",), "--bogus", None, None), (("3",), "", None, None)]),
        (["--bogus=3"], [(("--bogus=3",), "--bogus", None, "3")]),
        (["-port=1", "--", "-h"],
         [(("-port=1",), "", None, None), (("--",), "", None, None), (("-h",), "", None, None)]),
        # a value may start with one dash
        (["--model_name", "-m"], [(("--model_name", "-m"), "--model_name", "model_name", "-m")]),
    ],
)  # fmt: skip
def test_tokenize(
    argv: list[str], expected: list[tuple[tuple[str, ...], str, str | None, str | None]]
) -> None:
    tokens = tokenize(argv)
    assert all(isinstance(token, Token) for token in tokens)
    got = [(t.args, t.spelling, None if t.flag is None else t.flag.name, t.value) for t in tokens]
    assert got == expected
    # nothing is lost: the arguments come back in order
    assert [arg for token in tokens for arg in token.args] == argv


def test_the_entrypoint_passes_on_what_it_does_not_take_as_written() -> None:
    argv = ("--model_name", "m", "--tensorflow_intra_op_parallelism", "2", "--bogus", "x", "-y")
    flags = plan_flags(argv, {})
    assert not isinstance(flags, str)
    assert flags.args == ("--model_name", "m", "--bogus", "x", "-y")
    assert user_flags(argv) == {"model_name", "tensorflow_intra_op_parallelism", "bogus"}


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("TRUE", True), (" 1 ", True), ("yes", True), ("on", True),
     ("false", False), ("0", False), ("No", False), ("off", False),
     ("", None), ("2", None), ("truthy", None), ("\uff54rue", None)],
)  # fmt: skip
def test_boolean_words(text: str, value: bool | None) -> None:
    assert boolean(text) is value


def main_cc_flags() -> list[str]:
    lines = (DATA / "tf_serving_main_flags.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_every_flag_of_tf_servings_main_cc_is_in_the_table() -> None:
    names = main_cc_flags()
    assert len(names) > 40  # the vendored list was read, not an empty file
    assert sorted(flag.name for flag in FLAGS if flag.tf_serving) == sorted(names)


def test_spellings_are_unique_and_ours_use_dashes() -> None:
    spellings = [spelling for flag in FLAGS for spelling in flag.spellings]
    assert len(spellings) == len(set(spellings))
    for flag in FLAGS:
        if not flag.tf_serving:
            assert "_" not in flag.name, flag.name
        assert flag.meaning or flag.why, flag.name
        if flag.kind == "limited":
            assert flag.why, flag.name
