"""Shared pieces of the host-side harness: docker, load average, machine facts, the models."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import models as model_library

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
#: Every container and volume the harness starts carries this label
#: (the same one the tests use, so `make prune` finds leftovers).
LABEL = "tf-entrypoint.test=1"
#: docker run options for an in-container probe run as `python -m bench.NAME`: bench/ and
#: harness/ (its stats and load loop) side by side at /load, read-only.
LOAD_MOUNTS = (
    *("-v", f"{BENCH}:/load/bench:ro", "-v", f"{REPO / 'harness'}:/load/harness:ro"),
    *("-w", "/load", "-e", "PYTHONPATH=/load"),
)
_LIBRARY: list[model_library.ModelLibrary] = []


def use_library(found: model_library.ModelLibrary) -> None:
    """Serve every benchmark model from `found` (python -m bench resolves it once, from the
    image's own tag, before pinning the image under a private one)."""
    _LIBRARY[:] = [found]


def library(image: str) -> model_library.ModelLibrary:
    """The harness model library (harness/models.py): the one `use_library` set, else the
    library of `image`, exported now unless cached."""
    if not _LIBRARY:
        _LIBRARY.append(model_library.library(image))
    return _LIBRARY[0]


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def docker(*args: str, timeout: float = 120, check: bool = True) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])}... failed: {done.stderr.strip()[-800:]}")
    return done.stdout.strip()


@dataclass
class Names:
    """Names of the containers this process started, for cleanup on any exit."""

    prefix: str = f"tfe-bench-{os.getpid()}"
    count: int = 0
    live: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)  # python -m bench --jobs

    def new(self) -> str:
        with self.lock:
            self.count += 1
            name = f"{self.prefix}-{self.count}"
            self.live.add(name)
        return name

    def remove(self, name: str) -> None:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        self.live.discard(name)

    def remove_all(self) -> None:
        for name in sorted(self.live):
            self.remove(name)


NAMES = Names()


def detached_server(cpus: str, *run: str) -> tuple[str, str]:
    """Start a server container: `docker run -d` named, labelled, under --cpus `cpus`, REST's
    8501 published on 127.0.0.1; `run`: the rest of the words (options, image, command).

    (the container's name, REST's base URL on the host).
    """
    name = NAMES.new()
    docker("run", "-d", "--name", name, "--label", LABEL, "--cpus", cpus,
           "-p", "127.0.0.1::8501", *run)  # fmt: skip
    return name, rest_url(name)


def rest_url(name: str) -> str:
    """The base URL of container `name`'s REST port as published on the host."""
    port = docker("port", name, "8501/tcp").splitlines()[0].rsplit(":", 1)[1]
    return f"http://127.0.0.1:{port}"


def run_container(
    args: Sequence[str], image: str, command: Sequence[str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """docker run --rm (labelled, named); raises RuntimeError on failure or timeout."""
    name = NAMES.new()
    argv = ["docker", "run", "--rm", "--name", name, "--label", LABEL, *args, image, *command]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"container timed out after {timeout} s: {' '.join(argv)}") from err
    finally:
        NAMES.remove(name)
    if done.returncode != 0:
        tail = done.stderr.strip()[-1500:]
        raise RuntimeError(f"exit {done.returncode}: {' '.join(argv)}\n{tail}")
    return done


def last_json_line(text: str) -> Any:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON object in output: {text[-500:]!r}")


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def wait_for_quiet(threshold: float, max_wait: float, poll: float = 15) -> dict[str, Any]:
    """Poll the 1-minute load average until it is below threshold (or give up)."""
    started = time.monotonic()
    seen = loadavg()
    while seen[0] >= threshold and time.monotonic() - started < max_wait:
        log(
            f"waiting for a quiet machine: load {seen[0]:.2f} >= {threshold} "
            f"({time.monotonic() - started:.0f} s of {max_wait:.0f} s)"
        )
        time.sleep(poll)
        seen = loadavg()
    quiet = seen[0] < threshold
    if not quiet:
        log(f"load still {seen[0]:.2f} after {max_wait:.0f} s; running anyway")
    return {
        "threshold": threshold,
        "waited_s": round(time.monotonic() - started),
        "reached": quiet,
        "loadavg_at_start": seen,
    }


def busy_cpus(window: float = 3.0) -> float:
    """CPUs busy machine-wide (plus steal) over the next `window` seconds, from /proc/stat."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        user, nice, system, _idle, _iowait, irq, softirq, steal = fields
        return user + nice + system + irq + softirq + steal, os.sysconf("SC_CLK_TCK")

    (before, tick), started = sample(), time.monotonic()
    time.sleep(window)
    after, _ = sample()
    return (after - before) / tick / (time.monotonic() - started)


def wait_until_idle(threshold: float, max_wait: float) -> float:
    """Sleep until the machine is idle (busy CPUs below threshold over 3 s); the last reading."""
    deadline = time.monotonic() + max_wait
    busy = busy_cpus()
    while busy >= threshold and time.monotonic() < deadline:
        busy = busy_cpus()
    return busy


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _cgroup_version() -> str:
    mounts = Path("/proc/self/mountinfo").read_text()
    v1_cpu = any(" - cgroup " in m and ",cpu" in m.split(" - ", 1)[1] for m in mounts.splitlines())
    return "v1" if v1_cpu else "v2"


def machine(image: str) -> dict[str, Any]:
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    os_name = "unknown"
    with_os = Path("/etc/os-release")
    if with_os.exists():
        for line in with_os.read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    return {
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "os": os_name,
        "kernel": platform.release(),
        "docker": docker("version", "-f", "{{.Server.Version}}", check=False) or "unknown",
        "cgroup": _cgroup_version(),
        "image": image,
        "image_id": docker("image", "inspect", "-f", "{{.Id}}", image, check=False)[:19],
    }


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    log(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
