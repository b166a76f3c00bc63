"""The lowest CFS quota from the process's cgroup up to the top of its mounted hierarchy.

Finds the cpu controller through ``/proc/self/mountinfo`` and
``/proc/self/cgroup`` and walks up the levels, reading each with the version's
module (:mod:`tf_entrypoint.cgroup_v1` or :mod:`tf_entrypoint.cgroup_v2`). Never
raises: every oddity becomes a note. docs/configuration.md.
"""

from __future__ import annotations

from tf_entrypoint import cgroup_v1, cgroup_v2
from tf_entrypoint.common import show
from tf_entrypoint.frozen import frozen
from tf_entrypoint.kernel import fields, read_proc_file, records, unescape, why

TYPE_CHECKING = False
if TYPE_CHECKING:
    from os import PathLike
    from typing import Literal, Protocol

    from tf_entrypoint.kernel import LevelValue

    class Version(Protocol):
        """What cgroup_v1 and cgroup_v2 each provide."""

        VERSION: Literal[1, 2]

        def read_level(self, directory: str) -> tuple[LevelValue | None, str, str]: ...


#: Mount points are preferred below this directory when a hierarchy is
#: mounted more than once.
_CGROUP_FS = ("sys", "fs", "cgroup")


@frozen
class CpuQuota:
    """One CFS quota, and where it was found."""

    #: quota / period: how many CPUs' worth of time per period.
    cpus: float
    quota_us: int
    period_us: int
    version: Literal[1, 2]
    #: The file it was read from, in the process's own view (escaped for display).
    file: str
    #: The cgroup path of the level that set it, e.g. ``/kubepods/pod1``.
    cgroup: str


@frozen
class CgroupReading:
    """What the cgroup cpu controller says, with every oddity met on the way."""

    #: Which hierarchy the cpu controller was found in; None when none was.
    version: Literal[1, 2] | None
    #: False when no level's cpu controller files could be found or read.
    readable: bool
    #: The lowest quota from the process's cgroup up to the mount root; None
    #: when no level sets one.
    quota: CpuQuota | None
    #: One human sentence per oddity.
    notes: tuple[str, ...]


@frozen
class Mount:
    """One cgroup or cgroup2 record of ``/proc/self/mountinfo``."""

    #: Field 4: the path of the hierarchy that is mounted.
    root: str
    #: Field 5: where it is mounted, in the process's mount namespace.
    mount_point: str
    fstype: str
    super_options: tuple[str, ...]


@frozen
class CgroupMembership:
    """One record of ``/proc/self/cgroup``: ``ID:controller,list:/path``."""

    hierarchy_id: str
    controllers: tuple[str, ...]
    path: str


def parse_mountinfo(text: str) -> tuple[tuple[Mount, ...], tuple[str, ...]]:
    """The cgroup and cgroup2 mounts of a mountinfo file, and notes.

    proc(5): ``ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] -
    FSTYPE SOURCE SUPER_OPTIONS``; the optional fields end at the lone ``-``.
    """
    mounts: list[Mount] = []
    malformed = 0
    for record in records(text):
        parts = fields(record)
        try:
            separator = parts.index("-", 6)
        except ValueError:
            malformed += 1
            continue
        if len(parts) < separator + 4:
            malformed += 1
            continue
        fstype = parts[separator + 1]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        mounts.append(
            Mount(
                root=unescape(parts[3]),
                mount_point=unescape(parts[4]),
                fstype=fstype,
                super_options=tuple(parts[separator + 3].split(",")),
            )
        )
    notes = (f"ignored {malformed} malformed line(s) in /proc/self/mountinfo",) if malformed else ()
    return tuple(mounts), notes


def parse_proc_cgroup(text: str) -> tuple[tuple[CgroupMembership, ...], tuple[str, ...]]:
    """The records of ``/proc/self/cgroup``, and notes."""
    memberships: list[CgroupMembership] = []
    malformed = 0
    for record in records(text):
        parts = record.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            malformed += 1
            continue
        hierarchy_id, controllers, path = parts
        memberships.append(
            CgroupMembership(
                hierarchy_id=hierarchy_id,
                controllers=tuple(c for c in controllers.split(",") if c),
                path=path,
            )
        )
    notes = (f"ignored {malformed} malformed line(s) in /proc/self/cgroup",) if malformed else ()
    return tuple(memberships), notes


