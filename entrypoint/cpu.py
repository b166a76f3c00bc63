"""How many CPUs this container may really use.

TensorFlow sizes its intra-op and inter-op thread pools from
``sched_getaffinity`` and ignores CFS quotas: under ``docker run --cpus=1`` on
a 64-core node it starts 64 threads per pool and the kernel throttles them at
every CFS period. This module finds the real budget so the entrypoint can size
the pools before handing off.

Precedence (first match wins)
-----------------------------
1. ``TF_ENTRYPOINT_CPUS`` (``override``): the user's number, used as is, even
   above the affinity count.
2. The lowest CFS quota found walking from the process's own cgroup up to the
   cgroup mount root (cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``
   or cgroup v2 ``cpu.max``), capped by the affinity count: a cpuset smaller
   than the quota wins.
3. ``TF_ENTRYPOINT_CPU_LIMIT_MILLICORES`` (``limit_millicores``, the
   Kubernetes downward API ``limits.cpu`` with ``divisor: 1m``), capped by the
   affinity count, and only when the cgroup files could not be read at all:
   when they can be read they are the truth (the downward API reports node
   allocatable when no limit is set).
4. The affinity count (``len(os.sched_getaffinity(0))``).

Which hierarchy
---------------
The cpu controller is looked for in ``/proc/self/mountinfo``: a ``cgroup``
(v1) mount whose super options include ``cpu`` wins over a ``cgroup2`` mount,
as in OpenJDK and automaxprocs, because on hybrid hosts (v1 controllers plus
a cgroup2 mount at ``/sys/fs/cgroup/unified``) the v2 hierarchy has no cpu
controller. cgroup v2 is used when no v1 cpu controller is mounted, after
checking (when the file can be read) that ``cgroup.controllers`` lists
``cpu``. The process's cgroup path from ``/proc/self/cgroup`` is translated
with the mount root (mountinfo field 4) to a directory below the mount point
(field 5); a path outside the mount root or containing ``..`` (cgroup
namespaces) falls back to the mount point itself, with a note. Nothing is
ever read outside the mount point.

Rounding
--------
Thread pools need a whole number; the result is never below 1.

* ``floor`` (the default, automaxprocs' and libuv's choice): never more
  runnable threads than the quota can serve within one CFS period, so a
  fully busy pool is not throttled for the rest of each period; this protects
  tail (p99) latency, at the cost of leaving up to one CPU of quota unused
  (1.9 CPUs gives 1 thread).
* ``ceil`` (OpenJDK's, .NET's, Go's and loky's choice): uses all of the quota
  for throughput, and accepts some throttling when every thread is busy.
* ``nearest`` (half up): a compromise.

There is no consensus across runtimes. Floor is the default on this
project's quota sweep (docs/bench/results.md): at --cpus 1.5, ceil gave
batch-1 inference 0.79x and batch-64 inference 0.94x the throughput of floor,
training 1.05x, with p99 within 4 % either way.

Limitations
-----------
Only what the process can see is read. Inside a Docker container on cgroup v1
(or with a private cgroup namespace on v2) only the container's own cgroup is
mounted, so a quota set solely on a parent (``--cgroup-parent``, a Kubernetes
pod-level limit) is invisible; set ``TF_ENTRYPOINT_CPUS`` then. Quotas are
read once, at start: a later ``docker update --cpus`` is not followed.
``cpu.shares`` / ``cpu.weight`` are ignored (they are proportions, not caps).

Everything here is stdlib-only and reads a handful of small files; every
filesystem root is injectable so the tests use fake ``/proc`` and ``/sys``
trees.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from entrypoint.common import Rounding
from entrypoint.frozen import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

#: cgroup v2 ``cpu.max`` with a single field means this period (the kernel's
#: default, and what Kubernetes sets).
DEFAULT_PERIOD_US = 100_000

SOURCE_OVERRIDE = "TF_ENTRYPOINT_CPUS"
SOURCE_CGROUP_V1 = "cgroup v1 quota"
SOURCE_CGROUP_V2 = "cgroup v2 quota"
SOURCE_MILLICORES = "TF_ENTRYPOINT_CPU_LIMIT_MILLICORES"
SOURCE_AFFINITY = "cpu affinity"

#: Mount points are preferred below this directory when a hierarchy is
#: mounted more than once.
_CGROUP_FS = ("sys", "fs", "cgroup")
#: Control files are a few bytes; anything longer is garbage.
_MAX_CONTROL_FILE = 4096
_DIGITS = re.compile(r"-?[0-9]+")
_MOUNTINFO_ESCAPE = re.compile(r"\\([0-7]{3})")


@frozen
class CpuQuota:
    """One CFS quota, and where it was found."""

    #: quota / period: how many CPUs' worth of time per period.
    cpus: float
    quota_us: int
    period_us: int
    version: Literal[1, 2]
    #: The file it was read from, as a path in the process's own view, e.g.
    #: ``/sys/fs/cgroup/cpu/cpu.cfs_quota_us`` (for display: characters that
    #: cannot be printed are escaped).
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
class CpuBudget:
    """The number of CPUs thread pools are sized from, and why."""

    #: Rounded, at least 1.
    cpus: int
    #: The fractional budget before rounding.
    exact: float
    #: One of the ``SOURCE_*`` strings.
    source: str
    #: One human sentence saying where the number came from.
    detail: str
    affinity_cpus: int
    cgroup: CgroupReading
    rounding: Rounding


# --------------------------------------------------------------------------
# Parsing (pure)


@frozen
class Mount:
    """One cgroup or cgroup2 line of ``/proc/self/mountinfo``."""

    #: Field 4: the path of the hierarchy that is mounted.
    root: str
    #: Field 5: where it is mounted, in the process's mount namespace.
    mount_point: str
    fstype: str
    super_options: tuple[str, ...]


@frozen
class CgroupMembership:
    """One line of ``/proc/self/cgroup``: ``ID:controller,list:/path``."""

    hierarchy_id: str
    controllers: tuple[str, ...]
    path: str


def _unescape_mountinfo(field: str) -> str:
    r"""Undo the kernel's octal escapes (``\040`` is a space)."""
    return _MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> tuple[tuple[Mount, ...], tuple[str, ...]]:
    """The cgroup and cgroup2 mounts of a mountinfo file, and notes.

    Format (proc(5)): ``ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS
    [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS``; the optional fields end at
    the lone ``-``.
    """
    mounts: list[Mount] = []
    malformed = 0
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        try:
            separator = fields.index("-", 6)
        except ValueError:
            malformed += 1
            continue
        if len(fields) < separator + 3:
            malformed += 1
            continue
        fstype = fields[separator + 1]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        mounts.append(
            Mount(
                root=_unescape_mountinfo(fields[3]),
                mount_point=_unescape_mountinfo(fields[4]),
                fstype=fstype,
                super_options=tuple(fields[separator + 3].split(",")),
            )
        )
    notes = (f"ignored {malformed} malformed line(s) in /proc/self/mountinfo",) if malformed else ()
    return tuple(mounts), notes


