"""Apply the plan inside the process that imports TensorFlow.

After the hand-off (``os.execvp``) the entrypoint is gone; what it decided
travels in the environment. TensorFlow's native variables
(``TF_NUM_INTRAOP_THREADS``, ``TF_NUM_INTEROP_THREADS``,
``TF_FORCE_GPU_ALLOW_GROWTH``) need no Python, but per-GPU memory caps exist
only as a Python call, and ``tf.config.threading`` getters report 0 unless the
setters ran. So ``tf_entrypoint_hook.pth`` registers a post-import hook
(``entrypoint/_pth.py``) that calls :func:`on_tensorflow_imported` right after
``tensorflow/__init__.py`` has executed, before any op can run.

Where the plan comes from
-------------------------
``TF_ENTRYPOINT_PLAN``, compact JSON written by the entrypoint with
:func:`encode_plan` (schema version 1)::

    {"version":1,"intra_op_threads":2,"inter_op_threads":2,
     "allow_growth":true,"memory_limits_mb":{"0":1024,"1":2048}}

Threads are whole numbers >= 1 or null (leave TensorFlow alone),
``allow_growth`` is true/false/null, ``memory_limits_mb`` maps a TensorFlow GPU
index (decimal string, no leading zeros) to MB (>= 1) and may be empty. All
five keys are required; unknown keys are ignored (a later version 1 writer
may add some); any other version is refused. When the variable is absent or
blank (``docker exec`` bypasses the entrypoint) the plan is computed here by
``entrypoint.plan.hook_plan_from_environment`` from the same variables the
entrypoint reads, provided the module name ``entrypoint`` in this process is
tf-entrypoint's package and not a user's ``entrypoint.py``.

What is applied (:func:`apply`)
-------------------------------
* threads: ``tf.config.threading.set_intra_op_parallelism_threads`` /
  ``set_inter_op_parallelism_threads``. The pools are sized by these (and,
  when the entrypoint ran, already by the native variables); the getters then
  report the plan. When ``TF_NUM_INTRAOP_THREADS``/``TF_NUM_INTEROP_THREADS``
  holds a different positive number than the plan (changed after the
  hand-off, by a wrapper script or by code before ``import tensorflow``),
  that variable wins and the setter is skipped.
* caps: ``tf.config.set_logical_device_configuration(gpu,
  [LogicalDeviceConfiguration(memory_limit=MB)])`` for each capped GPU listed
  by ``tf.config.list_physical_devices("GPU")`` (which does not initialise
  the runtime). An index TensorFlow does not list: one warning, skipped.
* growth with caps: ``set_memory_growth`` is never called (TensorFlow refuses
  it on a GPU with a logical-device configuration and ignores the setting
  once any GPU has one); the allocator reads ``TF_FORCE_GPU_ALLOW_GROWTH``
  for every GPU, capped ones included, which gives "grow on demand up to the
  cap". When the variable is missing (docker exec) it is put into
  ``os.environ`` here, before the runtime starts, so the allocator sees it.
* growth without caps: ``tf.config.experimental.set_memory_growth(gpu, v)`` on
  every GPU (TensorFlow requires the same value on all of them), unless
  ``TF_FORCE_GPU_ALLOW_GROWTH`` already says the same thing: then the
  allocator does it natively and the hook does not list the GPUs (listing
  them initialises CUDA at import time, which would freeze a
  ``CUDA_VISIBLE_DEVICES`` the script sets after ``import tensorflow``).

It never breaks user code: every TensorFlow call is guarded; when TensorFlow
reports it is already initialised the hook writes one line and steps aside;
the user's own later ``tf.config`` calls win because ours run before the
runtime starts. Nothing is written to stdout; stderr lines start with
``tf-entrypoint:``. Quiet on success unless ``TF_ENTRYPOINT_HOOK_VERBOSE`` is
true (and ``TF_ENTRYPOINT_QUIET`` is not).

Imported by the entrypoint (for :func:`encode_plan`) and loaded by the hook in
every process that imports TensorFlow: stdlib only (no dataclasses: it is on
the hand-off path), and it imports nothing from the rest of the package
unless it must compute the plan itself.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs start-up time
    from collections.abc import Callable, Iterator, Mapping, MutableMapping
    from typing import Any, TypeAlias

    Warn: TypeAlias = Callable[[str], None]

__all__ = [
    "ALLOW_GROWTH_VARIABLE",
    "INTER_OP_NATIVE",
    "INTRA_OP_NATIVE",
    "OLDEST_TENSORFLOW",
    "PLAN_VARIABLE",
    "PLAN_VERSION",
    "QUIET_VARIABLE",
    "SWITCH_VARIABLE",
    "VERBOSE_VARIABLE",
    "HookPlan",
    "apply",
    "decode_plan",
    "encode_plan",
    "on_tensorflow_imported",
    "plan_for_process",
    "switch_state",
    "tensorflow_missing",
    "version_problem",
]

PLAN_VARIABLE = "TF_ENTRYPOINT_PLAN"
PLAN_VERSION = 1
SWITCH_VARIABLE = "TF_ENTRYPOINT_HOOK"
VERBOSE_VARIABLE = "TF_ENTRYPOINT_HOOK_VERBOSE"
QUIET_VARIABLE = "TF_ENTRYPOINT_QUIET"
ALLOW_GROWTH_VARIABLE = "TF_FORCE_GPU_ALLOW_GROWTH"
#: TensorFlow's own thread variables (read once, when the runtime starts).
INTRA_OP_NATIVE = "TF_NUM_INTRAOP_THREADS"
INTER_OP_NATIVE = "TF_NUM_INTEROP_THREADS"

#: Same words as entrypoint/_pth.py and the line in tf_entrypoint_hook.pth.
SWITCH_OFF = ("off", "false", "0", "no")
SWITCH_ON = ("", "on", "true", "1", "yes")
_TRUE_WORDS = ("true", "1", "yes", "on")

#: TensorFlow keeps thread counts in int32 fields; MB * 2**20 must fit int64.
_MAX_VALUE = 2**31 - 1
_WHITESPACE = " \t\n\r\v\f"
_PREFIX = "tf-entrypoint:"
_PLAN_KEYS = ("intra_op_threads", "inter_op_threads", "allow_growth", "memory_limits_mb")


class HookPlan:
    """What the hook applies. None = leave TensorFlow's own behaviour.

    A frozen record written out by hand: the entrypoint imports this module at
    every hand-off (for encode_plan), and this module may not import the rest
    of the package (entrypoint.frozen) because it is loaded by path, beside a
    user's own ``entrypoint`` module; ``dataclasses`` would cost more than the
    whole entrypoint otherwise imports.
    """

    __slots__ = _PLAN_KEYS
    intra_op_threads: int | None
    inter_op_threads: int | None
    allow_growth: bool | None
    #: (TensorFlow GPU index, MB) pairs; decode_plan gives them sorted by index.
    memory_limits_mb: tuple[tuple[int, int], ...]

    def __init__(
        self,
        intra_op_threads: int | None,
        inter_op_threads: int | None,
        allow_growth: bool | None,
        memory_limits_mb: tuple[tuple[int, int], ...] = (),
    ) -> None:
        values = (intra_op_threads, inter_op_threads, allow_growth, memory_limits_mb)
        for key, value in zip(_PLAN_KEYS, values, strict=True):
            object.__setattr__(self, key, value)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, key) for key in _PLAN_KEYS)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"HookPlan is frozen: cannot assign to {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"HookPlan is frozen: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{key}={getattr(self, key)!r}" for key in _PLAN_KEYS)
        return f"HookPlan({shown})"


# --- the wire format ----------------------------------------------------------


def encode_plan(plan: HookPlan) -> str:
    """The compact JSON for TF_ENTRYPOINT_PLAN; ValueError if decode would refuse it."""
    problem = plan_problem(plan)
    if problem:
        raise ValueError(f"cannot encode the plan: {problem}")
    # Written out rather than json.dumps: importing json is a few ms that the
    # hand-off would pay for one short line; plan_problem has already checked
    # every value is an int, a bool or None (a test compares with json.dumps).
    limits = ",".join(f'"{int(index)}":{int(mb)}' for index, mb in sorted(plan.memory_limits_mb))
    return (
        f'{{"version":{int(PLAN_VERSION)},'
        f'"intra_op_threads":{_json_scalar(plan.intra_op_threads)},'
        f'"inter_op_threads":{_json_scalar(plan.inter_op_threads)},'
        f'"allow_growth":{_json_scalar(plan.allow_growth)},'
        f'"memory_limits_mb":{{{limits}}}}}'
    )


def _json_scalar(value: int | bool | None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(int(value))


def decode_plan(text: str) -> HookPlan | str:
    """Parse TF_ENTRYPOINT_PLAN; a str is the reason it is malformed. Never raises."""
    import json  # noqa: PLC0415 - only where TensorFlow is imported, not at hand-off

    try:
        data = json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except (ValueError, RecursionError) as err:
        return f"not valid JSON ({_short(str(err), 80)})"
    problem = next(_document_problems(data), "")
    if problem:
        return problem
    limits = {int(key): mb for key, mb in data["memory_limits_mb"].items()}
    plan = HookPlan(
        intra_op_threads=data["intra_op_threads"],
        inter_op_threads=data["inter_op_threads"],
        allow_growth=data["allow_growth"],
        memory_limits_mb=tuple(sorted(limits.items())),
    )
    return plan_problem(plan) or plan


def _document_problems(data: object) -> Iterator[str]:
    """What is wrong with the decoded JSON's shape (values are checked later)."""
    if not isinstance(data, dict):
        yield f"expected a JSON object, got {_json_type(data)}"
        return
    if "version" not in data:
        yield "no 'version'"
    version = data.get("version")
    if not _is_int(version) or version != PLAN_VERSION:
        yield f"unsupported version {_shown(version)} (this hook reads version {PLAN_VERSION})"
    missing = [key for key in _PLAN_KEYS if key not in data]
    if missing:
        yield "missing " + ", ".join(repr(key) for key in missing)
    limits = data.get("memory_limits_mb")
    if not isinstance(limits, dict):
        yield f"memory_limits_mb must be an object, got {_json_type(limits)}"
        return
    for key in limits:
        # Canonical decimal only: "1", not "01", "+1", " 1" or a non-ASCII digit.
        canonical = key.isascii() and key.isdigit() and (key == "0" or key[0] != "0")
        if not canonical or len(key) > len(str(_MAX_VALUE)):
            yield f"memory_limits_mb key {_shown(key)} is not a GPU index (0, 1, 2...)"


