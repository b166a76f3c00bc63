"""Every CPU the container is given (issue 34): --frontends against one process and the floor.

Arms, each a container with host networking (no proxy takes a share of the
cores) under a CPU limit, started in turn on the same models (half_plus_two
and the MLP, from the model library):

* one@C: the server as one process (`serve --frontends 1`) under --cpus C;
* frontends@C: a supervisor, an engine and C front-ends (`serve --frontends C`);
* floor@C: bench/floor.py's raw-ASGI REST app in C processes, a model copy each
  (`rest-workers C`: what `uvicorn --workers C` does), REST only.

Each arm is measured per request kind (half_plus_two with 1 value, with 2,000
values, the MLP with one row of 32) and protocol (REST through wrk, gRPC
Predict through h2load: both C programs, so the load generator costs little),
CONNECTIONS connections, a warm-up window then a timed one, arms taking turns
per repetition: requests per second, the CPUs the container used (its
cgroup's CPU time over the window), p50/p99 (wrk's; h2load's per-request log),
and the container's memory (its cgroup's usage, so pages shared between
processes count once) idle and at the end of the load. A last window at one
connection gives each arm's p50 for the latency a process hop adds.

Without wrk or h2load on the host (Debian: wrk, nghttp2-client) the REST
windows use harness/load.py's Python client and gRPC windows are refused: the
result says which client measured.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import LOAD_MOUNTS, NAMES, docker, log, now_iso, run_container
from bench.serving import WRK_SCRIPT, choose_client, export_models, http, python_client, wrk
from harness.stats import median, percentile

MODELS = ("half_plus_two", "mlp")
#: Request kinds: (model, its REST body's instances).
REQUESTS: dict[str, tuple[str, list[Any]]] = {
    "hp2-1": ("half_plus_two", [1.0]),
    "hp2-2000": ("half_plus_two", [((i * 7) % 13) / 13.0 for i in range(2000)]),
    "mlp-1": ("mlp", [[((j * 7) % 13) / 13.0 for j in range(32)]]),
}
#: Builds a PredictRequest in the image (TF Serving's classes) and prints it in hex.
PREDICT_REQUEST = """
import json, sys
import numpy as np, tensorflow as tf
from tensorflow_serving.apis import predict_pb2
model, instances, name = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
request = predict_pb2.PredictRequest()
request.model_spec.name = model
request.inputs[name].CopyFrom(tf.make_tensor_proto(np.asarray(instances, np.float32)))
print(request.SerializeToString().hex())
"""
#: The input alias of each model's serving_default signature.
INPUT = {"half_plus_two": "x", "mlp": "x"}


@dataclass(frozen=True)
class ProcessesConfig:
    arms: tuple[str, ...] = ("one@1", "one@2", "frontends@2", "floor@2")
    requests: tuple[str, ...] = ("hp2-1", "hp2-2000", "mlp-1")
    protocols: tuple[str, ...] = ("rest", "grpc")
    connections: int = 32
    seconds: float = 10.0
    warmup: float = 2.0
    repetitions: int = 2
    #: Seconds of the one-connection window (0: none).
    single: float = 5.0
    client: str = "auto"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _cgroup_file(container: str, v1: tuple[str, str], v2: str) -> Path:
    full = docker("inspect", "-f", "{{.Id}}", container)
    for candidate in (
        Path(f"/sys/fs/cgroup/{v1[0]}/docker/{full}/{v1[1]}"),
        Path(f"/sys/fs/cgroup/{v1[0]}/system.slice/docker-{full}.scope/{v1[1]}"),
        Path(f"/sys/fs/cgroup/system.slice/docker-{full}.scope/{v2}"),
        Path(f"/sys/fs/cgroup/docker/{full}/{v2}"),
    ):
        if candidate.exists():
            return candidate
    raise RuntimeError(f"no cgroup file for {container}")


def cpu_seconds(path: Path) -> float:
    """A cgroup's CPU time: cpuacct.usage (ns, v1) or cpu.stat's usage_usec (v2)."""
    text = path.read_text()
    if path.name == "cpuacct.usage":
        return int(text) / 1e9
    return int(re.search(r"usage_usec (\d+)", text).group(1)) / 1e6  # type: ignore[union-attr]


def memory_bytes(path: Path) -> int:
    return int(path.read_text().split()[0])


class Arm:
    """One arm's container: started, checked, measured, removed."""

    def __init__(self, image: str, spec: str, models: Path) -> None:
        self.spec = spec
        kind, cpus = spec.split("@")
        self.rest_port, self.grpc_port = _free_port(), _free_port()
        self.name = NAMES.new()
        run = ["run", "-d", "--name", self.name, "--network", "host", "--cpus", cpus,
               "-v", f"{models}:/models:ro"]  # fmt: skip
        if kind == "floor":
            run += ["-e", f"FLOOR_REST_PORT={self.rest_port}", *LOAD_MOUNTS,
                    "--entrypoint", "python", image, "-m", "bench.floor", "rest-workers", cpus,
                    *MODELS]  # fmt: skip
        else:
            frontends = "1" if kind == "one" else cpus
            config = ",".join(f'config {{ name: "{m}" base_path: "/models/{m}" }}' for m in MODELS)
            (models / "models.config").write_text(f"model_config_list {{ {config} }}\n")
            run += [image, "serve", "--model_config_file=/models/models.config",
                    f"--rest_api_port={self.rest_port}", f"--port={self.grpc_port}",
                    f"--frontends={frontends}"]  # fmt: skip
        docker(*run)
        self.url = f"http://127.0.0.1:{self.rest_port}"
        self.floor = kind == "floor"
        self._wait()
        self.cpu = _cgroup_file(self.name, ("cpuacct", "cpuacct.usage"), "cpu.stat")
        self.memory = _cgroup_file(self.name, ("memory", "memory.usage_in_bytes"), "memory.current")

    def _wait(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        body = json.dumps({"instances": [1.0]}).encode()
        while time.monotonic() < deadline:
            try:
                if http(f"{self.url}/v1/models/half_plus_two:predict", body, timeout=2)[0] == 200:
                    time.sleep(1.0)  # every process listening (the front-ends start together)
                    return
            except OSError:
                pass
            time.sleep(0.3)
        logs = docker("logs", "--tail", "30", self.name, check=False)
        raise RuntimeError(f"{self.spec} not serving within {timeout} s:\n{logs}")

    def remove(self) -> None:
        docker("rm", "-f", self.name, check=False)
        NAMES.remove(self.name)


class Loads:
    """The request bodies and the load generators."""

    def __init__(self, image: str, workdir: Path, config: ProcessesConfig) -> None:
        self.config = config
        self.client = choose_client(config.client)
        self.h2load = shutil.which("h2load")
        self.scripts: dict[str, Path] = {}
        self.bodies: dict[str, bytes] = {}
        self.grpc: dict[str, Path] = {}
        for kind in config.requests:
            model, instances = REQUESTS[kind]
            body = json.dumps({"instances": instances})
            self.bodies[kind] = body.encode()
            script = workdir / f"{kind}.lua"
            script.write_text(WRK_SCRIPT % body)
            self.scripts[kind] = script
            if "grpc" in config.protocols:
                done = run_container(["--entrypoint", "python"], image,
                                     ["-c", PREDICT_REQUEST, model, json.dumps(instances),
                                      INPUT[model]])  # fmt: skip
                message = bytes.fromhex(done.stdout.strip().splitlines()[-1])
                framed = workdir / f"{kind}.grpc"
                framed.write_bytes(struct.pack(">BI", 0, len(message)) + message)
                self.grpc[kind] = framed

    def rest(self, arm: Arm, kind: str, connections: int, seconds: float) -> dict[str, Any]:
        model = REQUESTS[kind][0]
        url = f"{arm.url}/v1/models/{model}:predict"
        if self.client == "wrk":
            return wrk(url, self.scripts[kind], connections, seconds)
        return python_client(url, self.bodies[kind], connections, seconds)

    def grpc_load(self, arm: Arm, kind: str, connections: int, seconds: float) -> dict[str, Any]:
        if not self.h2load:
            raise RuntimeError("h2load is not installed (Debian: nghttp2-client)")
        logged = self.grpc[kind].with_suffix(".log")
        argv = [
            self.h2load,
            "-D",
            str(max(1, round(seconds))),
            "-c",
            str(connections),
            "-m",
            "1",
            "-d",
            str(self.grpc[kind]),
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "--log-file",
            str(logged),
            f"http://127.0.0.1:{arm.grpc_port}/tensorflow.serving.PredictionService/Predict",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60,
                              check=True)  # fmt: skip
        found = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded",
                          done.stdout)  # fmt: skip
        assert found, done.stdout
        times = [int(line.split("\t")[2]) / 1e3 for line in logged.read_text().splitlines()
                 if line.count("\t") >= 2]  # fmt: skip
        took = float(re.search(r"finished in ([0-9.]+)s", done.stdout).group(1))  # type: ignore[union-attr]
        ok = int(found.group(2))
        return {
            "requests": int(found.group(1)),
            "errors": int(found.group(1)) - ok,
            "rps": round(ok / took, 2),
            "p50_ms": round(percentile(times, 50), 3) if times else 0.0,
            "p99_ms": round(percentile(times, 99), 3) if times else 0.0,
        }


