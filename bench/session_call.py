"""Session bundles against tf.saved_model.load: what a call costs, side by side (issue 22).

    python -m bench run session_call [--image IMAGE] [--out DIR] [--quick]

The server loads every SavedModel as TF Serving does, as a Session bundle,
and calls a signature through a Session callable; before, it called
tf.saved_model.load's signature function (SERVE_SAVED_MODEL_LOADER=tf2 still
does). The same image measures both, under --cpus 1, on three models made by
bench/session_probe.py, each loadable either way: half_plus_two (y = 0.5 x +
2, x [batch]: no compute), the sweep's MLP (32-512-512-10, x [batch, 32])
and a small convolutional net (x [batch, 32, 32, 3], about 10 M
multiply-adds a row: compute dominates; a Keras model held by a tf.Module,
whose variables the server sets from their restored copies).

* calls: one process, one container, both paths loaded side by side
  (session_probe.py calls): the median call, batch 1 and 64, of the bare
  run (NumPy in, NumPy out) and of gRPC's Predict in process (TensorProtos
  in and out), in windows that take turns (A B, then B A).
* profile: where a batch-1 call of half_plus_two spends its time on each
  path (session_probe.py profile, cProfile).
* servers: two servers of the three models, each --cpus 1, up at the same
  time, one with each loader; bench/protocol_load.py in each server's
  network namespace (the grpc part's client); per repetition, model,
  concurrency and protocol (REST, gRPC) the two servers take turns (A B,
  then B A), so both see the same stretch of machine: requests per second,
  p50/p99, server CPU per request.
* startup: the MLP, then the CNN, served alone, each loader in turn:
  seconds from `docker run` to /readyz 200, the load time the server logs,
  and the server process's RSS once ready and after 200 predicts.

The runner (python -m bench) waits for a quiet machine before a full run,
writes OUT/session_call.json and re-renders OUT/results.md (bench/report.py).
--quick: one short cell of each (a smoke of the harness, not figures).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import grpc_rest
from bench.bodies import request_body
from bench.common import (
    LOAD_MOUNTS,
    NAMES,
    docker,
    last_json_line,
    library,
    loadavg,
    log,
    machine,
    now_iso,
    run_container,
)
from bench.grpc_rest import GrpcConfig, LoadClient, measure_cell, model_config
from bench.serving import http, wait_ready
from harness.stats import median

MODELS = ("half_plus_two", "mlp", "cnn")
#: The models whose start-up and memory are measured (those with weights).
STARTUP_MODELS = ("mlp", "cnn")
LOADERS = ("session", "tf2")
PROTOCOLS = ("rest", "grpc")


@dataclass(frozen=True)
class SessionConfig:
    cpus: str = "1"
    rounds: int = 5
    window: float = 1.0
    concurrencies: tuple[int, ...] = (1, 8)
    seconds: float = 4.0
    warmup: float = 1.5
    reps: int = 3
    startups: int = 3
    idle_predicts: int = 200
    profile_calls: int = 20000
    startup_models: tuple[str, ...] = STARTUP_MODELS


QUICK = SessionConfig(
    rounds=1,
    window=0.2,
    concurrencies=(1,),
    seconds=1.0,
    warmup=0.5,
    reps=1,
    startups=1,
    idle_predicts=20,
    profile_calls=200,
    startup_models=("cnn",),  # one model's start-up runs the path; the MLP's is the same
)


def export(image: str, models: Path) -> None:
    """bench/session_probe.py's models, from the harness model library (its "session" folder)."""
    found = library(image)
    for model in MODELS:
        found.copy(f"session/{model}", models / model)


def calls(image: str, models: Path, config: SessionConfig) -> dict[str, Any]:
    done = run_container(
        ["--cpus", config.cpus, "-v", f"{models}:/models:ro", *LOAD_MOUNTS],
        image,
        [
            "python",
            "-m",
            "bench.session_probe",
            "calls",
            "/models",
            str(config.rounds),
            str(config.window),
        ],
        timeout=1800,
    )
    result: dict[str, Any] = last_json_line(done.stdout)
    if not all(result["same_answers"].values()):
        raise RuntimeError(f"the two paths answer differently: {result['same_answers']}")
    for cell in result["cells"]:
        session, function = cell["paths"]["session"], cell["paths"]["tf.saved_model.load"]
        cell["session_vs_tf2"] = round(session["median_us"] / function["median_us"], 3)
    return result


