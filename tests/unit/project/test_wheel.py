"""`make wheel` (scripts/build-wheel): the same commit gives the same bytes, versioned from git."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "build-wheel"


def build(out: Path, *extra: str) -> Path:
    ran = subprocess.run(
        [str(SCRIPT), "--out", str(out), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    path = Path(ran.stdout.strip().splitlines()[-1])
    return path if path.is_absolute() else REPO / path


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build(tmp_path_factory.mktemp("a")), build(tmp_path_factory.mktemp("b"))


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_builds_of_one_commit_are_byte_identical(two_builds: tuple[Path, Path]) -> None:
    first, second = two_builds
    assert first.name == second.name
    assert sha256(first) == sha256(second)


def test_version_comes_from_git(two_builds: tuple[Path, Path]) -> None:
    wheel = two_builds[0]
    head = git("rev-parse", "--short=12", "HEAD")
    base = re.search(
        r'^__version__ = "(.*)"$',
        (REPO / "entrypoint/tf_entrypoint/__init__.py").read_text(),
        re.MULTILINE,
    )
    assert base
    tagged = subprocess.run(
        ["git", "describe", "--tags", "--exact-match", "--match", f"v{base[1]}", "HEAD"],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    if tagged.returncode == 0:
        expected = re.escape(base[1])
    else:
        expected = rf"{re.escape(base[1])}\.dev\d+\+g{head}"
    match = re.fullmatch(rf"tf_entrypoint-({expected})-py3-none-any\.whl", wheel.name)
    assert match, wheel.name
    with zipfile.ZipFile(wheel) as archive:
        # What `tf-entrypoint --version` prints.
        init = archive.read("tf_entrypoint/__init__.py").decode()
        metadata = archive.read(f"tf_entrypoint-{match[1]}.dist-info/METADATA").decode()
    assert f'__version__ = "{match[1]}"' in init
    assert f"\nVersion: {match[1]}\n" in metadata


def test_wheel_carries_the_hook_at_the_top_of_site_packages(two_builds: tuple[Path, Path]) -> None:
    with zipfile.ZipFile(two_builds[0]) as archive:
        names = set(archive.namelist())
        pth = archive.read("tf_entrypoint_hook.pth").decode()
        stamps = {info.date_time for info in archive.infolist()}
    assert {"tf_entrypoint_hook.pth", "_tf_entrypoint_pth.py", "tf_entrypoint/hook.py"} <= names
    assert pth == (REPO / "entrypoint" / "tf_entrypoint" / "tf_entrypoint_hook.pth").read_text()
    # Every entry is stamped with the commit's time, not the build's.
    assert len(stamps) == 1


def test_an_older_commit_builds_with_its_own_version(tmp_path: Path) -> None:
    wheel = build(tmp_path, "--rev", "HEAD~1")
    parent = git("rev-parse", "--short=12", "HEAD~1")
    assert f"+g{parent}-" in wheel.name


def test_a_worktree_build_never_takes_the_index_lock(tmp_path: Path) -> None:
    """`--worktree` while another git command holds index.lock (a `git status`
    in scripts/build-image, under pytest-xdist) still builds, with the edit in."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    # The script under test, as it is here (the clone has the committed one).
    shutil.copy2(SCRIPT, clone / "scripts" / "build-wheel")
    init = clone / "entrypoint" / "tf_entrypoint" / "__init__.py"
    init.write_text(init.read_text() + "EDITED_IN_THE_WORKTREE = True\n")
    (clone / ".git" / "index.lock").write_text("")
    ran = subprocess.run(
        [str(clone / "scripts" / "build-wheel"), "--worktree", "--out", str(tmp_path / "out")],
        cwd=clone,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "BUILD_VENV": str(REPO / ".venv-build")},
    )
    assert ran.returncode == 0, ran.stderr
    wheel = Path(ran.stdout.strip().splitlines()[-1])
    assert wheel.name.endswith(".dirty-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        assert "EDITED_IN_THE_WORKTREE" in archive.read("tf_entrypoint/__init__.py").decode()
    # Nothing was left behind in the repository's own index.
    assert (clone / ".git" / "index.lock").read_text() == ""