def _check_grpc(image: str, arm: Arm, kind: str) -> None:
    """One Predict with TF Serving's own stub: the load's request is answered OK."""
    model, instances = REQUESTS[kind]
    check = (
        "import grpc, json, sys, numpy as np, tensorflow as tf\n"
        "from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc\n"
        "stub = prediction_service_pb2_grpc.PredictionServiceStub("
        "grpc.insecure_channel(sys.argv[1]))\n"
        "r = predict_pb2.PredictRequest(); r.model_spec.name = sys.argv[2]\n"
        "r.inputs[sys.argv[4]].CopyFrom(tf.make_tensor_proto("
        "np.asarray(json.loads(sys.argv[3]), np.float32)))\n"
        "print(len(stub.Predict(r, timeout=30).outputs))\n"
    )
    run_container(["--network", "host", "--entrypoint", "python"], image,
                  ["-c", check, f"127.0.0.1:{arm.grpc_port}", model, json.dumps(instances),
                   INPUT[model]])  # fmt: skip


def _window(
    loads: Loads, arm: Arm, protocol: str, kind: str, *, seconds: float, connections: int
) -> dict[str, Any]:
    cpu0, wall0 = cpu_seconds(arm.cpu), time.monotonic()
    if protocol == "rest":
        result = loads.rest(arm, kind, connections, seconds)
    else:
        result = loads.grpc_load(arm, kind, connections, seconds)
    cpus = (cpu_seconds(arm.cpu) - cpu0) / (time.monotonic() - wall0)
    return {**result, "cpus": round(cpus, 3), "memory_mb": round(memory_bytes(arm.memory) / 1e6)}


