"""Say what a plan does: for a person, as JSON, and as one line at hand-off.

The JSON form is a documented, stable interface (schema ``tf-entrypoint/plan/v1``):
fields are only ever added within v1, never renamed or removed.
"""

from __future__ import annotations

from tf_entrypoint import __version__
from tf_entrypoint.gpus import Gpu
from tf_entrypoint.plan import Plan, child_environment
from tf_entrypoint.settings import TABLE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

SCHEMA = "tf-entrypoint/plan/v1"


def _gpu_json(gpu: Gpu) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "system_index": gpu.system_index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "memory_mb": gpu.memory_mb,
    }


def to_json(plan: Plan, env: Mapping[str, str]) -> dict[str, Any]:
    cpu = plan.cpu
    quota = cpu.cgroup.quota
    added = {
        k: v for k, v in sorted(child_environment(plan, env).items()) if env.get(k) != v and plan.ok
    }
    return {
        "schema": SCHEMA,
        "tf_entrypoint_version": __version__,
        "ok": plan.ok,
        "problems": [
            {
                "variable": p.variable,
                "value": p.value,
                "expected": p.expected,
                "reason": p.reason,
                "message": str(p),
            }
            for p in plan.problems
        ],
        "notices": [{"variable": n.variable, "message": n.message} for n in plan.notices],
        "cpu": {
            "cpus": cpu.cpus,
            "exact": cpu.exact,
            "source": cpu.source,
            "detail": cpu.detail,
            "rounding": cpu.rounding,
            "affinity_cpus": cpu.affinity_cpus,
            "cgroup": {
                "version": cpu.cgroup.version,
                "readable": cpu.cgroup.readable,
                "quota": None
                if quota is None
                else {
                    "cpus": quota.cpus,
                    "quota_us": quota.quota_us,
                    "period_us": quota.period_us,
                    "file": quota.file,
                    "cgroup": quota.cgroup,
                },
                "notes": list(cpu.cgroup.notes),
            },
        },
        "threads": {
            "intra_op": {"value": plan.intra_op.value, "source": plan.intra_op.source},
            "inter_op": {"value": plan.inter_op.value, "source": plan.inter_op.source},
            "libraries": [
                {"variable": v.name, "value": v.value, "source": v.source}
                for v in plan.library_threads
            ],
        },
        "gpu": {
            "source": plan.gpus.source,
            "reason": plan.gpus.reason,
            "devices": [_gpu_json(g) for g in plan.gpus.gpus],
            "notes": list(plan.gpus.notes),
            "allow_growth": plan.allow_growth,
            "memory_limits_mb": [
                {
                    "index": cap.index,
                    "memory_mb": cap.memory_mb,
                    "applied": cap.gpu is not None,
                    "source": cap.source,
                }
                for cap in plan.memory_caps
            ],
            "memory_fraction": _fraction_json(plan),
        },
        "environment": added,
    }


def _fraction_json(plan: Plan) -> dict[str, Any] | None:
    fraction = plan.memory_fraction
    if fraction is None:
        return None
    return {
        "flag": fraction.source,
        "value": fraction.text,
        "applied": bool(plan.applied_caps),
    }


def _fraction_text(plan: Plan) -> list[str]:
    fraction = plan.memory_fraction
    if fraction is None:
        return []
    if plan.applied_caps:
        effect = "of each visible GPU's memory, as the caps below"
    elif not plan.gpus.gpus:
        effect = "ignored: no GPU visible"
    else:
        effect = "not applied (see the problems above)"
    return [f"memory fraction  {fraction.text} ({fraction.source}; {effect})"]


def _settings(env: Mapping[str, str]) -> dict[str, str]:
    """The table's variables that are set, as given."""
    return {v.name: env[v.name] for v in TABLE if v.name in env}


def render_json(plan: Plan, env: Mapping[str, str]) -> str:
    import json  # noqa: PLC0415 - not needed on the hand-off path

    return json.dumps(to_json(plan, env), indent=2) + "\n"


def _growth_text(plan: Plan) -> str:
    if plan.allow_growth is None:
        return "TensorFlow's default (maps nearly all GPU memory at start)"
    return "on demand" if plan.allow_growth else "off (all memory at start)"


