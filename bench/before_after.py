"""Two builds of the server side by side in one run: the cost of a change.

    python -m bench run before_after --before BEFORE_IMAGE --image AFTER_IMAGE [--quick]

Both servers run at once, each under `--cpus 1` with the automatic plan,
serving the demo's half_plus_two and the quota sweep's MLP (8 rows per
request) over REST (8501) and gRPC (8500). One load client per server
(bench/protocol_load.py, from AFTER_IMAGE for both, in the server's network
namespace) drives one server at a time; per repetition, model, concurrency
and protocol the two servers take turns (A B, then B A in the next cell), so
both see the same stretch of the machine. Per window: requests per second,
p50/p99 and the server container's CPU seconds (its cgroup), hence server
CPU per request. The first answer of every window is checked against the
SavedModel's own output. Reported: AFTER / BEFORE per cell (medians over the
repetitions, and the min-max of the paired ratios), and the idle RSS of each.

Used for issue 23 (a pure restructuring must not cost anything): BEFORE is
the image of the commit before the change, AFTER the image of the change.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.common import NAMES, docker, log, machine, now_iso
from bench.grpc_rest import GrpcConfig, LoadClient, measure_cell, served_models, start_server
from bench.serving import wait_ready
from harness.stats import median

MODELS = ("half_plus_two", "mlp")
MODES = ("rest", "grpc")
KEYS = ("rps", "p99_ms", "server_cpu_ms_per_request")


def rss_mib(container: str) -> float:
    """The container's resident memory (docker stats), in MiB."""
    text = docker("stats", "--no-stream", "--format", "{{.MemUsage}}", container)
    value = text.split("/")[0].strip()
    units = {"KiB": 1 / 1024, "MiB": 1.0, "GiB": 1024.0, "B": 1 / 2**20}
    for unit, factor in units.items():
        if value.endswith(unit):
            return round(float(value[: -len(unit)]) * factor, 1)
    raise ValueError(f"unexpected docker stats memory: {text!r}")


def run(before: str, after: str, config: GrpcConfig) -> dict[str, Any]:
    began = now_iso()
    workdir = Path(tempfile.mkdtemp(prefix="tfe-bench-before-after-"))
    runs: list[dict[str, Any]] = []
    idle: dict[str, float] = {}
    try:
        models, config_dir = served_models(after, workdir, config.models, "before_after")
        started = {
            label: start_server(image, models, config_dir, config.cpus)
            for label, image in (("before", before), ("after", after))
        }
        servers = {label: name for label, (name, _) in started.items()}
        try:
            clients: dict[str, LoadClient] = {}
            for label, (server, url) in started.items():
                wait_ready(server, url)
                idle[label] = rss_mib(server)
                clients[label] = LoadClient(
                    after,
                    server,
                    "bench.protocol_load",
                    config.models,
                    docker_args=["-v", f"{models}:/models:ro"],
                )
                if not all(clients[label].ready["checks"].values()):
                    raise RuntimeError(f"{label}: a path answers wrongly: {clients[label].ready}")
            try:
                runs = measure_all(clients, servers, config)
            finally:
                for client in clients.values():
                    client.close()
        finally:
            for server in servers.values():
                NAMES.remove(server)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    data: dict[str, Any] = {
        "images": {"before": before, "after": after},
        "machine": machine(after),
        "config": {
            "cpus": config.cpus,
            "concurrencies": config.concurrencies,
            "seconds": config.seconds,
            "warmup": config.warmup,
            "reps": config.reps,
            "models": config.models,
        },
        "started": began,
        "finished": now_iso(),
        "idle_rss_mib": idle,
        "runs": runs,
    }
    data["cells"] = analyse(runs)
    return data


def measure_all(
    clients: dict[str, LoadClient], servers: dict[str, str], config: GrpcConfig
) -> list[dict[str, Any]]:
    """Every cell, the two builds taking turns (A B, then B A in the next cell)."""
    runs: list[dict[str, Any]] = []
    cell = 0
    for rep in range(config.reps):
        for model in config.models:
            for concurrency in config.concurrencies:
                for mode in MODES:
                    order = ("before", "after") if (rep + cell) % 2 == 0 else ("after", "before")
                    cell += 1
                    for label in order:
                        result = measure_cell(
                            clients[label],
                            servers[label],
                            mode=mode,
                            model=model,
                            concurrency=concurrency,
                            config=config,
                        )
                        runs.append(
                            {
                                "build": label,
                                "rep": rep,
                                "model": model,
                                "concurrency": concurrency,
                                "mode": mode,
                                **result,
                            }
                        )
                        log(
                            f"{label:6} {model} c={concurrency:<3} {mode:4} rep {rep}: "
                            f"{result['rps']:.0f} req/s, p99 {result['p99_ms']:.1f} ms, "
                            f"{result['server_cpu_ms_per_request']} CPU ms/req"
                        )
    return runs


def analyse(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cells = []
    keys = sorted({(r["model"], r["concurrency"], r["mode"]) for r in runs})
    for model, concurrency, mode in keys:
        mine = [
            r
            for r in runs
            if (r["model"], r["concurrency"], r["mode"]) == (model, concurrency, mode)
        ]
        cell: dict[str, Any] = {"model": model, "concurrency": concurrency, "mode": mode}
        for key in KEYS:
            values = {
                label: {r["rep"]: r[key] for r in mine if r["build"] == label and r[key]}
                for label in ("before", "after")
            }
            reps = sorted(set(values["before"]) & set(values["after"]))
            if not reps:
                continue
            paired = [values["after"][rep] / values["before"][rep] for rep in reps]
            cell[key] = {
                "before": median(values["before"].values()),
                "after": median(values["after"].values()),
                "after_over_before": round(
                    median(values["after"].values()) / median(values["before"].values()), 4
                ),
                "paired_min": round(min(paired), 4),
                "paired_max": round(max(paired), 4),
            }
        cell["errors"] = {
            label: sum(r["errors"] for r in mine if r["build"] == label)
            for label in ("before", "after")
        }
        cells.append(cell)
    return cells


def table(data: dict[str, Any]) -> str:
    """The cells as a Markdown table (after/before: < 1 is cheaper or faster)."""
    lines = [
        "| model | conc. | protocol | req/s before | after | after/before "
        "| CPU ms/req before | after | after/before | p99 ms before | after |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in data["cells"]:
        rps, cpu, p99 = c["rps"], c["server_cpu_ms_per_request"], c["p99_ms"]
        lines.append(
            f"| {c['model']} | {c['concurrency']} | {c['mode']} "
            f"| {rps['before']:.0f} | {rps['after']:.0f} | {rps['after_over_before']:.2f} "
            f"| {cpu['before']:.3f} | {cpu['after']:.3f} | {cpu['after_over_before']:.2f} "
            f"| {p99['before']:.1f} | {p99['after']:.1f} |"
        )
    return "\n".join(lines)