def plan_problem(plan: HookPlan) -> str:
    """Why plan is not a valid plan ('' when it is). Checks types, not only values."""
    return next(_plan_problems(plan), "")


def _plan_problems(plan: HookPlan) -> Iterator[str]:
    for name in ("intra_op_threads", "inter_op_threads"):
        value = getattr(plan, name)
        if value is not None and not _in_range(value, 1):
            expected = f"a whole number from 1 to {_MAX_VALUE} or null"
            yield f"{name} must be {expected}, got {_shown(value)}"
    if plan.allow_growth is not None and not isinstance(plan.allow_growth, bool):
        yield f"allow_growth must be true, false or null, got {_shown(plan.allow_growth)}"
    if not isinstance(plan.memory_limits_mb, tuple):
        yield f"memory_limits_mb must be a tuple of pairs, got {_shown(plan.memory_limits_mb)}"
        return
    seen: set[object] = set()
    for pair in plan.memory_limits_mb:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            yield f"memory_limits_mb entries must be (index, MB) pairs, got {_shown(pair)}"
            continue
        index, mb = pair
        if not _in_range(index, 0):
            yield f"GPU index must be a whole number from 0 to {_MAX_VALUE}, got {_shown(index)}"
        elif not _in_range(mb, 1):
            yield f"GPU {index}: MB must be a whole number from 1 to {_MAX_VALUE}, got {_shown(mb)}"
        elif index in seen:
            yield f"GPU {index} is capped twice"
        seen.add(index)


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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

    return _short(json.dumps(value) if _jsonable(value) else repr(value), 40)


