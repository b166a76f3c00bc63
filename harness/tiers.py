"""`make test`: the tiers in order, failing fast, each timed.

1. check: `make check` (lint, the unit tests, the offline deploy checks; no
   Docker). The images build meanwhile in the background (`make images`):
   they need the network and the disk more than the CPUs, and a cold build
   takes minutes. A failed check stops everything at once, the builds too.
2. images: waiting for `make images` to finish (both flavors, built at once).
3. containers: the tests that run the images (`pytest -m container`), in
   parallel with pytest-xdist, each module whole on one worker (its servers
   and fixtures are module- or session-scoped); TF_ENTRYPOINT_IMAGES_BUILT=1
   tells them the images are built.

Each tier's wall time goes to stdout at the end and to build/tiers.txt, which
.ci/run prints after its own steps. Environment: TEST_WORKERS (xdist workers
for the container tier, default 4: its tests mostly wait on containers),
PYTEST_ARGS (more pytest arguments for both pytest tiers).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMES = REPO / "build" / "tiers.txt"


def record(name: str, seconds: float, outcome: str) -> None:
    line = f"{name:<11} {seconds:7.0f} s  {outcome}"
    TIMES.parent.mkdir(parents=True, exist_ok=True)
    with TIMES.open("a") as out:
        out.write(line + "\n")


def run(name: str, argv: list[str], env: dict[str, str] | None = None) -> bool:
    print(f"[tiers] {name}: {shlex.join(argv)}", flush=True)
    started = time.monotonic()
    code = subprocess.run(argv, cwd=REPO, env=env, check=False).returncode
    record(name, time.monotonic() - started, "passed" if code == 0 else f"FAILED (exit {code})")
    return code == 0


def main() -> int:
    TIMES.parent.mkdir(parents=True, exist_ok=True)
    TIMES.write_text("")
    make = os.environ.get("MAKE", "make")
    extra = shlex.split(os.environ.get("PYTEST_ARGS", ""))
    workers = os.environ.get("TEST_WORKERS", "4")
    started = time.monotonic()

    images_started = time.monotonic()
    images = subprocess.Popen(  # its own process group: a failed check stops it whole
        [make, "--no-print-directory", "images"], cwd=REPO, start_new_session=True
    )
    ok = run("check", [make, "--no-print-directory", "check"])
    if not ok:
        os.killpg(images.pid, signal.SIGTERM)
        images.wait()
        record("images", time.monotonic() - images_started, "stopped")
    else:
        code = images.wait()
        ok = code == 0
        record(
            "images", time.monotonic() - images_started, "built" if ok else f"FAILED (exit {code})"
        )
    if ok:
        env = {**os.environ, "TF_ENTRYPOINT_IMAGES_BUILT": "1"}
        pytest = [str(REPO / ".venv" / "bin" / "pytest"), "-m", "container"]
        ok = run("containers", [*pytest, "-n", workers, "--dist", "loadfile", *extra], env)
    record("make test", time.monotonic() - started, "passed" if ok else "FAILED")
    print("\n[tiers] wall time of each tier (build/tiers.txt):")
    print(TIMES.read_text(), end="", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
