"""tf-entrypoint's command line, without executing anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tf_entrypoint import __version__, cli
from tf_entrypoint.cli import (
    Exec,
    ShowHelp,
    ShowVersion,
    Subcommand,
    UsageError,
    parse_command_line,
)
from tf_entrypoint.problems import EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND, EXIT_USAGE
from tf_entrypoint.settings import TABLE, plain

DEFAULT = ("serve-something",)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], Exec(DEFAULT)),
        (["python", "x.py"], Exec(("python", "x.py"))),
        (["--", "python", "-V"], Exec(("python", "-V"))),
        (["--", "explain"], Exec(("explain",))),
        (["--", "--weird-name"], Exec(("--weird-name",))),
        (["--port", "9000"], Exec((*DEFAULT, "--port", "9000"))),
        (["-v"], Exec((*DEFAULT, "-v"))),
        (["-h"], ShowHelp()),
        (["--help"], ShowHelp()),
        (["--version"], ShowVersion()),
        (["explain"], Subcommand("explain", ())),
        (["explain", "--json"], Subcommand("explain", ("--json",))),
        (["serve", "--port", "9000"], Subcommand("serve", ("--port", "9000"))),
        (["--", "serve"], Exec(("serve",))),
        (["echo", "--help"], Exec(("echo", "--help"))),
        (["--"], UsageError("'--' must be followed by a command to run")),
    ],
)
def test_parse_command_line(args: list[str], expected: cli.Invocation) -> None:
    assert parse_command_line(args, default=DEFAULT) == expected


def test_default_command_options_reach_a_default_subcommand() -> None:
    assert parse_command_line(["--json"], default=("explain",)) == Subcommand(
        "explain", ("--json",)
    )


def test_help_and_version_go_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"tf-entrypoint {__version__}\n"
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("usage: tf-entrypoint")
    assert out.err == ""
    for variable in TABLE:  # the one table of variables drives --help too
        assert f"\n  {variable.name}\n      {plain(variable.accepted)} [default: " in out.out


def test_usage_error_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--"]) == EXIT_USAGE
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith("tf-entrypoint: '--' must be followed by a command")


def test_command_not_found(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.hand_off(("surely-no-such-command-here",), {"PATH": "/nonexistent"})
    assert code == EXIT_NOT_FOUND
    assert "command not found" in capsys.readouterr().err


def test_command_not_executable(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    assert cli.hand_off((str(script),), {"PATH": "/nonexistent"}) == EXIT_CANNOT_EXECUTE


def test_serve_is_the_default_command() -> None:
    assert parse_command_line([]) == Subcommand("serve", ())
    assert parse_command_line(["--port", "9000"]) == Subcommand("serve", ("--port", "9000"))
