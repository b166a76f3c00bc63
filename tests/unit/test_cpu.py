"""Unit tests for tf_entrypoint.cpu on fake /proc and /sys trees."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tf_entrypoint.cgroup_v1 import parse_cfs
from tf_entrypoint.cgroup_v2 import parse_cpu_max
from tf_entrypoint.cgroups import (
    CgroupReading,
    CpuQuota,
    Mount,
    cgroup_subdirectory,
    choose_mount,
    parse_mountinfo,
    parse_proc_cgroup,
    read_cgroup_quota,
)
from tf_entrypoint.common import ROUNDINGS, Rounding
from tf_entrypoint.cpu import (
    SOURCE_AFFINITY,
    SOURCE_CGROUP_V1,
    SOURCE_CGROUP_V2,
    SOURCE_MILLICORES,
    SOURCE_OVERRIDE,
    cpu_budget,
    detect_cpu_budget,
    round_cpus,
)

# --------------------------------------------------------------------------
# Building fake trees

#: Put this as a file's content to create a directory in its place (a file
#: that cannot be read, even by root).
DIRECTORY = object()

FileContent = str | bytes | object


def mountinfo_line(
    root: str,
    mount_point: str,
    fstype: str,
    super_options: str,
    *,
    optional: str = "master:12",
    mount_id: int = 100,
) -> str:
    """One mountinfo line as the kernel writes it (with optional fields)."""
    optional_fields = f" {optional}" if optional else ""
    return (
        f"{mount_id} 50 0:{mount_id} {root} {mount_point} ro,nosuid,nodev,noexec,relatime"
        f"{optional_fields} - {fstype} {fstype} {super_options}\n"
    )


#: Mounts every container has, so the parser has to skip them.
OTHER_MOUNTS = (
    "22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
    "23 22 0:22 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
    "24 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755\n"
)


def build_tree(
    root: Path,
    *,
    proc_cgroup: str | bytes | None,
    mountinfo: str | bytes | None,
    files: Mapping[str, FileContent] | None = None,
) -> Path:
    """Write root/proc/self/{cgroup,mountinfo} and the given files.

    ``files`` maps paths as the process sees them (``/sys/fs/cgroup/cpu.max``)
    to their content; :data:`DIRECTORY` makes a directory instead. None for
    the proc files leaves them out.
    """
    proc = root / "proc" / "self"
    proc.mkdir(parents=True, exist_ok=True)
    for name, proc_content in (("cgroup", proc_cgroup), ("mountinfo", mountinfo)):
        if proc_content is not None:
            _write(proc / name, proc_content)
    for path, content in (files or {}).items():
        target = root / path.lstrip("/")
        if content is DIRECTORY:
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            assert isinstance(content, str | bytes)
            _write(target, content)
    return root


def _write(path: Path, content: str | bytes) -> None:
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)


# Typical layouts -----------------------------------------------------------

V1_CPU = "/sys/fs/cgroup/cpu,cpuacct"
V2 = "/sys/fs/cgroup"
UNIFIED = "/sys/fs/cgroup/unified"
DOCKER_ID = "3f1c2d4e5a6b"


def v1_proc_cgroup(cpu_path: str, *, unified: str | None = None) -> str:
    """/proc/self/cgroup of a v1 (or hybrid, with ``unified``) process."""
    lines = [
        f"12:cpu,cpuacct:{cpu_path}",
        f"11:memory:{cpu_path}",
        f"10:cpuset:{cpu_path}",
        f"1:name=systemd:{cpu_path}",
    ]
    if unified is not None:
        lines.append(f"0::{unified}")
    return "\n".join(lines) + "\n"


def v1_mounts(root: str = "/", *, mount_point: str = V1_CPU) -> str:
    return (
        OTHER_MOUNTS
        + mountinfo_line(root, mount_point, "cgroup", "rw,cpu,cpuacct", mount_id=30)
        + mountinfo_line(root, "/sys/fs/cgroup/memory", "cgroup", "rw,memory", mount_id=31)
        + mountinfo_line(root, "/sys/fs/cgroup/cpuset", "cgroup", "rw,cpuset", mount_id=32)
    )


def v2_mounts(root: str = "/", *, mount_point: str = V2) -> str:
    return "22 1 0:21 / / rw,relatime - overlay overlay rw\n" + mountinfo_line(
        root, mount_point, "cgroup2", "rw,nsdelegate,memory_recursiveprot", optional=""
    )


def cfs(directory: str, quota: str, period: str = "100000") -> dict[str, FileContent]:
    return {
        f"{directory}/cpu.cfs_quota_us": quota + "\n",
        f"{directory}/cpu.cfs_period_us": period + "\n",
    }


# --------------------------------------------------------------------------
# read_cgroup_quota: table of fake trees


@dataclass(frozen=True)
class Case:
    id: str
    proc_cgroup: str | bytes | None
    mountinfo: str | bytes | None
    files: Mapping[str, FileContent]
    version: int | None
    readable: bool
    #: Expected quota: (cpus, cgroup, file) or None for no limit.
    quota: tuple[float, str, str] | None
    #: Substrings that must appear in the notes (all of them, joined).
    notes: tuple[str, ...] = ()
    #: Whether the notes must be empty.
    clean: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)


DOCKER_V1_PATH = f"/docker/{DOCKER_ID}"
K8S_LEAF = (
    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-x.scope"
)

CASES = [
    Case(
        id="v1 docker: mount root /docker/<id> at cpu,cpuacct, 0.5 CPU",
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files=cfs(V1_CPU, "50000"),
        version=1,
        readable=True,
        quota=(0.5, DOCKER_V1_PATH, f"{V1_CPU}/cpu.cfs_quota_us"),
        clean=True,
    ),
    Case(
        id="v1 nested: parent's lower quota wins over the leaf's",
        proc_cgroup=v1_proc_cgroup("/kubepods/pod1/ctr"),
        mountinfo=v1_mounts("/"),
        files={
            **cfs(V1_CPU, "-1"),
            **cfs(f"{V1_CPU}/kubepods", "-1"),
            **cfs(f"{V1_CPU}/kubepods/pod1", "100000"),
            **cfs(f"{V1_CPU}/kubepods/pod1/ctr", "200000"),
        },
        version=1,
        readable=True,
        quota=(1.0, "/kubepods/pod1", f"{V1_CPU}/kubepods/pod1/cpu.cfs_quota_us"),
        clean=True,
    ),
    Case(
        id="v1 nested: the leaf's lower quota wins over the parent's",
        proc_cgroup=v1_proc_cgroup("/kubepods/pod1/ctr"),
        mountinfo=v1_mounts("/"),
        files={
            **cfs(V1_CPU, "-1"),
            **cfs(f"{V1_CPU}/kubepods/pod1", "400000"),
            **cfs(f"{V1_CPU}/kubepods/pod1/ctr", "25000", "50000"),
        },
        version=1,
        readable=True,
        quota=(0.5, "/kubepods/pod1/ctr", f"{V1_CPU}/kubepods/pod1/ctr/cpu.cfs_quota_us"),
        clean=True,
    ),
    Case(
        id="v1 with cpu mounted alone (not combined with cpuacct)",
        proc_cgroup="4:memory:/\n2:cpuacct:/\n1:cpu:/job\n0::/\n",
        mountinfo=OTHER_MOUNTS
        + mountinfo_line("/", "/sys/fs/cgroup/cpuacct", "cgroup", "rw,cpuacct", mount_id=40)
        + mountinfo_line("/", "/sys/fs/cgroup/cpu", "cgroup", "rw,cpu", mount_id=41)
        + mountinfo_line("/", UNIFIED, "cgroup2", "rw", mount_id=42),
        files={**cfs("/sys/fs/cgroup/cpu", "-1"), **cfs("/sys/fs/cgroup/cpu/job", "300000")},
        version=1,
        readable=True,
        quota=(3.0, "/job", "/sys/fs/cgroup/cpu/job/cpu.cfs_quota_us"),
        clean=True,
    ),
    Case(
        id="v1 mount root other than / with the pod's quota on the mount point",
        proc_cgroup=v1_proc_cgroup("/kubepods/pod1/ctr"),
        mountinfo=v1_mounts("/kubepods/pod1", mount_point="/sys/fs/cgroup/cpu"),
        files={
            **cfs("/sys/fs/cgroup/cpu", "200000"),
            **cfs("/sys/fs/cgroup/cpu/ctr", "30000"),
        },
        version=1,
        readable=True,
        quota=(0.3, "/kubepods/pod1/ctr", "/sys/fs/cgroup/cpu/ctr/cpu.cfs_quota_us"),
        clean=True,
    ),
    Case(
        id="v1 quota -1 everywhere: no limit",
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files=cfs(V1_CPU, "-1"),
        version=1,
        readable=True,
        quota=None,
        clean=True,
    ),
    Case(
        id="v1 path not below the mount root: falls back to the mount point",
        proc_cgroup=v1_proc_cgroup("/other/place"),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files=cfs(V1_CPU, "150000"),
        version=1,
        readable=True,
        quota=(1.5, DOCKER_V1_PATH, f"{V1_CPU}/cpu.cfs_quota_us"),
        notes=("/other/place is not below the mount root /docker/", "reading the mount point"),
    ),
    Case(
        id="v1 period 0: level ignored, never divided by",
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files=cfs(V1_CPU, "50000", "0"),
        version=1,
        readable=False,
        quota=None,
        notes=("ignored /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us: period '0'",),
    ),
    Case(
        id="v1 negative period",
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files=cfs(V1_CPU, "50000", "-100000"),
        version=1,
        readable=False,
        quota=None,
        notes=("period '-100000' is not a positive integer",),
    ),
    Case(
        id="v1 quota neither -1 nor positive",
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files=cfs(V1_CPU, "-5"),
        version=1,
        readable=False,
        quota=None,
        notes=("quota -5 is neither -1 nor positive",),
    ),
    Case(
        id="v1 garbage quota text",
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files=cfs(V1_CPU, "fifty thousand"),
        version=1,
        readable=False,
        quota=None,
        notes=("quota 'fifty thousand' is not an integer",),
    ),
    Case(
        id="v1 non-integer period",
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files=cfs(V1_CPU, "50000", "1e5"),
        version=1,
        readable=False,
        quota=None,
        notes=("period '1e5' is not a positive integer",),
    ),
    Case(
        id="v1 quota set but period file missing",
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files={f"{V1_CPU}/cpu.cfs_quota_us": "50000\n"},
        version=1,
        readable=False,
        quota=None,
        notes=("cpu.cfs_period_us is missing",),
    ),
    Case(
        id="v1 quota file is a directory (unreadable even for root)",
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files={f"{V1_CPU}/cpu.cfs_quota_us": DIRECTORY},
        version=1,
        readable=False,
        quota=None,
        notes=("could not read /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us: Is a directory",),
    ),
    Case(
        id="v1 period file is a directory",
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files={f"{V1_CPU}/cpu.cfs_quota_us": "50000", f"{V1_CPU}/cpu.cfs_period_us": DIRECTORY},
        version=1,
        readable=False,
        quota=None,
        notes=("could not read /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us: Is a directory",),
    ),
    Case(
        id="v1 binary garbage in the quota file",
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files={f"{V1_CPU}/cpu.cfs_quota_us": b"\xff\x00\xfe5"},
        version=1,
        readable=False,
        quota=None,
        notes=("it is not ASCII text",),
    ),
    Case(
        id="v2 private cgroup namespace: 0::/ at mount root /",
        proc_cgroup="0::/\n",
        mountinfo=v2_mounts("/"),
        files={
            f"{V2}/cgroup.controllers": "cpuset cpu io memory pids\n",
            f"{V2}/cpu.max": "150000 100000\n",
        },
        version=2,
        readable=True,
        quota=(1.5, "/", "/sys/fs/cgroup/cpu.max"),
        clean=True,
    ),
    Case(
        id="v2 host namespace, deep kubepods path, pod slice sets the limit",
        proc_cgroup=f"0::{K8S_LEAF}\n",
        mountinfo=v2_mounts("/"),
        files={
            # The real root cgroup has no cpu.max.
            f"{V2}/cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
            f"{V2}/kubepods.slice/cpu.max": "max 100000\n",
            f"{V2}/kubepods.slice/kubepods-burstable.slice/cpu.max": "max 100000\n",
            f"{V2}/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/"
            "cpu.max": "250000 100000\n",
            f"{V2}{K8S_LEAF}/cpu.max": "max 100000\n",
        },
        version=2,
        readable=True,
        quota=(
            2.5,
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice",
            "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/"
            "kubepods-burstable-pod1.slice/cpu.max",
        ),
        clean=True,
    ),
    Case(
        id="v2 one-field cpu.max: period defaults to 100000",
        proc_cgroup="0::/\n",
        mountinfo=v2_mounts("/"),
        files={f"{V2}/cpu.max": "250000\n"},
        version=2,
        readable=True,
        quota=(2.5, "/", "/sys/fs/cgroup/cpu.max"),
        clean=True,
    ),
    Case(
        id="v2 'max': no limit",
        proc_cgroup="0::/\n",
        mountinfo=v2_mounts("/"),
        files={f"{V2}/cpu.max": "max\n"},
        version=2,
        readable=True,
        quota=None,
        clean=True,
    ),
    Case(
        id="v2 'max 100000': no limit",
        proc_cgroup="0::/\n",
        mountinfo=v2_mounts("/"),
        files={f"{V2}/cpu.max": "max 100000\n"},
        version=2,
        readable=True,
        quota=None,
        clean=True,
    ),
    Case(
        id="v2 period 0 at the leaf: ignored, parent's quota still found",
        proc_cgroup="0::/job/step\n",
        mountinfo=v2_mounts("/"),
        files={
            f"{V2}/job/cpu.max": "300000 100000\n",
            f"{V2}/job/step/cpu.max": "50000 0\n",
        },
        version=2,
        readable=True,
        quota=(3.0, "/job", "/sys/fs/cgroup/job/cpu.max"),
        notes=("ignored /sys/fs/cgroup/job/step/cpu.max: period '0' is not a positive integer",),
    ),
    Case(
        id="v2 period 0 and nothing else: unreadable",
        proc_cgroup="0::/\n",
        mountinfo=v2_mounts("/"),
        files={f"{V2}/cpu.max": "50000 0\n"},
        version=2,
        readable=False,
        quota=None,
        notes=("period '0'",),
    ),
    Case(
        id="v2 garbage: three fields",
        proc_cgroup="0::/\n",
        mountinfo=v2_mounts("/"),
        files={f"{V2}/cpu.max": "1 2 3\n"},
        version=2,
        readable=False,
        quota=None,
        notes=("expected 'QUOTA PERIOD', got '1 2 3'",),
    ),
    Case(
        id="v2 garbage: quota 0, non-ASCII digits",
        proc_cgroup="0::/a\n",
        mountinfo=v2_mounts("/"),
        files={f"{V2}/cpu.max": "0 100000\n", f"{V2}/a/cpu.max": "\u0665 100000\n"},
        version=2,
        readable=False,
        quota=None,
        notes=("quota '0' is neither 'max' nor a positive integer", "not ASCII"),
    ),
    Case(
        id="v2 leaf cpu.max missing: note, parents still read",
        proc_cgroup="0::/user.slice/session.scope\n",
        mountinfo=v2_mounts("/"),
        files={
            f"{V2}/user.slice/cpu.max": "50000 100000\n",
            f"{V2}/user.slice/session.scope": DIRECTORY,
        },
        version=2,
        readable=True,
        quota=(0.5, "/user.slice", "/sys/fs/cgroup/user.slice/cpu.max"),
        notes=("/sys/fs/cgroup/user.slice/session.scope/cpu.max does not exist",),
    ),
    Case(
        id="v2 no cpu.max anywhere: unreadable",
        proc_cgroup="0::/a/b\n",
        mountinfo=v2_mounts("/"),
        files={f"{V2}/a/b": DIRECTORY},
        version=2,
        readable=False,
        quota=None,
        notes=("does not exist",),
    ),
    Case(
        id="v2 '../' path from a cgroup namespace: mount point only, never above it",
        proc_cgroup="0::/../../sibling\n",
        mountinfo=v2_mounts("/"),
        files={
            f"{V2}/cpu.max": "200000 100000\n",
            # Outside the mount point: must never be read.
            "/sys/fs/cpu.max": "1000 100000\n",
            "/sys/fs/sibling/cpu.max": "1000 100000\n",
        },
        version=2,
        readable=True,
        quota=(2.0, "/", "/sys/fs/cgroup/cpu.max"),
        notes=("contains '..'", "reading the mount point /sys/fs/cgroup instead"),
    ),
    Case(
        id="v2 mount root outside the namespace (/..): mount point only",
        proc_cgroup="0::/\n",
        mountinfo=v2_mounts("/.."),
        files={f"{V2}/cpu.max": "100000 100000\n"},
        version=2,
        readable=True,
        quota=(1.0, "/", "/sys/fs/cgroup/cpu.max"),
        notes=("lies outside this cgroup namespace",),
    ),
    Case(
        id="hybrid host: v1 cpu controller wins over the cgroup2 mount",
        proc_cgroup=v1_proc_cgroup("/job", unified="/job"),
        mountinfo=v1_mounts("/") + mountinfo_line("/", UNIFIED, "cgroup2", "rw", mount_id=60),
        files={
            **cfs(V1_CPU, "-1"),
            **cfs(f"{V1_CPU}/job", "100000"),
            f"{UNIFIED}/cgroup.controllers": "cpu\n",
            f"{UNIFIED}/job/cpu.max": "50000 100000\n",
        },
        version=1,
        readable=True,
        quota=(1.0, "/job", f"{V1_CPU}/job/cpu.cfs_quota_us"),
        clean=True,
    ),
    Case(
        id="hybrid host whose cpu controller lives in v2",
        proc_cgroup="3:memory:/job\n0::/job\n",
        mountinfo=OTHER_MOUNTS
        + mountinfo_line("/", "/sys/fs/cgroup/memory", "cgroup", "rw,memory", mount_id=31)
        + mountinfo_line("/", UNIFIED, "cgroup2", "rw", mount_id=60),
        files={
            f"{UNIFIED}/cgroup.controllers": "cpu io\n",
            f"{UNIFIED}/job/cpu.max": "50000 100000\n",
        },
        version=2,
        readable=True,
        quota=(0.5, "/job", f"{UNIFIED}/job/cpu.max"),
        clean=True,
    ),
    Case(
        id="hybrid host without a cpu controller anywhere",
        proc_cgroup="3:memory:/job\n0::/job\n",
        mountinfo=OTHER_MOUNTS
        + mountinfo_line("/", "/sys/fs/cgroup/memory", "cgroup", "rw,memory", mount_id=31)
        + mountinfo_line("/", UNIFIED, "cgroup2", "rw", mount_id=60),
        files={
            f"{UNIFIED}/cgroup.controllers": "hugetlb\n",
            f"{UNIFIED}/job/cpu.max": "50000 100000\n",
        },
        version=None,
        readable=False,
        quota=None,
        notes=("has no cpu controller",),
    ),
    Case(
        id="no cgroup mounts at all",
        proc_cgroup="0::/\n",
        mountinfo=OTHER_MOUNTS,
        files={},
        version=None,
        readable=False,
        quota=None,
        notes=("no cgroup cpu controller is mounted",),
    ),
    Case(
        id="mountinfo missing",
        proc_cgroup="0::/\n",
        mountinfo=None,
        files={f"{V2}/cpu.max": "50000 100000\n"},
        version=None,
        readable=False,
        quota=None,
        notes=("could not read /proc/self/mountinfo",),
    ),
    Case(
        id="/proc/self/cgroup missing: mount point read, with a note",
        proc_cgroup=None,
        mountinfo=v2_mounts("/"),
        files={f"{V2}/cpu.max": "50000 100000\n"},
        version=2,
        readable=True,
        quota=(0.5, "/", "/sys/fs/cgroup/cpu.max"),
        notes=("could not read /proc/self/cgroup", "does not name the process's cgroup v2"),
    ),
    Case(
        id="mount point with an escaped space (\\040)",
        proc_cgroup="0::/job\n",
        mountinfo=v2_mounts("/", mount_point="/mnt/my\\040cgroups"),
        files={"/mnt/my cgroups/job/cpu.max": "75000 50000\n"},
        version=2,
        readable=True,
        quota=(1.5, "/job", "/mnt/my cgroups/job/cpu.max"),
        clean=True,
    ),
    Case(
        id="hierarchy mounted twice: the mount whose root holds the path is chosen",
        proc_cgroup=v1_proc_cgroup("/docker/abc"),
        mountinfo=v1_mounts("/other", mount_point="/mnt/elsewhere")
        + mountinfo_line("/docker/abc", V1_CPU, "cgroup", "rw,cpuacct,cpu", mount_id=90),
        files={**cfs(V1_CPU, "40000"), **cfs("/mnt/elsewhere", "900000")},
        version=1,
        readable=True,
        quota=(0.4, "/docker/abc", f"{V1_CPU}/cpu.cfs_quota_us"),
        clean=True,
    ),
    Case(
        id="malformed lines are counted, the good ones still used",
        proc_cgroup="garbage\n0::/\n",
        mountinfo="nonsense line\n" + v2_mounts("/"),
        files={f"{V2}/cpu.max": "50000 100000\n"},
        version=2,
        readable=True,
        quota=(0.5, "/", "/sys/fs/cgroup/cpu.max"),
        notes=(
            "ignored 1 malformed line(s) in /proc/self/mountinfo",
            "ignored 1 malformed line(s) in /proc/self/cgroup",
        ),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_read_cgroup_quota(tmp_path: Path, case: Case) -> None:
    root = build_tree(
        tmp_path, proc_cgroup=case.proc_cgroup, mountinfo=case.mountinfo, files=case.files
    )
    reading = read_cgroup_quota(root)
    assert reading.version == case.version
    assert reading.readable == case.readable
    if case.quota is None:
        assert reading.quota is None
    else:
        assert reading.quota is not None
        cpus, cgroup, file = case.quota
        assert reading.quota.cpus == pytest.approx(cpus)
        assert reading.quota.cgroup == cgroup
        assert reading.quota.file == file
        assert reading.quota.version == case.version
    joined = "\n".join(reading.notes)
    for expected in case.notes:
        assert expected in joined
    if case.clean:
        assert reading.notes == ()


def test_v1_docker_values(tmp_path: Path) -> None:
    """The raw values are kept, not only the ratio."""
    root = build_tree(
        tmp_path,
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files=cfs(V1_CPU, "50000"),
    )
    assert read_cgroup_quota(root).quota == CpuQuota(
        cpus=0.5,
        quota_us=50000,
        period_us=100000,
        version=1,
        file="/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us",
        cgroup=DOCKER_V1_PATH,
    )


# Root reads a chmod 000 file through CAP_DAC_OVERRIDE; as root, the read runs
# in a child whose capability bounding set lacks it, so the case is real in CI.
READ_AS_CHILD = """
import sys
from pathlib import Path
from tf_entrypoint.cpu import read_cgroup_quota
reading = read_cgroup_quota(Path(sys.argv[1]))
print(reading.readable)
print(reading.notes[0] if reading.notes else "")
"""


def test_unreadable_file_chmod_000(tmp_path: Path) -> None:
    root = build_tree(
        tmp_path, proc_cgroup="0::/\n", mountinfo=v2_mounts("/"), files={f"{V2}/cpu.max": "1"}
    )
    target = root / "sys/fs/cgroup/cpu.max"
    target.chmod(0)
    command = [sys.executable, "-c", READ_AS_CHILD, str(root)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "running as root needs setpriv (util-linux) to drop CAP_DAC_OVERRIDE"
        command = [setpriv, "--bounding-set=-dac_override,-dac_read_search", *command]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parents[2] / "entrypoint",
        )
    finally:
        target.chmod(0o644)
    readable, note = done.stdout.splitlines()
    assert readable == "False"
    assert "could not read /sys/fs/cgroup/cpu.max: Permission denied" in note


def test_empty_root(tmp_path: Path) -> None:
    """Nothing at all: no /proc, no /sys."""
    reading = read_cgroup_quota(tmp_path)
    assert reading == CgroupReading(
        version=None,
        readable=False,
        quota=None,
        notes=("could not read /proc/self/mountinfo: No such file or directory",),
    )


# --------------------------------------------------------------------------
# Pure parsers


def test_parse_mountinfo_fields() -> None:
    text = (
        "36 35 98:0 /mnt1 /mnt\\0402 rw,noatime master:1 shared:2 - cgroup2 none rw,nsdelegate\n"
        "37 35 0:30 /docker/x /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "38 35 0:31 / /proc rw - proc proc rw\n"
    )
    mounts, notes = parse_mountinfo(text)
    assert notes == ()
    assert mounts == (
        Mount("/mnt1", "/mnt 2", "cgroup2", ("rw", "nsdelegate")),
        Mount("/docker/x", "/sys/fs/cgroup/cpu,cpuacct", "cgroup", ("rw", "cpu", "cpuacct")),
    )


def test_parse_proc_cgroup_splits_controllers() -> None:
    lines, notes = parse_proc_cgroup("12:cpu,cpuacct:/a:b\n0::/\n1:name=systemd:/x\n")
    assert notes == ()
    assert [(m.hierarchy_id, m.controllers, m.path) for m in lines] == [
        ("12", ("cpu", "cpuacct"), "/a:b"),
        ("0", (), "/"),
        ("1", ("name=systemd",), "/x"),
    ]


@pytest.mark.parametrize(
    ("text", "kind", "quota", "period"),
    [
        ("150000 100000\n", "quota", 150000, 100000),
        ("max 100000\n", "unlimited", 0, 100000),
        ("max\n", "unlimited", 0, 100000),
        ("250000", "quota", 250000, 100000),
        ("50000 0", "invalid", 0, 0),
        ("-1 100000", "invalid", 0, 0),
        ("+5 100000", "invalid", 0, 0),
        ("1_000 100000", "invalid", 0, 0),
        ("", "invalid", 0, 0),
        ("max max", "invalid", 0, 0),
    ],
)
def test_parse_cpu_max(text: str, kind: str, quota: int, period: int) -> None:
    value = parse_cpu_max(text)
    assert (value.kind, value.quota_us, value.period_us) == (kind, quota, period)
    assert bool(value.problem) == (kind == "invalid")


@pytest.mark.parametrize(
    ("quota", "period", "kind"),
    [
        ("50000\n", "100000\n", "quota"),
        ("-1\n", None, "unlimited"),
        ("-1\n", "garbage", "unlimited"),
        ("0", "100000", "invalid"),
        ("50000", None, "invalid"),
        ("50000", "0", "invalid"),
        ("5e4", "100000", "invalid"),
    ],
)
def test_parse_cfs(quota: str, period: str | None, kind: str) -> None:
    assert parse_cfs(quota, period).kind == kind


@pytest.mark.parametrize(
    ("root", "path", "parts", "falls_back"),
    [
        ("/", "/", (), False),
        ("/", "/a/b", ("a", "b"), False),
        ("/docker/x", "/docker/x", (), False),
        ("/docker/x", "/docker/x/sub", ("sub",), False),
        ("/docker/x", "/docker/xy", (), True),  # a prefix of the name is not a parent
        ("/docker/x", "/other", (), True),
        ("/", "/../..", (), True),
        ("/", "/a/./b", (), True),
        ("/..", "/", (), True),
        ("/", "relative", (), True),
        ("/", "//a//b/", ("a", "b"), False),
    ],
)
def test_cgroup_subdirectory(
    root: str, path: str, parts: tuple[str, ...], falls_back: bool
) -> None:
    got, note = cgroup_subdirectory(root, "/sys/fs/cgroup", path)
    assert got == parts
    assert (note is not None) == falls_back


def test_choose_mount_prefers_sys_fs_cgroup_then_first() -> None:
    a = Mount("/", "/mnt/a", "cgroup2", ("rw",))
    b = Mount("/", "/sys/fs/cgroup", "cgroup2", ("rw",))
    c = Mount("/", "/sys/fs/cgroup/other", "cgroup2", ("rw",))
    bad = Mount("/", "/sys/../etc", "cgroup2", ("rw",))
    assert choose_mount((bad, a, b, c), "/x") is b
    assert choose_mount((bad, a), "/x") is a
    assert choose_mount((bad,), "/x") is None


# --------------------------------------------------------------------------
# cpu_budget


def reading_with(
    cpus: float | None,
    *,
    version: int = 2,
    readable: bool = True,
    quota_us: int | None = None,
    period_us: int = 100000,
) -> CgroupReading:
    """A CgroupReading with (or without) a quota of ``cpus``."""
    quota = None
    if cpus is not None:
        v: int = version
        assert v in (1, 2)
        quota = CpuQuota(
            cpus=cpus,
            quota_us=quota_us if quota_us is not None else round(cpus * period_us),
            period_us=period_us,
            version=1 if v == 1 else 2,
            file="/sys/fs/cgroup/cpu.max" if v == 2 else f"{V1_CPU}/cpu.cfs_quota_us",
            cgroup="/",
        )
    return CgroupReading(
        version=(1 if version == 1 else 2) if readable else None,
        readable=readable,
        quota=quota,
        notes=(),
    )


@pytest.mark.parametrize(
    ("exact", "rounding", "expected"),
    [
        (0.5, "floor", 1),
        (0.5, "ceil", 1),
        (0.5, "nearest", 1),
        (0.01, "nearest", 1),
        (0.0, "floor", 1),
        (1.5, "floor", 1),
        (1.5, "ceil", 2),
        (1.5, "nearest", 2),
        (2.49, "nearest", 2),
        (2.5, "nearest", 3),
        (2.01, "ceil", 3),
        (1.99, "floor", 1),
        (3.0, "floor", 3),
        (3.0, "ceil", 3),
        (3.0, "nearest", 3),
        (64.0, "floor", 64),
    ],
)
def test_round_cpus(exact: float, rounding: Rounding, expected: int) -> None:
    assert round_cpus(exact, rounding) == expected


def test_quota_detail_v2_floor() -> None:
    budget = cpu_budget(
        affinity_cpus=64,
        cgroup=reading_with(1.5),
        rounding="floor",
        override=None,
        limit_millicores=None,
    )
    assert (budget.cpus, budget.exact, budget.source) == (1, 1.5, SOURCE_CGROUP_V2)
    assert budget.detail == (
        "cgroup v2 cpu.max '150000 100000' at /sys/fs/cgroup/cpu.max (cgroup /) = 1.5 CPUs; "
        "rounded down (floor) to 1"
    )


def test_quota_detail_v1_ceil() -> None:
    budget = cpu_budget(
        affinity_cpus=64,
        cgroup=reading_with(1.5, version=1),
        rounding="ceil",
        override=None,
        limit_millicores=None,
    )
    assert (budget.cpus, budget.source) == (2, SOURCE_CGROUP_V1)
    assert budget.detail == (
        "cgroup v1 cpu.cfs_quota_us=150000 cpu.cfs_period_us=100000 at "
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us (cgroup /) = 1.5 CPUs; "
        "rounded up (ceil) to 2"
    )


@pytest.mark.parametrize(("rounding", "expected"), [("floor", 2), ("ceil", 3), ("nearest", 3)])
def test_each_rounding_mode_on_a_quota(rounding: Rounding, expected: int) -> None:
    budget = cpu_budget(
        affinity_cpus=8,
        cgroup=reading_with(2.5),
        rounding=rounding,
        override=None,
        limit_millicores=None,
    )
    assert budget.cpus == expected
    assert budget.rounding == rounding


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_quota_below_one_cpu_gives_one(rounding: Rounding) -> None:
    budget = cpu_budget(
        affinity_cpus=64,
        cgroup=reading_with(0.5),
        rounding=rounding,
        override=None,
        limit_millicores=None,
    )
    assert budget.cpus == 1
    assert budget.exact == 0.5
    if rounding == "floor":
        assert budget.detail.endswith("rounded down (floor) gives 0, raised to the minimum of 1")


def test_affinity_smaller_than_quota_wins() -> None:
    budget = cpu_budget(
        affinity_cpus=2,
        cgroup=reading_with(4.0),
        rounding="floor",
        override=None,
        limit_millicores=None,
    )
    assert (budget.cpus, budget.exact, budget.source) == (2, 2.0, SOURCE_AFFINITY)
    assert budget.detail.startswith("cpu affinity: 2 CPUs in this process's affinity mask, fewer")
    assert "= 4 CPUs" in budget.detail


def test_quota_equal_to_affinity_is_reported_as_the_quota() -> None:
    budget = cpu_budget(
        affinity_cpus=2,
        cgroup=reading_with(2.0),
        rounding="floor",
        override=None,
        limit_millicores=None,
    )
    assert (budget.cpus, budget.source) == (2, SOURCE_CGROUP_V2)


def test_no_quota_uses_affinity() -> None:
    budget = cpu_budget(
        affinity_cpus=64,
        cgroup=reading_with(None),
        rounding="floor",
        override=None,
        limit_millicores=None,
    )
    assert (budget.cpus, budget.source) == (64, SOURCE_AFFINITY)
    assert budget.detail == (
        "cpu affinity: 64 CPUs in this process's affinity mask; "
        "no CFS quota in the cgroup v2 hierarchy"
    )


def test_override_wins_even_above_affinity() -> None:
    budget = cpu_budget(
        affinity_cpus=4,
        cgroup=reading_with(0.5),
        rounding="floor",
        override=8.0,
        limit_millicores=1500,
    )
    assert (budget.cpus, budget.exact, budget.source) == (8, 8.0, SOURCE_OVERRIDE)
    assert "TF_ENTRYPOINT_CPUS=8 set by the user, over the cgroup v2 quota of 0.5 CPUs" in (
        budget.detail
    )
    assert "above the 4 CPUs in this process's affinity mask (used anyway)" in budget.detail
    assert "TF_ENTRYPOINT_CPU_LIMIT_MILLICORES=1500 ignored (TF_ENTRYPOINT_CPUS is set)" in (
        budget.detail
    )


def test_fractional_override_is_rounded() -> None:
    budget = cpu_budget(
        affinity_cpus=4,
        cgroup=reading_with(None),
        rounding="ceil",
        override=2.5,
        limit_millicores=None,
    )
    assert (budget.cpus, budget.exact) == (3, 2.5)
    assert "above" not in budget.detail


def test_millicores_used_only_when_unreadable() -> None:
    budget = cpu_budget(
        affinity_cpus=64,
        cgroup=reading_with(None, readable=False),
        rounding="floor",
        override=None,
        limit_millicores=1500,
    )
    assert (budget.cpus, budget.exact, budget.source) == (1, 1.5, SOURCE_MILLICORES)
    assert budget.detail == (
        "TF_ENTRYPOINT_CPU_LIMIT_MILLICORES=1500 (Kubernetes downward API limits.cpu) = 1.5 CPUs, "
        "used because the cgroup cpu files could not be read; rounded down (floor) to 1"
    )


def test_millicores_ignored_when_cgroup_readable_without_quota() -> None:
    budget = cpu_budget(
        affinity_cpus=64,
        cgroup=reading_with(None, readable=True),
        rounding="floor",
        override=None,
        limit_millicores=1500,
    )
    assert (budget.cpus, budget.source) == (64, SOURCE_AFFINITY)
    assert "TF_ENTRYPOINT_CPU_LIMIT_MILLICORES=1500 ignored (the cgroup files were read)" in (
        budget.detail
    )


def test_millicores_ignored_when_a_quota_exists() -> None:
    budget = cpu_budget(
        affinity_cpus=64,
        cgroup=reading_with(3.0),
        rounding="floor",
        override=None,
        limit_millicores=1500,
    )
    assert (budget.cpus, budget.source) == (3, SOURCE_CGROUP_V2)


def test_millicores_capped_by_affinity() -> None:
    budget = cpu_budget(
        affinity_cpus=2,
        cgroup=reading_with(None, readable=False),
        rounding="floor",
        override=None,
        limit_millicores=4000,
    )
    assert (budget.cpus, budget.source) == (2, SOURCE_AFFINITY)
    assert "fewer than TF_ENTRYPOINT_CPU_LIMIT_MILLICORES=4000" in budget.detail


def test_unreadable_without_hint_uses_affinity() -> None:
    budget = cpu_budget(
        affinity_cpus=3,
        cgroup=reading_with(None, readable=False),
        rounding="floor",
        override=None,
        limit_millicores=None,
    )
    assert (budget.cpus, budget.source) == (3, SOURCE_AFFINITY)
    assert budget.detail.endswith("the cgroup cpu files could not be read")


def test_zero_affinity_is_treated_as_one() -> None:
    budget = cpu_budget(
        affinity_cpus=0,
        cgroup=reading_with(None),
        rounding="floor",
        override=None,
        limit_millicores=None,
    )
    assert (budget.cpus, budget.affinity_cpus) == (1, 1)
    assert "1 CPU in this process's affinity mask" in budget.detail


# --------------------------------------------------------------------------
# detect_cpu_budget (the edge)


def test_detect_on_a_fake_tree(tmp_path: Path) -> None:
    root = build_tree(
        tmp_path,
        proc_cgroup=v1_proc_cgroup(DOCKER_V1_PATH),
        mountinfo=v1_mounts(DOCKER_V1_PATH),
        files=cfs(V1_CPU, "150000"),
    )
    budget = detect_cpu_budget(root=root, affinity_cpus=64, rounding="nearest")
    assert (budget.cpus, budget.exact, budget.source) == (2, 1.5, SOURCE_CGROUP_V1)
    assert budget.cgroup.quota is not None
    assert budget.cgroup.quota.cgroup == DOCKER_V1_PATH


def test_detect_uses_the_affinity_mask(tmp_path: Path) -> None:
    budget = detect_cpu_budget(root=tmp_path)
    assert budget.affinity_cpus == len(os.sched_getaffinity(0))
    assert budget.source == SOURCE_AFFINITY
    assert budget.rounding == "floor"


def test_detect_without_sched_getaffinity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert detect_cpu_budget(root=tmp_path).affinity_cpus == 6


# --------------------------------------------------------------------------
# Properties: garbage never raises, the budget is always >= 1

CGROUP_LINES = st.sampled_from(
    ["0::/", "0::/a/b", "0::/a", "0::/../..", "12:cpu,cpuacct:/docker/x", "1:cpu:/", "3:memory:/x"]
)
MOUNT_LINES = st.sampled_from(
    [
        mountinfo_line("/", V2, "cgroup2", "rw").strip(),
        mountinfo_line("/", UNIFIED, "cgroup2", "rw").strip(),
        mountinfo_line("/docker/x", V1_CPU, "cgroup", "rw,cpu,cpuacct").strip(),
        mountinfo_line("/", "/sys/fs/cgroup/cpu", "cgroup", "rw,cpu").strip(),
        mountinfo_line("/..", V2, "cgroup2", "rw").strip(),
        "22 1 0:21 / / rw,relatime - overlay overlay rw",
    ]
)


def proc_file(real_lines: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """Random bytes, garbage mixed with real lines, or real lines only."""
    mixed = st.lists(st.one_of(real_lines, st.text(max_size=40)), max_size=6)
    real = st.lists(real_lines, min_size=1, max_size=5)
    return st.one_of(
        st.binary(max_size=300),
        mixed.map(lambda lines: "\n".join(lines).encode("utf-8", "surrogatepass")),
        real.map(lambda lines: "\n".join(lines).encode()),
        real.map(lambda lines: "\n".join(lines).encode()),
    )


CONTENT = st.one_of(
    st.binary(max_size=64),
    proc_file(CGROUP_LINES),
    st.sampled_from(
        [b"max", b"max 100000", b"50000 0", b"-1", b"0", b"150000 100000", b"7", b"100000\n"]
    ),
    st.builds(lambda a, b: f"{a} {b}".encode(), st.integers(), st.integers()),
    st.integers(min_value=-2, max_value=10**6).map(lambda n: f"{n}\n".encode()),
)
CONTROLLERS = st.one_of(
    st.sampled_from([b"cpu\n", b"cpuset cpu io memory pids\n", b"hugetlb\n"]), CONTENT
)
CONTROL_FILES = (
    f"{V2}/cpu.max",
    f"{V2}/a/cpu.max",
    f"{V2}/cgroup.controllers",
    f"{UNIFIED}/cpu.max",
    f"{UNIFIED}/cgroup.controllers",
    f"{V1_CPU}/cpu.cfs_quota_us",
    f"{V1_CPU}/cpu.cfs_period_us",
    "/sys/fs/cgroup/cpu/cpu.cfs_quota_us",
    "/sys/fs/cgroup/cpu/cpu.cfs_period_us",
)


@dataclass(frozen=True)
class Garbage:
    """One generated tree plus the budget's other inputs."""

    proc_cgroup: bytes
    mountinfo: bytes
    contents: tuple[bytes, ...]
    rounding: Rounding
    affinity: int
    millicores: int | None


