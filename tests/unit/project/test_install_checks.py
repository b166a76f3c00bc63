"""Bad installations say so in one line and never stop the command.

TensorFlow older than the tested range (the hook), two copies of the hook on
one Python's path (the .pth half), and no TensorFlow beside the entrypoint (at
the hand-off). The containers in tests/matrix show the same with real
installations.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tf_entrypoint import _pth, handoff, hook

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "version", ["2.11.1", "2.0.0", "1.15.5", "2.11.0rc1", "2.9"], ids=lambda v: v
)
def test_older_tensorflow_is_named(version: str) -> None:
    line = hook.version_problem(version)
    assert line.startswith(f"TensorFlow {version} is older than 2.12,")
    assert "the plan is applied as far as this TensorFlow allows" in line


@pytest.mark.parametrize(
    "version", ["2.12.0", "2.15.1", "2.16.2", "2.21.0", "2.22.0rc0", "3.0.0", "2.13.0-dev"]
)
def test_supported_and_newer_tensorflow_say_nothing(version: str) -> None:
    assert hook.version_problem(version) == ""


@pytest.mark.parametrize("version", [None, "", "unknown", "2", "x.y.z", 2.11, "\uff12.\uff11"])
def test_unreadable_version_says_nothing(version: object) -> None:
    assert hook.version_problem(version) == ""


class FakeThreading:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def set_intra_op_parallelism_threads(self, n: int) -> None:
        self.calls.append(("intra", n))

    def set_inter_op_parallelism_threads(self, n: int) -> None:
        self.calls.append(("inter", n))


class FakeTF:
    def __init__(self, version: str) -> None:
        self.__version__ = version
        self.config = type("config", (), {})()
        self.config.threading = FakeThreading()


def test_old_tensorflow_gets_one_line_and_the_plan() -> None:
    tf = FakeTF("2.11.1")
    said: list[str] = []
    plan = handoff.encode_plan(handoff.HookPlan(1, 1, None, ()))
    done = hook.on_tensorflow_imported(tf, {"TF_ENTRYPOINT_PLAN": plan}, warn=said.append)
    assert done == ["intra_op_threads=1", "inter_op_threads=1"]
    assert tf.config.threading.calls == [("intra", 1), ("inter", 1)]
    assert len(said) == 1
    assert said[0].startswith("TensorFlow 2.11.1 is older than 2.12")


def test_supported_tensorflow_is_silent() -> None:
    said: list[str] = []
    plan = handoff.encode_plan(handoff.HookPlan(2, 1, None, ()))
    hook.on_tensorflow_imported(FakeTF("2.12.0"), {"TF_ENTRYPOINT_PLAN": plan}, warn=said.append)
    assert said == []


def make_site(root: Path, name: str, *, pth: bool = True) -> Path:
    site = root / name
    site.mkdir(parents=True)
    if pth:
        (site / _pth.PTH_FILE).write_text("import os\n")
    return site


def test_one_copy_is_one_copy(tmp_path: Path) -> None:
    site = make_site(tmp_path, "site")
    other = make_site(tmp_path, "other", pth=False)
    assert _pth.copies_on_path([str(site), str(other), "", str(site)]) == [str(site)]


def test_two_copies_are_listed_in_path_order(tmp_path: Path) -> None:
    user = make_site(tmp_path, "user")
    system = make_site(tmp_path, "system")
    link = tmp_path / "link"
    link.symlink_to(system)
    path = [str(tmp_path / "missing"), str(user), str(link), str(system)]
    assert _pth.copies_on_path(path) == [str(user), str(system)]


def test_fire_says_one_line_for_two_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = make_site(tmp_path, "a"), make_site(tmp_path, "b")
    monkeypatch.setattr(sys, "path", [str(first), str(second)])
    applied: list[object] = []

    class Hook:
        @staticmethod
        def on_tensorflow_imported(tf: object) -> None:
            applied.append(tf)

    monkeypatch.setattr(_pth, "load_hook", lambda: Hook)
    _pth.fire("tf")  # type: ignore[arg-type]
    assert applied == ["tf"]  # the plan is still applied, once
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"tf-entrypoint: 2 copies of the tf-entrypoint hook are on this Python's path "
        f"({first}, {second}); the first applies the plan, once; uninstall the others"
    ]


def test_tensorflow_missing_names_the_python() -> None:
    # This host's test venv has no TensorFlow.
    line = handoff.tensorflow_missing({}, python="/opt/venv")
    assert line.startswith("TensorFlow is not installed in the Python that has tf-entrypoint")
    assert "(/opt/venv)" in line
    assert handoff.tensorflow_missing({"TF_ENTRYPOINT_HOOK": "off"}) == ""


def test_tensorflow_present_says_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "tensorflow"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert handoff.tensorflow_missing({}) == ""
    assert "tensorflow" not in sys.modules  # found, never imported


def test_entrypoint_without_tensorflow_warns_once_and_runs_the_command() -> None:
    code = "print('ran')"
    ran = subprocess.run(
        [sys.executable, "-m", "tf_entrypoint", "--", sys.executable, "-c", code],
        cwd=REPO / "entrypoint",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO / "entrypoint")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran.stderr
    missing = [line for line in ran.stderr.splitlines() if "TensorFlow is not installed" in line]
    assert len(missing) == 1
    assert missing[0].startswith("tf-entrypoint: warning: TensorFlow is not installed")
