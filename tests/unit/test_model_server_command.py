"""`tensorflow_model_server`: ours is `serve` (thread flags into the plan); a real one: flags."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tf_entrypoint import cli
from tf_entrypoint.problems import EXIT_USAGE
from tf_entrypoint.tfserving import (
    PlanFlags,
    find_command,
    is_our_server,
    plan_flags,
)

#: What pip writes for a console script (uv's template says the same).
PIP_SCRIPT = """\
#!/opt/venv/bin/python
# -*- coding: utf-8 -*-
import re
import sys
from tf_entrypoint.cli import model_server_main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(model_server_main())
"""
STUB = '#!/bin/sh\necho "$@"\n'
INTRA = "--tensorflow_intra_op_parallelism"
INTER = "--tensorflow_inter_op_parallelism"
SESSION = "--tensorflow_session_parallelism"


def executable(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        path.write_text(text)
    else:
        path.write_bytes(text)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("args", "expected_args", "expected_env"),
    [
        ((), (), {}),
        (("--model_name=m",), ("--model_name=m",), {}),
        ((f"{INTRA}=3", "--port=1"), ("--port=1",), {"intra": "3"}),
        ((INTRA, "3", INTER, "2"), (), {"intra": "3", "inter": "2"}),
        ((f"{SESSION}=4",), (), {"intra": "4", "inter": "4"}),
        ((f"{SESSION}=4", f"{INTER}=2"), (), {"inter": "2"}),  # session ignored (TF Serving)
        ((f"{INTRA}=0",), (), {}),  # 0: automatic, the flag decides nothing
        ((f"{INTRA}=", "x"), ("x",), {}),
    ],
)
def test_thread_flags(
    args: tuple[str, ...], expected_args: tuple[str, ...], expected_env: dict[str, str]
) -> None:
    flags = plan_flags(args, {})
    assert isinstance(flags, PlanFlags)
    assert flags.args == expected_args
    names = {
        "intra": ("TF_INTRA_OP_PARALLELISM_THREADS", "TF_NUM_INTRAOP_THREADS"),
        "inter": ("TF_INTER_OP_PARALLELISM_THREADS", "TF_NUM_INTEROP_THREADS"),
    }
    wanted = {name: value for pool, value in expected_env.items() for name in names[pool]}
    assert dict(flags.env) == wanted


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((f"{INTRA}=two",), f"{INTRA}='two' is invalid (not a whole number"),
        ((f"{INTER}=5000",), f"{INTER}='5000' is invalid (more than 1024)"),
        ((INTRA,), f"{INTRA} needs a value"),
        ((INTRA, "--port=1"), f"{INTRA} needs a value"),
        ((f"{INTRA}=1", f"{INTER}=1", f"{SESSION}=1"), f"give {SESSION} or {INTRA}"),
    ],
)
def test_bad_thread_flags(args: tuple[str, ...], message: str) -> None:
    problem = plan_flags(args, {})
    assert isinstance(problem, str)
    assert problem.startswith(message)


def test_the_flag_wins_over_the_environment_with_a_note() -> None:
    env = {"TF_INTRA_OP_PARALLELISM_THREADS": "2", "TF_NUM_INTRAOP_THREADS": "3"}
    flags = plan_flags((f"{INTRA}=3",), env)
    assert isinstance(flags, PlanFlags)
    assert flags.notes == (f"{INTRA}=3 overrides TF_INTRA_OP_PARALLELISM_THREADS='2' from the "
                           "environment",)  # fmt: skip
    assert dict(flags.env)["TF_INTRA_OP_PARALLELISM_THREADS"] == "3"


def test_ours_is_recognised_by_its_content(tmp_path: Path) -> None:
    ours = executable(tmp_path / "a" / "tensorflow_model_server", PIP_SCRIPT)
    stub = executable(tmp_path / "b" / "tensorflow_model_server", STUB)
    binary = executable(tmp_path / "c" / "tensorflow_model_server", b"\x7fELF" + bytes(5000))
    assert is_our_server(str(ours))
    assert not is_our_server(str(stub))
    assert not is_our_server(str(binary))
    assert not is_our_server(str(tmp_path / "missing"))
    assert not is_our_server(None)
    # First on PATH wins, as for execvp; a non-executable file is skipped.
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "tensorflow_model_server").write_text(PIP_SCRIPT)
    path = f"{tmp_path / 'd'}:{tmp_path / 'b'}:{tmp_path / 'a'}"
    assert find_command("tensorflow_model_server", path) == str(stub)
    assert find_command("/x/tensorflow_model_server", path) == "/x/tensorflow_model_server"
    assert find_command("nothing-here", path) is None


def environment(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    for name in ("TF_INTRA_OP_PARALLELISM_THREADS", "TF_NUM_INTRAOP_THREADS",
                 "TF_INTER_OP_PARALLELISM_THREADS", "TF_NUM_INTEROP_THREADS",
                 "TF_GPU_MEMORY_ALLOC", "CUDA_VISIBLE_DEVICES"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TF_ENTRYPOINT_CPUS", "2")
    monkeypatch.setenv("PATH", str(path))


def test_our_command_under_the_entrypoint_is_serve(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    handed_off: list[tuple[tuple[str, ...], dict[str, str]]],
) -> None:
    executable(tmp_path / "tensorflow_model_server", PIP_SCRIPT)
    environment(monkeypatch, tmp_path)
    code = cli.main(["tensorflow_model_server", "--model_name=m", f"{INTRA}=1"])
    assert code == 0
    [(argv, env)] = handed_off
    assert argv == (sys.executable, "-m", "tf_entrypoint.serving", "--model_name=m")
    assert (env["TF_NUM_INTRAOP_THREADS"], env["TF_NUM_INTEROP_THREADS"]) == ("1", "2")
    plan = json.loads(env["TF_ENTRYPOINT_PLAN"])
    assert (plan["intra_op_threads"], plan["inter_op_threads"]) == (1, 2)


def test_the_console_script_is_serve(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    handed_off: list[tuple[tuple[str, ...], dict[str, str]]],
) -> None:
    environment(monkeypatch, tmp_path)
    monkeypatch.setattr(sys, "argv", ["/usr/bin/tensorflow_model_server", f"{SESSION}=3"])
    assert cli.model_server_main() == 0
    [(argv, env)] = handed_off
    assert argv == (sys.executable, "-m", "tf_entrypoint.serving")
    assert (env["TF_NUM_INTRAOP_THREADS"], env["TF_NUM_INTEROP_THREADS"]) == ("3", "3")


def test_a_real_binary_gets_the_plan_as_flags(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    handed_off: list[tuple[tuple[str, ...], dict[str, str]]],
) -> None:
    executable(tmp_path / "tensorflow_model_server", STUB)
    environment(monkeypatch, tmp_path)
    assert cli.main(["tensorflow_model_server", "--model_name=m"]) == 0
    [(argv, _)] = handed_off
    assert argv == (
        "tensorflow_model_server",
        "--model_name=m",
        f"{INTRA}=2",
        f"{INTER}=2",
        "--rest_api_num_threads=8",
    )


def test_a_bad_thread_flag_is_a_usage_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    handed_off: list[tuple[tuple[str, ...], dict[str, str]]],
) -> None:
    environment(monkeypatch, tmp_path)
    assert cli.main(["serve", f"{INTRA}=-1"]) == EXIT_USAGE
    assert not handed_off
    err = capsys.readouterr().err
    assert f"{INTRA}='-1' is invalid (negative)" in err
    assert "Traceback" not in err
