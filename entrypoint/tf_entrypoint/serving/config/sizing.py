"""The CPU budget and what follows from it: inference threads, the admission bound.

Concurrency is sized from the container's CPU budget, the same number the
entrypoint gives TensorFlow's pools (tf_entrypoint.plan.planned_cpus).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tf_entrypoint.server_flags import DEFAULT_QUEUE_PER_WORKER


@dataclass(frozen=True)
class PlannedCpus:
    """The CPU budget the entrypoint planned (tf_entrypoint.plan.planned_cpus)."""

    cpus: int
    #: Where the number came from, for the start-up log line.
    source: str


def cpu_budget(env: Mapping[str, str]) -> PlannedCpus:
    """The container's CPU budget as the entrypoint computes it (quota, cpuset, override)."""
    try:
        from tf_entrypoint.plan import planned_cpus  # noqa: PLC0415 - stdlib-only, cheap

        return PlannedCpus(*planned_cpus(env))
    except Exception:  # noqa: BLE001 - never refuse to serve over the sizing
        return PlannedCpus(max(1, len(os.sched_getaffinity(0))), "affinity (planning failed)")


def size_workers(budget: PlannedCpus) -> int:
    """Inference threads for a CPU budget: one per CPU.

    TensorFlow's intra-op and inter-op pools are process-wide and already
    sized to the budget by the entrypoint, so extra callers do not add
    compute threads; they add queueing inside TensorFlow and the GIL. One
    caller per CPU keeps every CPU busy with small models (where Python and
    per-call overhead dominate) while large ops still fan out over the
    shared intra-op pool. The event loop (HTTP parsing) is one more thread,
    mostly idle next to inference. See the README for the measurement.
    """
    return max(1, budget.cpus)


#: The most front-ends --frontends' default starts (the flag may ask for more).
MAX_DEFAULT_FRONTENDS = 8
#: The most front-ends --frontends may ask for: the shared page's words (ipc/board.py's
#: MAX_FRONTENDS, the same number: a test keeps them equal).
MAX_FRONTENDS = 510


def size_frontends(budget: PlannedCpus) -> int:
    """Front-end processes for a CPU budget (--frontends' default): one process under
    2 CPUs; from 2, one front-end per CPU over one engine process.

    The request path (HTTP, JSON, protobuf, checks) holds a process's GIL, so
    one process answers at about one core's rate; the front-ends spread it
    over every CPU while the engine keeps one copy of each model. Measured at
    2 CPUs (docs/benchmarks.md, "Every CPU the container is given"): 1.7-1.8x
    one process's requests per second over REST, 1.2-1.6x over gRPC, a median
    latency at one connection within 50 us, 53 MB more for two front-ends. A
    front-end that has no requests uses no CPU, so one per CPU costs only
    memory. At most MAX_DEFAULT_FRONTENDS: a pod without a CPU limit plans for
    its node's CPUs, and the engine, one process, limits small models well
    before that many.
    """
    return 1 if budget.cpus < 2 else min(budget.cpus, MAX_DEFAULT_FRONTENDS)


def default_max_queue(workers: int) -> int:
    """--max-queue's default: DEFAULT_QUEUE_PER_WORKER requests per worker."""
    return DEFAULT_QUEUE_PER_WORKER * workers
