"""The plan: settings + CPU budget + visible GPUs -> what TensorFlow and its neighbours get.

:func:`make_plan` is pure, :func:`resolve` reads the machine, and
:func:`child_environment` is what the command receives (TF_ENTRYPOINT_PLAN
included, see :mod:`tf_entrypoint.handoff`). The rules (threads = the budget, a
count above it warned about, growth with caps, caps without GPUs) are the
docs/configuration.md: "Environment variables", "What is applied where".
"""

from __future__ import annotations

from tf_entrypoint import settings as s
from tf_entrypoint.cpu import CpuBudget, detect_cpu_budget
from tf_entrypoint.frozen import frozen
from tf_entrypoint.gpus import Gpu, GpuView, detect_gpus
from tf_entrypoint.handoff import PLAN_VARIABLE, HookPlan, decode_plan, encode_plan
from tf_entrypoint.problems import Notice, Problem
from tf_entrypoint.tfconfig import TF_CONFIG, check_tf_config, tf_config_notices

# Annotations only: `typing`, `collections.abc` and `pathlib` cost start-up
# time that the hand-off does not need (mypy reads this like typing's).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from os import PathLike

#: Variables other libraries read for their own thread pools; set to the
#: intra-op count when the user has not set them.
LIBRARY_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@frozen
class Threads:
    value: int
    #: The variable that set it, or the CPU budget's source ("cgroup v1 quota", ...).
    source: str


@frozen
class MemoryCap:
    index: int  # TensorFlow GPU index
    memory_mb: int
    gpu: Gpu | None  # None only when no GPU is visible (the cap is then ignored)
    #: Where it came from: TF_GPU_MEMORY_ALLOC, or the fraction flag with its
    #: value and the GPU's size ("--per_process_gpu_memory_fraction=0.5 x 81559 MB").
    source: str = s.GPU_MEMORY_ALLOC


@frozen
class MemoryFraction:
    """TF Serving's --per_process_gpu_memory_fraction: a share of every visible GPU.

    Read from the command line (tfserving.plan_flags); the plan turns it into
    one cap per visible GPU, floor(share x the GPU's memory in MB), which the
    hook applies like TF_GPU_MEMORY_ALLOC's. The share is exact: numerator /
    denominator of the decimal as written, in (0, 1].
    """

    #: "--per_process_gpu_memory_fraction" (the spelling used).
    source: str
    #: The value as written.
    text: str
    numerator: int
    denominator: int

    def of(self, total_mb: int) -> int:
        """The cap for a GPU of `total_mb`: the share, rounded down to whole MB."""
        return total_mb * self.numerator // self.denominator


@frozen
class EnvValue:
    name: str
    value: str
    #: "tf-entrypoint" when we set it, "already set" when the user's value stays.
    source: str


