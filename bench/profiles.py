"""Where the server's CPU goes per predict: py-spy profiles under load (issue 24).

    python -m bench run profiles [--image IMAGE] [--out DIR] [--quick]   # into OUT/profiles/

One server (`tf-entrypoint serve`, --cpus 1, half_plus_two and the MLP, as
bench/cost.py's) under batch-1 predicts from 8 connections
(bench/protocol_load.py on its network namespace: REST keep-alive, gRPC on
one channel), one cell at a time: REST and gRPC, each model. During each
cell py-spy 0.4.3 records the server's process for S seconds twice, once as
speedscope JSON and once as an SVG flame graph (`--threads`, idle samples
left out, 100 samples a second, `--nonblocking`: a blocking py-spy stops the
threads to read them, and then counts waiting threads as busy). py-spy runs
in its own container of the image, in the server's PID namespace with CAP_SYS_PTRACE (`--pid
container:SERVER --cap-add SYS_PTRACE`), so its own CPU is not the server's;
its binary comes from PyPI's wheel, downloaded once by the host's pip into
~/.cache/tf-entrypoint-bench/ and mounted read-only (the image is not
changed, the containers have no network).

Each speedscope profile is summed up by bench/profiles.py's `shares`: every
sample goes to the category of its innermost frame that has one (routing,
Starlette's request objects, thread hand-offs, metrics, JSON, tensor
conversions, logging, locks, gRPC's per-call Python, protobuf, TensorFlow's
call, the server's own modules), and the samples are set against the CPU the
container's cgroup counted meanwhile: py-spy sees Python threads only, so
what TensorFlow's and gRPC's native threads spend shows as the rest.

Writes OUT/profiles/NAME.svg and OUT/profiles/NAME.speedscope.json per cell;
the runner writes OUT/profiles/profiles.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import LABEL, NAMES, loadavg, log, now_iso
from bench.cost import MODELS, start_target, wait_target
from bench.grpc_rest import LoadClient, cpu_seconds, model_config
from bench.serving import export_models

PYSPY = "0.4.3"
CACHE = Path.home() / ".cache" / "tf-entrypoint-bench" / f"py-spy-{PYSPY}"
RATE = 100
CONCURRENCY = 8
#: grpc.aio's polling thread (Thread-N (_poll_wrapper)): its samples are gRPC's C core.
POLLER = "_poll_wrapper"
CELLS = (("rest", "half_plus_two"), ("rest", "mlp"), ("grpc", "half_plus_two"), ("grpc", "mlp"))

#: (category, pattern on "file:function"), first match of the innermost frame wins.
CATEGORIES = (
    ("JSON decode/encode", r"(/json/|codec/json_|codec/proto_json|orjson|ujson)"),
    (
        "tensor conversions",
        r"(tensor_util|codec/tensor_proto|/numpy/|make_ndarray|make_tensor_proto)",
    ),
    ("TensorFlow (the model call)", r"(tensorflow/python/client/session|model/bundle\.py:run)"),
    ("TensorFlow (other)", r"/tensorflow/"),
    ("metrics", r"(prometheus_client|core/metrics|core/tfs_metrics)"),
    ("logging", r"/logging/"),
    ("routing", r"starlette/routing"),
    ("Starlette request/response objects", r"starlette/(requests|responses|datastructures|_utils)"),
    ("Starlette middleware/app", r"starlette/"),
    ("thread hand-offs", r"(anyio/|concurrent/futures|asyncio/threads|run_in_executor|to_thread)"),
    ("locks", r"threading\.py:(acquire|release|__enter__|__exit__|wait|notify)"),
    ("gRPC per call (Python)", r"(/grpc/|grpc/_cython|_server\.py)"),
    ("protobuf", r"google/protobuf"),
    ("uvicorn/httptools", r"(uvicorn/|httptools)"),
    ("event loop (task steps, I/O, native code under it)", r"(asyncio/|uvloop)"),
    ("admission, deadlines, inference (core)", r"tf_entrypoint/serving/core/"),
    ("model/ (signatures, servable)", r"tf_entrypoint/serving/model/"),
    ("REST transport", r"tf_entrypoint/serving/rest/"),
    ("gRPC transport", r"tf_entrypoint/serving/grpc/"),
    ("codec (other)", r"tf_entrypoint/serving/codec/"),
    ("threading", r"threading\.py"),
)


def pyspy_binary() -> tuple[Path, str]:
    """py-spy's binary from PyPI's wheel (the host's pip, once), and the wheel's sha256."""
    binary = CACHE / "py-spy"
    digest = CACHE / "wheel.sha256"
    if binary.exists() and digest.exists():
        return binary, digest.read_text().strip()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", f"py-spy=={PYSPY}", "--no-deps",
             "--only-binary=:all:", "--platform", "manylinux_2_5_x86_64", "-d", tmp],
            check=True, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        (wheel,) = Path(tmp).glob("py_spy-*.whl")
        CACHE.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            binary.write_bytes(archive.read(f"py_spy-{PYSPY}.data/scripts/py-spy"))
        binary.chmod(0o755)
        digest.write_text(hashlib.sha256(wheel.read_bytes()).hexdigest() + "\n")
    return binary, digest.read_text().strip()


def record(
    image: str, server: str, binary: Path, out: Path, *, name: str, seconds: float, fmt: str
) -> None:
    """py-spy record of the server's Python process, from a container in its PID namespace."""
    target = f"/out/{name}.speedscope.json" if fmt == "speedscope" else f"/out/{name}.svg"
    script = (
        'pid=""; for p in /proc/[0-9]*; do case "$(cat $p/comm 2>/dev/null)" in python*) '
        'pid=${p#/proc/}; break;; esac; done; [ -n "$pid" ] || { echo no python; exit 3; }; '
        f"exec /pyspy/py-spy record --pid $pid --duration {seconds:g} --rate {RATE} --threads "
        f"--format {fmt} --output {target} --nonblocking"
    )
    done = subprocess.run(
        ["docker", "run", "--rm", "--label", LABEL, "--pid", f"container:{server}",
         "--cap-add", "SYS_PTRACE", "--network", "none", "--user", f"{os.getuid()}:{os.getgid()}",
         "-v", f"{binary.parent}:/pyspy:ro", "-v", f"{out}:/out", "--entrypoint", "sh", image,
         "-c", script],
        capture_output=True, text=True, timeout=seconds + 120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"py-spy {name} ({fmt}): {done.stdout[-500:]}{done.stderr[-1500:]}")


# --- the analysis -------------------------------------------------------------


def category(frame: dict[str, Any]) -> str | None:
    where = f"{frame.get('file', '')}:{frame.get('name', '')}"
    for name, pattern in CATEGORIES:
        if re.search(pattern, where):
            return name
    return None


def shares(speedscope: dict[str, Any]) -> dict[str, Any]:
    """Samples per category (innermost categorised frame), and the top leaf frames."""
    frames = speedscope["shared"]["frames"]
    kinds = [category(f) for f in frames]
    by_category: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for profile in speedscope["profiles"]:
        for stack, weight in zip(profile["samples"], profile["weights"], strict=True):
            total += weight
            threads[profile.get("name", "?")] += weight
            found = next((kinds[i] for i in reversed(stack) if kinds[i]), None)
            if POLLER in profile.get("name", ""):  # grpc.aio's poller: C-core, no Python frames
                found = "gRPC C-core poller thread"
            if found is None and stack:
                leaf = frames[stack[-1]]
                found = f"other ({Path(leaf.get('file', '?')).name})"
            by_category[found or "other"] += weight
            if stack:
                leaf = frames[stack[-1]]
                leaves[
                    f"{leaf.get('name')} ({_short(leaf.get('file', ''))}:{leaf.get('line')})"
                ] += weight
    return {
        "samples": round(total, 2),  # py-spy's weights: seconds
        "categories": {k: round(v / total, 4) for k, v in by_category.most_common()}
        if total
        else {},
        "top_leaves": {k: round(v / total, 4) for k, v in leaves.most_common(15)} if total else {},
        "threads": {k: round(v, 2) for k, v in threads.most_common()},
    }


def _short(path: str) -> str:
    for marker in ("site-packages/", "lib/python3.11/", "tf_entrypoint/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def summarise(
    name: str,
    result: dict[str, Any],
    summary: dict[str, Any],
    *,
    cpu: float | None,
    elapsed: float,
    seconds: float,
) -> dict[str, Any]:
    """One cell: the load's numbers, the cgroup's CPU, the profile's shares.

    `cpu` is what the container used over `elapsed` seconds around py-spy's
    `seconds` of sampling (its container's start included: the load is
    steady), hence CPUs used and CPU per request; each category's share of
    the samples is also given as µs of that CPU per request.
    """
    mode, _, rest = name.partition("-")
    model = rest.rsplit("-", 1)[0]
    cpus = None if cpu is None else cpu / elapsed
    per_request = None if cpus is None else cpus * 1e6 / result["rps"]
    return {
        "name": name,
        "mode": mode,
        "model": model,
        "concurrency": CONCURRENCY,
        "rps": result["rps"],
        "p99_ms": result["p99_ms"],
        "cgroup_cpus": None if cpus is None else round(cpus, 3),
        "cpu_us_per_request": None if per_request is None else round(per_request, 1),
        # Python threads running or runnable (sample seconds a second) per CPU used
        "python_visible": None if not cpus else round(summary["samples"] / seconds / cpus, 3),
        **summary,
        "category_us_per_request": {
            k: round(v * per_request, 1) for k, v in summary["categories"].items()
        }
        if per_request is not None
        else {},
    }


# --- the run ------------------------------------------------------------------


def run(
    image: str,
    out: Path,
    seconds: float,
    chosen: tuple[tuple[str, str], ...] = CELLS,
    margin: float = 20.0,
) -> dict[str, Any]:
    """Record the `chosen` cells ((mode, model) each) for `seconds`; each cell's load window
    lasts two recordings and `margin` seconds (py-spy's container starts) more."""
    binary, wheel_sha256 = pyspy_binary()
    began, load_before = now_iso(), loadavg()
    workdir = Path(tempfile.mkdtemp(prefix="tfe-bench-profiles-"))
    cells = []
    try:
        models = workdir / "models"
        models.mkdir()
        config_dir = workdir / "config"
        config_dir.mkdir()
        (config_dir / "models.config").write_text(model_config(MODELS))
        export_models(image, models, MODELS)
        recorded = workdir / "out"
        recorded.mkdir()
        server = start_target("server", image, models, config_dir, "1")
        try:
            wait_target("server", server)
            client = LoadClient(image, server, "bench.protocol_load", MODELS,
                                docker_args=["-v", f"{models}:/models:ro"])  # fmt: skip
            try:
                if not all(client.ready["checks"].values()):
                    raise RuntimeError(f"a path answers wrongly: {client.ready['checks']}")
                for mode, model in chosen:
                    name = f"{mode}-{model}-c{CONCURRENCY}"
                    window = 2 * seconds + margin
                    client.window(mode, model, CONCURRENCY, 2.0, last=False)  # warm
                    client.send({"mode": mode, "model": model, "concurrency": CONCURRENCY,
                                 "seconds": window, "last": True})  # fmt: skip
                    time.sleep(2)
                    cpu_before, started = cpu_seconds(server), time.monotonic()
                    record(
                        image,
                        server,
                        binary,
                        recorded,
                        name=name,
                        seconds=seconds,
                        fmt="speedscope",
                    )
                    cpu_after, elapsed = cpu_seconds(server), time.monotonic() - started
                    record(
                        image,
                        server,
                        binary,
                        recorded,
                        name=name,
                        seconds=seconds,
                        fmt="flamegraph",
                    )
                    result = client.read(timeout=window + 60)
                    if not result["answer_ok"] or result["errors"]:
                        raise RuntimeError(f"{name}: {result['error_kinds']} {result['answer']}")
                    profile = json.loads((recorded / f"{name}.speedscope.json").read_text())
                    cpu = (
                        None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
                    )
                    cell = summarise(
                        name, result, shares(profile), cpu=cpu, elapsed=elapsed, seconds=seconds
                    )
                    cells.append(cell)
                    log(
                        f"profiles {name}: {result['rps']:.0f} req/s, "
                        f"{cell['cpu_us_per_request']} µs/req, "
                        f"python-visible {cell['python_visible']}, "
                        f"top {list(cell['categories'])[:4]}"
                    )
            finally:
                client.close()
        finally:
            NAMES.remove(server)
        out.mkdir(parents=True, exist_ok=True)
        for path in recorded.iterdir():
            shutil.copyfile(path, out / path.name)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "started": began,
        "finished": now_iso(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "py_spy": {
            "version": PYSPY,
            "wheel_sha256": wheel_sha256,
            "rate": RATE,
            "options": "--threads --nonblocking, idle samples left out",
        },
        "seconds": seconds,
        "cells": cells,
    }
