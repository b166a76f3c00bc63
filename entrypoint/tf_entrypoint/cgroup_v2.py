"""cgroup v2: the CFS quota of one level, ``cpu.max``; whether the cpu controller is on."""

from __future__ import annotations

from tf_entrypoint.kernel import LevelValue, fields, integer, read_level_file, show_content, value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

VERSION: Literal[1, 2] = 2
QUOTA_FILE = "cpu.max"
#: ``cpu.max`` with a single field means this period (the kernel's default).
DEFAULT_PERIOD_US = 100_000


def parse_cpu_max(text: str) -> LevelValue:
    """``QUOTA PERIOD``, ``max PERIOD`` or ``QUOTA``, separated by one space."""
    parts = fields(value(text))
    if len(parts) not in (1, 2):
        return LevelValue("invalid", problem=f"expected 'QUOTA PERIOD', got {show_content(text)}")
    period = DEFAULT_PERIOD_US
    if len(parts) == 2:
        parsed_period = integer(parts[1])
        if parsed_period is None or parsed_period <= 0:
            return LevelValue(
                "invalid", problem=f"period {show_content(parts[1])} is not a positive integer"
            )
        period = parsed_period
    if parts[0] == "max":
        return LevelValue("unlimited", period_us=period)
    quota = integer(parts[0])
    if quota is None or quota <= 0:
        return LevelValue(
            "invalid",
            problem=f"quota {show_content(parts[0])} is neither 'max' nor a positive integer",
        )
    return LevelValue("quota", quota, period)


def read_level(directory: str) -> tuple[LevelValue | None, str, str]:
    """(value, why it could not be read, the file that failed); value None: missing."""
    text, failure = read_level_file(directory, QUOTA_FILE)
    return (None if text is None else parse_cpu_max(text)), failure, QUOTA_FILE


def parse_controllers(text: str) -> tuple[str, ...]:
    """``cgroup.controllers``: controller names separated by single spaces."""
    return tuple(name for name in fields(value(text)) if name)


def has_cpu_controller(directory: str) -> bool | None:
    """Whether ``cgroup.controllers`` lists cpu; None when it cannot be read."""
    text, _ = read_level_file(directory, "cgroup.controllers")
    return None if text is None else "cpu" in parse_controllers(text)


def describe(quota_us: int, period_us: int) -> str:
    return f"{QUOTA_FILE} '{quota_us} {period_us}'"
