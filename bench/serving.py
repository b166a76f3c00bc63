"""tf-entrypoint serve under a CPU quota: requests per second and tail latency.

Two servers of the same model run side by side, both under the same CPU
limit, both with the same number of inference workers:

* auto: the image's default command (`tf-entrypoint serve`): the entrypoint
  plans, and the server sizes its workers to the CPU budget;
* defaults: the entrypoint and the import hook bypassed (`--entrypoint python
  -m tf_entrypoint.serving`, TF_ENTRYPOINT_HOOK=off) with SERVE_WORKERS set to
  the auto server's worker count, so only TensorFlow's pools (and the
  OpenMP/BLAS variables) differ.

Ports are published on 127.0.0.1 only. A closed-loop load generator (wrk from
Debian's package when installed, else a small asyncio HTTP/1.1 client) keeps
C connections busy for a fixed time per run; runs alternate between the two
servers (A B B A ...), repetition by repetition. Models: the demo's
half_plus_two (demo/train.py: almost no compute, so HTTP and JSON dominate)
and the quota sweep's MLP (bench/workload.py --export), 8 rows per request.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.bodies import request_body
from bench.common import (
    NAMES,
    detached_server,
    docker,
    last_json_line,
    library,
    loadavg,
    log,
    now_iso,
)
from harness.load import HttpCaller, Tally, closed_loop, http_request, read_message
from harness.stats import median

MODELS = ("half_plus_two", "mlp")
MODES = ("auto", "defaults")


@dataclass(frozen=True)
class ServingConfig:
    cpus: str = "1"
    concurrencies: tuple[int, ...] = (1, 4, 16, 32)
    seconds: float = 4.0
    warmup: float = 2.0
    reps: int = 3
    models: tuple[str, ...] = MODELS
    client: str = "auto"  # wrk, python or auto (wrk when installed)


# --- models and servers -------------------------------------------------------


#: Each benchmark model's folder in the harness model library (harness/models.py).
LIBRARY_MODELS = {
    "half_plus_two": "half_plus_two/half_plus_two",
    "mlp": "mlp",
}


def export_models(image: str, target: Path, models: tuple[str, ...]) -> None:
    """Copy the models from the harness model library into target (TF Serving layout)."""
    found = library(image)
    for model in models:
        found.copy(LIBRARY_MODELS[model], target / model)


def start_server(
    image: str, mode: str, model: str, models: Path, *, cpus: str, workers: int | None
) -> tuple[str, str]:
    """Start a detached server; (container name, base URL)."""
    args = [
        "-v",
        f"{models}:/models:ro",
        "-e",
        f"MODEL_NAME={model}",
    ]
    if workers is not None:
        args += ["-e", f"SERVE_WORKERS={workers}"]
    if mode == "defaults":
        args += [
            "--entrypoint",
            "python",
            "-e",
            "TF_ENTRYPOINT_HOOK=off",
            image,
            "-m",
            "tf_entrypoint.serving",
        ]
    else:
        args += [image, "serve"]
    return detached_server(cpus, *args)


def http(url: str, body: bytes | None = None, timeout: float = 10) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST" if body else "GET")  # noqa: S310
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def wait_ready(name: str, url: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http(f"{url}/readyz", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    logs = docker("logs", "--tail", "30", name, check=False)
    raise RuntimeError(f"server {name} not ready within {timeout} s:\n{logs}")


def workers_of(url: str) -> int:
    _, text = http(f"{url}/metrics")
    for line in text.decode().splitlines():
        if line.startswith("serving_workers"):
            return int(float(line.split()[-1]))
    raise RuntimeError("serving_workers not in /metrics")


def cgroup_dirs(full_id: str, controller: str) -> list[Path]:
    """Where a container's cgroup for `controller` may be (cgroup v1 cgroupfs/systemd, or v2)."""
    return [
        Path(f"/sys/fs/cgroup/{controller}/docker/{full_id}"),
        Path(f"/sys/fs/cgroup/{controller}/system.slice/docker-{full_id}.scope"),
        Path(f"/sys/fs/cgroup/system.slice/docker-{full_id}.scope"),
        Path(f"/sys/fs/cgroup/docker/{full_id}"),
    ]


