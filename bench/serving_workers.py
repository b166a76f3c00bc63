"""How many inference workers for a CPU budget? Throughput and tail latency.

For each CPU limit (docker --cpus) and worker count (SERVE_WORKERS), starts
the model server (`python -m tf_entrypoint.serving`, the entrypoint bypassed)
on the demo's half_plus_two, and drives it with harness/load.py's closed loop
at a fixed concurrency for a fixed time per request batch size (rows per
predict): req/s, p50 and p99. The client runs on the same host, so keep the
CPU limits below the host's core count for numbers that mean something.
(`python -m bench run workers`; it replaced bench/serving_workers.py's own
command line, which sent a bounded number of requests with httpx.)
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import NAMES, detached_server, log, now_iso
from bench.serving import export_models, python_client, wait_ready

MODEL = "half_plus_two"


@dataclass(frozen=True)
class WorkersConfig:
    cpus: tuple[str, ...] = ("1", "2")
    workers: tuple[int, ...] = (1, 2, 4)
    batches: tuple[int, ...] = (1, 256)
    concurrency: int = 16
    seconds: float = 4.0
    warmup: float = 1.0


def run_workers(image: str, config: WorkersConfig) -> dict[str, Any]:
    began = now_iso()
    workdir = Path(tempfile.mkdtemp(prefix="tfe-bench-workers-"))
    runs = []
    try:
        models = workdir / "models"
        export_models(image, models, (MODEL,))
        for cpus in config.cpus:
            for workers in config.workers:
                name, url = detached_server(
                    cpus, "-e", f"SERVE_WORKERS={workers}", "-e", f"MODEL_NAME={MODEL}",
                    "-v", f"{models}:/models:ro", image, "python", "-m", "tf_entrypoint.serving",
                )  # fmt: skip
                try:
                    wait_ready(name, url)
                    target = f"{url}/v1/models/{MODEL}:predict"
                    for batch in config.batches:
                        body = json.dumps({"instances": [float(i) for i in range(batch)]}).encode()
                        python_client(target, body, config.concurrency, config.warmup)
                        result = python_client(target, body, config.concurrency, config.seconds)
                        runs.append({"cpus": cpus, "workers": workers, "batch": batch, **result})
                        log(
                            f"workers cpus={cpus} workers={workers} batch={batch}: "
                            f"{result['rps']:.0f} req/s, p99 {result['p99_ms']:.1f} ms"
                        )
                finally:
                    NAMES.remove(name)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"config": asdict(config), "started": began, "finished": now_iso(), "runs": runs}
