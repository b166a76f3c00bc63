"""gRPC against REST: the same predict on the same server, side by side in one run.

One server container (`tf-entrypoint serve` under a CPU limit, the automatic
plan, its own worker count) serves the demo's half_plus_two and the quota
sweep's MLP (bench/workload.py --export, 8 rows of 32 floats per request)
over both protocols at once: gRPC on 8500 and REST on 8501. The same models,
process, workers and TensorFlow pools answer both; only the protocol differs.

The load comes from a second container of the same image in the server's
network namespace (`--network container:SERVER`, no CPU limit):
bench/protocol_load.py, one Python process for both protocols (asyncio
HTTP/1.1 keep-alive for REST, `grpc.aio` with TF Serving's stub for gRPC),
so neither protocol gets a faster client. Modes:

* rest: one keep-alive connection per caller;
* grpc: all callers on one channel (one HTTP/2 connection);
* grpc-channels: one channel, and connection, per caller (concurrency > 1).

Per repetition, model and concurrency the modes take turns (A B C, then
C B A in the next cell), each a warm-up window and then a timed one, so
every mode sees the same stretch of machine. Per timed window: requests per
second (200/OK answers), p50/p99, errors, the connections open, and the CPU
seconds the server's and the client's containers used (read from the host's
cgroup tree), hence server CPU per request. The first answer of every window
is decoded and compared with the SavedModel's own output, computed in the
client container; a wrong answer fails the part.
"""

from __future__ import annotations

import json
import shutil
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
    detached_server,
    docker,
    loadavg,
    log,
    now_iso,
)
from bench.serving import cgroup_stat, export_models, wait_ready, workers_of
from harness.stats import median

MODELS = ("half_plus_two", "mlp")
MODES = ("rest", "grpc", "grpc-channels")


def model_config(models: tuple[str, ...]) -> str:
    """TF Serving's model config file serving `models` from /models."""
    entries = "".join(
        f'  config {{ name: "{m}" base_path: "/models/{m}" model_platform: "tensorflow" }}\n'
        for m in models
    )
    return f"model_config_list {{\n{entries}}}\n"


def served_models(
    image: str, workdir: Path, models: tuple[str, ...], label: str
) -> tuple[Path, Path]:
    """Export `models` (with `image`) into WORKDIR/models and write WORKDIR/config/models.config
    serving them all: (the models' directory, the config's directory), to mount at /models and
    /config."""
    exported = workdir / "models"
    exported.mkdir()
    config_dir = workdir / "config"
    config_dir.mkdir()
    (config_dir / "models.config").write_text(model_config(models))
    log(f"{label}: exporting {', '.join(models)}")
    export_models(image, exported, models)
    return exported, config_dir


@dataclass(frozen=True)
class GrpcConfig:
    cpus: str = "1"
    concurrencies: tuple[int, ...] = (1, 8, 32)
    seconds: float = 5.0
    warmup: float = 1.5
    reps: int = 3
    models: tuple[str, ...] = MODELS
    #: Modes per concurrency: grpc-channels only where it differs from grpc.
    channels_from: int = 2


def modes_for(concurrency: int, config: GrpcConfig) -> tuple[str, ...]:
    return MODES if concurrency >= config.channels_from else MODES[:2]


def cpu_seconds(container: str) -> float | None:
    """CPU seconds a container has used (cgroup v1 cpuacct.usage or v2 cpu.stat usage_usec)."""
    full = docker("inspect", "-f", "{{.Id}}", container, check=False)
    for path in (
        f"/sys/fs/cgroup/cpuacct/docker/{full}/cpuacct.usage",
        f"/sys/fs/cgroup/cpu,cpuacct/docker/{full}/cpuacct.usage",
        f"/sys/fs/cgroup/cpuacct/system.slice/docker-{full}.scope/cpuacct.usage",
    ):
        try:
            return int(Path(path).read_text()) / 1e9
        except OSError:
            continue
    for path in (
        f"/sys/fs/cgroup/system.slice/docker-{full}.scope/cpu.stat",
        f"/sys/fs/cgroup/docker/{full}/cpu.stat",
    ):
        try:
            for line in Path(path).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except OSError:
            continue
    return None


# --- the server and the client ------------------------------------------------


def start_server(
    image: str, models: Path, config_dir: Path, cpus: str, *options: str
) -> tuple[str, str]:
    """The server, both protocols; REST also published on 127.0.0.1 for the host's checks.

    `options`: more of docker run's options (e.g. "-e", "NAME=value").
    """
    return detached_server(
        cpus,
        *options,
        "-v",
        f"{models}:/models:ro",
        "-v",
        f"{config_dir}:/config:ro",
        image,
        "--model_config_file=/config/models.config",
        "--port=8500",
        "--rest_api_port=8501",
    )