def cgroup_stat(container: str) -> dict[str, int]:
    """The container's cpu.stat read from the host (cgroup v1 cgroupfs/systemd or v2)."""
    full = docker("inspect", "-f", "{{.Id}}", container, check=False)
    for controller in ("cpu", "cpu,cpuacct"):
        for directory in cgroup_dirs(full, controller):
            try:
                lines = (directory / "cpu.stat").read_text().splitlines()
            except OSError:
                continue
            return {k: int(v) for k, _, v in (line.partition(" ") for line in lines) if v.isdigit()}
    return {}


# --- load generators ----------------------------------------------------------

WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[%s]==]
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests":%%d,"duration_us":%%d,"non2xx":%%d,"socket_errors":%%d,' ..
    '"p50_us":%%d,"p90_us":%%d,"p99_us":%%d,"max_us":%%d}\\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""


def wrk(url: str, script: Path, concurrency: int, seconds: float) -> dict[str, Any]:
    whole = max(1, round(seconds))  # wrk takes whole seconds
    argv = [
        "wrk",
        "-t",
        "1",
        "-c",
        str(concurrency),
        "-d",
        f"{whole}s",
        "--timeout",
        "20s",
        "-s",
        str(script),
        url,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=whole + 60, check=True)
    raw = last_json_line(done.stdout)
    seconds_run = raw["duration_us"] / 1e6
    ok = raw["requests"] - raw["non2xx"]
    return {
        "requests": raw["requests"],
        "errors": raw["non2xx"] + raw["socket_errors"],
        "rps": round(ok / seconds_run, 2),
        "p50_ms": raw["p50_us"] / 1e3,
        "p99_ms": raw["p99_us"] / 1e3,
        "max_ms": raw["max_us"] / 1e3,
    }


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a Content-Length: (status, body)."""
    status, _, body = await read_message(reader)
    return status, body


def python_client(url: str, body: bytes, concurrency: int, seconds: float) -> dict[str, Any]:
    """harness/load.py's closed loop: `concurrency` keep-alive connections for `seconds`."""
    host, port_path = url.removeprefix("http://").split(":", 1)
    port, path = port_path.split("/", 1)
    raw = http_request("POST", host, f"/{path}", body)
    tally = Tally()

    async def go() -> float:
        started = time.perf_counter()
        await closed_loop(
            lambda: HttpCaller(host, int(port), raw, lambda status: 200 <= status < 300),
            concurrency,
            tally,
            deadline=started + seconds,
        )
        return time.perf_counter() - started

    summary = tally.summary(asyncio.run(go()))
    return {k: summary[k] for k in ("requests", "errors", "rps", "p50_ms", "p99_ms", "max_ms")}


# --- the benchmark ------------------------------------------------------------


def choose_client(wanted: str) -> str:
    if wanted == "auto":
        return "wrk" if shutil.which("wrk") else "python"
    if wanted == "wrk" and not shutil.which("wrk"):
        raise RuntimeError("wrk is not installed (apt-get install -y wrk), or use --client python")
    return wanted


class Load:
    def __init__(self, client: str, workdir: Path) -> None:
        self.client = client
        self.workdir = workdir

    def run(self, url: str, model: str, concurrency: int, seconds: float) -> dict[str, Any]:
        target = f"{url}/v1/models/{model}:predict"
        body = request_body(model)
        if self.client == "python":
            return python_client(target, body, concurrency, seconds)
        script = self.workdir / f"{model}.lua"
        if not script.exists():
            script.write_text(WRK_SCRIPT % body.decode())
        return wrk(target, script, concurrency, seconds)


def _check_answer(url: str, model: str) -> None:
    status, answer = http(f"{url}/v1/models/{model}:predict", request_body(model))
    if status != 200 or "predictions" not in json.loads(answer):
        raise RuntimeError(f"{model} at {url}: {status} {answer[:300]!r}")


