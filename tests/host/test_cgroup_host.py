"""tf_entrypoint.cpu on a real kernel: quotas set on real cgroups, read by a child.

Creates a parent cgroup with a CFS quota and a child below it, starts a
Python process that moves itself into the child *before* importing anything,
and checks what ``read_cgroup_quota`` / ``detect_cpu_budget`` found there.
This proves the translation from /proc/self/cgroup and mountinfo to
directories and the walk up to the parents against the kernel's own files.

Needs root and a writable cgroup hierarchy with the cpu controller: the cgroup
v1 cpu hierarchy when one is mounted (as the module prefers it), otherwise the
cgroup v2 hierarchy with cpu delegated through ``cgroup.subtree_control``.
Everything created is removed afterwards, even when a test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from tf_entrypoint.cgroups import Mount, parse_mountinfo
from tf_entrypoint.common import ROUNDINGS, Rounding
from tf_entrypoint.cpu import SOURCE_CGROUP_V1, SOURCE_CGROUP_V2, round_cpus

pytestmark = pytest.mark.host_cgroup

REPO = Path(__file__).resolve().parents[2]

#: Run in the child process once it sits in the test cgroup.
CHILD_SCRIPT = """
import json, sys
from tf_entrypoint.cpu import detect_cpu_budget
from tf_entrypoint.frozen import fields
budget = detect_cpu_budget(rounding=sys.argv[1])
reading = budget.cgroup
print(json.dumps({
    "proc_self_cgroup": open("/proc/self/cgroup").read(),
    "version": reading.version,
    "readable": reading.readable,
    "quota": None if reading.quota is None else {
        name: getattr(reading.quota, name) for name in fields(reading.quota)
    },
    "notes": list(reading.notes),
    "cpus": budget.cpus,
    "exact": budget.exact,
    "source": budget.source,
    "detail": budget.detail,
    "affinity_cpus": budget.affinity_cpus,
}))
"""


@dataclass(frozen=True)
class Hierarchy:
    """The cgroup hierarchy with the cpu controller that the module will read."""

    version: Literal[1, 2]
    mount: Mount

    @property
    def directory(self) -> Path:
        return Path(self.mount.mount_point)

    def cgroup_path(self, directory: Path) -> str:
        """The cgroup path of a directory below the mount point."""
        relative = directory.relative_to(self.directory).as_posix()
        root = self.mount.root.rstrip("/")
        return f"{root}/{relative}"

    def file(self, directory: Path) -> str:
        name = "cpu.max" if self.version == 2 else "cpu.cfs_quota_us"
        return str(directory / name)

    def set_quota(self, directory: Path, quota_us: int, period_us: int = 100_000) -> None:
        if self.version == 2:
            (directory / "cpu.max").write_text(f"{quota_us} {period_us}\n")
        else:
            (directory / "cpu.cfs_period_us").write_text(f"{period_us}\n")
            (directory / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")


def _find_hierarchy() -> Hierarchy | str:
    """The hierarchy to test on, or why there is none."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs root on Linux to create cgroups"
    found = _cpu_hierarchy()
    if isinstance(found, str):
        return found
    probe = found.directory / f"tf-entrypoint-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError as error:
        return (
            f"the cgroup v{found.version} cpu hierarchy at {found.directory} is read-only: {error}"
        )
    probe.rmdir()
    if found.version == 2:
        return _delegate_cpu(found.directory) or found
    return found


def _cpu_hierarchy() -> Hierarchy | str:
    """The mounted hierarchy with the cpu controller, v1 first as in the module."""
    try:
        mounts, _ = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    except OSError as error:
        return f"cannot read /proc/self/mountinfo: {error}"
    v1 = [m for m in mounts if m.fstype == "cgroup" and "cpu" in m.super_options]
    if v1:
        return Hierarchy(1, v1[0])
    v2 = [m for m in mounts if m.fstype == "cgroup2"]
    if not v2:
        return "no cgroup v1 cpu hierarchy and no cgroup2 hierarchy is mounted"
    mount = next((m for m in v2 if m.mount_point == "/sys/fs/cgroup"), v2[0])
    controllers = Path(mount.mount_point, "cgroup.controllers")
    try:
        listed = controllers.read_text().split()
    except OSError as error:
        return f"cannot read {controllers}: {error}"
    if "cpu" not in listed:
        return f"the cgroup2 hierarchy at {mount.mount_point} has no cpu controller"
    return Hierarchy(2, mount)


def _delegate_cpu(directory: Path) -> str:
    """Enable the cpu controller for the children of a v2 cgroup; '' when done."""
    subtree = directory / "cgroup.subtree_control"
    try:
        if "cpu" in subtree.read_text().split():
            return ""
        subtree.write_text("+cpu\n")
    except OSError as error:
        return (
            f"cannot enable the cpu controller in {subtree} ({error}); a v2 cgroup with "
            "processes in it cannot delegate controllers"
        )
    return ""


@pytest.fixture(scope="module")
def hierarchy() -> Hierarchy:
    found = _find_hierarchy()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@dataclass
