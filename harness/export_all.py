"""Run every export of the model library in one container (runs in the image).

    python export_all.py REPO OUT PLAN_JSON

PLAN_JSON is a list of {"name", "script", "args", "after"} (harness/models.py's
EXPORTS); "{out}" in args is OUT/NAME, "{root}" is OUT. Runs as many scripts
at once as there are CPUs, those marked "after" once the others are done;
exits 1 naming every export that failed, with its output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def run(repo: str, out: str, export: dict[str, object]) -> tuple[str, int, str]:
    name = str(export["name"])
    args = [
        str(a).replace("{out}", f"{out}/{name}").replace("{root}", out)
        for a in export["args"]  # type: ignore[attr-defined]
    ]
    done = subprocess.run(
        [sys.executable, f"{repo}/{export['script']}", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    return name, done.returncode, done.stdout + done.stderr


def main(argv: list[str]) -> int:
    repo, out, raw = argv
    plan = json.loads(raw)
    workers = max(1, min(len(plan), os.cpu_count() or 1))
    results = []
    for later in (False, True):
        with ThreadPoolExecutor(workers) as pool:
            wave = [e for e in plan if bool(e.get("after")) == later]
            results += list(pool.map(lambda e: run(repo, out, e), wave))
    failed = [(name, text) for name, code, text in results if code != 0]
    for name, text in failed:
        print(f"export {name} failed:\n{text}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
