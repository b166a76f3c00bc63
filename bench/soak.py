"""The soak benchmark: what production throws at the server, all at once, for ten minutes.

    python -m bench run soak                # 10 minutes (SoakConfig); docs/bench/soak.json
    python -m bench run soak --quick        # 15 s with small bodies: a smoke

One server (`tf-entrypoint serve`, the image's default command) under
`--cpus 1` and a memory limit serves, from TF Serving's model config file
(re-read every second):

* plus (y = x + V) and cr (classify, regress, predict 2x + V), whose
  answers name the version V that served them (bench/soak_models.py);
* slow, whose predict runs as long as the request asks (the deadline class);
* extra, added to and removed from the config file in turn.

A second container of the image in the server's network namespace
(bench/soak_load.py) runs, for --duration seconds: steady REST and gRPC load
on plus and cr, every answer checked; a new version renamed in every
--swap-every seconds (old ones deleted; some arrive unreadable); a version
directory that turns root-owned 0700 and back; config file flips and
HandleReloadConfigRequest (with short deadlines too, and names no URL can
reach); every class of hostile request of issue 21, each with the answer the
README documents; a /healthz prober every 100 ms. The host samples the
server container's memory (cgroup rss, and the server process's peak RSS)
every second, and its CPU. At the end the client waits for the newest
versions to serve, then the server gets SIGTERM with calls in flight that
outlast --grace-period: it must exit within the grace period.

The runner writes OUT/soak.json and re-renders OUT/results.md. A
benchmark, not a test: nothing is asserted; the figures are reported
(failed good requests, hostile requests answered otherwise than documented,
reloads not applied, versions never served, RSS growth, the longest /healthz
answer, the shutdown). Needs Docker and the image (`make image-cpu`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import (
    NAMES,
    detached_server,
    docker,
    library,
    loadavg,
    log,
    now_iso,
)
from bench.grpc_rest import LoadClient, cpu_seconds, model_config
from bench.serving import cgroup_dirs, cgroup_stat, wait_ready
from bench.soak_load import HOSTILE

CLASSES = tuple(name for name, _ in HOSTILE)
#: What the server logs when its control thread takes a HandleReloadConfigRequest's config.
RELOAD_TAKEN = "model configuration received:"
#: The image's user (Dockerfile.cpu APP_UID), which must not read a locked-out version.
SERVER_UID = 10001


@dataclass(frozen=True)
class SoakConfig:
    duration: float = 600  # seconds of load (at least 10)
    cpus: str = "1"  # the server's --cpus
    memory: str = "4g"  # the server's memory limit
    max_body_bytes: int = 8 << 20  # the server's --max-body-bytes
    grace_period: float = 8  # the server's --grace-period
    batching: bool = True  # serve with --enable_batching
    rest_callers: int = 2  # REST closed loops per model
    grpc_callers: int = 2  # gRPC closed loops per model
    swap_every: float = 5  # seconds between new versions (0: none)
    reload_every: float = 10  # seconds between reload rounds (0: none)
    unreadable_every: float = 30  # seconds between lock-outs (0: none)
    unreadable_for: float = 6  # seconds a version stays unreadable
    hostile_every: float = 3  # seconds between requests of a class
    bomb_every: float = 20  # seconds between context/shape bombs
    large_every: float = 60  # seconds between bursts of large bodies
    large_burst: int = 6  # large bodies sent at once
    deadline_every: float = 15  # seconds between deadline pairs
    deadline: float = 0.25  # their gRPC deadline (they run 4x longer)
    poison_every: float = 45  # seconds between int64-overflow versions
    classes: tuple[str, ...] = CLASSES  # the hostile classes sent
    server_log: str | None = None  # also write the server's whole log here

    def __post_init__(self) -> None:
        if set(self.classes) - set(CLASSES):
            raise ValueError(f"classes: from {','.join(CLASSES)}")
        if min(self.swap_every, self.reload_every, self.unreadable_every) < 0:
            raise ValueError("swap_every, reload_every, unreadable_every: 0 (off) or more")
        if self.duration < 10:
            raise ValueError("duration: at least 10 seconds")


def settings(args: SoakConfig, versions: int) -> dict[str, Any]:
    """What bench/soak_load.py reads."""
    return {
        "seconds": args.duration,
        "rest_callers": args.rest_callers,
        "grpc_callers": args.grpc_callers,
        "versions": versions,
        "swap_every": args.swap_every,
        "keep_versions": 3,
        "reload_every": args.reload_every,
        "config_poll": 1.0,
        "unreadable_every": args.unreadable_every,
        "unreadable_for": args.unreadable_for,
        "hostile_every": args.hostile_every,
        "bomb_every": args.bomb_every,
        "large_every": args.large_every,
        "large_burst": args.large_burst,
        "deadline_every": args.deadline_every,
        "deadline_s": args.deadline,
        "poison_every": args.poison_every,
        "max_body_bytes": args.max_body_bytes,
        "grace_period": args.grace_period,
        "classes": list(args.classes),
    }


# --- the models and the server --------------------------------------------------


def prepare(image: str, work: Path, versions: int) -> None:
    """The versions of bench/soak_models.py, from the harness model library (its "soak"
    folder); plus/1 and cr/1 in place, the config."""
    found = library(image)
    have = len(list(found.path("soak", "staging", "plus").iterdir()))
    if versions > have:
        raise RuntimeError(
            f"the soak needs {versions} versions a model; the model library has {have}: "
            "raise --versions of the soak's Export in harness/models.py"
        )
    for folder in ("staging", "models", "poison"):
        found.copy(f"soak/{folder}", work / folder)
    for model in ("plus", "cr"):
        (work / "models" / model).mkdir(parents=True)
        (work / "staging" / model / "1").rename(work / "models" / model / "1")
    (work / "config").mkdir()
    (work / "config" / "models.config").write_text(model_config(("plus", "cr", "slow")))
    for path in (work / "models", work / "config"):  # readable by the image's user
        path.chmod(0o755)


def start_server(image: str, work: Path, args: SoakConfig) -> tuple[str, str]:
    run = [
        "--memory",
        args.memory,
        "--memory-swap",
        args.memory,
        "-v",
        f"{work / 'models'}:/models:ro",
        "-v",
        f"{work / 'config'}:/config:ro",
        image,
        "--model_config_file=/config/models.config",
        "--model_config_file_poll_wait_seconds=1",
        f"--max-body-bytes={args.max_body_bytes}",
        f"--grace-period={args.grace_period:g}",
    ]
    if args.batching:
        run.append("--enable_batching")
    return detached_server(args.cpus, *run)


# --- what the host watches --------------------------------------------------------


class Sampler(threading.Thread):
    """Every second: the server container's memory, its state; stops the client if it died."""

    def __init__(self, server: str, client: LoadClient) -> None:
        super().__init__(daemon=True)
        self.server, self.client = server, client
        self.full = docker("inspect", "-f", "{{.Id}}", server)
        self.memory = next(
            (d for d in cgroup_dirs(self.full, "memory") if (d / "memory.stat").exists()), None
        )
        self.started = time.monotonic()
        #: (seconds in, server process VmRSS MiB, cgroup anonymous MiB)
        self.samples: list[tuple[float, float, float]] = []
        self.peak_process_rss = 0.0
        self.died_at: float | None = None
        self.done = threading.Event()

    def anon_mib(self) -> float | None:
        """The container's anonymous memory (cgroup v1 total_rss, v2 anon), MiB."""
        if self.memory is None:
            return None
        try:
            text = (self.memory / "memory.stat").read_text()
        except OSError:
            return None
        stat = dict(line.split() for line in text.splitlines())
        value = stat.get("total_rss", stat.get("anon"))
        return int(value) / 2**20 if value is not None else None

    def process_rss(self) -> tuple[float, float]:
        """The server process's VmRSS and VmHWM (peak), MiB: the container's largest process."""
        if self.memory is None:
            return 0.0, 0.0
        try:
            pids = (self.memory / "cgroup.procs").read_text().split()
        except OSError:
            return 0.0, 0.0
        best = (0.0, 0.0)
        for pid in pids:
            fields = {}
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    key, _, value = line.partition(":")
                    if key in ("VmRSS", "VmHWM"):
                        fields[key] = int(value.split()[0]) / 1024
            except (OSError, ValueError):
                continue
            best = max(best, (fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0)))
        return best

    def run(self) -> None:
        while not self.done.wait(1.0):
            rss, peak = self.process_rss()
            anon = self.anon_mib()
            if rss:
                at = round(time.monotonic() - self.started, 1)
                self.samples.append((at, round(rss, 1), round(anon or 0.0, 1)))
            self.peak_process_rss = max(self.peak_process_rss, peak)
            running = docker("inspect", "-f", "{{.State.Running}}", self.server, check=False)
            if running != "true" and self.died_at is None:
                self.died_at = time.monotonic() - self.started
                log(f"soak: the server is not running any more ({self.died_at:.0f} s in)")
                with contextlib.suppress(OSError):
                    self.client.send({"stop": "server exited"})

    def summary(self) -> dict[str, Any]:
        """Largest RSS, and whether it grew: late against early, after the warm-up."""
        samples = self.samples
        if not samples:
            return {"samples": 0, "max_mib": 0.0, "grew": False, "growth_mib": 0.0}
        rss = [r for _, r, _ in samples]
        n = len(rss)

        def median_of(part: list[float]) -> float:
            ordered = sorted(part) or [0.0]
            return ordered[len(ordered) // 2]

        early = median_of(rss[n // 5 : (2 * n) // 5])  # 20-40 % of the run
        late = median_of(rss[(4 * n) // 5 :])  # the last 20 %
        growth = late - early
        return {
            "what": "VmRSS of the server process (the container's largest), sampled every second",
            "samples": n,
            "first_mib": rss[0],
            "max_mib": max(rss),
            "max_at_s": samples[rss.index(max(rss))][0],
            "peak_mib": round(self.peak_process_rss, 1),
            "cgroup_anon_max_mib": max(a for _, _, a in samples),
            "early_median_mib": early,
            "late_median_mib": late,
            "growth_mib": round(growth, 1),
            "grew": growth > max(20.0, 0.05 * early),
            "grew_rule": "median of the last 20 % of samples exceeds the median of 20-40 % "
            "by more than 5 % (and 20 MiB)",
            "series": [list(x) for x in samples[:: max(1, n // 120)]],
        }


def read_line(client: LoadClient, seconds: float) -> dict[str, Any]:
    """The client's next line; kills it if none comes within `seconds`."""
    got: dict[str, Any] = {}
    failure: list[BaseException] = []

    def reader() -> None:
        try:
            got.update(client.read(timeout=60))
        except (RuntimeError, ValueError) as err:
            failure.append(err)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        NAMES.remove(client.name)
        thread.join(60)
        raise RuntimeError(f"the load client said nothing for {seconds:.0f} s")
    if failure:
        raise RuntimeError(str(failure[0]))
    return got


def stop_server(server: str, client: LoadClient, grace: float) -> dict[str, Any]:
    """SIGTERM with slow calls in flight; how long the server took to exit, and how."""
    client.send({"shutdown": True})
    read_line(client, 120)  # {"sigterm": true}: the calls are in flight
    sent = time.monotonic()
    docker("kill", "-s", "TERM", server)
    running = "true"
    while running == "true" and time.monotonic() - sent < grace + 30:
        time.sleep(0.1)
        running = docker("inspect", "-f", "{{.State.Running}}", server, check=False)
    seconds = round(time.monotonic() - sent, 2)
    killed = running == "true"
    if killed:
        docker("kill", server, check=False)
    state = docker("inspect", "-f", "{{.State.ExitCode}} {{.State.OOMKilled}}", server, check=False)
    code, _, oom = state.partition(" ")
    exited = {
        "seconds": seconds,
        "grace_period_s": grace,
        # The server's promise (docs/robustness.md): the grace period and a 1 s margin.
        "within_grace": not killed and seconds <= grace + 1,
        "killed_after_grace_plus_30_s": killed,
        "exit_code": int(code) if code.lstrip("-").isdigit() else None,
        "oom_killed": oom == "true",
    }
    client.send({"exited": exited})
    calls = read_line(client, 120).get("shutdown", {})
    return {**exited, "in_flight_calls": calls.get("in_flight_calls", {})}


def server_log(server: str, keep: Path | None) -> dict[str, Any]:
    """What the server's log says went wrong: tracebacks (by their last line), dead threads."""
    done = subprocess.run(
        ["docker", "logs", server], capture_output=True, text=True, timeout=120, check=False
    )
    text = done.stdout + done.stderr
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text(text)
        log(f"wrote {keep}")
    lines = text.splitlines()
    kinds: Counter[str] = Counter()
    where: dict[str, str] = {}
    for start, line in enumerate(lines):
        if not line.startswith("Traceback"):
            continue
        end = start + 1
        while end < len(lines) and lines[end].startswith((" ", "\t")):
            end += 1
        last = lines[end][:200] if end < len(lines) else "?"
        kinds[last] += 1
        frames = [x.strip() for x in lines[start:end] if x.strip().startswith("File ")]
        where.setdefault(last, frames[-1][:200] if frames else "")
    return {
        "lines": len(lines),
        # HandleReloadConfigRequest configurations the control thread took (core/manager.py logs
        # each one): the reloads received but never applied are the difference.
        "grpc_reloads_taken": sum(1 for line in lines if RELOAD_TAKEN in line),
        "tracebacks": sum(kinds.values()),
        "thread_exceptions": [
            line[:200] for line in lines if line.startswith("Exception in thread")
        ],
        "errors": sum(1 for line in lines if " ERROR " in line),
        "exceptions": [
            {"count": n, "exception": last, "raised_at": where[last]}
            for last, n in kinds.most_common(10)
        ],
    }


# --- the run ---------------------------------------------------------------------


def run_soak(args: SoakConfig, image: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="tfe-bench-soak-"))
    began, load_before = now_iso(), loadavg()
    # Per model: the swapper's versions and the reloader's (one a round), alternating models.
    versions = 4 + sum(
        int(args.duration / every / 2) for every in (args.swap_every, args.reload_every) if every
    )
    try:
        log(f"soak: exporting {versions} versions of plus and cr, slow, extra and poison")
        prepare(image, work, versions)
        server, url = start_server(image, work, args)
        wait_ready(server, url)
        cpu_before, throttle_before = cpu_seconds(server), cgroup_stat(server)
        client = LoadClient(
            image,
            server,
            "bench.soak_load",
            [json.dumps(settings(args, versions))],
            docker_args=["--user", "0:0", "-v", f"{work}:/work"],
        )
        try:
            if not all(client.ready["checks"].values()):
                raise RuntimeError(f"a good path answers wrongly: {client.ready['checks']}")
            sampler = Sampler(server, client)
            sampler.start()
            log(f"soak: running for {args.duration:g} s")
            client.send({"run": True})
            results = read_line(client, args.duration + 600)["results"]
            sampler.done.set()
            sampler.join()
            cpu_after, throttle_after = cpu_seconds(server), cgroup_stat(server)
            shutdown: dict[str, Any] = {"skipped": "the server had exited"}
            if sampler.died_at is None:
                shutdown = stop_server(server, client, args.grace_period)
        finally:
            client.close()
        state = docker("inspect", "-f", "{{.State.ExitCode}} {{.State.OOMKilled}}", server)
        logs = server_log(server, Path(args.server_log) if args.server_log else None)
        NAMES.remove(server)
    finally:
        subprocess.run(  # the client made files as root; the harness may not be root
            [
                "docker",
                "run",
                "--rm",
                "--user",
                "0:0",
                "-v",
                f"{work}:/work",
                "--entrypoint",
                "rm",
                image,
                "-rf",
                "/work/models",
                "/work/staging",
                "/work/poison",
                "/work/config",
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
        shutil.rmtree(work, ignore_errors=True)
    memory = sampler.summary()
    cpu = None if cpu_before is None or cpu_after is None else round(cpu_after - cpu_before, 1)
    code, _, oom = state.partition(" ")
    facts = {
        "died_during_run_at_s": sampler.died_at,
        "exit_code": int(code) if code.lstrip("-").isdigit() else None,
        "oom_killed": oom == "true",
        "cpu_s": cpu,
        "throttled_periods": throttle_after.get("nr_throttled", 0)
        - throttle_before.get("nr_throttled", 0),
        "log": logs,
    }
    return {
        "started": began,
        "finished": now_iso(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "config": {
            **settings(args, versions),
            "cpus": args.cpus,
            "memory": args.memory,
            "batching": args.batching,
            "server_uid": SERVER_UID,
        },
        "summary": summarise(results, memory, shutdown, facts),
        "client": results,
        "memory": memory,
        "server": facts,
        "shutdown": shutdown,
    }


def summarise(
    results: dict[str, Any],
    memory: dict[str, Any],
    shutdown: dict[str, Any],
    server: dict[str, Any],
) -> dict[str, Any]:
    """The figures issue 21 asks for, each a number (or a yes/no)."""
    good, hostile, swaps, reloads = (
        results["good"],
        results["hostile"],
        results["swaps"],
        results["reloads"],
    )
    final = swaps["final"]
    return {
        "seconds": results["ran_s"],
        "requests_answered": good["answered"] + hostile["sent"],
        "good_requests": good["answered"],
        "good_failed": good["failed"],
        "versions_swapped": swaps["versions_swapped"],
        "versions_renamed_in": swaps["renamed_in"],
        "versions_never_answered": len(swaps["never_answered"]),
        "newest_versions_served_at_end": bool(final) and all(m["served"] for m in final.values()),
        "reloads_applied": reloads["applied"],
        "file_flips_not_applied": reloads["file_flips_not_applied"],
        "grpc_reloads_received": reloads["grpc_received"],
        "grpc_reloads_dropped": max(
            0, reloads["grpc_received"] - server["log"]["grpc_reloads_taken"]
        ),
        "unreadable_episodes": results["unreadable"]["episodes"],
        "hostile_sent": hostile["sent"],
        "hostile_refused_as_documented": hostile["as_documented"],
        "hostile_unexpected": hostile["unexpected"],
        "rss_max_mib": memory["max_mib"],
        "rss_growth_mib": memory["growth_mib"],
        "rss_grew": memory["grew"],
        "rss_peak_mib": memory.get("peak_mib", 0.0),
        "healthz_max_ms": results["healthz"].get("max_ms", 0.0),
        "healthz_failed": results["healthz"].get("failed", 0),
        "server_died": server["died_during_run_at_s"] is not None,
        "server_tracebacks": server["log"]["tracebacks"],
        "shutdown_s": shutdown.get("seconds", 0.0),
        "shutdown_within_grace": bool(shutdown.get("within_grace", False)),
    }