class LoadClient:
    """A module of bench/ in a container of the image on the server's network namespace.

    It is spoken to in JSON lines on stdin/stdout (bench/protocol_load.py,
    bench/soak_load.py); `docker_args` adds mounts or a user, `args` follow
    the module's name.
    """

    def __init__(
        self,
        image: str,
        server: str,
        module: str,
        args: Sequence[str],
        *,
        docker_args: Sequence[str] = (),
        ready_timeout: float = 300,
    ) -> None:
        self.name = NAMES.new()
        argv = [
            "docker",
            "run",
            "-i",
            "--rm",
            "--name",
            self.name,
            "--label",
            LABEL,
            "--network",
            f"container:{server}",
            *LOAD_MOUNTS,
            *docker_args,
            "-e",
            "PYTHONDONTWRITEBYTECODE=1",
            "-e",
            "TF_CPP_MIN_LOG_LEVEL=2",
            "--entrypoint",
            "python",
            image,
            "-m",
            module,
            *args,
        ]
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )
        self.ready = self.read(timeout=ready_timeout)

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        stdin, stdout = self.process.stdin, self.process.stdout
        if stdin is None or stdout is None:
            raise RuntimeError("the load client has no pipes")
        return stdin, stdout

    def read(self, timeout: float) -> dict[str, Any]:
        _, stdout = self._pipes()
        line = stdout.readline()  # the client answers or exits; the caller's window bounds it
        if not line:
            self.process.wait(timeout=timeout)
            self.stderr.seek(0)
            tail = self.stderr.read()[-2000:]
            raise RuntimeError(f"load client exited {self.process.returncode}:\n{tail}")
        data: dict[str, Any] = json.loads(line)
        return data

    def window(
        self, mode: str, model: str, concurrency: int, seconds: float, *, last: bool = True
    ) -> dict[str, Any]:
        """One window; `last`: the gRPC channels close after it (False for a warm-up)."""
        command = {
            "mode": mode,
            "model": model,
            "concurrency": concurrency,
            "seconds": seconds,
            "last": last,
        }
        self.send(command)
        return self.read(timeout=seconds + 60)

    def send(self, command: dict[str, Any]) -> None:
        stdin, _ = self._pipes()
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()

    def close(self) -> None:
        stdin, _ = self._pipes()
        stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        NAMES.remove(self.name)
        self.stderr.close()


# --- the benchmark ------------------------------------------------------------


def measure_cell(
    client: LoadClient,
    server: str,
    *,
    mode: str,
    model: str,
    concurrency: int,
    config: GrpcConfig,
) -> dict[str, Any]:
    client.window(mode, model, concurrency, config.warmup, last=False)
    cpu_before = (cpu_seconds(server), cpu_seconds(client.name))
    throttle_before = cgroup_stat(server)
    load = loadavg()[0]
    result = client.window(mode, model, concurrency, config.seconds)
    cpu_after = (cpu_seconds(server), cpu_seconds(client.name))
    throttle_after = cgroup_stat(server)
    if not result["answer_ok"]:
        raise RuntimeError(
            f"{mode} {model} c={concurrency}: wrong answer {str(result['answer'])[:300]}"
        )
    server_cpu = _delta(cpu_before[0], cpu_after[0])
    client_cpu = _delta(cpu_before[1], cpu_after[1])
    result.pop("answer")
    result["loadavg_1m"] = load
    result["server_cpu_s"] = server_cpu
    result["client_cpu_s"] = client_cpu
    per_request = None
    if server_cpu is not None and result["ok"]:
        per_request = round(server_cpu * 1e3 / result["ok"], 4)
    result["server_cpu_ms_per_request"] = per_request
    result["throttled_periods"] = throttle_after.get("nr_throttled", 0) - throttle_before.get(
        "nr_throttled", 0
    )
    result["periods"] = throttle_after.get("nr_periods", 0) - throttle_before.get("nr_periods", 0)
    return result


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else round(after - before, 4)


