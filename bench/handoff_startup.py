"""The hand-off's cost on this machine: `tf-entrypoint true` against `python -c pass`.

    python -m bench run startup    # StartupConfig.trees: other checkouts of this repository

`tf-entrypoint true` runs as its console script does (import tf_entrypoint.cli,
call main). The commands run interleaved (so all see the same machine),
ROUNDS times each, with a clean environment and TF_ENTRYPOINT_QUIET=1; it
records each median and the entrypoint's work before the exec (its median
minus the baseline's), also as a ratio to `python -c pass`. The README's
"Start-up" numbers come from here.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import REPO, log
from harness.stats import median

ROUNDS = 60
#: What pip's console-script wrapper for `tf-entrypoint true` runs.
_CONSOLE_SCRIPT = "import sys; from tf_entrypoint.cli import main; sys.exit(main(['true']))"


def _once(argv: list[str], cwd: Path) -> float:
    env = {"PATH": "/usr/bin:/bin", "TF_ENTRYPOINT_QUIET": "1"}
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


@dataclass(frozen=True)
class StartupConfig:
    rounds: int = ROUNDS
    trees: tuple[str, ...] = ()  # checkouts of this repository (default: this one)


def run(config: StartupConfig) -> dict[str, Any]:
    roots = [Path(tree).resolve() for tree in config.trees] or [REPO]
    commands = {"python -c pass": ([sys.executable, "-c", "pass"], roots[0])}
    for root in roots:
        argv = [sys.executable, "-c", _CONSOLE_SCRIPT]
        # The package is entrypoint/tf_entrypoint/; older checkouts had a
        # tf_entrypoint symlink at the root instead.
        package_parent = root / "entrypoint"
        cwd = package_parent if (package_parent / "tf_entrypoint").is_dir() else root
        commands[f"{root}: tf-entrypoint true"] = (argv, cwd)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(config.rounds):
        for name, (argv, cwd) in commands.items():
            times[name].append(_once(argv, cwd))
    base = median(times["python -c pass"])
    found = {}
    for name, values in times.items():
        middle = median(values)
        work = middle - base
        found[name] = {
            "median_ms": round(middle * 1000, 2),
            "work_ms": round(work * 1000, 2),
            "work_vs_python": round(work / base, 3),
        }
        log(f"{middle * 1000:7.1f} ms  work {work * 1000:6.1f} ms = {work / base:4.2f}x  {name}")
    return {"rounds": config.rounds, "commands": found}