@frozen
class Plan:
    cpu: CpuBudget
    gpus: GpuView
    intra_op: Threads
    inter_op: Threads
    allow_growth: bool | None  # None: TensorFlow's default (no growth)
    memory_caps: tuple[MemoryCap, ...]  # applied only when GPUs are visible
    #: --per_process_gpu_memory_fraction, when given (not 0); its caps are in memory_caps.
    memory_fraction: MemoryFraction | None
    library_threads: tuple[EnvValue, ...]
    quiet: bool
    problems: tuple[Problem, ...]
    notices: tuple[Notice, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def applied_caps(self) -> tuple[MemoryCap, ...]:
        return tuple(cap for cap in self.memory_caps if cap.gpu is not None)


def _threads(setting: s.ThreadSetting, cpu: CpuBudget) -> Threads:
    if setting.value is not None:
        return Threads(setting.value, setting.variable or "")
    return Threads(cpu.cpus, cpu.source)


def _budget_notices(intra: Threads, inter: Threads, cpu: CpuBudget) -> list[Notice]:
    notices = []
    for name, threads in (("intra-op", intra), ("inter-op", inter)):
        if threads.value > cpu.cpus and threads.source != cpu.source:
            notices.append(
                Notice(
                    threads.source,
                    f"{threads.value} {name} threads exceed this container's CPU budget of "
                    f"{cpu.cpus} ({cpu.source}); expect CPU throttling and higher latency",
                )
            )
    return notices


def _memory_caps(
    parsed: s.Settings, raw: str, gpus: GpuView
) -> tuple[tuple[MemoryCap, ...], list[Problem], list[Notice]]:
    if not parsed.gpu_memory_alloc:
        return (), [], []
    if not gpus.gpus:
        ignored = tuple(MemoryCap(i, mb, None) for i, mb in parsed.gpu_memory_alloc)
        notice = Notice(
            s.GPU_MEMORY_ALLOC,
            f"no GPU is visible ({gpus.reason}); the memory caps are ignored",
        )
        return ignored, [], [notice]
    by_index = {gpu.index: gpu for gpu in gpus.gpus}
    visible = ", ".join(str(i) for i in sorted(by_index))
    caps: list[MemoryCap] = []
    problems: list[Problem] = []
    notices: list[Notice] = []
    for index, mb in parsed.gpu_memory_alloc:
        gpu = by_index.get(index)
        if gpu is None:
            problems.append(
                Problem(
                    s.GPU_MEMORY_ALLOC,
                    raw,
                    f"ids of visible GPUs (TensorFlow indexes: {visible})",
                    reason=f"GPU {index} is not visible",
                )
            )
            continue
        if gpu.memory_mb is not None and mb > gpu.memory_mb:
            problems.append(
                Problem(
                    s.GPU_MEMORY_ALLOC,
                    raw,
                    f"a cap of at most {gpu.memory_mb} MB for GPU {index}",
                    reason=f"GPU {index} ({gpu.name or 'unknown model'}) has {gpu.memory_mb} MB",
                )
            )
            continue
        if gpu.memory_mb is None:
            notices.append(
                Notice(
                    s.GPU_MEMORY_ALLOC,
                    f"GPU {index}'s total memory is unknown, so its {mb} MB cap is not checked",
                )
            )
        caps.append(MemoryCap(index, mb, gpu))
    return tuple(caps), problems, notices


def _growth_notices(
    allow_growth: bool | None, caps: tuple[MemoryCap, ...], fraction: MemoryFraction | None
) -> list[Notice]:
    applied = [cap for cap in caps if cap.gpu is not None]
    if allow_growth and applied:
        capped = ", ".join(f"GPU {cap.index} up to {cap.memory_mb} MB" for cap in applied)
        origin = fraction.source if fraction is not None else s.GPU_MEMORY_ALLOC
        return [
            Notice(
                s.ALLOW_GROWTH,
                f"with {origin}: memory grows on demand, never beyond the cap ({capped})",
            )
        ]
    return []


def _fraction_caps(
    fraction: MemoryFraction, alloc: str, gpus: GpuView
) -> tuple[tuple[MemoryCap, ...], list[Problem], list[Notice]]:
    """--per_process_gpu_memory_fraction -> one cap per visible GPU (floor, in MB).

    Not with TF_GPU_MEMORY_ALLOC (two answers to one question); ignored, with
    a notice, when no GPU is visible (TF Serving ignores it too); refused
    when a GPU's size is unknown (the share cannot become MB) or the share is
    under 1 MB.
    """
    if alloc.strip():
        reason = f"{s.GPU_MEMORY_ALLOC}={alloc!r} caps GPU memory too"
        return (), [Problem(fraction.source, fraction.text, _ONE_OF_THEM, reason)], []
    if not gpus.gpus:
        notice = Notice(
            fraction.source,
            f"no GPU is visible ({gpus.reason}); the fraction is ignored, as TF Serving "
            "ignores it without a GPU",
        )
        return (), [], [notice]
    caps: list[MemoryCap] = []
    problems: list[Problem] = []
    for gpu in gpus.gpus:
        if gpu.memory_mb is None:
            reason = f"GPU {gpu.index}'s memory size is unknown (NVML is not available)"
            problems.append(Problem(fraction.source, fraction.text, _IN_MB, reason))
            continue
        mb = fraction.of(gpu.memory_mb)
        if mb < 1:
            reason = f"it leaves GPU {gpu.index} ({gpu.memory_mb} MB) less than 1 MB"
            problems.append(Problem(fraction.source, fraction.text, _AT_LEAST_1_MB, reason))
            continue
        origin = f"{fraction.source}={fraction.text} x {gpu.memory_mb} MB"
        caps.append(MemoryCap(gpu.index, mb, gpu, origin))
    return tuple(caps), problems, []


_ONE_OF_THEM = (
    f"one of the two: drop the flag to keep the caps in MB, or unset {s.GPU_MEMORY_ALLOC} "
    "to cap every GPU at that share"
)
_IN_MB = f"caps in MB with {s.GPU_MEMORY_ALLOC} (e.g. '0:4096') instead of a fraction"
_AT_LEAST_1_MB = "a share of at least 1 MB of every visible GPU"


def _library_threads(env: Mapping[str, str], intra: Threads) -> tuple[EnvValue, ...]:
    values = []
    for name in LIBRARY_THREAD_VARIABLES:
        current = env.get(name, "")
        if current.strip():
            values.append(EnvValue(name, current, "already set"))
        else:
            values.append(EnvValue(name, str(intra.value), "tf-entrypoint"))
    return tuple(values)


def make_plan(
    parsed: s.ParsedSettings,
    cpu: CpuBudget,
    gpus: GpuView,
    env: Mapping[str, str],
    fraction: MemoryFraction | None = None,
) -> Plan:
    """Combine what was read into what will be applied. Pure.

    `fraction`: --per_process_gpu_memory_fraction from the command line, if given.
    """
    conf = parsed.settings
    intra = _threads(conf.intra_op, cpu)
    inter = _threads(conf.inter_op, cpu)
    alloc = env.get(s.GPU_MEMORY_ALLOC, "")
    if fraction is not None:
        caps, cap_problems, cap_notices = _fraction_caps(fraction, alloc, gpus)
    else:
        caps, cap_problems, cap_notices = _memory_caps(conf, alloc, gpus)
    # TF_CONFIG (multi-worker training) is checked, then passed on unchanged.
    tf_config = env.get(TF_CONFIG)
    tf_config_problems = check_tf_config(tf_config) if tf_config is not None else ()
    notices = [
        *parsed.notices,
        *_budget_notices(intra, inter, cpu),
        *cap_notices,
        *_growth_notices(conf.allow_growth, caps, fraction),
        *tf_config_notices(tf_config),
    ]
    return Plan(
        cpu=cpu,
        gpus=gpus,
        intra_op=intra,
        inter_op=inter,
        allow_growth=conf.allow_growth,
        memory_caps=caps,
        memory_fraction=fraction,
        library_threads=_library_threads(env, intra),
        quiet=conf.quiet,
        problems=(*parsed.problems, *cap_problems, *tf_config_problems),
        notices=tuple(notices),
    )


def resolve(
    env: Mapping[str, str],
    *,
    root: str | PathLike[str] = "/",
    affinity_cpus: int | None = None,
    fraction: MemoryFraction | None = None,
) -> Plan:
    """Read settings, the CPU budget and the visible GPUs; make the plan.

    `root` replaces "/" for every file read (tests use fake trees); `fraction`
    is --per_process_gpu_memory_fraction from the command line.
    """
    parsed = s.parse_settings(env)
    conf = parsed.settings
    cpu = detect_cpu_budget(
        rounding=conf.cpu_rounding,
        override=conf.cpus_override,
        limit_millicores=conf.cpu_limit_millicores,
        root=root,
        affinity_cpus=affinity_cpus,
    )
    gpus = detect_gpus(env, root=root)
    return make_plan(parsed, cpu, gpus, env, fraction)


def child_environment(plan: Plan, env: Mapping[str, str]) -> dict[str, str]:
    """The environment the command runs with: `env` plus what the plan sets."""
    child = dict(env)
    intra, inter = str(plan.intra_op.value), str(plan.inter_op.value)
    # TensorFlow's own variables size the pools natively; Rasa's names carry
    # the same values so code that reads them (Rasa does) agrees.
    child["TF_NUM_INTRAOP_THREADS"] = intra
    child["TF_NUM_INTEROP_THREADS"] = inter
    child[s.INTRA_OP] = intra
    child[s.INTER_OP] = inter
    if plan.allow_growth is not None:
        child[s.ALLOW_GROWTH] = "true" if plan.allow_growth else "false"
    for value in plan.library_threads:
        child[value.name] = value.value
    child[PLAN_VARIABLE] = encode_plan(hook_plan(plan))
    return child


def hook_plan(plan: Plan) -> HookPlan:
    """What crosses the exec (see tf_entrypoint.handoff)."""
    return HookPlan(
        intra_op_threads=plan.intra_op.value,
        inter_op_threads=plan.inter_op.value,
        allow_growth=plan.allow_growth,
        memory_limits_mb=tuple(sorted((cap.index, cap.memory_mb) for cap in plan.applied_caps)),
        cpus=plan.cpu.cpus,
        cpu_source=plan.cpu.source,
    )


def hook_plan_from_environment(env: Mapping[str, str]) -> HookPlan | None:
    """For the in-process hook when the entrypoint did not run (docker exec).

    None when the configuration is invalid: the hook then applies nothing and
    the user sees TensorFlow's own behaviour (the entrypoint, had it run, would
    have refused to start the command).
    """
    plan = resolve(env)
    return hook_plan(plan) if plan.ok else None


def planned_cpus(env: Mapping[str, str]) -> tuple[int, str]:
    """(CPU budget, its source): from TF_ENTRYPOINT_PLAN, else computed (the budget only).

    For the model server, which runs after the entrypoint and needs this one number.
    """
    raw = env.get(PLAN_VARIABLE)
    handed = decode_plan(raw) if raw else None
    if isinstance(handed, HookPlan) and handed.cpus is not None:
        return handed.cpus, handed.cpu_source
    conf = s.parse_settings(env).settings
    cpu = detect_cpu_budget(
        rounding=conf.cpu_rounding,
        override=conf.cpus_override,
        limit_millicores=conf.cpu_limit_millicores,
    )
    return cpu.cpus, cpu.source