def run_grpc(image: str, config: GrpcConfig) -> dict[str, Any]:
    began, load_before = now_iso(), loadavg()
    workdir = Path(tempfile.mkdtemp(prefix="tfe-bench-grpc-"))
    runs: list[dict[str, Any]] = []
    try:
        models, config_dir = served_models(image, workdir, config.models, "grpc")
        server, url = start_server(image, models, config_dir, config.cpus)
        try:
            wait_ready(server, url)
            workers = workers_of(url)
            client = LoadClient(
                image,
                server,
                "bench.protocol_load",
                config.models,
                docker_args=["-v", f"{models}:/models:ro"],
            )
            try:
                if not all(client.ready["checks"].values()):
                    raise RuntimeError(f"a path answers wrongly: {client.ready['checks']}")
                idle = idle_cpu(server)
                cell = 0
                for rep in range(config.reps):
                    for model in config.models:
                        for concurrency in config.concurrencies:
                            modes = modes_for(concurrency, config)
                            order = modes if (rep + cell) % 2 == 0 else modes[::-1]
                            cell += 1
                            for mode in order:
                                result = measure_cell(
                                    client,
                                    server,
                                    mode=mode,
                                    model=model,
                                    concurrency=concurrency,
                                    config=config,
                                )
                                runs.append(
                                    {
                                        "rep": rep,
                                        "model": model,
                                        "concurrency": concurrency,
                                        "mode": mode,
                                        **result,
                                    }
                                )
                                log(
                                    f"grpc {model} c={concurrency:<3} {mode:13} rep {rep}: "
                                    f"{result['rps']:.0f} req/s, p99 {result['p99_ms']:.1f} ms, "
                                    f"{result['errors']} errors, "
                                    f"{result['server_cpu_ms_per_request']} CPU ms/req"
                                )
            finally:
                client.close()
        finally:
            NAMES.remove(server)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    data = {
        "config": asdict(config),
        "started": began,
        "finished": now_iso(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "workers": workers,
        "server_idle_cpu": idle,
        "client": {
            "rest": "asyncio HTTP/1.1 keep-alive, one connection per caller, prebuilt request",
            "grpc": "grpc.aio + TF Serving's PredictionServiceStub, one channel for all callers",
            "grpc-channels": "the same, one channel (own TCP connection) per caller",
        },
        "runs": runs,
    }
    data["cells"] = analyse(data)
    return data


def idle_cpu(server: str, seconds: float = 2.0) -> float | None:
    """CPUs the idle server uses (its health watcher, uvicorn): the floor of CPU per request."""
    before = cpu_seconds(server)
    time.sleep(seconds)
    after = cpu_seconds(server)
    return None if before is None or after is None else round((after - before) / seconds, 4)


# --- analysis -----------------------------------------------------------------

KEYS = ("rps", "p50_ms", "p99_ms", "server_cpu_ms_per_request", "client_cpu_s")


def _stat(values: list[float]) -> dict[str, float]:
    return {"median": median(values), "min": min(values), "max": max(values)}


def _ratio(runs: list[dict[str, Any]], over: str, under: str, key: str) -> dict[str, float] | None:
    """median(over)/median(under), and the same ratio rep by rep (min-max)."""
    top = {r["rep"]: r[key] for r in runs if r["mode"] == over and r[key] is not None}
    bottom = {r["rep"]: r[key] for r in runs if r["mode"] == under and r[key] is not None}
    reps = sorted(set(top) & set(bottom))
    if not reps or not all(bottom[rep] for rep in reps):
        return None
    paired = [top[rep] / bottom[rep] for rep in reps]
    return {
        "median": round(median(top.values()) / median(bottom.values()), 4),
        "min": round(min(paired), 4),
        "max": round(max(paired), 4),
    }


def analyse(data: dict[str, Any]) -> list[dict[str, Any]]:
    cells = []
    config = data["config"]
    for model in config["models"]:
        for concurrency in config["concurrencies"]:
            runs = [
                r for r in data["runs"] if r["model"] == model and r["concurrency"] == concurrency
            ]
            if not runs:
                continue
            modes: dict[str, Any] = {}
            for mode in dict.fromkeys(r["mode"] for r in runs):
                mine = [r for r in runs if r["mode"] == mode]
                modes[mode] = {
                    key: _stat([r[key] for r in mine])
                    for key in KEYS
                    if all(r[key] is not None for r in mine)
                }
                modes[mode]["errors"] = sum(r["errors"] for r in mine)
                modes[mode]["requests"] = sum(r["requests"] for r in mine)
                modes[mode]["connections"] = max((r["connections"] or 0) for r in mine)
                modes[mode]["throttled_periods"] = sum(r["throttled_periods"] for r in mine)
                modes[mode]["periods"] = sum(r["periods"] for r in mine)
            cell: dict[str, Any] = {
                "model": model,
                "concurrency": concurrency,
                "modes": modes,
                "grpc_vs_rest": {
                    "rps": _ratio(runs, "grpc", "rest", "rps"),
                    "p99": _ratio(runs, "grpc", "rest", "p99_ms"),
                    "cpu_per_request": _ratio(runs, "grpc", "rest", "server_cpu_ms_per_request"),
                },
            }
            if "grpc-channels" in modes:
                cell["channels_vs_grpc"] = {
                    "rps": _ratio(runs, "grpc-channels", "grpc", "rps"),
                    "p99": _ratio(runs, "grpc-channels", "grpc", "p99_ms"),
                }
            cells.append(cell)
    return cells


def summary_line(data: dict[str, Any]) -> str:
    """One line per cell, for logs."""
    return "; ".join(
        f"{c['model']} c={c['concurrency']}: rps {c['grpc_vs_rest']['rps']['median']:.2f}x"
        for c in data["cells"]
        if c["grpc_vs_rest"]["rps"]
    )