def run_processes(image: str, config: ProcessesConfig) -> dict[str, Any]:
    began = now_iso()
    workdir = Path(tempfile.mkdtemp(prefix="tfe-bench-processes-"))
    runs: list[dict[str, Any]] = []
    try:
        models = workdir / "models"
        models.mkdir()
        export_models(image, models, MODELS)
        loads = Loads(image, workdir, config)
        for repetition in range(config.repetitions):
            order = list(config.arms) if repetition % 2 == 0 else list(config.arms)[::-1]
            for spec in order:
                log(f"processes: {spec}, repetition {repetition + 1}")
                arm = Arm(image, spec, models)
                try:
                    idle = round(memory_bytes(arm.memory) / 1e6)
                    for protocol in config.protocols:
                        if protocol == "grpc" and arm.floor:
                            continue
                        for kind in config.requests:
                            if protocol == "grpc" and repetition == 0:
                                _check_grpc(image, arm, kind)
                            _window(loads, arm, protocol, kind, seconds=config.warmup,
                                    connections=config.connections)  # fmt: skip
                            result = _window(loads, arm, protocol, kind, seconds=config.seconds,
                                             connections=config.connections)  # fmt: skip
                            runs.append({"arm": spec, "protocol": protocol, "request": kind,
                                         "repetition": repetition, "idle_memory_mb": idle,
                                         **result})  # fmt: skip
                    if config.single and "rest" in config.protocols:
                        kind = config.requests[0]
                        result = _window(loads, arm, "rest", kind, seconds=config.single,
                                         connections=1)  # fmt: skip
                        runs.append({"arm": spec, "protocol": "rest", "request": kind,
                                     "repetition": repetition, "connections": 1,
                                     "idle_memory_mb": idle, **result})  # fmt: skip
                finally:
                    arm.remove()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    data = {"config": {**asdict(config), "client": loads.client,
                       "grpc_client": "h2load" if loads.h2load else ""},
            "started": began, "finished": now_iso(), "runs": runs}  # fmt: skip
    data["cells"] = analyse(data)
    return data


def analyse(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (protocol, request): each arm's medians, and the ratios the issue asks for."""
    cells = []
    loaded = [r for r in data["runs"] if r.get("connections", 0) != 1]
    for protocol, kind in sorted({(r["protocol"], r["request"]) for r in loaded}):
        cell: dict[str, Any] = {"protocol": protocol, "request": kind}
        for arm in sorted({r["arm"] for r in loaded}):
            mine = [r for r in loaded if (r["arm"], r["protocol"], r["request"]) ==
                    (arm, protocol, kind)]  # fmt: skip
            if mine:
                cell[arm] = {key: round(median([r[key] for r in mine]), 3)
                             for key in ("rps", "cpus", "p50_ms", "p99_ms", "memory_mb",
                                         "idle_memory_mb")}  # fmt: skip
        for arm in [a for a in cell if a.startswith("frontends@")]:
            cpus = arm.split("@")[1]
            rps = cell[arm]["rps"]
            if f"floor@{cpus}" in cell:
                cell[f"{arm} / floor@{cpus}"] = round(rps / cell[f"floor@{cpus}"]["rps"], 2)
            if f"one@{cpus}" in cell:
                cell[f"{arm} / one@{cpus}"] = round(rps / cell[f"one@{cpus}"]["rps"], 2)
            if "one@1" in cell:
                cell[f"{arm} / one@1"] = round(rps / cell["one@1"]["rps"], 2)
        cells.append(cell)
    single = [r for r in data["runs"] if r.get("connections") == 1]
    if single:
        cells.append({"connections": 1, **{
            arm: round(median([r["p50_ms"] for r in single if r["arm"] == arm]), 3)
            for arm in sorted({r["arm"] for r in single})}})  # fmt: skip
    return cells