def _components(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part)


def _has_dots(parts: tuple[str, ...]) -> bool:
    return any(part in (".", "..") for part in parts)


def cgroup_subdirectory(
    mount_root: str, mount_point: str, cgroup_path: str
) -> tuple[tuple[str, ...], str | None]:
    """The components of the process's cgroup directory below the mount point.

    For cgroup path P and mount root R: P minus R when P is at or below R;
    otherwise (P outside R, ``..`` anywhere, not absolute) the mount point
    itself, with a note saying why. The result never contains ``.`` or
    ``..``, so joining it to the mount point never leaves it.
    """
    show_path, show_root, show_mp = show(cgroup_path), show(mount_root), show(mount_point)
    if not cgroup_path.startswith("/") or "\x00" in cgroup_path:
        return (), (
            f"cgroup path {show_path!r} in /proc/self/cgroup is not an absolute path; "
            f"reading the mount point {show_mp} instead"
        )
    path_parts = _components(cgroup_path)
    root_parts = _components(mount_root)
    if _has_dots(path_parts):
        return (), (
            f"cgroup path {show_path} in /proc/self/cgroup contains '..' (a cgroup namespace "
            f"hides where the process really is); reading the mount point {show_mp} instead"
        )
    if _has_dots(root_parts) or not mount_root.startswith("/"):
        return (), (
            f"the mount root {show_root} of {show_mp} lies outside this cgroup namespace; "
            f"reading the mount point {show_mp} instead"
        )
    if path_parts[: len(root_parts)] != root_parts:
        return (), (
            f"cgroup path {show_path} is not below the mount root {show_root} of {show_mp}; "
            f"reading the mount point {show_mp} instead"
        )
    return path_parts[len(root_parts) :], None


def _valid_mount_point(mount: Mount) -> bool:
    """An absolute path without '.', '..' or NUL: safe to join under the root."""
    point = mount.mount_point
    return point.startswith("/") and "\x00" not in point and not _has_dots(_components(point))


def choose_mount(mounts: tuple[Mount, ...], cgroup_path: str | None) -> Mount | None:
    """The mount of a hierarchy to read, when it is mounted more than once.

    Prefer one whose root contains the process's cgroup (the deepest such
    root), then one below /sys/fs/cgroup, then the first listed.
    """
    best: Mount | None = None
    best_key: tuple[int, int, int] | None = None
    path_parts = _components(cgroup_path) if cgroup_path is not None else None
    for mount in mounts:
        if not _valid_mount_point(mount):
            continue
        root_parts = _components(mount.root)
        contains = path_parts is not None and path_parts[: len(root_parts)] == root_parts
        under_sys = _components(mount.mount_point)[:3] == _CGROUP_FS
        key = (int(contains), len(root_parts) if contains else 0, int(under_sys))
        if best_key is None or key > best_key:
            best, best_key = mount, key
    return best


def _join(root: str, parts: tuple[str, ...]) -> str:
    return "/".join((root.rstrip("/"), *parts))


