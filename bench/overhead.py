"""What the entrypoint costs: container start to command start, and inside one container.

Container start: `docker run --rm --network none IMAGE date +%s%N` (through
tini and the entrypoint) against `docker run --rm --network none --entrypoint
tini IMAGE -- date +%s%N` (tini only: the entrypoint bypassed), interleaved.
The host takes the wall clock just before it spawns `docker run`; `date`
prints the wall clock when the command starts; containers share the host's
clock. Then bench/overhead_probe.py times the pieces inside one container.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from bench.common import (
    LABEL,
    LOAD_MOUNTS,
    last_json_line,
    loadavg,
    log,
    now_iso,
    run_container,
)

#: Issue 7's targets, in ms.
TARGET_CONTAINER_ADDED_MS = 50
TARGET_HOOK_ADDED_MS = 5

VARIANTS: dict[str, list[str]] = {
    "entrypoint": [],
    "bypassed": ["--entrypoint", "tini"],
}


def _start_once(image: str, variant: str) -> tuple[float, float]:
    """(ms from `docker run` to the command's start, ms until docker run returned)."""
    command = ["--", "date", "+%s%N"] if variant == "bypassed" else ["date", "+%s%N"]
    argv = [
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        "--label",
        LABEL,
        *VARIANTS[variant],
        image,
        *command,
    ]
    started = time.time_ns()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    ended = time.time_ns()
    command_start = int(done.stdout.strip().splitlines()[-1])
    return (command_start - started) / 1e6, (ended - started) / 1e6


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    n = len(ordered)
    return {
        "median": round(
            ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2, 2
        ),
        "p10": round(ordered[int(0.1 * (n - 1))], 2),
        "p90": round(ordered[int(0.9 * (n - 1) + 0.5)], 2),
        "n": n,
    }


def container_start(image: str, pairs: int) -> dict[str, Any]:
    names = list(VARIANTS)
    start: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(2):  # warm the page cache and docker's image lookups
        for name in names:
            _start_once(image, name)
    for i in range(pairs):
        for name in names if i % 2 == 0 else names[::-1]:
            to_command, to_exit = _start_once(image, name)
            start[name].append(to_command)
            wall[name].append(to_exit)
    added = [a - b for a, b in zip(start["entrypoint"], start["bypassed"], strict=True)]
    return {
        "pairs": pairs,
        "to_command_start_ms": {name: _spread(v) for name, v in start.items()},
        "docker_run_wall_ms": {name: _spread(v) for name, v in wall.items()},
        "added_ms_paired": _spread(added),
    }


def run_overhead(image: str, pairs: int, rounds: int, tf_rounds: int) -> dict[str, Any]:
    began, load_before = now_iso(), loadavg()
    log(f"overhead: {pairs} interleaved container-start pairs")
    starts = container_start(image, pairs)
    log(f"overhead: in-container probe, {rounds} rounds")
    done = run_container(
        [
            "--network",
            "none",
            "--entrypoint",
            "python",
            "-e",
            "TF_ENTRYPOINT_HOOK=off",
            *LOAD_MOUNTS,
        ],
        image,
        ["-m", "bench.overhead_probe", "--rounds", str(rounds), "--tf-rounds", str(tf_rounds)],
        timeout=900,
    )
    probe = last_json_line(done.stdout)
    added = probe["processes"]["added"]
    container_added = starts["added_ms_paired"]["median"]
    hook_added = added["hook .pth (python -c pass, on - off)"]["median"]
    return {
        "started": began,
        "finished": now_iso(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "container_start": starts,
        "in_container": probe,
        "targets": {
            "container_added_ms": {
                "value": container_added,
                "target": TARGET_CONTAINER_ADDED_MS,
                "ok": container_added <= TARGET_CONTAINER_ADDED_MS,
            },
            "hook_added_ms": {
                "value": hook_added,
                "target": TARGET_HOOK_ADDED_MS,
                "ok": hook_added <= TARGET_HOOK_ADDED_MS,
            },
        },
    }
