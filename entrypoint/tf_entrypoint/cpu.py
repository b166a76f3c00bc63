"""The CPU budget thread pools are sized to: precedence, rounding, and the sentence saying why.

docs/configuration.md: "How the CPU budget is detected" (precedence, rounding, limitations).
"""

from __future__ import annotations

import math
import os

from tf_entrypoint import cgroup_v1, cgroup_v2
from tf_entrypoint.cgroups import CgroupReading, CpuQuota, read_cgroup_quota
from tf_entrypoint.common import Rounding, plural
from tf_entrypoint.frozen import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from os import PathLike

SOURCE_OVERRIDE = "TF_ENTRYPOINT_CPUS"
SOURCE_CGROUP_V1 = "cgroup v1 quota"
SOURCE_CGROUP_V2 = "cgroup v2 quota"
SOURCE_MILLICORES = "TF_ENTRYPOINT_CPU_LIMIT_MILLICORES"
SOURCE_AFFINITY = "cpu affinity"


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


def _fmt(value: float) -> str:
    """1.5 -> '1.5', 2.0 -> '2', 1/3 -> '0.3333'."""
    if value.is_integer():
        return str(int(value))
    return f"{value:.4f}".rstrip("0").rstrip(".")


def round_cpus(exact: float, rounding: Rounding) -> int:
    """Round a fractional CPU count; never below 1. ``nearest`` rounds halves up."""
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
    describe = cgroup_v2.describe if quota.version == 2 else cgroup_v1.describe
    raw = describe(quota.quota_us, quota.period_us)
    return (
        f"cgroup v{quota.version} {raw} at {quota.file} (cgroup {quota.cgroup}) "
        f"= {_fmt(quota.cpus)} CPUs"
    )


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
    mask = f"{plural(affinity, 'CPU')} in this process's affinity mask"
    extras: list[str] = []
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
    root: str | PathLike[str] = "/",
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
