"""Every kernel-file parser: split as the kernel writes (proc(5)), never raises on any bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tf_entrypoint.cgroup_v1 import parse_cfs
from tf_entrypoint.cgroup_v2 import parse_controllers, parse_cpu_max
from tf_entrypoint.cgroups import Mount, parse_mountinfo, parse_proc_cgroup
from tf_entrypoint.nvidia import parse_information

#: Characters str.split() or str.splitlines() would break at, which the kernel does not.
ODD = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u00a0", "\u2028"]


#: Arbitrary bytes, and text made of separators, odd characters and field material.
BYTES = st.one_of(
    st.binary(max_size=400),
    st.text(
        alphabet=st.sampled_from([*ODD, " ", "\n", "\t", ":", ",", "-", "0", "5", "a", "/", "\\"]),
        max_size=200,
    ).map(lambda t: t.encode("utf-8")),
)


def text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")  # how /proc files are read


@given(BYTES)
def test_mountinfo_any_bytes(data: bytes) -> None:
    mounts, notes = parse_mountinfo(text(data))
    assert all(m.fstype in ("cgroup", "cgroup2") for m in mounts)
    assert len(notes) <= 1


@given(BYTES)
def test_proc_cgroup_any_bytes(data: bytes) -> None:
    memberships, notes = parse_proc_cgroup(text(data))
    assert all(m.path.startswith("/") for m in memberships)
    assert len(notes) <= 1


@given(BYTES)
def test_cpu_max_any_bytes(data: bytes) -> None:
    value = parse_cpu_max(text(data))
    assert value.kind in ("quota", "unlimited", "invalid")
    if value.kind == "quota":
        assert value.quota_us > 0
        assert value.period_us > 0


@given(BYTES, st.none() | BYTES)
def test_cfs_any_bytes(quota: bytes, period: bytes | None) -> None:
    value = parse_cfs(text(quota), None if period is None else text(period))
    if value.kind == "quota":
        assert value.quota_us > 0
        assert value.period_us > 0


@given(BYTES)
def test_controllers_any_bytes(data: bytes) -> None:
    assert all(name and " " not in name for name in parse_controllers(text(data)))


@given(BYTES)
def test_nvidia_information_any_bytes(data: bytes) -> None:
    fields = parse_information(text(data))
    assert all("\n" not in key + value for key, value in fields.items())


@pytest.mark.parametrize("odd", ODD)
def test_a_path_with_odd_characters_is_one_field(odd: str) -> None:
    point = f"/sys/fs/cgroup/a{odd}b"
    line = f"30 25 0:26 / {point} rw,nosuid - cgroup2 cgroup2 rw\n"
    mounts, notes = parse_mountinfo(line + "31 25 0:27 / /x rw - tmpfs tmpfs rw\n")
    assert mounts == (Mount("/", point, "cgroup2", ("rw",)),)
    assert notes == ()
    memberships, notes = parse_proc_cgroup(f"0::/job{odd}/step\n1:cpu:/x\n")
    assert [m.path for m in memberships] == [f"/job{odd}/step", "/x"]
    assert notes == ()


@pytest.mark.parametrize("odd", ODD)
def test_control_files_split_on_single_spaces_only(odd: str) -> None:
    assert parse_cpu_max(f"150000{odd}100000\n").kind == "invalid"
    assert parse_cpu_max("150000 100000\n").quota_us == 150000
    assert parse_cfs(f"50000{odd}\n", "100000\n").kind == "invalid"
    assert parse_controllers(f"cpu{odd}io memory\n") == (f"cpu{odd}io", "memory")
    fields = parse_information(f"Model: \t NVIDIA{odd}A100\nGPU UUID:\tGPU-1\n")
    assert fields == {"Model": f"NVIDIA{odd}A100", "GPU UUID": "GPU-1"}


def test_octal_escapes_and_short_records() -> None:
    mountinfo = (
        "30 25 0:26 /r\\040oot /sys/fs/cgroup/a\\011b rw - cgroup cgroup rw,cpu\n"
        "31 25 0:27 / /short rw - cgroup\n"  # truncated: skipped with a note
        "garbage\n"
    )
    mounts, notes = parse_mountinfo(mountinfo)
    assert mounts == (Mount("/r oot", "/sys/fs/cgroup/a\tb", "cgroup", ("rw", "cpu")),)
    assert notes == ("ignored 2 malformed line(s) in /proc/self/mountinfo",)


#: Path characters: letters, the odd separators, and what the kernel escapes in mountinfo.
PATH_TEXT = st.text(
    alphabet=st.sampled_from(["a", "b", "-", "/", " ", "\t", "\\", *ODD]), max_size=20
)


def mountinfo_escape(path: str) -> str:
    """What the kernel writes for a path in mountinfo (show_mountinfo: mangle ' \\t\\n\\\\')."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


@given(point=PATH_TEXT, root=PATH_TEXT)
def test_any_mount_path_comes_back_as_written(point: str, root: str) -> None:
    point, root = "/" + point, "/" + root
    line = f"30 25 0:26 {mountinfo_escape(root)} {mountinfo_escape(point)} rw - cgroup2 none rw\n"
    data = (line + "garbage\n").encode("utf-8")
    mounts, notes = parse_mountinfo(text(data))
    assert mounts == (Mount(root, point, "cgroup2", ("rw",)),)
    assert notes == ("ignored 1 malformed line(s) in /proc/self/mountinfo",)


@given(path=PATH_TEXT)
def test_any_cgroup_path_comes_back_as_written(path: str) -> None:
    data = f"0::/{path}\n1:cpu,cpuacct:/x\n".encode()
    memberships, notes = parse_proc_cgroup(text(data))
    assert [(m.hierarchy_id, m.controllers, m.path) for m in memberships] == [
        ("0", (), f"/{path}"),
        ("1", ("cpu", "cpuacct"), "/x"),
    ]
    assert notes == ()