def start_server(
    image: str, models: Path, config_dir: Path, cpus: str, loader: str
) -> tuple[str, str]:
    """grpc_rest's server, loading with SERVE_SAVED_MODEL_LOADER=`loader`."""
    return grpc_rest.start_server(
        image, models, config_dir, cpus, "-e", f"SERVE_SAVED_MODEL_LOADER={loader}"
    )


def servers(image: str, models: Path, workdir: Path, config: SessionConfig) -> dict[str, Any]:
    config_dir = workdir / "config-servers"
    config_dir.mkdir()
    (config_dir / "models.config").write_text(model_config(MODELS))
    cell_config = GrpcConfig(
        cpus=config.cpus, seconds=config.seconds, warmup=config.warmup, reps=config.reps
    )
    started = {
        loader: start_server(image, models, config_dir, config.cpus, loader) for loader in LOADERS
    }
    clients: dict[str, LoadClient] = {}
    runs: list[dict[str, Any]] = []
    try:
        for name, url in started.values():
            wait_ready(name, url)
        for loader, (name, _) in started.items():
            clients[loader] = LoadClient(
                image,
                name,
                "bench.protocol_load",
                MODELS,
                docker_args=["-v", f"{models}:/models:ro"],
            )
            if not all(clients[loader].ready["checks"].values()):
                raise RuntimeError(f"{loader}: a path answers wrongly: {clients[loader].ready}")
        cell = 0
        for rep in range(config.reps):
            for model in MODELS:
                for concurrency in config.concurrencies:
                    for mode in PROTOCOLS:
                        order = LOADERS if cell % 2 == 0 else LOADERS[::-1]
                        cell += 1
                        for loader in order:
                            result = measure_cell(
                                clients[loader],
                                started[loader][0],
                                mode=mode,
                                model=model,
                                concurrency=concurrency,
                                config=cell_config,
                            )
                            runs.append(
                                {
                                    "rep": rep,
                                    "loader": loader,
                                    "model": model,
                                    "concurrency": concurrency,
                                    "mode": mode,
                                    **result,
                                }
                            )
                            log(
                                f"session_call {loader:7} {model} c={concurrency} {mode:4} "
                                f"rep {rep}: {result['rps']:.0f} req/s, "
                                f"{result['server_cpu_ms_per_request']} CPU ms/req"
                            )
    finally:
        for client in clients.values():
            client.close()
        for name, _ in started.values():
            NAMES.remove(name)
    return {"runs": runs, "cells": analyse(runs, config)}


def analyse(runs: list[dict[str, Any]], config: SessionConfig) -> list[dict[str, Any]]:
    cells = []
    for model in MODELS:
        for concurrency in config.concurrencies:
            for mode in PROTOCOLS:
                mine = [
                    r
                    for r in runs
                    if (r["model"], r["concurrency"], r["mode"]) == (model, concurrency, mode)
                ]
                by_loader = {
                    loader: {
                        key: median(r[key] for r in mine if r["loader"] == loader)
                        for key in ("rps", "p50_ms", "p99_ms", "server_cpu_ms_per_request")
                        if all(r[key] is not None for r in mine if r["loader"] == loader)
                    }
                    | {"errors": sum(r["errors"] for r in mine if r["loader"] == loader)}
                    for loader in LOADERS
                }
                session, tf2 = by_loader["session"], by_loader["tf2"]
                ratios = {
                    key: round(session[key] / tf2[key], 3)
                    for key in ("rps", "p99_ms", "server_cpu_ms_per_request")
                    if session.get(key) and tf2.get(key)
                }
                cells.append(
                    {
                        "model": model,
                        "concurrency": concurrency,
                        "mode": mode,
                        "loaders": by_loader,
                        "session_vs_tf2": ratios,
                    }
                )
    return cells


def server_rss_mib(name: str) -> float:
    """VmRSS of the server (the container's Python process), MiB."""
    found = docker(
        "exec",
        name,
        "sh",
        "-c",
        'for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = python3 ] && grep VmRSS $p/status; done',
    )
    return round(int(found.split()[1]) / 1024, 1)


