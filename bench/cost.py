"""CPU per predict: the server against the Python floors, side by side in one run (issue 24).

    python -m bench run cost [--image IMAGE] [--out DIR] [--quick]

Five containers of the CPU image, each under `--cpus 1`, all up at once and
serving the same two models (the demo's half_plus_two and the sweep's MLP
32-512-512-10 from bench/workload.py --export, as bench/grpc_rest.py):

* server: `tf-entrypoint serve` with a model config of both, REST on 8501
  and gRPC on 8500 (SERVE_MAX_QUEUE=256 so 32 connections are never refused);
* batching: the same with --enable_batching (TF Serving's default
  parameters), for the batching part only;
* rest-floor, grpc-aio, grpc-threaded: bench/floor.py's floors on the same
  ports (a raw ASGI app on uvicorn, a minimal grpc.aio servicer, a minimal
  threaded grpc.server servicer), through the image's entrypoint as the
  server is, so all get the same thread plan.

Each container has its own load client, bench/protocol_load.py in a
container of the image on the container's network namespace, no CPU limit
(REST: one keep-alive connection per caller; gRPC: one channel for all
callers). Batch-1 predicts (one request is one model call: half_plus_two 3
values, the MLP 8 rows of 32, bench/serving.py's bodies).

Parts:

* cost: per repetition, model and concurrency (1 and 8) the arms take
  turns, server REST, REST floor, server gRPC, aio floor, threaded floor,
  then reversed in the next repetition; each a warm-up window and a timed
  one (bench/grpc_rest.py's measure_cell): req/s, p50/p99, and the server's
  CPU per request from the container's cgroup. Medians of the repetitions,
  and the ratios the issue's goals name.
* batching: the MLP at 1 and 32 connections, REST, batching off (server)
  against on (batching), taking turns the same way.
* calls: the model call alone in process (bench/floor.py calls), the
  Session callable and tf.saved_model.load's function, with the same inputs.
* edges: the MLP served alone by a fresh server, several times: seconds
  from `docker run` to /readyz 200, the server's RSS once ready and idle,
  and its peak RSS under 8 REST connections from the host.

Every timed window's first answer is checked against the SavedModel's own
output (protocol_load.py); a wrong answer fails the run. The runner (python
-m bench) waits for a quiet machine before a full run, writes OUT/cost.json,
and the report renders the Markdown table (bench/cost.py's `table`).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.bodies import request_body
from bench.common import (
    LABEL,
    LOAD_MOUNTS,
    NAMES,
    docker,
    last_json_line,
    loadavg,
    log,
    now_iso,
    run_container,
)
from bench.grpc_rest import (
    GrpcConfig,
    LoadClient,
    idle_cpu,
    measure_cell,
    model_config,
    served_models,
)
from bench.serving import http, python_client, wait_ready
from harness.stats import median

MODELS = ("half_plus_two", "mlp")
#: The server's containers and the floors'.
TARGETS = ("server", "batching", "rest-floor", "grpc-aio", "grpc-threaded")
#: The floors' containers -> bench/floor.py's kinds.
FLOORS = {"rest-floor": "rest", "grpc-aio": "grpc-aio", "grpc-threaded": "grpc-threaded"}
#: arm -> (target, protocol_load mode).
ARMS = {
    "server rest": ("server", "rest"),
    "floor rest": ("rest-floor", "rest"),
    "server grpc": ("server", "grpc"),
    "aio grpc": ("grpc-aio", "grpc"),
    "threaded grpc": ("grpc-threaded", "grpc"),
}
BATCH_ARMS = {"batching off": ("server", "rest"), "batching on": ("batching", "rest")}
BATCH_MODEL = "mlp"
MAX_QUEUE = 256
#: The issue's goals: (name, numerator arm, denominator arm, key, bound, "max"/"min").
REST_GOAL = 1.3
GRPC_GOAL = 1.0
BATCH_RPS_GOAL = 3.0
BATCH_ONE_GOAL = 0.9


@dataclass(frozen=True)
class CostConfig:
    cpus: str = "1"
    models: tuple[str, ...] = MODELS
    concurrencies: tuple[int, ...] = (1, 8)
    batch_concurrencies: tuple[int, ...] = (1, 32)
    seconds: float = 5.0
    warmup: float = 1.5
    reps: int = 3
    call_rounds: int = 5
    call_window: float = 1.0
    startups: int = 3
    rss_seconds: float = 5.0


QUICK = CostConfig(
    concurrencies=(2,),
    batch_concurrencies=(2,),
    seconds=0.5,
    warmup=0.3,
    reps=1,
    call_rounds=2,
    call_window=0.1,
    startups=1,
    rss_seconds=1.0,
)


# --- the containers -----------------------------------------------------------


def start_target(target: str, image: str, models: Path, config_dir: Path, cpus: str) -> str:
    """One target, detached, under the CPU limit; its container name."""
    name = NAMES.new()
    args = ["run", "-d", "--name", name, "--label", LABEL, "--cpus", cpus,
            "-v", f"{models}:/models:ro"]  # fmt: skip
    if target in {"server", "batching"}:
        args += ["-p", "127.0.0.1::8501", "-v", f"{config_dir}:/config:ro",
                 "-e", f"SERVE_MAX_QUEUE={MAX_QUEUE}", image,
                 "--model_config_file=/config/models.config", "--port=8500",
                 "--rest_api_port=8501"]  # fmt: skip
        if target == "batching":
            args.append("--enable_batching")
    else:
        args += [*LOAD_MOUNTS, "-e", "PYTHONDONTWRITEBYTECODE=1", "-e", "TF_CPP_MIN_LOG_LEVEL=2",
                 image,
                 "python", "-m", "bench.floor", FLOORS[target], *MODELS]  # fmt: skip
    docker(*args)
    return name


def wait_target(target: str, name: str, timeout: float = 300) -> None:
    if target in {"server", "batching"}:
        port = docker("port", name, "8501/tcp").splitlines()[0].rsplit(":", 1)[1]
        wait_ready(name, f"http://127.0.0.1:{port}", timeout=timeout)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "floor ready" in docker("logs", name, check=False):
            return
        if docker("inspect", "-f", "{{.State.Running}}", name, check=False) != "true":
            break
        time.sleep(0.3)
    state = docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name, check=False)
    logs = subprocess.run(
        ["docker", "logs", "--tail", "30", name], capture_output=True, text=True, check=False
    )
    raise RuntimeError(f"{target} ({name}) not ready ({state}):\n{logs.stdout}{logs.stderr}")


def checks_for(target: str) -> tuple[str, ...]:
    """The protocol_load paths a target must answer (a floor speaks one protocol)."""
    if target == "rest-floor":
        return ("rest",)
    if target.startswith("grpc-"):
        return ("grpc", "grpc-channels")
    return ("rest", "grpc", "grpc-channels")


def check_answers(
    client: LoadClient, target: str, models: tuple[str, ...], modes: tuple[str, ...]
) -> None:
    """Every (model, mode) answers right before anything is timed; else RuntimeError.

    protocol_load's own checks are 50 ms windows: a first call that takes
    longer (a batch's first size) is checked again, for longer.
    """
    checks = client.ready["checks"]
    wanted = {f"{m} {mode}" for m in models for mode in modes}
    wrong = []
    for key in sorted(k for k in wanted if not checks.get(k)):
        model, mode = key.split()
        again = client.window(mode, model, 1, 2.0)
        if not again["answer_ok"]:
            wrong.append(f"{key}: {str(again['answer'])[:200]}, {again['error_kinds']}")
    if wrong:
        raise RuntimeError(f"{target} answers wrongly on {wrong}")


# --- the parts ----------------------------------------------------------------


def turns(
    clients: dict[str, LoadClient],
    names: dict[str, str],
    arms: dict[str, tuple[str, str]],
    cells: list[tuple[str, int]],
    *,
    config: CostConfig,
    part: str,
) -> list[dict[str, Any]]:
    """Every cell, every repetition: the arms in turn (A B C.., reversed the next time)."""
    window = GrpcConfig(cpus=config.cpus, seconds=config.seconds, warmup=config.warmup)
    runs = []
    for rep in range(config.reps):
        for index, (model, concurrency) in enumerate(cells):
            order = list(arms) if (rep + index) % 2 == 0 else list(arms)[::-1]
            for arm in order:
                target, mode = arms[arm]
                result = measure_cell(
                    clients[target],
                    names[target],
                    mode=mode,
                    model=model,
                    concurrency=concurrency,
                    config=window,
                )
                if result["errors"]:
                    raise RuntimeError(f"{arm} {model} c={concurrency}: {result['error_kinds']}")
                runs.append(
                    {
                        "part": part,
                        "rep": rep,
                        "model": model,
                        "concurrency": concurrency,
                        "arm": arm,
                        **result,
                    }
                )
                log(
                    f"cost {part} {model} c={concurrency:<2} {arm:13} rep {rep}: "
                    f"{result['rps']:.0f} req/s, p99 {result['p99_ms']:.1f} ms, "
                    f"{result['server_cpu_ms_per_request']} CPU ms/req"
                )
    return runs


def calls(image: str, models: Path, config: CostConfig) -> dict[str, Any]:
    quick = ["--quick"] if config.call_rounds < CostConfig.call_rounds else []
    done = run_container(
        ["--cpus", config.cpus, "-v", f"{models}:/models:ro", *LOAD_MOUNTS,
         "-e", "TF_CPP_MIN_LOG_LEVEL=2"],
        image,
        ["python", "-m", "bench.floor", "calls", *quick, *config.models],
        timeout=900,
    )  # fmt: skip
    found: dict[str, Any] = last_json_line(done.stdout)
    if not all(m["same_answer"] for m in found.values()):
        raise RuntimeError(f"the two model calls disagree: {found}")
    return found


def rss_mib(name: str) -> float:
    """VmRSS of the container's Python processes, MiB."""
    found = docker(
        "exec",
        name,
        "sh",
        "-c",
        'for p in /proc/[0-9]*; do case "$(cat $p/comm 2>/dev/null)" in python*) '
        "grep VmRSS $p/status;; esac; done",
    )
    kib = sum(int(line.split()[1]) for line in found.splitlines() if line.startswith("VmRSS"))
    return round(kib / 1024, 1)


def _load(into: dict[str, Any], url: str, body: bytes, config: CostConfig) -> None:
    into.update(python_client(url, body, 8, config.rss_seconds))


def edges(image: str, models: Path, workdir: Path, config: CostConfig) -> dict[str, Any]:
    """The MLP served alone: time to ready, idle RSS, RSS under 8 REST connections."""
    config_dir = workdir / "config-edges"
    config_dir.mkdir()
    (config_dir / "models.config").write_text(model_config((BATCH_MODEL,)))
    body = request_body(BATCH_MODEL)
    runs = []
    for _ in range(config.startups):
        began = time.monotonic()
        name = start_target("server", image, models, config_dir, config.cpus)
        try:
            port = docker("port", name, "8501/tcp").splitlines()[0].rsplit(":", 1)[1]
            url = f"http://127.0.0.1:{port}"
            ready = None
            while time.monotonic() - began < 180:
                try:
                    if http(f"{url}/readyz", timeout=2)[0] == 200:
                        ready = time.monotonic() - began
                        break
                except OSError:
                    pass
                time.sleep(0.05)
            wait_ready(name, url)  # fails with the logs if it never was
            time.sleep(2)
            idle = rss_mib(name)
            loaded: dict[str, Any] = {}
            load = threading.Thread(
                target=_load, args=(loaded, f"{url}/v1/models/{BATCH_MODEL}:predict", body, config)
            )
            load.start()
            peak = idle
            while load.is_alive():
                peak = max(peak, rss_mib(name))
                time.sleep(0.25)
            load.join()
            after = rss_mib(name)
        finally:
            NAMES.remove(name)
        if loaded.get("errors") or not loaded.get("rps"):
            raise RuntimeError(f"edges: the load failed: {loaded}")
        runs.append({"ready_s": round(ready or 0, 3), "rss_idle_mib": idle,
                     "rss_load_peak_mib": max(peak, after), "load_rps": loaded["rps"]})  # fmt: skip
        log(f"cost edges: ready in {ready:.2f} s, RSS {idle} MiB idle, {peak} MiB under load")
    return {
        "runs": runs,
        "median": {key: median(r[key] for r in runs) for key in runs[0]},
    }


# --- analysis -----------------------------------------------------------------

KEYS = ("rps", "p50_ms", "p99_ms", "server_cpu_ms_per_request")


def arm_stats(runs: list[dict[str, Any]]) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    for key in KEYS:
        values = [r[key] for r in runs if r[key] is not None]
        if values:
            stats[key] = {"median": median(values), "min": min(values), "max": max(values)}
    stats["requests"] = sum(r["requests"] for r in runs)
    stats["errors"] = sum(r["errors"] for r in runs)
    stats["throttled_periods"] = sum(r["throttled_periods"] for r in runs)
    stats["periods"] = sum(r["periods"] for r in runs)
    return stats


def ratio(arms: dict[str, Any], over: str, under: str, key: str) -> float | None:
    top, bottom = arms.get(over, {}).get(key), arms.get(under, {}).get(key)
    if not top or not bottom or not bottom["median"]:
        return None
    return round(float(top["median"]) / float(bottom["median"]), 3)


def goal(value: float | None, bound: float, *, at_most: bool) -> dict[str, Any]:
    met = None if value is None else (value <= bound if at_most else value >= bound)
    return {"value": value, "bound": bound, "at_most": at_most, "met": met}


def analyse(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cells = []
    seen = dict.fromkeys((r["part"], r["model"], r["concurrency"]) for r in runs)
    for part, model, concurrency in seen:
        key = (part, model, concurrency)
        mine = [r for r in runs if (r["part"], r["model"], r["concurrency"]) == key]
        arms = {arm: arm_stats([r for r in mine if r["arm"] == arm])
                for arm in dict.fromkeys(r["arm"] for r in mine)}  # fmt: skip
        cpu = "server_cpu_ms_per_request"
        cell: dict[str, Any] = {"part": part, "model": model, "concurrency": concurrency,
                                "arms": arms}  # fmt: skip
        if part == "cost":
            cell["ratios"] = {
                "server_rest_vs_rest_floor": {
                    "cpu": ratio(arms, "server rest", "floor rest", cpu),
                    "rps": ratio(arms, "server rest", "floor rest", "rps"),
                    "p99": ratio(arms, "server rest", "floor rest", "p99_ms"),
                },
                "server_grpc_vs_aio": {
                    "cpu": ratio(arms, "server grpc", "aio grpc", cpu),
                    "rps": ratio(arms, "server grpc", "aio grpc", "rps"),
                    "p99": ratio(arms, "server grpc", "aio grpc", "p99_ms"),
                },
                "server_grpc_vs_threaded": {
                    "cpu": ratio(arms, "server grpc", "threaded grpc", cpu),
                    "rps": ratio(arms, "server grpc", "threaded grpc", "rps"),
                    "p99": ratio(arms, "server grpc", "threaded grpc", "p99_ms"),
                },
                "server_grpc_vs_rest_floor": {
                    "cpu": ratio(arms, "server grpc", "floor rest", cpu),
                    "rps": ratio(arms, "server grpc", "floor rest", "rps"),
                },
            }
            ratios = cell["ratios"]
            cell["goals"] = {
                "rest_cpu_vs_floor": goal(
                    ratios["server_rest_vs_rest_floor"]["cpu"], REST_GOAL, at_most=True
                ),
                "grpc_cpu_vs_aio": goal(
                    ratios["server_grpc_vs_aio"]["cpu"], GRPC_GOAL, at_most=True
                ),
                "grpc_cpu_vs_threaded": goal(
                    ratios["server_grpc_vs_threaded"]["cpu"], GRPC_GOAL, at_most=True
                ),
            }
        else:
            on_off = {
                "rps": ratio(arms, "batching on", "batching off", "rps"),
                "p99": ratio(arms, "batching on", "batching off", "p99_ms"),
                "cpu": ratio(arms, "batching on", "batching off", cpu),
            }
            cell["ratios"] = {"on_vs_off": on_off}
            if concurrency == 1:
                cell["goals"] = {"rps_at_1": goal(on_off["rps"], BATCH_ONE_GOAL, at_most=False)}
            else:
                cell["goals"] = {
                    "rps": goal(on_off["rps"], BATCH_RPS_GOAL, at_most=False),
                    "p99": goal(on_off["p99"], 1.0, at_most=True),
                }
        cells.append(cell)
    return cells


# --- the report ---------------------------------------------------------------


def arm_text(arms: dict[str, Any], arm: str) -> str:
    stats = arms.get(arm)
    if not stats or "server_cpu_ms_per_request" not in stats:
        return "-"
    cpu = stats["server_cpu_ms_per_request"]["median"] * 1e3
    return (
        f"{cpu:,.0f} µs, {stats['rps']['median']:,.0f} req/s, "
        f"p99 {stats['p99_ms']['median']:.1f} ms"
    )


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(data: dict[str, Any]) -> str:
    """The results as Markdown (printed; docs/benchmarks.md quotes it)."""
    lines = [
        f"Under `--cpus {data['config']['cpus']}`, {data['config']['reps']} interleaved "
        f"{data['config']['seconds']:g} s windows per arm (medians); server CPU per request "
        "from the container's cgroup, with req/s and p99 beside it.",
        "",
        "| model | conns | call in process | REST floor | server REST | server/floor "
        "| aio gRPC floor | threaded gRPC floor | server gRPC | gRPC / aio | gRPC / threaded "
        "| gRPC / REST floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in data["cells"]:
        if cell["part"] != "cost":
            continue
        arms, ratios = cell["arms"], cell["ratios"]
        call = data["calls"].get(cell["model"], {}).get("session_callable", {})
        lines.append(
            f"| {cell['model']} | {cell['concurrency']} | {call.get('cpu_us', 0):,.0f} µs "
            f"| {arm_text(arms, 'floor rest')} | {arm_text(arms, 'server rest')} "
            f"| {times(ratios['server_rest_vs_rest_floor']['cpu'])} "
            f"| {arm_text(arms, 'aio grpc')} | {arm_text(arms, 'threaded grpc')} "
            f"| {arm_text(arms, 'server grpc')} | {times(ratios['server_grpc_vs_aio']['cpu'])} "
            f"| {times(ratios['server_grpc_vs_threaded']['cpu'])} "
            f"| {times(ratios['server_grpc_vs_rest_floor']['cpu'])} |"
        )
    lines += [
        "",
        "| batching (MLP, REST) | conns | off | on | req/s on/off | p99 on/off | CPU/req on/off |",
        "|---|---|---|---|---|---|---|",
    ]
    for cell in data["cells"]:
        if cell["part"] != "batching":
            continue
        arms, on_off = cell["arms"], cell["ratios"]["on_vs_off"]
        lines.append(
            f"| {cell['model']} | {cell['concurrency']} | {arm_text(arms, 'batching off')} "
            f"| {arm_text(arms, 'batching on')} | {times(on_off['rps'])} | {times(on_off['p99'])} "
            f"| {times(on_off['cpu'])} |"
        )
    edge = data["edges"]["median"]
    lines += [
        "",
        f"MLP alone (median of {len(data['edges']['runs'])} starts): ready "
        f"{edge['ready_s']:.2f} s after `docker run`, RSS {edge['rss_idle_mib']:.0f} MiB idle, "
        f"{edge['rss_load_peak_mib']:.0f} MiB at peak under 8 REST connections.",
        "",
        "In-process model call (median µs, wall / CPU): "
        + "; ".join(
            f"{model}: Session callable {c['session_callable']['wall_us']:.0f} / "
            f"{c['session_callable']['cpu_us']:.0f}, tf.saved_model.load "
            f"{c['saved_model_function']['wall_us']:.0f} / "
            f"{c['saved_model_function']['cpu_us']:.0f}"
            for model, c in data["calls"].items()
        ),
    ]
    return "\n".join(lines)


# --- the run ------------------------------------------------------------------


def run(image: str, config: CostConfig) -> dict[str, Any]:
    began, load_before = now_iso(), loadavg()
    workdir = Path(tempfile.mkdtemp(prefix="tfe-bench-cost-"))
    clients: dict[str, LoadClient] = {}
    names: dict[str, str] = {}
    try:
        models, config_dir = served_models(image, workdir, config.models, "cost")
        log("cost: the model call in process")
        in_process = calls(image, models, config)
        log("cost: starting " + ", ".join(TARGETS))
        names = {target: start_target(target, image, models, config_dir, config.cpus)
                 for target in TARGETS}  # fmt: skip
        for target, name in names.items():
            wait_target(target, name)
        idle = {}
        for target, name in names.items():
            clients[target] = LoadClient(
                image, name, "bench.protocol_load", config.models,
                docker_args=["-v", f"{models}:/models:ro"],
            )  # fmt: skip
            check_answers(clients[target], target, config.models, checks_for(target))
            idle[target] = idle_cpu(name, 1.0)
        cells = [(m, c) for m in config.models for c in config.concurrencies]
        runs = turns(clients, names, ARMS, cells, config=config, part="cost")
        batch_cells = [(BATCH_MODEL, c) for c in config.batch_concurrencies]
        runs += turns(clients, names, BATCH_ARMS, batch_cells, config=config, part="batching")
        for client in clients.values():
            client.close()
        clients = {}
        for name in names.values():
            NAMES.remove(name)
        log("cost: start-up and memory of the MLP")
        edge = edges(image, models, workdir, config)
    finally:
        for client in clients.values():
            client.close()
        for name in names.values():
            NAMES.remove(name)
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "config": asdict(config),
        "started": began,
        "finished": now_iso(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "idle_cpu_s_per_s": idle,
        "arms": {arm: {"target": t, "mode": m} for arm, (t, m) in {**ARMS, **BATCH_ARMS}.items()},
        "calls": in_process,
        "runs": runs,
        "cells": analyse(runs),
        "edges": edge,
    }