def render_text(plan: Plan, env: Mapping[str, str]) -> str:
    cpu = plan.cpu
    lines = ["tf-entrypoint plan", ""]
    settings = _settings(env)
    if settings:
        lines.append("Variables set:")
        lines += [f"  {name}={value!r}" for name, value in settings.items()]
        lines.append("")
    if plan.problems:
        lines.append("PROBLEMS (the command would not start):")
        lines += [f"  - {p}" for p in plan.problems]
        lines.append("")
    lines += [
        f"CPU budget       {cpu.cpus} ({cpu.source})",
        f"                 {cpu.detail}",
        f"  affinity       {cpu.affinity_cpus} CPUs",
    ]
    lines += [f"  note           {n}" for n in cpu.cgroup.notes]
    lines += [
        f"intra-op threads {plan.intra_op.value} ({plan.intra_op.source})",
        f"inter-op threads {plan.inter_op.value} ({plan.inter_op.source})",
    ]
    lines += [f"{v.name:<16} {v.value} ({v.source})" for v in plan.library_threads]
    lines.append(f"GPUs             {len(plan.gpus.gpus)} ({plan.gpus.reason})")
    for gpu in plan.gpus.gpus:
        mem = f"{gpu.memory_mb} MB" if gpu.memory_mb is not None else "memory unknown"
        lines.append(f"  GPU:{gpu.index}          {gpu.name or 'unknown model'}, {mem}, {gpu.uuid}")
    lines += [f"  note           {n}" for n in plan.gpus.notes]
    lines.append(f"memory growth    {_growth_text(plan)}")
    lines += _fraction_text(plan)
    for cap in plan.memory_caps:
        state = "" if cap.gpu is not None else "; ignored: no GPU visible"
        lines.append(f"memory cap       GPU:{cap.index} {cap.memory_mb} MB ({cap.source}{state})")
    if plan.notices:
        lines.append("")
        lines += [f"warning: {n}" for n in plan.notices]
    if plan.ok:
        lines += ["", "The command receives:"]
        child = child_environment(plan, env)
        lines += [f"  {k}={v}" for k, v in sorted(child.items()) if env.get(k) != v]
    return "\n".join(lines) + "\n"


#: Values of NVIDIA_DRIVER_CAPABILITIES that ask the NVIDIA container toolkit for CUDA.
_CUDA_CAPABILITIES = frozenset({"compute", "all"})


def asks_for_cuda(env: Mapping[str, str]) -> bool:
    """Whether the image asks the NVIDIA runtime for CUDA (NVIDIA_DRIVER_CAPABILITIES).

    The CUDA image sets ``compute,utility``, as NVIDIA's CUDA base images do;
    the CPU image leaves it unset. Entries are comma-separated, any case.
    """
    raw = env.get("NVIDIA_DRIVER_CAPABILITIES") or ""
    return any(part.strip().lower() in _CUDA_CAPABILITIES for part in raw.split(","))


def no_gpu_line(plan: Plan, env: Mapping[str, str]) -> str | None:
    """In an image built for CUDA that got no GPU: one line saying so, and why.

    None when a GPU is visible, or when the image does not ask for CUDA (in
    the CPU image no GPU is the normal case, not news).
    """
    if plan.gpus.gpus or not asks_for_cuda(env):
        return None
    return f"no GPU is visible, so TensorFlow will run on the CPU: {plan.gpus.reason}"


def summary_line(plan: Plan, argv: tuple[str, ...]) -> str:
    """One concise line at hand-off (silenced by TF_ENTRYPOINT_QUIET)."""
    cpu = plan.cpu
    exact = f"{cpu.exact:g}"
    budget = f"{cpu.cpus} CPU" + ("s" if cpu.cpus != 1 else "")
    if exact != str(cpu.cpus):
        budget += f" ({cpu.source} {exact}, {cpu.rounding})"
    else:
        budget += f" ({cpu.source})"
    threads = f"threads intra {plan.intra_op.value} / inter {plan.inter_op.value}"
    n = len(plan.gpus.gpus)
    gpus = f"{n} GPU" + ("s" if n != 1 else "") if n else "no GPU"
    if plan.applied_caps:
        gpus += " capped " + ",".join(f"{c.index}:{c.memory_mb}MB" for c in plan.applied_caps)
    if plan.allow_growth:
        gpus += ", memory growth"
    command = argv[0] if argv else ""
    return f"{budget}; {threads}; {gpus} -> {command}"
