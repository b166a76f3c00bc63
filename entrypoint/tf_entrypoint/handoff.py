"""The plan as it crosses the exec: ``TF_ENTRYPOINT_PLAN``, compact JSON, version 1.

Written once by the entrypoint (:func:`encode_plan`, from a plan it made and
trusts), read by the hook and the server (:func:`decode_plan`, which checks
everything: the variable may come from anywhere). docs/configuration.md.
"""

from __future__ import annotations

import sys

from tf_entrypoint.common import FALSE_WORDS, WHITESPACE
from tf_entrypoint.frozen import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs start-up time
    from collections.abc import Iterator, Mapping
    from typing import Any

PLAN_VARIABLE = "TF_ENTRYPOINT_PLAN"
PLAN_VERSION = 1
#: TensorFlow keeps thread counts in int32 fields; MB * 2**20 must fit int64.
_MAX_VALUE = 2**31 - 1
_REQUIRED = ("intra_op_threads", "inter_op_threads", "allow_growth", "memory_limits_mb")
_MAX_SOURCE = 200


@frozen
class HookPlan:
    """What the plan hands over. None = leave TensorFlow's own behaviour."""

    intra_op_threads: int | None
    inter_op_threads: int | None
    allow_growth: bool | None
    #: (TensorFlow GPU index, MB) pairs, sorted by index.
    memory_limits_mb: tuple[tuple[int, int], ...] = ()
    #: The CPU budget and where it came from (for the model server); None when
    #: an older version-1 writer did not say.
    cpus: int | None = None
    cpu_source: str = ""


def encode_plan(plan: HookPlan) -> str:
    """The compact JSON for TF_ENTRYPOINT_PLAN.

    Written by hand: ``json`` imports ``re``, which the hand-off does not
    otherwise need (a test compares this with ``json.dumps``). ``cpu_source``
    is one of the CPU budget's fixed source names (printable ASCII).
    """
    limits = ",".join(f'"{index}":{mb}' for index, mb in plan.memory_limits_mb)
    return (
        f'{{"version":{PLAN_VERSION},'
        f'"intra_op_threads":{_scalar(plan.intra_op_threads)},'
        f'"inter_op_threads":{_scalar(plan.inter_op_threads)},'
        f'"allow_growth":{_scalar(plan.allow_growth)},'
        f'"memory_limits_mb":{{{limits}}},'
        f'"cpus":{_scalar(plan.cpus)},'
        f'"cpu_source":"{plan.cpu_source}"}}'
    )


def _scalar(value: int | bool | None) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    return str(value)


def decode_plan(text: str) -> HookPlan | str:
    """Parse TF_ENTRYPOINT_PLAN; a str is the reason it is malformed. Never raises."""
    import json  # noqa: PLC0415 - only where the plan is read, not at hand-off

    try:
        data = json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except (ValueError, RecursionError) as err:
        return f"not valid JSON ({_short(str(err), 80)})"
    problem = next(_problems(data), "")
    if problem:
        return problem
    limits = {int(key): mb for key, mb in data["memory_limits_mb"].items()}
    return HookPlan(
        intra_op_threads=data["intra_op_threads"],
        inter_op_threads=data["inter_op_threads"],
        allow_growth=data["allow_growth"],
        memory_limits_mb=tuple(sorted(limits.items())),
        cpus=data.get("cpus"),
        cpu_source=data.get("cpu_source") or "",
    )


def _problems(data: object) -> Iterator[str]:
    """What is wrong with the decoded JSON, first problem first."""
    if not isinstance(data, dict):
        yield f"expected a JSON object, got {_json_type(data)}"
        return
    if "version" not in data:
        yield "no 'version'"
    version = data.get("version")
    if not _in_range(version, PLAN_VERSION) or version != PLAN_VERSION:
        yield f"unsupported version {_shown(version)} (this hook reads version {PLAN_VERSION})"
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        yield "missing " + ", ".join(repr(key) for key in missing)
        return
    for name in ("intra_op_threads", "inter_op_threads", "cpus"):
        value = data.get(name)
        if value is not None and not _in_range(value, 1):
            expected = f"a whole number from 1 to {_MAX_VALUE} or null"
            yield f"{name} must be {expected}, got {_shown(value)}"
    if not (data["allow_growth"] is None or isinstance(data["allow_growth"], bool)):
        yield f"allow_growth must be true, false or null, got {_shown(data['allow_growth'])}"
    source = data.get("cpu_source")
    if source is not None and not (isinstance(source, str) and len(source) <= _MAX_SOURCE):
        yield f"cpu_source must be a short string, got {_shown(source)}"
    limits = data["memory_limits_mb"]
    if not isinstance(limits, dict):
        yield f"memory_limits_mb must be an object, got {_json_type(limits)}"
        return
    for key, mb in limits.items():
        # Canonical decimal only: "1", not "01", "+1", " 1" or a non-ASCII digit.
        canonical = key.isascii() and key.isdigit() and (key == "0" or key[0] != "0")
        if not canonical or len(key) > len(str(_MAX_VALUE)) or int(key) > _MAX_VALUE:
            yield f"memory_limits_mb key {_shown(key)} is not a GPU index (0, 1, 2...)"
        elif not _in_range(mb, 1):
            yield f"GPU {key}: MB must be a whole number from 1 to {_MAX_VALUE}, got {_shown(mb)}"


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _in_range(value: object, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= _MAX_VALUE


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shown(value: object) -> str:
    import json  # noqa: PLC0415 - see decode_plan

    jsonable = value is None or isinstance(value, (bool, int, float, str))
    return _short(json.dumps(value) if jsonable else repr(value), 40)


def tensorflow_missing(env: Mapping[str, str], python: str | None = None) -> str:
    """One line when this Python cannot import tensorflow, else ''. Imports nothing.

    For the entrypoint, before the hand-off: the hook is installed in this
    Python only, so a TensorFlow found elsewhere (another venv, another
    interpreter) gets the native variables but not the hook. Nothing to say
    when TF_ENTRYPOINT_HOOK turns the hook off.
    """
    switch = env.get("TF_ENTRYPOINT_HOOK")
    if switch is not None and switch.strip(WHITESPACE).lower() in FALSE_WORDS:
        return ""
    # The import system's own path finder, from sys.meta_path: importing
    # importlib.machinery would load importlib and warnings (1-2 ms).
    finders = [f for f in sys.meta_path if getattr(f, "__name__", None) == "PathFinder"]
    try:
        if not finders or finders[0].find_spec("tensorflow", None) is not None:
            return ""
    except Exception:  # noqa: BLE001 - a strange sys.path entry: say nothing
        return ""
    where = python or sys.prefix
    return (
        f"TensorFlow is not installed in the Python that has tf-entrypoint ({where}): the "
        "command still gets the thread variables, but the in-process hook (thread getters, "
        "GPU memory caps) works only in a Python where both are installed"
    )
