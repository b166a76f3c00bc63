"""A plan's inputs for tests/unit: a CPU budget from a cgroup v1 quota, GPU views, and plan_for."""

from __future__ import annotations

from tf_entrypoint import plan as p
from tf_entrypoint.cgroups import CgroupReading, CpuQuota
from tf_entrypoint.cpu import CpuBudget
from tf_entrypoint.gpus import Gpu, GpuView
from tf_entrypoint.settings import parse_settings

QUOTA = CpuQuota(
    cpus=1.5,
    quota_us=150000,
    period_us=100000,
    version=1,
    file="/sys/fs/cgroup/cpu/cpu.cfs_quota_us",
    cgroup="/docker/abc",
)
CGROUP = CgroupReading(version=1, readable=True, quota=QUOTA, notes=())
CPU = CpuBudget(
    cpus=1,
    exact=1.5,
    source="cgroup v1 quota",
    detail="cgroup v1 quota 1.5 CPUs; rounded down (floor) to 1",
    affinity_cpus=8,
    cgroup=CGROUP,
    rounding="floor",
)
NO_GPU = GpuView(gpus=(), source="none", reason="no NVIDIA driver in this container", notes=())
H100 = Gpu(index=0, system_index=0, uuid="GPU-aaaa", name="NVIDIA H100", memory_mb=81559)
MYSTERY = Gpu(index=1, system_index=3, uuid="GPU-bbbb", name=None, memory_mb=None)
TWO_GPUS = GpuView(gpus=(H100, MYSTERY), source="nvml", reason="2 GPUs visible", notes=())


def plan_for(env: dict[str, str], gpus: GpuView = NO_GPU, cpu: CpuBudget = CPU) -> p.Plan:
    return p.make_plan(parse_settings(env), cpu, gpus, env)
