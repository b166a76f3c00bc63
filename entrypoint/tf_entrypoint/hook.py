"""The hook: apply the plan inside the process that imports TensorFlow.

Called by ``_pth`` right after ``tensorflow/__init__.py`` has run; applies
what :mod:`tf_entrypoint.handoff` carries (or, under ``docker exec``, the plan
computed from the same variables). Never raises into the user's import.
docs/configuration.md: "What is applied where".
"""

from __future__ import annotations

import os

from tf_entrypoint.common import FALSE_WORDS, TRUE_WORDS, WHITESPACE, say
from tf_entrypoint.handoff import PLAN_VARIABLE, HookPlan, decode_plan

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs start-up time
    from collections.abc import Callable, Mapping, MutableMapping
    from typing import Any, TypeAlias

    Warn: TypeAlias = Callable[[str], None]

SWITCH_VARIABLE = "TF_ENTRYPOINT_HOOK"
VERBOSE_VARIABLE = "TF_ENTRYPOINT_HOOK_VERBOSE"
QUIET_VARIABLE = "TF_ENTRYPOINT_QUIET"
ALLOW_GROWTH_VARIABLE = "TF_FORCE_GPU_ALLOW_GROWTH"
#: TensorFlow's own thread variables (read once, when the runtime starts).
INTRA_OP_NATIVE = "TF_NUM_INTRAOP_THREADS"
INTER_OP_NATIVE = "TF_NUM_INTEROP_THREADS"

#: The words of entrypoint/_pth.py and the line in tf_entrypoint_hook.pth (a test ties them).
SWITCH_OFF = FALSE_WORDS
SWITCH_ON = ("", *TRUE_WORDS)
_MAX_THREADS_DIGITS = 10


# --- switches -----------------------------------------------------------------


def switch_state(raw: str | None) -> str:
    """'on', 'off' or 'invalid' for a TF_ENTRYPOINT_HOOK value (None = unset = on)."""
    if raw is None:
        return "on"
    word = raw.strip(WHITESPACE).lower()
    if word in SWITCH_OFF:
        return "off"
    return "on" if word in SWITCH_ON else "invalid"


def _positive_int(raw: str | None) -> int | None:
    """A whole number >= 1 written with ASCII digits, else None (unset, 0, junk)."""
    text = (raw or "").strip(WHITESPACE)
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_THREADS_DIGITS:
        return None
    return int(text) or None


def _is_true(raw: str | None) -> bool:
    return raw is not None and raw.strip(WHITESPACE).lower() in TRUE_WORDS


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
    environment (None when the configuration is invalid: the entrypoint would
    not have started the command).
    """
    raw = env.get(PLAN_VARIABLE)
    if raw is not None and raw.strip(WHITESPACE):
        plan = decode_plan(raw)
        if isinstance(plan, str):
            return PLAN_VARIABLE, f"{PLAN_VARIABLE} is malformed ({plan}); nothing applied"
        return PLAN_VARIABLE, plan
    try:
        from tf_entrypoint.plan import hook_plan_from_environment  # noqa: PLC0415 - docker exec

        return "the environment", hook_plan_from_environment(env)
    except Exception as err:  # noqa: BLE001 - never break the user's import
        return "the environment", (
            f"could not compute the plan ({type(err).__name__}: {err}); nothing applied"
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
    tell = warn or _say
    switch = env.get(SWITCH_VARIABLE)
    state = switch_state(switch)
    if state == "off":  # switched off inside the process before importing tensorflow
        return []
    if state == "invalid":
        tell(
            f"{SWITCH_VARIABLE}={_shown(switch)} is not on/off "
            "(on: true/1/yes, off: off/false/0/no); the hook stays on"
        )
    too_old = version_problem(getattr(tf, "__version__", None))
    if too_old:
        tell(too_old)
    source, plan = plan_for_process(env)
    if isinstance(plan, str):
        tell(plan)
        return []
    if plan is None:
        return []
    done = apply(tf, plan, warn=tell, environ=env)
    if _is_true(env.get(VERBOSE_VARIABLE)) and not _is_true(env.get(QUIET_VARIABLE)):
        what = ", ".join(done) if done else "nothing to apply"
        tell(f"hook applied the plan from {source} after import tensorflow: {what}")
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


def _say(message: str) -> None:
    """One line on stderr (TensorFlow's messages may hold newlines: folded)."""
    say(" ".join(message.split()))


def _shown(value: str | None) -> str:
    import json  # noqa: PLC0415 - only for an odd switch value

    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