def bench_model(
    image: str, model: str, models: Path, config: ServingConfig, load: Load
) -> dict[str, Any]:
    servers: dict[str, tuple[str, str]] = {}
    servers["auto"] = start_server(image, "auto", model, models, cpus=config.cpus, workers=None)
    wait_ready(*servers["auto"])
    workers = workers_of(servers["auto"][1])
    servers["defaults"] = start_server(
        image, "defaults", model, models, cpus=config.cpus, workers=workers
    )
    wait_ready(*servers["defaults"])
    runs: list[dict[str, Any]] = []
    try:
        for mode in MODES:
            _check_answer(servers[mode][1], model)
            load.run(servers[mode][1], model, 4, config.warmup)
        for rep in range(config.reps):
            for k, concurrency in enumerate(config.concurrencies):
                order = MODES if (rep + k) % 2 == 0 else MODES[::-1]
                for mode in order:
                    name, url = servers[mode]
                    before = cgroup_stat(name)
                    result = load.run(url, model, concurrency, config.seconds)
                    after = cgroup_stat(name)
                    result["throttled_periods"] = after.get("nr_throttled", 0) - before.get(
                        "nr_throttled", 0
                    )
                    result["periods"] = after.get("nr_periods", 0) - before.get("nr_periods", 0)
                    runs.append({"mode": mode, "concurrency": concurrency, "rep": rep, **result})
                    log(
                        f"serving {model} c={concurrency:<3} {mode:8} rep {rep}: "
                        f"{result['rps']:.0f} req/s, p99 {result['p99_ms']:.1f} ms"
                    )
    finally:
        for name, _ in servers.values():
            NAMES.remove(name)
    return {"model": model, "workers": workers, "runs": runs}


def run_serving(image: str, config: ServingConfig) -> dict[str, Any]:
    client = choose_client(config.client)
    began, load_before = now_iso(), loadavg()
    workdir = Path(tempfile.mkdtemp(prefix="tfe-bench-serving-"))
    try:
        models = workdir / "models"
        models.mkdir()
        log(f"serving: exporting {', '.join(config.models)}")
        export_models(image, models, config.models)
        load = Load(client, workdir)
        results = [bench_model(image, model, models, config, load) for model in config.models]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    data = {
        "config": {**asdict(config), "client": client},
        "started": began,
        "finished": now_iso(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "models": results,
    }
    data["cells"] = analyse(data)
    return data


def analyse(data: dict[str, Any]) -> list[dict[str, Any]]:
    cells = []
    for model in data["models"]:
        for concurrency in data["config"]["concurrencies"]:
            stats: dict[str, Any] = {}
            for mode in MODES:
                runs = [
                    r
                    for r in model["runs"]
                    if r["mode"] == mode and r["concurrency"] == concurrency
                ]
                if not runs:
                    continue
                stats[mode] = {
                    key: {
                        "median": median(r[key] for r in runs),
                        "min": min(r[key] for r in runs),
                        "max": max(r[key] for r in runs),
                    }
                    for key in ("rps", "p50_ms", "p99_ms")
                }
                stats[mode]["errors"] = sum(r["errors"] for r in runs)
                stats[mode]["throttled_periods"] = sum(r["throttled_periods"] for r in runs)
                stats[mode]["periods"] = sum(r["periods"] for r in runs)
            if len(stats) < 2:
                continue
            auto, defaults = stats["auto"], stats["defaults"]
            cells.append(
                {
                    "model": model["model"],
                    "workers": model["workers"],
                    "concurrency": concurrency,
                    "modes": stats,
                    "auto_vs_defaults": {
                        "rps": round(auto["rps"]["median"] / defaults["rps"]["median"], 4),
                        "p99": round(auto["p99_ms"]["median"] / defaults["p99_ms"]["median"], 4),
                    },
                }
            )
    return cells