def parse_proc_cgroup(text: str) -> tuple[tuple[CgroupMembership, ...], tuple[str, ...]]:
    """The lines of ``/proc/self/cgroup``, and notes."""
    lines: list[CgroupMembership] = []
    malformed = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            malformed += 1
            continue
        hierarchy_id, controllers, path = parts
        lines.append(
            CgroupMembership(
                hierarchy_id=hierarchy_id,
                controllers=tuple(c for c in controllers.split(",") if c),
                path=path,
            )
        )
    notes = (f"ignored {malformed} malformed line(s) in /proc/self/cgroup",) if malformed else ()
    return tuple(lines), notes


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
    show_path, show_root, show_mp = _show(cgroup_path), _show(mount_root), _show(mount_point)
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


@frozen
class LevelValue:
    """What one level's control files say."""

    #: "quota": a limit; "unlimited": no limit at this level; "invalid": the
    #: content makes no sense and the level is ignored (``problem`` says why).
    kind: Literal["quota", "unlimited", "invalid"]
    quota_us: int = 0
    period_us: int = 0
    problem: str = ""


def _integer(text: str) -> int | None:
    """A plain ASCII decimal integer (int() also takes '+5', '1_0' and non-ASCII digits)."""
    return int(text) if _DIGITS.fullmatch(text) else None


