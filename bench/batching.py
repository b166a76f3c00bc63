"""Server-side batching on vs off: batch-1 predicts from 1 to 128 connections.

For each CPU limit and model, two servers of the image run side by side
under the same `--cpus`: `off` (the default command) and `on`
(`--enable_batching`, TF Serving's default parameters: max_batch_size 1000,
batch_timeout_micros 0, num_batch_threads = the worker count). Both admit up
to 256 requests (SERVE_MAX_QUEUE), so 128 connections are never refused by
admission. A closed-loop load generator (bench/serving.py's: wrk when
installed) sends one-row predicts; modes alternate per cell (A B, then B A).

The two limits the server should approach are measured too:

* model: the same SavedModel called in-process (`python` in the image,
  same `--cpus`) at the mean batch size batching produced at 32
  connections (the server's serving_batch_size histogram), in rows per second;
* bare: a constant-answer endpoint on the same stack (Starlette on uvicorn,
  one event loop, in the image, same `--cpus`), in requests per second.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    NAMES,
    detached_server,
    last_json_line,
    loadavg,
    log,
    now_iso,
    run_container,
)
from bench.serving import (
    cgroup_stat,
    choose_client,
    export_models,
    http,
    python_client,
    wait_ready,
    wrk,
)

MODELS = ("mlp", "half_plus_two")
MODES = ("off", "on")
MAX_QUEUE = 256
BODIES = {
    "mlp": {"instances": [[((j * 7) % 13) / 13.0 for j in range(32)]]},
    "half_plus_two": {"instances": [1.0]},
}
WRK_SCRIPT = (
    'wrk.method = "POST"\nwrk.body = [[%s]]\nwrk.headers["Content-Type"] = "application/json"\n'
)

#: Runs in the image: the model in-process at one batch size, rows per second.
MODEL_PROBE = """
import json, sys, time
import tensorflow as tf
model, rows, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
f = tf.saved_model.load(f"/models/{model}/1").signatures["serving_default"]
name = list(f.structured_input_signature[1])[0]
width = f.structured_input_signature[1][name].shape[1:]
x = tf.ones([rows, *width], tf.float32)
for _ in range(20):
    f(**{name: x})
calls, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    f(**{name: x}); calls += 1
print(json.dumps({"rows_per_s": calls * rows / (time.perf_counter() - start)}))
"""
#: Runs in the image: a constant answer on the server's HTTP stack.
BARE = """
import uvicorn
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
async def predict(request):
    await request.body()
    return Response(b'{"predictions": [0.0]}', media_type="application/json")