class Cgroups:
    """Creates test cgroups and removes them all afterwards."""

    hierarchy: Hierarchy
    created: list[Path] = field(default_factory=list)
    prefix: str = field(default_factory=lambda: f"tf-entrypoint-test-{os.getpid()}-")

    def make(self, parent: Path | None = None) -> Path:
        """A new empty cgroup below ``parent`` (default: the mount point)."""
        base = parent if parent is not None else self.hierarchy.directory
        directory = base / f"{self.prefix}{uuid.uuid4().hex[:8]}"
        directory.mkdir()
        self.created.append(directory)
        if self.hierarchy.version == 2:
            reason = _delegate_cpu(directory)
            if reason:
                pytest.fail(reason)
        return directory

    def cleanup(self) -> None:
        errors: list[str] = []
        for directory in reversed(self.created):
            _evict(directory)
            for attempt in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as error:
                    if attempt == 49:
                        errors.append(f"{directory}: {error}")
                    time.sleep(0.02)
        self.created.clear()
        if errors:
            pytest.fail("could not remove test cgroups: " + "; ".join(errors))


def _evict(directory: Path) -> None:
    """Kill what is left in a test cgroup: only the test's own children get there."""
    try:
        pids = (directory / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


@pytest.fixture
def cgroups(hierarchy: Hierarchy) -> Iterator[Cgroups]:
    made = Cgroups(hierarchy)
    try:
        yield made
    finally:
        made.cleanup()


def run_in(directory: Path, rounding: Rounding = "floor") -> dict[str, Any]:
    """Start a Python process in ``directory``'s cgroup and return its reading.

    The shell writes its own pid into cgroup.procs and then execs Python, so
    the process is in the cgroup before it reads anything.
    """
    command = [
        "sh",
        "-c",
        'echo $$ > "$1" && exec "$2" -c "$3" "$4"',
        "sh",
        str(directory / "cgroup.procs"),
        sys.executable,
        CHILD_SCRIPT,
        rounding,
    ]
    pythonpath = os.pathsep.join(
        filter(None, [str(REPO / "entrypoint"), os.environ.get("PYTHONPATH")])
    )
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        command,
        cwd=REPO / "entrypoint",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _assert_placed(result: dict[str, Any], hierarchy: Hierarchy, directory: Path) -> None:
    """The child really ran in ``directory`` (as /proc/self/cgroup says)."""
    lines = result["proc_self_cgroup"].splitlines()
    if hierarchy.version == 1:
        cpu = [line for line in lines if "cpu" in line.split(":")[1].split(",")]
    else:
        cpu = [line for line in lines if line.startswith("0::")]
    assert cpu, result["proc_self_cgroup"]
    assert cpu[0].split(":", 2)[2] == hierarchy.cgroup_path(directory)


def _source(hierarchy: Hierarchy) -> str:
    return SOURCE_CGROUP_V1 if hierarchy.version == 1 else SOURCE_CGROUP_V2


def test_parent_quota_found_from_child(hierarchy: Hierarchy, cgroups: Cgroups) -> None:
    parent = cgroups.make()
    hierarchy.set_quota(parent, 50_000, 100_000)
    child = cgroups.make(parent)

    result = run_in(child)

    _assert_placed(result, hierarchy, child)
    assert result["version"] == hierarchy.version
    assert result["readable"] is True
    assert result["notes"] == []
    assert result["quota"] == {
        "cpus": 0.5,
        "quota_us": 50_000,
        "period_us": 100_000,
        "version": hierarchy.version,
        "file": hierarchy.file(parent),
        "cgroup": hierarchy.cgroup_path(parent),
    }
    assert (result["cpus"], result["exact"], result["source"]) == (1, 0.5, _source(hierarchy))
    assert hierarchy.cgroup_path(parent) in result["detail"]


def test_child_quota_lower_than_parent(hierarchy: Hierarchy, cgroups: Cgroups) -> None:
    parent = cgroups.make()
    hierarchy.set_quota(parent, 150_000, 100_000)
    child = cgroups.make(parent)
    hierarchy.set_quota(child, 25_000, 100_000)

    result = run_in(child)

    _assert_placed(result, hierarchy, child)
    assert result["quota"]["cpus"] == 0.25
    assert result["quota"]["cgroup"] == hierarchy.cgroup_path(child)
    assert result["quota"]["file"] == hierarchy.file(child)
    assert result["cpus"] == 1


def test_grandparent_quota_through_two_levels(hierarchy: Hierarchy, cgroups: Cgroups) -> None:
    top = cgroups.make()
    hierarchy.set_quota(top, 200_000, 100_000)
    middle = cgroups.make(top)
    leaf = cgroups.make(middle)

    result = run_in(leaf)

    _assert_placed(result, hierarchy, leaf)
    assert result["quota"]["cpus"] == 2.0
    assert result["quota"]["cgroup"] == hierarchy.cgroup_path(top)


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_rounding_of_a_real_fractional_quota(
    hierarchy: Hierarchy, cgroups: Cgroups, rounding: Rounding
) -> None:
    parent = cgroups.make()
    hierarchy.set_quota(parent, 150_000, 100_000)
    child = cgroups.make(parent)

    result = run_in(child, rounding)

    affinity = result["affinity_cpus"]
    assert affinity == len(os.sched_getaffinity(0))
    assert result["exact"] == min(affinity, 1.5)
    assert result["cpus"] == round_cpus(min(affinity, 1.5), rounding)


def test_no_quota_in_the_test_cgroups(hierarchy: Hierarchy, cgroups: Cgroups) -> None:
    parent = cgroups.make()
    child = cgroups.make(parent)

    result = run_in(child)

    _assert_placed(result, hierarchy, child)
    assert result["readable"] is True
    # A quota above the test cgroups (this whole machine in a container) may
    # still be found, but not one of ours.
    quota = result["quota"]
    assert quota is None or not quota["cgroup"].startswith(hierarchy.cgroup_path(parent))