def parse_cpu_max(text: str) -> LevelValue:
    """cgroup v2 ``cpu.max``: ``QUOTA PERIOD``, ``max PERIOD`` or ``QUOTA``."""
    fields = text.split()
    if len(fields) not in (1, 2):
        return LevelValue("invalid", problem=f"expected 'QUOTA PERIOD', got {_show_content(text)}")
    period = DEFAULT_PERIOD_US
    if len(fields) == 2:
        parsed_period = _integer(fields[1])
        if parsed_period is None or parsed_period <= 0:
            return LevelValue(
                "invalid", problem=f"period {_show_content(fields[1])} is not a positive integer"
            )
        period = parsed_period
    if fields[0] == "max":
        return LevelValue("unlimited", period_us=period)
    quota = _integer(fields[0])
    if quota is None or quota <= 0:
        return LevelValue(
            "invalid",
            problem=f"quota {_show_content(fields[0])} is neither 'max' nor a positive integer",
        )
    return LevelValue("quota", quota, period)


def cfs_quota_needs_period(quota_text: str) -> bool:
    """Whether a v1 ``cpu.cfs_quota_us`` sets a limit, so the period matters."""
    quota = _integer(quota_text.strip())
    return quota is not None and quota > 0


def parse_cfs(quota_text: str, period_text: str | None) -> LevelValue:
    """cgroup v1 ``cpu.cfs_quota_us`` (-1 = no limit) and ``cpu.cfs_period_us``.

    ``period_text`` is None when the period file is missing.
    """
    quota = _integer(quota_text.strip())
    if quota is None:
        return LevelValue("invalid", problem=f"quota {_show_content(quota_text)} is not an integer")
    if quota == -1:
        return LevelValue("unlimited", quota_us=-1)
    if quota <= 0:
        return LevelValue("invalid", problem=f"quota {quota} is neither -1 nor positive")
    if period_text is None:
        return LevelValue("invalid", problem="cpu.cfs_period_us is missing")
    period = _integer(period_text.strip())
    if period is None or period <= 0:
        return LevelValue(
            "invalid", problem=f"period {_show_content(period_text)} is not a positive integer"
        )
    return LevelValue("quota", quota, period)


# --------------------------------------------------------------------------
# Display helpers


def _show(text: str) -> str:
    """``text`` made safe to print as part of a sentence."""
    if text.isprintable():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates from undecodable bytes
            pass
        else:
            return text
    return ascii(text)[1:-1]


def _show_content(text: str) -> str:
    text = text.strip()
    if len(text) > 40:
        text = text[:40] + "..."
    return f"'{_show(text)}'"


def _fmt(value: float) -> str:
    """1.5 -> '1.5', 2.0 -> '2', 1/3 -> '0.3333'."""
    if value.is_integer():
        return str(int(value))
    return f"{value:.4f}".rstrip("0").rstrip(".")


# --------------------------------------------------------------------------
# Reading (I/O at the edge)


class _Missing(Exception):
    """The file does not exist at this level."""


def _read_control_file(path: Path) -> str:
    """A small ASCII control file. Raises _Missing, or OSError/ValueError."""
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_CONTROL_FILE + 1)
    except FileNotFoundError as error:
        raise _Missing from error
    if len(data) > _MAX_CONTROL_FILE:
        raise ValueError("longer than a control file can be")
    return data.decode("ascii")


def _read_proc_file(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "surrogateescape")