app = Starlette(routes=[Route("/{path:path}", predict, methods=["POST"])])
uvicorn.run(app, host="0.0.0.0", port=8501, log_level="warning", access_log=False)
"""


@dataclass(frozen=True)
class BatchingConfig:
    cpus: tuple[str, ...] = ("1", "2")
    concurrencies: tuple[int, ...] = (1, 8, 32, 128)
    seconds: float = 4.0
    warmup: float = 2.0
    reps: int = 2
    models: tuple[str, ...] = MODELS
    client: str = "auto"


def _start(image: str, mode: str, model: str, models: Path, cpus: str) -> tuple[str, str]:
    args = ["-v", f"{models}:/models:ro",
            "-e", f"MODEL_NAME={model}", "-e", f"SERVE_MAX_QUEUE={MAX_QUEUE}"]  # fmt: skip
    if mode == "on":
        args += ["-e", "SERVE_ENABLE_BATCHING=true"]
    if mode == "bare":
        args += ["--entrypoint", "python", image, "-c", BARE]
    else:
        args += [image, "serve"]
    return detached_server(cpus, *args)


def _metrics(url: str) -> dict[str, float]:
    _, text = http(f"{url}/metrics")
    values = {}
    for line in text.decode().splitlines():
        if line.startswith(("serving_batch_size_sum", "serving_batch_size_count",
                            "serving_batches_total")):  # fmt: skip
            key, value = line.split()
            values[key] = float(value)
    return values


class _Load:
    def __init__(self, client: str, workdir: Path) -> None:
        self.client, self.workdir = client, workdir

    def run(self, url: str, model: str, concurrency: int, seconds: float) -> dict[str, Any]:
        target = f"{url}/v1/models/{model}:predict"
        body = json.dumps(BODIES[model])
        if self.client == "python":
            return python_client(target, body.encode(), concurrency, seconds)
        script = self.workdir / f"{model}-1.lua"
        if not script.exists():
            script.write_text(WRK_SCRIPT % body)
        return wrk(target, script, concurrency, seconds)


def _model_limit(image: str, models: Path, model: str, cpus: str, rows: int) -> float:
    done = run_container(
        ["--cpus", cpus, "--network", "none", "-v", f"{models}:/models:ro"],
        image,
        ["python", "-c", MODEL_PROBE, model, str(rows), "3"],
        timeout=300,
    )
    return float(last_json_line(done.stdout)["rows_per_s"])


def _bench(  # noqa: PLR0917
    image: str, models: Path, model: str, cpus: str, config: BatchingConfig, load: _Load
) -> dict[str, Any]:
    servers = {mode: _start(image, mode, model, models, cpus) for mode in MODES}
    runs: list[dict[str, Any]] = []
    batch_sizes: dict[int, float] = {}
    try:
        for mode in MODES:
            wait_ready(*servers[mode])
            load.run(servers[mode][1], model, 4, config.warmup)
        for rep in range(config.reps):
            for k, concurrency in enumerate(config.concurrencies):
                order = MODES if (rep + k) % 2 == 0 else MODES[::-1]
                for mode in order:
                    name, url = servers[mode]
                    before, throttle = _metrics(url), cgroup_stat(name)
                    result = load.run(url, model, concurrency, config.seconds)
                    after, throttle_after = _metrics(url), cgroup_stat(name)
                    if mode == "on":
                        count = after.get("serving_batch_size_count", 0) - before.get(
                            "serving_batch_size_count", 0
                        )
                        rows = after.get("serving_batch_size_sum", 0) - before.get(
                            "serving_batch_size_sum", 0
                        )
                        result["batches"] = count
                        result["mean_batch_rows"] = rows / count if count else 0.0
                        batch_sizes[concurrency] = result["mean_batch_rows"]
                    result["throttled_periods"] = throttle_after.get(
                        "nr_throttled", 0
                    ) - throttle.get("nr_throttled", 0)
                    runs.append({"mode": mode, "concurrency": concurrency, "rep": rep, **result})
                    log(
                        f"batching {model} cpus={cpus} c={concurrency:<3} {mode:3}: "
                        f"{result['rps']:.0f} req/s, p50 {result['p50_ms']:.1f} ms, "
                        f"p99 {result['p99_ms']:.1f} ms, errors {result['errors']}"
                        + (f", mean batch {result['mean_batch_rows']:.1f}" if mode == "on" else "")
                    )
    finally:
        for name, _ in servers.values():
            NAMES.remove(name)
    rows = max(1, round(batch_sizes.get(32, 1.0)))
    model_rows = _model_limit(image, models, model, cpus, rows)
    bare_name, bare_url = _start(image, "bare", model, models, cpus)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if http(f"{bare_url}/v1/models/{model}:predict", b"{}", timeout=2)[0] == 200:
                    break
            except OSError:
                time.sleep(0.3)
        load.run(bare_url, model, 4, config.warmup)
        bare = load.run(bare_url, model, 32, config.seconds)
    finally:
        NAMES.remove(bare_name)
    log(f"batching {model} cpus={cpus}: model {model_rows:.0f} rows/s at batch {rows}, "
        f"bare endpoint {bare['rps']:.0f} req/s")  # fmt: skip
    return {
        "model": model,
        "cpus": cpus,
        "runs": runs,
        "limits": {"model_batch_rows": rows, "model_rows_per_s": model_rows, "bare": bare},
    }


def run_batching(image: str, config: BatchingConfig) -> dict[str, Any]:
    client = choose_client(config.client)
    began, load_before = now_iso(), loadavg()
    workdir = Path(tempfile.mkdtemp(prefix="tfe-bench-batching-"))
    try:
        models = workdir / "models"
        models.mkdir()
        export_models(image, models, config.models)
        load = _Load(client, workdir)
        results = [
            _bench(image, models, model, cpus, config, load)
            for cpus in config.cpus
            for model in config.models
        ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    data = {
        "config": {**asdict(config), "client": client, "max_queue": MAX_QUEUE},
        "started": began,
        "finished": now_iso(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "results": results,
    }
    data["cells"] = analyse(data)
    return data


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def analyse(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (cpus, model, connections): both modes' medians, the ratios, the goals."""
    cells = []
    for result in data["results"]:
        limits = result["limits"]
        for concurrency in sorted({run["concurrency"] for run in result["runs"]}):
            cell: dict[str, Any] = {
                "cpus": result["cpus"], "model": result["model"], "concurrency": concurrency,
            }  # fmt: skip
            for mode in MODES:
                runs = [
                    r
                    for r in result["runs"]
                    if r["mode"] == mode and r["concurrency"] == concurrency
                ]
                cell[mode] = {
                    key: _median([float(r[key]) for r in runs])
                    for key in ("rps", "p50_ms", "p99_ms", "errors")
                }
                if mode == "on":
                    cell[mode]["mean_batch_rows"] = _median(
                        [float(r.get("mean_batch_rows", 0)) for r in runs]
                    )
            on, off = cell["on"], cell["off"]
            cell["rps_ratio"] = on["rps"] / off["rps"] if off["rps"] else 0.0
            cell["p99_ratio"] = on["p99_ms"] / off["p99_ms"] if off["p99_ms"] else 0.0
            cell["of_model"] = on["rps"] / limits["model_rows_per_s"]
            cell["of_bare"] = on["rps"] / limits["bare"]["rps"] if limits["bare"]["rps"] else 0.0
            if concurrency == 32:
                cell["goal"] = (
                    "ok" if cell["rps_ratio"] >= 3 and cell["p99_ratio"] <= 1 and not on["errors"]
                    else "MISS (3x the req/s, p99 no worse, no errors)"
                )  # fmt: skip
            elif concurrency == 1:
                cell["goal"] = "ok" if cell["rps_ratio"] >= 0.9 else "MISS (more than 10 % slower)"
            cells.append(cell)
    return cells
