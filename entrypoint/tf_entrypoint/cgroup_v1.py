"""cgroup v1: the CFS quota of one level, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``."""

from __future__ import annotations

from tf_entrypoint.kernel import LevelValue, integer, read_level_file, show_content, value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

VERSION: Literal[1, 2] = 1
QUOTA_FILE = "cpu.cfs_quota_us"
PERIOD_FILE = "cpu.cfs_period_us"


def parse_cfs(quota_text: str, period_text: str | None) -> LevelValue:
    """``cpu.cfs_quota_us`` (-1 = no limit) and ``cpu.cfs_period_us`` (None: missing)."""
    quota = integer(value(quota_text))
    if quota is None:
        return LevelValue("invalid", problem=f"quota {show_content(quota_text)} is not an integer")
    if quota == -1:
        return LevelValue("unlimited", quota_us=-1)
    if quota <= 0:
        return LevelValue("invalid", problem=f"quota {quota} is neither -1 nor positive")
    if period_text is None:
        return LevelValue("invalid", problem=f"{PERIOD_FILE} is missing")
    period = integer(value(period_text))
    if period is None or period <= 0:
        return LevelValue(
            "invalid", problem=f"period {show_content(period_text)} is not a positive integer"
        )
    return LevelValue("quota", quota, period)


def read_level(directory: str) -> tuple[LevelValue | None, str, str]:
    """(value, why it could not be read, the file that failed); value None: missing."""
    quota_text, failure = read_level_file(directory, QUOTA_FILE)
    if quota_text is None:
        return None, failure, QUOTA_FILE
    quota = integer(value(quota_text))
    if quota is None or quota <= 0:  # no limit or garbage: the period does not matter
        return parse_cfs(quota_text, None), "", QUOTA_FILE
    period_text, failure = read_level_file(directory, PERIOD_FILE)
    if failure:
        return None, failure, PERIOD_FILE
    return parse_cfs(quota_text, period_text), "", QUOTA_FILE


def describe(quota_us: int, period_us: int) -> str:
    return f"{QUOTA_FILE}={quota_us} {PERIOD_FILE}={period_us}"