def _jsonable(value: object) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


# --- switches -----------------------------------------------------------------


def switch_state(raw: str | None) -> str:
    """'on', 'off' or 'invalid' for a TF_ENTRYPOINT_HOOK value (None = unset = on)."""
    if raw is None:
        return "on"
    word = raw.strip(_WHITESPACE).lower()
    if word in SWITCH_OFF:
        return "off"
    return "on" if word in SWITCH_ON else "invalid"


def _positive_int(raw: str | None) -> int | None:
    """A whole number >= 1 written with ASCII digits, else None (unset, 0, junk)."""
    text = (raw or "").strip(_WHITESPACE)
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(_MAX_VALUE)):
        return None
    return int(text) or None


def _is_true(raw: str | None) -> bool:
    return raw is not None and raw.strip(_WHITESPACE).lower() in _TRUE_WORDS


# --- applying -----------------------------------------------------------------


class _Initialised(Exception):
    """TensorFlow said its runtime is already initialised: step aside."""


def _is_initialised_error(err: BaseException) -> bool:
    # "Intra op parallelism cannot be modified after initialization.",
    # "Virtual devices cannot be modified after being initialized",
    # "Physical devices cannot be modified after being initialized".
    text = str(err).lower()
    return "after initialization" in text or "after being initialized" in text