def _why(error: BaseException) -> str:
    if isinstance(error, UnicodeDecodeError):
        return "it is not ASCII text"
    if isinstance(error, OSError):
        return error.strerror or type(error).__name__
    return str(error) or type(error).__name__


def _read_level(directory: Path, version: Literal[1, 2]) -> tuple[LevelValue | None, str, str]:
    """The value at one level: (value, why it could not be read, file name).

    The value is None when the level could not be read (the reason is then
    given, and the file name is the file that failed) or when its files are
    missing (the reason is then empty).
    """
    name = "cpu.max" if version == 2 else "cpu.cfs_quota_us"
    try:
        text = _read_control_file(directory / name)
    except _Missing:
        return None, "", name
    except (OSError, ValueError) as error:  # UnicodeDecodeError is a ValueError
        return None, _why(error), name
    if version == 2:
        return parse_cpu_max(text), "", name
    if not cfs_quota_needs_period(text):
        return parse_cfs(text, None), "", name
    try:
        period_text: str | None = _read_control_file(directory / "cpu.cfs_period_us")
    except _Missing:
        period_text = None
    except (OSError, ValueError) as error:
        return None, _why(error), "cpu.cfs_period_us"
    return parse_cfs(text, period_text), "", name


def _walk(
    root: Path,
    version: Literal[1, 2],
    mount: Mount,
    cgroup_path: str | None,
) -> CgroupReading:
    """Read the quota at every level from the process's cgroup to the mount."""
    notes: list[str] = []
    mp_parts = _components(mount.mount_point)
    if cgroup_path is None:
        parts: tuple[str, ...] = ()
        notes.append(
            f"/proc/self/cgroup does not name the process's cgroup v{version} cpu cgroup; "
            f"reading the mount point {_show(mount.mount_point)} instead"
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
        directory = root.joinpath(*mp_parts, *level)
        value, failure, name = _read_level(directory, version)
        shown_file = _show("/" + "/".join((*mp_parts, *level, name)))
        cgroup = _show("/" + "/".join((*root_parts, *level)))
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
            lowest = CpuQuota(
                cpus=cpus,
                quota_us=value.quota_us,
                period_us=value.period_us,
                version=version,
                file=shown_file,
                cgroup=cgroup,
            )
    return CgroupReading(version=version, readable=readable, quota=lowest, notes=tuple(notes))


def _cpu_in_controllers(root: Path, mount: Mount) -> bool | None:
    """Whether the v2 mount's ``cgroup.controllers`` lists cpu; None if unknown."""
    path = root.joinpath(*_components(mount.mount_point), "cgroup.controllers")
    try:
        text = _read_control_file(path)
    except (_Missing, OSError, ValueError):
        return None
    return "cpu" in text.split()


def read_cgroup_quota(root: Path = Path("/")) -> CgroupReading:
    """The lowest CFS quota over the process's cgroup and its parents.

    Reads ``root/proc/self/cgroup`` and ``root/proc/self/mountinfo``, then the
    cpu controller's files below ``root/<mount point>``. Never raises: every
    unreadable file, malformed line or odd value becomes a note.
    """
    notes: list[str] = []
    try:
        mountinfo = _read_proc_file(root / "proc/self/mountinfo")
    except (OSError, ValueError) as error:
        return CgroupReading(
            version=None,
            readable=False,
            quota=None,
            notes=(f"could not read /proc/self/mountinfo: {_why(error)}",),
        )
    mounts, mount_notes = parse_mountinfo(mountinfo)
    notes.extend(mount_notes)
    try:
        memberships, cgroup_notes = parse_proc_cgroup(_read_proc_file(root / "proc/self/cgroup"))
        notes.extend(cgroup_notes)
    except (OSError, ValueError) as error:
        memberships = ()
        notes.append(f"could not read /proc/self/cgroup: {_why(error)}")

    v1_path = next((m.path for m in memberships if "cpu" in m.controllers), None)
    v2_path = next(
        (m.path for m in memberships if m.hierarchy_id == "0" and not m.controllers), None
    )
    v1_mounts = tuple(m for m in mounts if m.fstype == "cgroup" and "cpu" in m.super_options)
    v2_mounts = tuple(m for m in mounts if m.fstype == "cgroup2")
    for mount in (*v1_mounts, *v2_mounts):
        if not _valid_mount_point(mount):
            notes.append(
                f"ignored the {mount.fstype} mount at {_show(mount.mount_point)!r}: "
                "not a plain absolute path"
            )

    v1_mount = choose_mount(v1_mounts, v1_path)
    if v1_mount is not None:
        reading = _walk(root, 1, v1_mount, v1_path)
        return _with_notes(reading, notes)

    v2_mount = choose_mount(v2_mounts, v2_path)
    if v2_mount is not None:
        if _cpu_in_controllers(root, v2_mount) is False:
            notes.append(
                f"the cgroup2 mount at {_show(v2_mount.mount_point)} has no cpu controller "
                "(cgroup.controllers does not list cpu) and no cgroup v1 cpu controller "
                "is mounted"
            )
            return CgroupReading(version=None, readable=False, quota=None, notes=tuple(notes))
        reading = _walk(root, 2, v2_mount, v2_path)
        return _with_notes(reading, notes)

    notes.append(
        "no cgroup cpu controller is mounted (no cgroup v1 mount with the cpu option "
        "and no cgroup2 mount in /proc/self/mountinfo)"
    )
    return CgroupReading(version=None, readable=False, quota=None, notes=tuple(notes))


def _with_notes(reading: CgroupReading, notes: list[str]) -> CgroupReading:
    return CgroupReading(
        version=reading.version,
        readable=reading.readable,
        quota=reading.quota,
        notes=(*notes, *reading.notes),
    )


# --------------------------------------------------------------------------
# The budget (pure)


def round_cpus(exact: float, rounding: Rounding) -> int:
    """Round a fractional CPU count; never below 1.

    ``nearest`` rounds halves up (2.5 -> 3). Raises ValueError for NaN or
    infinities, which the settings never produce.
    """
    if not math.isfinite(exact):
        raise ValueError(f"cannot round {exact} CPUs")
    return max(1, _round_raw(exact, rounding))


def _round_raw(exact: float, rounding: Rounding) -> int:
    if rounding == "ceil":
        return math.ceil(exact)
    if rounding == "nearest":
        return math.floor(exact + 0.5)
    return math.floor(exact)


_ROUNDING_WORDS: dict[Rounding, str] = {
    "floor": "rounded down (floor)",
    "ceil": "rounded up (ceil)",
    "nearest": "rounded to the nearest (half up)",
}


def _rounding_clause(exact: float, rounding: Rounding) -> str:
    raw = _round_raw(exact, rounding)
    words = _ROUNDING_WORDS[rounding]
    if raw < 1:
        return f"; {words} gives {raw}, raised to the minimum of 1"
    if exact.is_integer():
        return ""
    return f"; {words} to {raw}"


def _describe_quota(quota: CpuQuota) -> str:
    if quota.version == 2:
        raw = f"cpu.max '{quota.quota_us} {quota.period_us}'"
    else:
        raw = f"cpu.cfs_quota_us={quota.quota_us} cpu.cfs_period_us={quota.period_us}"
    return (
        f"cgroup v{quota.version} {raw} at {quota.file} (cgroup {quota.cgroup}) "
        f"= {_fmt(quota.cpus)} CPUs"
    )


def _plural(count: int) -> str:
    return f"{count} CPU" if count == 1 else f"{count} CPUs"


def _from_quota(quota: CpuQuota, affinity: int, mask: str) -> tuple[float, str, str]:
    """(exact, source, detail) from the lowest quota, capped by the affinity."""
    if affinity < quota.cpus:
        return (
            float(affinity),
            SOURCE_AFFINITY,
            f"cpu affinity: {mask}, fewer than the {_describe_quota(quota)}",
        )
    source = SOURCE_CGROUP_V1 if quota.version == 1 else SOURCE_CGROUP_V2
    return quota.cpus, source, _describe_quota(quota)


def _from_millicores(millicores: int, affinity: int, mask: str) -> tuple[float, str, str]:
    """(exact, source, detail) from the downward-API hint, capped by the affinity."""
    hint = millicores / 1000
    described = (
        f"TF_ENTRYPOINT_CPU_LIMIT_MILLICORES={millicores} (Kubernetes downward API "
        f"limits.cpu) = {_fmt(hint)} CPUs"
    )
    if affinity < hint:
        return float(affinity), SOURCE_AFFINITY, f"cpu affinity: {mask}, fewer than {described}"
    return (
        hint,
        SOURCE_MILLICORES,
        f"{described}, used because the cgroup cpu files could not be read",
    )


def cpu_budget(
    *,
    affinity_cpus: int,
    cgroup: CgroupReading,
    rounding: Rounding,
    override: float | None,
    limit_millicores: int | None,
) -> CpuBudget:
    """The CPU budget from already-gathered facts (see the module docstring)."""
    affinity = max(1, affinity_cpus)
    mask = f"{_plural(affinity)} in this process's affinity mask"
    extras: list[str] = []
    if override is not None and not (math.isfinite(override) and override > 0):
        extras.append(f"TF_ENTRYPOINT_CPUS={override} ignored (not a positive number)")
        override = None
    if limit_millicores is not None and limit_millicores <= 0:
        extras.append(
            f"TF_ENTRYPOINT_CPU_LIMIT_MILLICORES={limit_millicores} ignored (not positive)"
        )
        limit_millicores = None
    millicores_unused = limit_millicores is not None

    exact: float
    if override is not None:
        exact, source = override, SOURCE_OVERRIDE
        detail = f"TF_ENTRYPOINT_CPUS={_fmt(override)} set by the user"
        if cgroup.quota is not None:
            quota = cgroup.quota
            detail += f", over the cgroup v{quota.version} quota of {_fmt(quota.cpus)} CPUs"
        if override > affinity:
            detail += f", above the {mask} (used anyway)"
    elif cgroup.quota is not None:
        exact, source, detail = _from_quota(cgroup.quota, affinity, mask)
    elif not cgroup.readable and limit_millicores is not None:
        millicores_unused = False
        exact, source, detail = _from_millicores(limit_millicores, affinity, mask)
    else:
        exact, source = float(affinity), SOURCE_AFFINITY
        if cgroup.readable:
            detail = f"cpu affinity: {mask}; no CFS quota in the cgroup v{cgroup.version} hierarchy"
        else:
            detail = f"cpu affinity: {mask}; the cgroup cpu files could not be read"

    if millicores_unused:
        why = "TF_ENTRYPOINT_CPUS is set" if override is not None else "the cgroup files were read"
        extras.append(f"TF_ENTRYPOINT_CPU_LIMIT_MILLICORES={limit_millicores} ignored ({why})")

    cpus = round_cpus(exact, rounding)
    detail += _rounding_clause(exact, rounding)
    if extras:
        detail += "; " + "; ".join(extras)
    return CpuBudget(
        cpus=cpus,
        exact=exact,
        source=source,
        detail=detail,
        affinity_cpus=affinity,
        cgroup=cgroup,
        rounding=rounding,
    )


def affinity_count() -> int:
    """CPUs this process may run on: the affinity mask, else the CPU count."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        try:
            return max(1, len(getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def detect_cpu_budget(
    *,
    rounding: Rounding = "floor",
    override: float | None = None,
    limit_millicores: int | None = None,
    root: Path = Path("/"),
    affinity_cpus: int | None = None,
) -> CpuBudget:
    """Read the cgroup files and the affinity mask, then apply :func:`cpu_budget`."""
    return cpu_budget(
        affinity_cpus=affinity_count() if affinity_cpus is None else affinity_cpus,
        cgroup=read_cgroup_quota(root),
        rounding=rounding,
        override=override,
        limit_millicores=limit_millicores,
    )