def startup(image: str, models: Path, workdir: Path, config: SessionConfig) -> dict[str, Any]:
    """Each of config.startup_models served alone, each loader in turn: ready time, load time,
    RSS."""
    runs: list[dict[str, Any]] = []
    for model in config.startup_models:
        config_dir = workdir / f"config-startup-{model}"
        config_dir.mkdir()
        (config_dir / "models.config").write_text(model_config((model,)))
        body = request_body(model)
        for index in range(config.startups):
            for loader in LOADERS if index % 2 == 0 else LOADERS[::-1]:
                runs.append(
                    one_startup(
                        image, models, config_dir, config, model=model, loader=loader, body=body
                    )
                )
    summary = {
        model: {loader: startup_summary(runs, model, loader) for loader in LOADERS}
        for model in config.startup_models
    }
    return {"runs": runs, "summary": summary}


def startup_summary(runs: list[dict[str, Any]], model: str, loader: str) -> dict[str, Any]:
    mine = [r for r in runs if (r["model"], r["loader"]) == (model, loader)]
    summary: dict[str, Any] = {}
    for key in ("ready_s", "load_s", "rss_ready_mib", "rss_after_predicts_mib"):
        values = [r[key] for r in mine if r[key] is not None]
        summary[key] = median(values) if values else None
    return summary


def one_startup(
    image: str,
    models: Path,
    config_dir: Path,
    config: SessionConfig,
    *,
    model: str,
    loader: str,
    body: bytes,
) -> dict[str, Any]:
    began = time.monotonic()
    name, url = start_server(image, models, config_dir, config.cpus, loader)
    try:
        wait_until = time.monotonic() + 180
        while time.monotonic() < wait_until:
            try:
                if http(f"{url}/readyz", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        ready = time.monotonic() - began
        wait_ready(name, url)  # fails the run, with the logs, if it never was
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
        loaded = re.search(
            rf"'{model}' version 1 is available \(loaded in ([0-9.]+) s", logs.stdout + logs.stderr
        )
        rss_ready = server_rss_mib(name)
        for _ in range(config.idle_predicts):
            status, _ = http(f"{url}/v1/models/{model}:predict", body)
            if status != 200:
                raise RuntimeError(f"{loader}: {model} predict answered {status}")
        rss_after = server_rss_mib(name)
    finally:
        NAMES.remove(name)
    log(f"session_call startup {model} {loader}: ready in {ready:.2f} s, RSS {rss_after} MiB")
    return {
        "model": model,
        "loader": loader,
        "ready_s": round(ready, 3),
        "load_s": float(loaded.group(1)) if loaded else None,
        "rss_ready_mib": rss_ready,
        "rss_after_predicts_mib": rss_after,
    }


def profile(image: str, models: Path, config: SessionConfig) -> dict[str, Any]:
    """Where a batch-1 call of half_plus_two spends its time on each path (cProfile)."""
    done = run_container(
        ["--cpus", config.cpus, "-v", f"{models}:/models:ro", *LOAD_MOUNTS],
        image,
        ["python", "-m", "bench.session_probe", "profile", "/models", str(config.profile_calls)],
        timeout=600,
    )
    found: dict[str, Any] = last_json_line(done.stdout)
    return found


def run(image: str, config: SessionConfig) -> dict[str, Any]:
    began, load_before = now_iso(), loadavg()
    workdir = Path(tempfile.mkdtemp(prefix="tfe-bench-session-"))
    try:
        models = workdir / "models"
        models.mkdir()
        log("session_call: exporting half_plus_two, the MLP and the CNN")
        export(image, models)
        log("session_call: in-process calls")
        in_process = calls(image, models, config)
        log("session_call: a profile of both paths")
        profiled = profile(image, models, config)
        log("session_call: servers")
        served = servers(image, models, workdir, config)
        log("session_call: start-up and idle memory")
        started = startup(image, models, workdir, config)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "config": asdict(config),
        "machine": machine(image),
        "started": began,
        "finished": now_iso(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "calls": in_process,
        "profile": profiled,
        "servers": served,
        "startup": started,
    }
