"""The quota sweep: the same TensorFlow workloads under CPU limits and thread settings.

The machine's speed drifts by 10-20 % over seconds (other tenants of the
host), more than the effects measured here, so modes are never timed one
after another. Instead, for each (repetition, limit) one container per mode
starts (bench/workload.py --slices, mounted read-only), traces and warms up
every workload, and waits. The harness then hands out short timed windows
in turn: for each workload, ROUNDS rounds in which every mode runs one
window (order rotated round by round). Idle containers block on stdin and
use no CPU, so each window has the machine to itself, and every mode's
windows are spread over the same minute. A round during which others (other
processes, the hypervisor as steal) took more than `disturbed_cpus` from the
benchmark's CPUs is discarded and run again once the machine is idle.
Each repetition starts fresh containers, so the process-level luck (thread
placement, memory layout) is sampled too.

Modes:

* defaults: TensorFlow's own sizing. The entrypoint is bypassed
  (`--entrypoint python`) and so is the import hook (TF_ENTRYPOINT_HOOK=off).
* auto: the entrypoint's automatic plan (the image's ENTRYPOINT, no settings).
* manual I/J: through the entrypoint with TF_INTRA_OP_PARALLELISM_THREADS=I
  and TF_INTER_OP_PARALLELISM_THREADS=J.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from bench.common import (
    LABEL,
    LOAD_MOUNTS,
    NAMES,
    docker,
    loadavg,
    log,
    now_iso,
    wait_until_idle,
)
from bench.workload import CGROUP_CPU_DIRS, SAMPLES, cgroup_cpu_seconds, summary
from harness.stats import median

#: Docker arguments per CPU limit. "none" is the whole (2-core) machine.
LIMITS: dict[str, list[str]] = {
    "none": [],
    "cpus=0.5": ["--cpus", "0.5"],
    "cpus=1": ["--cpus", "1"],
    "cpus=1.5": ["--cpus", "1.5"],
    "cpus=2": ["--cpus", "2"],
    "cpuset=0": ["--cpuset-cpus", "0"],
}
#: intra/inter pairs of the manual sweep: every pool size from 1 to the host's
#: CPU count (2 here); more threads than CPUs only oversubscribes.
MANUAL: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (2, 1), (2, 2))
WORKLOADS = tuple(SAMPLES)

#: The targets of issue 7, as ratios within one run.
TARGET_VS_BEST_THROUGHPUT = 0.95
TARGET_VS_BEST_P99 = 1.2
TARGET_VS_DEFAULTS_THROUGHPUT = 0.97


@dataclass(frozen=True)
class SweepConfig:
    limits: tuple[str, ...] = tuple(LIMITS)
    manual: tuple[tuple[int, int], ...] = MANUAL
    reps: int = 6
    #: rounds per workload and repetition; each mode runs one window per round
    rounds: int = 3
    #: timed seconds per window, after `warmup` untimed seconds
    seconds: float = 0.5
    warmup: float = 0.1
    workloads: tuple[str, ...] = WORKLOADS
    #: A round during which other processes (or the hypervisor, as steal) took
    #: more than this many CPUs from the benchmark's CPUs is run again...
    disturbed_cpus: float = 0.15
    #: ...up to this many times, after waiting (up to idle_wait seconds) for
    #: the machine to be idle.
    retries: int = 3
    idle_wait: float = 60

    @property
    def modes(self) -> list[str]:
        return ["defaults", "auto", *(f"manual {i}/{j}" for i, j in self.manual)]


def mode_arguments(mode: str) -> tuple[list[str], list[str]]:
    """(docker run arguments, command prefix) for a mode."""
    if mode == "defaults":
        return ["--entrypoint", "python", "-e", "TF_ENTRYPOINT_HOOK=off"], []
    if mode == "auto":
        return [], ["python"]
    intra, inter = mode.removeprefix("manual ").split("/")
    env = [
        "-e",
        f"TF_INTRA_OP_PARALLELISM_THREADS={intra}",
        "-e",
        f"TF_INTER_OP_PARALLELISM_THREADS={inter}",
    ]
    return env, ["python"]


def container_cgroups(container_id: str) -> tuple[Path, Path] | None:
    """(the host's root cgroup, the container's cgroup), when the host tree shows both.

    Read on the host, both CPU times are exact (ns or us), unlike /proc/stat,
    which samples busy time at each tick but measures idle time exactly, and
    so counts a bursty workload's own sub-tick bursts as somebody else's.
    """
    for root in map(Path, CGROUP_CPU_DIRS):
        for sub in (f"docker/{container_id}", f"system.slice/docker-{container_id}.scope"):
            if None not in (cgroup_cpu_seconds(root / sub), cgroup_cpu_seconds(root)):
                return root, root / sub
    return None


class HostCpu:
    """What others took from the machine while one container ran a window (host side)."""

    def __init__(self, cgroups: tuple[Path, Path]) -> None:
        self.cgroups = cgroups
        self.start = self._sample()

    def _sample(self) -> tuple[float, float, float, float]:
        root, own = (cgroup_cpu_seconds(c) or 0.0 for c in self.cgroups)
        steal = int(Path("/proc/stat").read_text().split("\n", 1)[0].split()[8])
        return time.monotonic(), root, own, steal / os.sysconf("SC_CLK_TCK")

    def result(self) -> dict[str, float]:
        wall, root, own, steal = self._sample()
        elapsed = wall - self.start[0]
        others = (root - self.start[1]) - (own - self.start[2])
        return {
            "foreign_cpus": round(max(0.0, others) / elapsed, 3),
            "steal_cpus": round((steal - self.start[3]) / elapsed, 3),
        }


class Worker:
    """One container of bench/workload.py --slices: a mode under a limit, waiting for windows."""

    def __init__(self, image: str, limit: str, mode: str, config: SweepConfig) -> None:
        extra, prefix = mode_arguments(mode)
        self.mode = mode
        self.name = NAMES.new()
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        argv = [
            *("docker", "run", "-i", "--rm", "--name", self.name, "--label", LABEL),
            *("--network", "none", *LOAD_MOUNTS, *LIMITS[limit], *extra, image),
            *(*prefix, "-m", "bench.workload", "--slices", "--warmup", str(config.warmup)),
            *("--workloads", ",".join(config.workloads)),
        ]
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr
        )
        self.threads: dict[str, Any] = {}
        self.cgroups: tuple[Path, Path] | None = None

    def _answer(self, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else b""
        if not line.startswith(b"{"):
            self.stderr.seek(0)
            tail = self.stderr.read().decode(errors="replace").strip()[-1500:]
            why = "no answer in time" if not ready else f"exit {self.process.poll()}"
            raise RuntimeError(f"{self.mode} ({self.name}): {why}\n{tail}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ready(self, timeout: float = 300) -> None:
        self.threads = self._answer(timeout)["threads"]
        container_id = docker("inspect", "-f", "{{.Id}}", self.name, check=False)
        self.cgroups = container_cgroups(container_id) if container_id else None

    def window(self, workload: str, seconds: float, warmup: float) -> dict[str, Any]:
        assert self.process.stdin is not None
        ask = {"workload": workload, "seconds": seconds, "warmup": warmup}
        host = HostCpu(self.cgroups) if self.cgroups else None
        self.process.stdin.write(json.dumps(ask).encode() + b"\n")
        self.process.stdin.flush()
        window = self._answer(timeout=60 + 4 * (seconds + warmup))
        if host is not None:  # warm-up included: whatever ran meanwhile
            window["host_cpu"] = host.result()
        return window

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()  # EOF: the workload exits
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        NAMES.remove(self.name)
        self.stderr.close()


def disturbance(window: dict[str, Any]) -> float:
    """CPU others took from the machine during a window (in CPUs).

    From the host's cgroup tree when readable (exact); else from the
    container's view of /proc/stat (tick-sampled: it over-counts bursty work).
    """
    cpu = window.get("host_cpu") or window["cpu"]
    return float(cpu.get("foreign_cpus", 0) + cpu.get("steal_cpus", 0))


def rotated(items: Sequence[str], by: int) -> list[str]:
    by %= len(items)
    return [*items[by:], *items[:by]]


def measure_limit(image: str, limit: str, rep: int, config: SweepConfig) -> list[dict[str, Any]]:
    """One repetition under one limit: a container per mode, windows in turn."""
    workers = {mode: Worker(image, limit, mode, config) for mode in config.modes}
    windows: dict[str, dict[str, list[dict[str, Any]]]] = {m: {} for m in config.modes}
    discarded: list[dict[str, Any]] = []
    disturbed = 0
    try:
        for worker in workers.values():
            worker.ready()
        for workload in config.workloads:
            kept = retries = 0
            while kept < config.rounds:
                got = {
                    mode: workers[mode].window(workload, config.seconds, config.warmup)
                    for mode in rotated(config.modes, rep + kept)
                }
                others = max(disturbance(w) for w in got.values())
                if others > config.disturbed_cpus and retries < config.retries:
                    retries += 1
                    idle = wait_until_idle(config.disturbed_cpus, config.idle_wait)
                    log(
                        f"sweep: {limit} {workload} round {kept}: others took {others:.2f} "
                        f"CPUs; running it again (machine now {idle:.2f} CPUs busy)"
                    )
                    discarded.append(
                        {"workload": workload, "round": kept, "others_cpus": round(others, 3)}
                    )
                    continue
                disturbed += others > config.disturbed_cpus
                for mode, window in got.items():
                    windows[mode].setdefault(workload, []).append(window)
                kept += 1
    finally:
        for worker in workers.values():
            worker.close()
    return [
        {
            "limit": limit,
            "mode": mode,
            "rep": rep,
            "result": {
                "threads": workers[mode].threads,
                "workloads": {w: summary(ws, SAMPLES[w]) for w, ws in windows[mode].items()},
            },
            "discarded_rounds": discarded,
            "disturbed_rounds": disturbed,
            "disturbance_from": "host cgroups" if workers[mode].cgroups else "/proc/stat",
        }
        for mode in config.modes
    ]


def run_sweep(image: str, config: SweepConfig) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    began, load_before = now_iso(), loadavg()
    clock = time.monotonic()
    blocks = len(config.limits) * config.reps
    for rep in range(config.reps):
        for limit in config.limits:
            try:
                runs += measure_limit(image, limit, rep, config)
            except (RuntimeError, ValueError, OSError) as err:
                log(f"sweep: {limit} rep {rep}: FAILED: {err}")
                failures.append({"limit": limit, "rep": rep, "error": str(err)})
                if len(failures) >= 2 and not runs:
                    raise RuntimeError(f"the first runs all failed; stopping: {err}") from err
                continue
            done = len(runs) // len(config.modes) + len(failures)
            log(
                f"sweep {done}/{blocks}: {limit:9} rep {rep} done "
                f"({time.monotonic() - clock:.0f} s)"
            )
    data = {
        "config": {**asdict(config), "modes": config.modes, "limit_args": LIMITS},
        "started": began,
        "finished": now_iso(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "runs": runs,
        "failures": failures,
    }
    data["cells"] = analyse(data)
    return data


# --- analysis -----------------------------------------------------------------


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": median(values), "min": min(values), "max": max(values), "n": len(values)}


def _by_rep(runs: list[dict[str, Any]], limit: str, mode: str, workload: str) -> dict[int, Any]:
    return {
        r["rep"]: r["result"]["workloads"][workload]
        for r in runs
        if r["limit"] == limit and r["mode"] == mode and "result" in r
    }


def _paired(a: dict[int, Any], b: dict[int, Any], key: str) -> dict[str, float] | None:
    ratios = [a[rep][key] / b[rep][key] for rep in sorted(a) if rep in b and b[rep][key] > 0]
    return _spread(ratios) if ratios else None


def _ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> float:
    return float(a[key]["median"] / b[key]["median"])


def _plan(runs: list[dict[str, Any]], limit: str) -> str:
    for r in runs:
        if r["limit"] == limit and r["mode"] == "auto" and "result" in r:
            env = r["result"]["threads"]["env"]
            return (
                f"{env.get('TF_NUM_INTRAOP_THREADS', '?')}/{env.get('TF_NUM_INTEROP_THREADS', '?')}"
            )
    return "?"


def _compare(
    mine: dict[int, Any],
    stats: dict[str, Any],
    other: str,
    theirs: dict[int, Any],
    other_stats: dict[str, Any],
) -> dict[str, Any]:
    return {
        "against": other,
        "throughput": round(_ratio(stats, other_stats, "throughput"), 4),
        "p99": round(_ratio(stats, other_stats, "p99_ms"), 4),
        "throughput_paired": _paired(mine, theirs, "throughput"),
        "p99_paired": _paired(mine, theirs, "p99_ms"),
    }


def analyse_cell(
    runs: list[dict[str, Any]], limit: str, workload: str, modes: list[str]
) -> dict[str, Any] | None:
    per_rep = {mode: _by_rep(runs, limit, mode, workload) for mode in modes}
    stats = {
        mode: {
            key: _spread([v[key] for v in reps.values()])
            for key in ("throughput", "p50_ms", "p99_ms")
        }
        for mode, reps in per_rep.items()
        if reps
    }
    manual = [m for m in modes if m.startswith("manual") and m in stats]
    if "auto" not in stats or "defaults" not in stats or not manual:
        return None
    best = max(manual, key=lambda m: stats[m]["throughput"]["median"])
    vs_best = _compare(per_rep["auto"], stats["auto"], best, per_rep[best], stats[best])
    vs_defaults = _compare(
        per_rep["auto"], stats["auto"], "defaults", per_rep["defaults"], stats["defaults"]
    )
    plan = _plan(runs, limit)
    # The control: the manual mode that asks for exactly what the plan chose.
    # Same configuration, so its ratio shows the benchmark's own noise.
    same = f"manual {plan}"
    vs_same = (
        _compare(per_rep["auto"], stats["auto"], same, per_rep[same], stats[same])
        if same in stats
        else None
    )
    return {
        "limit": limit,
        "workload": workload,
        "auto_plan": plan,
        "best_manual": best,
        "modes": stats,
        "auto_vs_best": vs_best,
        "auto_vs_defaults": vs_defaults,
        "auto_vs_same_manual": vs_same,
        "targets": {
            "throughput_vs_best": vs_best["throughput"] >= TARGET_VS_BEST_THROUGHPUT,
            "p99_vs_best": vs_best["p99"] <= TARGET_VS_BEST_P99,
            "throughput_vs_defaults": vs_defaults["throughput"] >= TARGET_VS_DEFAULTS_THROUGHPUT,
        },
    }


def analyse(data: dict[str, Any]) -> list[dict[str, Any]]:
    config = data["config"]
    cells = []
    for limit in config["limits"]:
        for workload in config["workloads"]:
            cell = analyse_cell(data["runs"], limit, workload, config["modes"])
            if cell is not None:
                cells.append(cell)
    return cells