class _Guard:
    """Calls into TensorFlow so that nothing can raise into the user's import."""

    def __init__(self, tf: Any, warn: Warn) -> None:
        self.tf = tf
        self.warn = warn

    def call(self, what: str, function: str, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
        """(True, result) of tf.<function>(*args, **kwargs), or (False, None) after a warning.

        Looking the dotted name up is guarded too (an unusual TensorFlow may
        lack it). Raises _Initialised when TensorFlow says it is initialised.
        """
        try:
            target = self.tf
            for name in function.split("."):
                target = getattr(target, name)
            return True, target(*args, **kwargs)
        except RuntimeError as err:
            if _is_initialised_error(err):
                raise _Initialised(str(err)) from err
            self.warn(f"could not {what}: {err}")
        except Exception as err:  # noqa: BLE001 - never break the user's import
            self.warn(f"could not {what} ({type(err).__name__}: {err})")
        return False, None


def apply(
    tf: Any,
    plan: HookPlan,
    *,
    warn: Warn | None = None,
    environ: MutableMapping[str, str] | None = None,
) -> list[str]:
    """Configure the freshly imported `tf` module; return what was done.

    Never raises (BaseException such as KeyboardInterrupt passes). `warn`
    receives one-line messages for stderr; `environ` is os.environ by default.
    """
    guard = _Guard(tf, warn or _say)
    env = os.environ if environ is None else environ
    done: list[str] = []
    try:
        _apply_threads(plan, guard, done, env)
        _apply_gpu_memory(plan, guard, done, env)
    except _Initialised as err:
        after = f" after {', '.join(done)}" if done else ""
        guard.warn(
            f"TensorFlow was already initialised ({err}), so the hook stepped aside{after}; "
            "TensorFlow keeps its own settings"
        )
    except Exception as err:  # noqa: BLE001 - an unexpected TensorFlow must not break the import
        guard.warn(f"could not apply the plan ({type(err).__name__}: {err})")
    return done


def _apply_threads(plan: HookPlan, guard: _Guard, done: list[str], env: Mapping[str, str]) -> None:
    for name, value, setter, native in (
        (
            "intra_op_threads",
            plan.intra_op_threads,
            "set_intra_op_parallelism_threads",
            INTRA_OP_NATIVE,
        ),
        (
            "inter_op_threads",
            plan.inter_op_threads,
            "set_inter_op_parallelism_threads",
            INTER_OP_NATIVE,
        ),
    ):
        if value is None:
            continue
        # The entrypoint exports the same number in TensorFlow's own variable;
        # a different positive number was set after the hand-off (a wrapper
        # script, the user's code before `import tensorflow`): it wins, as the
        # setter would otherwise override it (session config > variable).
        changed = _positive_int(env.get(native))
        if changed is not None and changed != value:
            done.append(f"{name}: {native}={changed} kept")
            continue
        ok, _ = guard.call(f"set {name} to {value}", f"config.threading.{setter}", value)
        if ok:
            done.append(f"{name}={value}")


def _apply_gpu_memory(
    plan: HookPlan, guard: _Guard, done: list[str], env: MutableMapping[str, str]
) -> None:
    growth = plan.allow_growth
    word = "true" if growth else "false"
    # TF_FORCE_GPU_ALLOW_GROWTH already saying the same thing makes the call
    # redundant, and skipping it keeps CUDA uninitialised until first use.
    growth_call = growth is not None and env.get(ALLOW_GROWTH_VARIABLE) != word
    if not plan.memory_limits_mb and not growth_call:
        return
    ok, listed = guard.call("list the GPUs", "config.list_physical_devices", "GPU")
    if not ok:
        return
    gpus = list(listed)
    if plan.memory_limits_mb and _apply_caps(plan.memory_limits_mb, gpus, guard, done):
        if growth is not None and ALLOW_GROWTH_VARIABLE not in env:
            # docker exec: nobody exported it; the allocator reads it at start.
            env[ALLOW_GROWTH_VARIABLE] = word
            done.append(f"{ALLOW_GROWTH_VARIABLE}={word}")
        return
    if growth_call and gpus:
        _apply_growth(gpus, bool(growth), guard, done)


def _apply_caps(
    limits: tuple[tuple[int, int], ...], gpus: list[Any], guard: _Guard, done: list[str]
) -> bool:
    """Set the caps TensorFlow can take; True when at least one was set."""
    missing = [index for index, _ in limits if index >= len(gpus)]
    if missing:
        listed = f"GPU 0-{len(gpus) - 1}" if gpus else "no GPU"
        skipped = ", ".join(map(str, missing))
        guard.warn(f"memory cap for GPU {skipped} skipped: TensorFlow lists {listed}")
    capped = False
    for index, mb in limits:
        if index >= len(gpus):
            continue
        what = f"cap GPU {index} at {mb} MB"
        ok, config = guard.call(what, "config.LogicalDeviceConfiguration", memory_limit=mb)
        if ok:
            ok, _ = guard.call(
                what, "config.set_logical_device_configuration", gpus[index], [config]
            )
        if ok:
            done.append(f"GPU:{index} memory_limit={mb}MB")
            capped = True
    return capped


def _apply_growth(gpus: list[Any], growth: bool, guard: _Guard, done: list[str]) -> None:
    setter = "config.experimental.set_memory_growth"
    set_on: list[Any] = []
    for gpu in gpus:
        ok, _ = guard.call(f"set memory growth on {getattr(gpu, 'name', gpu)}", setter, gpu, growth)
        if not ok:
            # TensorFlow refuses to start when growth differs between GPUs:
            # undo the ones already set (None is TensorFlow's "not set").
            for earlier in set_on:
                guard.call("undo memory growth", setter, earlier, None)
            return
        set_on.append(gpu)
    done.append(f"memory_growth={'true' if growth else 'false'} on {len(gpus)} GPU(s)")


# --- the hook -----------------------------------------------------------------


def plan_for_process(env: Mapping[str, str]) -> tuple[str, HookPlan | str | None]:
    """(where from, plan) for this process: a str plan is a one-line problem.

    TF_ENTRYPOINT_PLAN when set and not blank, else the plan computed from the
    environment (None when that is impossible or there is nothing to apply).
    """
    raw = env.get(PLAN_VARIABLE)
    if raw is not None and raw.strip(_WHITESPACE):
        plan = decode_plan(raw)
        if isinstance(plan, str):
            return PLAN_VARIABLE, f"{PLAN_VARIABLE} is malformed ({plan}); nothing applied"
        return PLAN_VARIABLE, plan
    return "the environment", _computed_plan(env)


def _computed_plan(env: Mapping[str, str]) -> HookPlan | str | None:
    compute = _plan_computer()
    if compute is None or isinstance(compute, str):
        return compute
    try:
        result = compute(env)
        if result is None:
            return None
        # result is an entrypoint.hook.HookPlan, maybe from another copy of
        # this module (the hook runs as _tf_entrypoint_hook): copy it.
        plan = HookPlan(
            intra_op_threads=result.intra_op_threads,
            inter_op_threads=result.inter_op_threads,
            allow_growth=result.allow_growth,
            memory_limits_mb=tuple(sorted(result.memory_limits_mb)),
        )
    except Exception as err:  # noqa: BLE001 - never break the user's import
        return _not_computed(err)
    problem = plan_problem(plan)
    return f"the computed plan is unusable ({problem}); nothing applied" if problem else plan


def _plan_computer() -> Callable[[Mapping[str, str]], Any] | str | None:
    """entrypoint.plan.hook_plan_from_environment; a str says why not; None: not there."""
    problem = _foreign_package()
    if problem:
        return problem
    import importlib  # noqa: PLC0415 - only on the docker exec path

    try:
        module = importlib.import_module("entrypoint.plan")
    except ModuleNotFoundError as err:
        if err.name in ("entrypoint", "entrypoint.plan"):
            return None  # a build without plan computation: nothing to apply
        return _not_computed(err)
    except Exception as err:  # noqa: BLE001 - never break the user's import
        return _not_computed(err)
    compute: Callable[[Mapping[str, str]], Any] | None = getattr(
        module, "hook_plan_from_environment", None
    )
    return compute


def _not_computed(err: BaseException) -> str:
    return f"could not compute the plan ({type(err).__name__}: {err}); nothing applied"


def _foreign_package() -> str:
    """'' when `import entrypoint` gives this file's package, else why not."""
    here = os.path.dirname(os.path.realpath(__file__))
    try:
        module = sys.modules.get("entrypoint")
        if module is not None:
            locations = list(getattr(module, "__path__", None) or ())
            where = getattr(module, "__file__", None) or repr(module)
        else:
            import importlib.util  # noqa: PLC0415

            spec = importlib.util.find_spec("entrypoint")  # top level: imports nothing
            if spec is None:
                return ""  # then importing entrypoint.plan fails: nothing to apply
            locations = list(spec.submodule_search_locations or ())
            where = spec.origin or "a namespace package"
    except Exception as err:  # noqa: BLE001
        return (
            f"cannot tell which 'entrypoint' module this process imports ({err}); nothing applied"
        )
    if any(os.path.realpath(location) == here for location in locations):
        return ""
    return (
        f"no {PLAN_VARIABLE} and the module name 'entrypoint' is taken by {where} in this "
        "process, so the plan cannot be computed; nothing applied (run the command through "
        f"tf-entrypoint, or set {PLAN_VARIABLE})"
    )


def on_tensorflow_imported(
    tf: Any,
    environ: MutableMapping[str, str] | None = None,
    warn: Warn | None = None,
) -> list[str]:
    """The hook: find this process's plan and apply it to `tf`. Never raises.

    Returns what was done (empty when off, nothing planned, or malformed).
    """
    env = os.environ if environ is None else environ
    say = warn or _say
    switch = env.get(SWITCH_VARIABLE)
    state = switch_state(switch)
    if state == "off":  # switched off inside the process before importing tensorflow
        return []
    if state == "invalid":
        say(
            f"{SWITCH_VARIABLE}={_shown(switch)} is not on/off "
            "(on: true/1/yes, off: off/false/0/no); the hook stays on"
        )
    too_old = version_problem(getattr(tf, "__version__", None))
    if too_old:
        say(too_old)
    source, plan = plan_for_process(env)
    if isinstance(plan, str):
        say(plan)
        return []
    if plan is None:
        return []
    done = apply(tf, plan, warn=say, environ=env)
    if _is_true(env.get(VERBOSE_VARIABLE)) and not _is_true(env.get(QUIET_VARIABLE)):
        what = ", ".join(done) if done else "nothing to apply"
        say(f"hook applied the plan from {source} after import tensorflow: {what}")
    return done


#: The oldest TensorFlow the hook is tested with (TensorFlow 2.12, Rasa 3.6's pin).
OLDEST_TENSORFLOW = (2, 12)


def version_problem(version: object) -> str:
    """One line when TensorFlow `version` is older than OLDEST_TENSORFLOW, else ''.

    The plan is still applied: every call is guarded, and TensorFlow has had
    these setters since 2.0. An unreadable version says nothing.
    """
    if not isinstance(version, str):
        return ""
    parts = version.split(".")
    if len(parts) < 2 or not all(p.isascii() and p.isdigit() for p in parts[:2]):
        return ""
    if (int(parts[0]), int(parts[1])) >= OLDEST_TENSORFLOW:
        return ""
    oldest = ".".join(map(str, OLDEST_TENSORFLOW))
    return (
        f"TensorFlow {version} is older than {oldest}, the oldest version tf-entrypoint "
        "is tested with; the plan is applied as far as this TensorFlow allows"
    )


def tensorflow_missing(env: Mapping[str, str], python: str | None = None) -> str:
    """One line when this Python cannot import tensorflow, else ''. Imports nothing.

    For the entrypoint, before the hand-off: the hook is installed in this
    Python only, so a TensorFlow found elsewhere (another venv, another
    interpreter) gets the native variables but not the hook. Nothing to say
    when TF_ENTRYPOINT_HOOK turns the hook off.
    """
    if switch_state(env.get(SWITCH_VARIABLE)) == "off":
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


def _say(message: str) -> None:
    """One line on stderr, prefixed; never raises (stderr may be closed or None)."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(f"{_PREFIX} {' '.join(message.split())}\n")
        stream.flush()
    except Exception:  # noqa: BLE001, S110
        pass
