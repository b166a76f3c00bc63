"""Memory per request, measured: what one request of each worst case adds to a server's peak.

    python -m bench run request_memory [--image tf-entrypoint:cpu]

For each case a fresh server (--cpus 1, --memory 4g, the memory tests'
models: plus, mlp, examples) answers one request of about --max-body-bytes
(8 MiB); the container's cgroup memory peak after it, minus the peak before
it, over the request's size, is the factor docs/robustness.md ("Memory per
request") documents. The cgroup counts everything: the body, the JSON
document, NumPy and TensorFlow's buffers, the answer, and what the allocator
keeps. Run it against an older image (--image) to see what the bound changed;
a case that kills a server for memory (4 GiB) says "OOM". Needs Docker and the
image; stdlib only on the host.
"""

from __future__ import annotations

import functools
import json
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import LABEL, NAMES, REPO, detached_server, docker, library, log

TESTS = REPO / "tests" / "container"
BODY = 8 * 1024 * 1024
MEMORY = "4g"
CONFIG = """
model_config_list {
  config { name: "plus" base_path: "/models/plus" }
  config { name: "examples" base_path: "/models/examples" }
  config { name: "mlp" base_path: "/models/mlp" }
}
"""


def _json_list(unit: bytes, prefix: bytes, suffix: bytes, size: int = BODY - 200) -> bytes:
    return prefix + b",".join([unit] * (size // (len(unit) + 1))) + suffix


#: name -> (what it is, model path, body)
REST_CASES: dict[str, tuple[str, str, Callable[[], bytes]]] = {
    "rest_nested_lists": (
        "lists in one-element lists, depth 30 (the worst JSON; 400 after parsing)",
        "plus:predict",
        lambda: _json_list(b"[" * 30 + b"0" + b"]" * 30, b'{"inputs": [', b"]}"),
    ),
    "rest_one_number_rows": (
        "[[0],[0],...] (400 after parsing: the input is [batch])",
        "plus:predict",
        lambda: _json_list(b"[0]", b'{"inputs": [', b"]}"),
    ),
    "rest_flat_zeros": (
        "[0,0,...] for a float32 [batch] input, y = x + 1 (4 million values in and out)",
        "plus:predict",
        lambda: _json_list(b"0", b'{"inputs": [', b"]}"),
    ),
    "rest_flat_floats": (
        "[1.5,1.5,...] for a float32 [batch] input, y = x + 1",
        "plus:predict",
        lambda: _json_list(b"1.5", b'{"inputs": [', b"]}"),
    ),
    "rest_mlp_rows": (
        "[[0,0,0,0],...] rows for the MLP (4 outputs a row)",
        "mlp:predict",
        lambda: _json_list(b"[0,0,0,0]", b'{"inputs": {"x": [', b"]}}"),
    ),
    "rest_mlp_instances": (
        "the same rows as instances: the answer is an object per row (y and total)",
        "mlp:predict",
        lambda: _json_list(b"[0,0,0,0]", b'{"instances": [', b"]}"),
    ),
    "rest_classify": (
        '{"x": 1.5} examples, classify (2 classes each)',
        "examples:classify",
        lambda: _json_list(b'{"x": 1.5}', b'{"signature_name": "classify", "examples": [', b"]}"),
    ),
}
GRPC_CASES = {
    "grpc_tensor_content": (
        "Predict of 2 million float32 (tensor_content), y = x + 1",
        {"op": "big", "model": "plus", "floats": 2_000_000},
        8_000_000,
    ),
}


def _peak(name: str) -> int:
    for path in (
        "/sys/fs/cgroup/memory/memory.max_usage_in_bytes",
        "/sys/fs/cgroup/memory.peak",
    ):
        done = subprocess.run(
            ["docker", "exec", name, "cat", path], capture_output=True, text=True, check=False
        )
        if done.returncode == 0:
            return int(done.stdout.strip())
    raise RuntimeError("no cgroup memory peak file in the container")


def _oom(name: str) -> bool:
    return docker("inspect", "--format", "{{.State.OOMKilled}}", name, check=False) == "true"


def _start(image: str, models: Path) -> tuple[str, str]:
    name, url = detached_server(
        "1", "--memory", MEMORY, "--memory-swap", MEMORY,
        "-v", f"{models}:/models:ro", image,
        "serve", "--model_config_file=/models/models.config", "--request-timeout=0",
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=5) as answer:  # noqa: S310
                if answer.status == 200:
                    return name, url
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{name} not ready: {docker('logs', name, check=False)[-2000:]}")


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(  # noqa: S310
        url, data=body, headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=600) as answer:  # noqa: S310
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except (urllib.error.URLError, ConnectionError):
        return 0  # the server went away


def _rest(path: str, body: bytes, name: str, url: str) -> int:
    return _post(f"{url}/v1/models/{path}", body)


def _grpc(image: str, op: dict[str, Any], name: str, url: str) -> str:
    done = subprocess.run(
        ["docker", "run", "--rm", "--label", LABEL, f"--network=container:{name}",
         "-v", f"{TESTS}:/t:ro", image, "python", "/t/grpc_client.py", "127.0.0.1:8500",
         json.dumps([op])],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return "client failed"
    code: str = json.loads(done.stdout.strip().splitlines()[-1])[0]["code"]
    return code


def measure(image: str, models: Path, chosen: tuple[str, ...]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    cases: list[tuple[str, str, int, Callable[[str, str], Any]]] = []
    for case, (about, path, make) in REST_CASES.items():
        if case not in chosen:
            continue
        body = make()
        cases.append((case, about, len(body), functools.partial(_rest, path, body)))
    for case, (about, op, size) in GRPC_CASES.items():
        if case not in chosen:
            continue
        cases.append((case, about, size, functools.partial(_grpc, image, op)))
    for case, about, size, send in cases:
        name, url = _start(image, models)
        try:
            idle = _peak(name)
            answer = send(name, url)
            oom = _oom(name)
            peak = None if oom else _peak(name)
        finally:
            NAMES.remove(name)
        factor = None if peak is None else round((peak - idle) / size, 1)
        results[case] = {
            "about": about, "request_bytes": size, "answer": answer, "idle_bytes": idle,
            "peak_bytes": peak, "oom_killed": oom, "factor": factor,
        }  # fmt: skip
        log(f"{case}: {answer}, " + ("OOM" if oom else f"+{(peak or 0) - idle} B = {factor}x"))
    return results


@dataclass(frozen=True)
class RequestMemoryConfig:
    cases: tuple[str, ...] = (*REST_CASES, *GRPC_CASES)  # a fresh server each


#: The model library's folders (harness/models.py) this serves: the memory tests' models.
LIBRARY_MODELS: dict[str, str | tuple[str, tuple[int, ...]]] = {
    "plus": ("plus", (1,)),
    "mlp": "batch/mlp",
    "examples": "examples",
}


def run(image: str, config: RequestMemoryConfig) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tfe-request-memory-") as tmp:
        models = library(image).tree(Path(tmp) / "models", LIBRARY_MODELS)
        (models / "models.config").write_text(CONFIG)
        results = measure(image, models, config.cases)  # each server removed after its case
    return {"memory_limit": MEMORY, "cases": results}