GARBAGE = st.builds(
    Garbage,
    proc_cgroup=proc_file(CGROUP_LINES),
    mountinfo=proc_file(MOUNT_LINES),
    contents=st.tuples(
        *(CONTROLLERS if name.endswith("controllers") else CONTENT for name in CONTROL_FILES)
    ),
    rounding=st.sampled_from(ROUNDINGS),
    affinity=st.integers(min_value=-2, max_value=512),
    millicores=st.one_of(st.none(), st.integers(min_value=1, max_value=10**7)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(GARBAGE)
def test_garbage_never_raises(garbage: Garbage) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = build_tree(
            Path(tmp),
            proc_cgroup=garbage.proc_cgroup,
            mountinfo=garbage.mountinfo,
            files=dict(zip(CONTROL_FILES, garbage.contents, strict=True)),
        )
        reading = read_cgroup_quota(root)
        budget = cpu_budget(
            affinity_cpus=garbage.affinity,
            cgroup=reading,
            rounding=garbage.rounding,
            override=None,
            limit_millicores=garbage.millicores,
        )
    assert budget.cpus >= 1
    assert budget.detail
    if reading.quota is not None:
        assert reading.quota.cpus > 0
        assert reading.quota.period_us > 0
        assert reading.quota.file.startswith("/")
    for text in (*reading.notes, budget.detail):
        text.encode("utf-8")  # printable: no lone surrogates


@given(
    path=st.lists(st.sampled_from(["a", "b", "..", ".", ""]), max_size=6).map(
        lambda parts: "/" + "/".join(parts)
    ),
    root=st.lists(st.sampled_from(["a", "b", ".."]), max_size=3).map(
        lambda parts: "/" + "/".join(parts)
    ),
)
def test_translation_never_leaves_the_mount_point(path: str, root: str) -> None:
    parts, note = cgroup_subdirectory(root, "/sys/fs/cgroup", path)
    assert not {".", "..", ""} & set(parts)
    if note is not None:
        assert parts == ()


@given(
    exact=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    rounding=st.sampled_from(ROUNDINGS),
)
def test_round_cpus_property(exact: float, rounding: Rounding) -> None:
    cpus = round_cpus(exact, rounding)
    assert cpus >= 1
    assert abs(cpus - exact) <= max(1.0, 1 - exact)
