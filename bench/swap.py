"""A version swap under load: what clients see while the server takes a new version.

One server (`tf-entrypoint serve`, under a CPU limit) serves the quota
sweep's MLP (bench/workload.py --export), version 1, to a closed loop of C
connections (8 rows per request). After a baseline window, version 2 is
renamed into the model's directory, the way the README recommends exporting;
the server finds it at its next poll (1 s), loads and warms it up next to
version 1, swaps it in, and unloads version 1 once its last request is done.
A status poller (every 20 ms) times the states. Every request is kept with
its start time and status, so each repetition (a fresh server) reports, side
by side in one run:

* before: the baseline window; during: from the rename until version 1 is
  END; after: a window once it is;
* per phase: requests per second, p50, p99, errors (non-200 answers or
  broken connections);
* swap: seconds from the rename to version 2 AVAILABLE, and to version 1 END,
  and the load time the server logged.

Ports are published on 127.0.0.1 only; the load stops by itself.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.bodies import request_body
from bench.common import docker, loadavg, log, now_iso
from bench.serving import export_models, read_response, start_server, wait_ready
from harness.load import HttpCaller, Tally, closed_loop, http_request
from harness.stats import median

MODEL = "mlp"


@dataclass(frozen=True)
class SwapConfig:
    cpus: str = "1"
    concurrency: int = 8
    baseline: float = 4.0
    after: float = 4.0
    reps: int = 3
    #: Seconds the swap may take before the repetition counts as failed.
    timeout: float = 120.0


async def _states(host: str, port: int) -> dict[int, str]:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET /v1/models/{MODEL} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        await writer.drain()
        status, body = await read_response(reader)
    finally:
        writer.close()
    if status != 200:
        return {}
    found = re.findall(rb'"version":"(\d+)","state":"([A-Z]+)"', body)
    return {int(v): s.decode() for v, s in found}


def _phase(tally: Tally, start: float, end: float) -> dict[str, Any]:
    seconds = max(end - start, 1e-9)
    found = tally.between(start, end).summary(seconds)
    return {"seconds": round(seconds, 3)} | {
        key: found[key] for key in ("requests", "errors", "rps", "p50_ms", "p99_ms")
    }


async def _one_swap(url: str, model_dir: Path, config: SwapConfig) -> dict[str, Any]:
    host, port_text = url.removeprefix("http://").split(":")
    port = int(port_text)
    raw = http_request("POST", host, f"/v1/models/{MODEL}:predict", request_body(MODEL))
    records = Tally()
    stop = asyncio.Event()
    clients = asyncio.create_task(
        closed_loop(
            lambda: HttpCaller(host, port, raw), config.concurrency, records, stop=stop,
            retry_pause=0.05,
        )
    )  # fmt: skip
    began = time.perf_counter()
    await asyncio.sleep(config.baseline)
    renamed = time.perf_counter()
    os.rename(model_dir / ".staged-2", model_dir / "2")
    available = ended = None
    while time.perf_counter() - renamed < config.timeout:
        states = await _states(host, port)
        now = time.perf_counter()
        if available is None and states.get(2) == "AVAILABLE":
            available = now
        if states.get(1) == "END":
            ended = now
            break
        await asyncio.sleep(0.02)
    if ended is None:
        stop.set()
        await clients
        raise RuntimeError(f"version 1 not unloaded within {config.timeout:g} s of the rename")
    await asyncio.sleep(config.after)
    stop.set()
    await clients
    finished = time.perf_counter()
    return {
        "swap_available_s": round((available or ended) - renamed, 3),
        "swap_end_s": round(ended - renamed, 3),
        "phases": {
            "before": _phase(records, began, renamed),
            "during": _phase(records, renamed, ended),
            "after": _phase(records, ended, finished),
        },
        "requests": len(records.records),
        "errors": sum(records.errors.values()),
    }


def _load_seconds(container: str) -> float | None:
    """The load time the server logged for version 2 (its logs are on stderr)."""
    logs = subprocess.run(
        ["docker", "logs", container],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stderr
    found = re.findall(r"version 2 is available \(loaded in ([0-9.]+) s", logs)
    return float(found[-1]) if found else None


def run_swap(image: str, config: SwapConfig) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="tfe-bench-swap-"))
    began, load_before = now_iso(), loadavg()
    try:
        library = workdir / "library"
        library.mkdir()
        log(f"swap: exporting {MODEL} versions 1 and 2")
        export_models(image, library, (MODEL,))
        shutil.copytree(library / MODEL / "1", library / "v2")
        reps = []
        for rep in range(config.reps):
            models = workdir / f"rep{rep}"
            shutil.copytree(library / MODEL / "1", models / MODEL / "1")
            shutil.copytree(library / "v2", models / MODEL / ".staged-2")
            name, url = start_server(image, "auto", MODEL, models, cpus=config.cpus, workers=None)
            try:
                wait_ready(name, url)
                result = asyncio.run(_one_swap(url, models / MODEL, config))
                result["load_s"] = _load_seconds(name)
            finally:
                docker("rm", "-f", name, check=False)
            log(
                f"swap rep {rep + 1}/{config.reps}: {result['requests']} requests, "
                f"{result['errors']} errors, version 2 available {result['swap_available_s']} s "
                f"after the rename"
            )
            reps.append(result)
        return {
            "started": began,
            "finished": now_iso(),
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
            "config": asdict(config),
            "reps": reps,
            "summary": summarise(reps),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def summarise(reps: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "errors": sum(r["errors"] for r in reps),
        "requests": sum(r["requests"] for r in reps),
        "swap_available_s": median([r["swap_available_s"] for r in reps]),
        "swap_end_s": median([r["swap_end_s"] for r in reps]),
        "load_s": median(loads) if (loads := [r["load_s"] for r in reps if r["load_s"]]) else None,
    }
    for phase in ("before", "during", "after"):
        summary[phase] = {
            key: median([r["phases"][phase][key] for r in reps])
            for key in ("rps", "p50_ms", "p99_ms")
        }
    before = summary["before"]
    summary["during_vs_before"] = {
        "rps": round(summary["during"]["rps"] / before["rps"], 3) if before["rps"] else None,
        "p99": round(summary["during"]["p99_ms"] / before["p99_ms"], 3)
        if before["p99_ms"]
        else None,
    }
    return summary