def _walk(root: str, version: Version, mount: Mount, cgroup_path: str | None) -> CgroupReading:
    """Read the quota at every level from the process's cgroup to the mount."""
    number = version.VERSION
    notes: list[str] = []
    mp_parts = _components(mount.mount_point)
    if cgroup_path is None:
        parts: tuple[str, ...] = ()
        notes.append(
            f"/proc/self/cgroup does not name the process's cgroup v{number} cpu cgroup; "
            f"reading the mount point {show(mount.mount_point)} instead"
        )
    else:
        parts, note = cgroup_subdirectory(mount.root, mount.mount_point, cgroup_path)
        if note:
            notes.append(note)
    # The cgroup path each level stands for: the mount root plus the parts,
    # or the mount root alone when it lies outside the namespace.
    root_parts = _components(mount.root)
    if _has_dots(root_parts) or not mount.root.startswith("/"):
        root_parts = ()
    readable = False
    lowest: CpuQuota | None = None
    for depth in range(len(parts), -1, -1):
        level = parts[:depth]
        value, failure, name = version.read_level(_join(root, (*mp_parts, *level)))
        shown_file = show("/" + "/".join((*mp_parts, *level, name)))
        cgroup = show("/" + "/".join((*root_parts, *level)))
        if value is None:
            if failure:
                notes.append(f"could not read {shown_file}: {failure}; ignored that level")
            elif depth == len(parts):
                notes.append(
                    f"{shown_file} does not exist (no {name} in the process's own cgroup)"
                    + ("; looked at the parents" if parts else "")
                )
            continue
        if value.kind == "invalid":
            notes.append(f"ignored {shown_file}: {value.problem}")
            continue
        readable = True
        if value.kind == "unlimited":
            continue
        cpus = value.quota_us / value.period_us
        if lowest is None or cpus < lowest.cpus:
            lowest = CpuQuota(cpus, value.quota_us, value.period_us, number, shown_file, cgroup)
    return CgroupReading(version=number, readable=readable, quota=lowest, notes=tuple(notes))


def read_cgroup_quota(root: str | PathLike[str] = "/") -> CgroupReading:
    """The lowest CFS quota over the process's cgroup and its parents.

    Reads ``root/proc/self/cgroup`` and ``root/proc/self/mountinfo``, then the
    cpu controller's files below ``root/<mount point>``.
    """
    base = str(root)
    notes: list[str] = []
    try:
        mountinfo = read_proc_file(_join(base, ("proc", "self", "mountinfo")))
    except (OSError, ValueError) as error:
        note = f"could not read /proc/self/mountinfo: {why(error)}"
        return CgroupReading(version=None, readable=False, quota=None, notes=(note,))
    mounts, mount_notes = parse_mountinfo(mountinfo)
    notes.extend(mount_notes)
    try:
        text = read_proc_file(_join(base, ("proc", "self", "cgroup")))
        memberships, cgroup_notes = parse_proc_cgroup(text)
        notes.extend(cgroup_notes)
    except (OSError, ValueError) as error:
        memberships = ()
        notes.append(f"could not read /proc/self/cgroup: {why(error)}")

    v1_path = next((m.path for m in memberships if "cpu" in m.controllers), None)
    v2_path = next(
        (m.path for m in memberships if m.hierarchy_id == "0" and not m.controllers), None
    )
    v1_mounts = tuple(m for m in mounts if m.fstype == "cgroup" and "cpu" in m.super_options)
    v2_mounts = tuple(m for m in mounts if m.fstype == "cgroup2")
    for mount in (*v1_mounts, *v2_mounts):
        if not _valid_mount_point(mount):
            notes.append(
                f"ignored the {mount.fstype} mount at {show(mount.mount_point)!r}: "
                "not a plain absolute path"
            )

    # A v1 cpu controller wins (hybrid hosts: the cgroup2 mount has no cpu controller).
    v1_mount = choose_mount(v1_mounts, v1_path)
    if v1_mount is not None:
        return _with_notes(_walk(base, cgroup_v1, v1_mount, v1_path), notes)
    v2_mount = choose_mount(v2_mounts, v2_path)
    if v2_mount is not None:
        directory = _join(base, _components(v2_mount.mount_point))
        if cgroup_v2.has_cpu_controller(directory) is False:
            notes.append(
                f"the cgroup2 mount at {show(v2_mount.mount_point)} has no cpu controller "
                "(cgroup.controllers does not list cpu) and no cgroup v1 cpu controller "
                "is mounted"
            )
            return CgroupReading(version=None, readable=False, quota=None, notes=tuple(notes))
        return _with_notes(_walk(base, cgroup_v2, v2_mount, v2_path), notes)
    notes.append(
        "no cgroup cpu controller is mounted (no cgroup v1 mount with the cpu option "
        "and no cgroup2 mount in /proc/self/mountinfo)"
    )
    return CgroupReading(version=None, readable=False, quota=None, notes=tuple(notes))


def _with_notes(reading: CgroupReading, notes: list[str]) -> CgroupReading:
    return CgroupReading(reading.version, reading.readable, reading.quota, (*notes, *reading.notes))
