"""Issue 33's record that no test was lost when the suite was reorganised.

    .venv/bin/python tests/ids/check.py collect   # write tests/ids/after.txt
    .venv/bin/python tests/ids/check.py           # check before -> after

before.txt: every test id CI ran before (pytest --collect-only -q at 6f5c39d);
after.txt: the same now; moved.txt: `OLD_ID -> NEW_ID [  # why | (why)]` for
every id of before.txt that is not in after.txt, naming the test that now
covers it.
The check fails when an id of before.txt is neither in after.txt nor mapped
to an id that is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def ids(name: str) -> set[str]:
    return {line.strip() for line in (HERE / name).read_text().splitlines() if "::" in line}


def collect() -> int:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    found = sorted({line for line in done.stdout.splitlines() if "::" in line})
    (HERE / "after.txt").write_text("\n".join(found) + "\n")
    print(f"{len(found)} ids in tests/ids/after.txt")
    return 0 if found else 1


def check() -> int:
    before, after = ids("before.txt"), ids("after.txt")
    moved: dict[str, str] = {}
    for line in (HERE / "moved.txt").read_text().splitlines():
        if " -> " in line:
            old, new = line.split(" -> ", 1)
            # The new id, then an optional note: "  # why" or " (why)".
            cuts = (new, new.split("  #", 1)[0], new.split(" (", 1)[0])
            found = [c.strip() for c in cuts if c.strip() in after]
            moved[old.strip()] = found[0] if found else cuts[-1].strip()
    lost = sorted(i for i in before - after if moved.get(i) not in after)
    for old in lost:
        print(
            f"lost: {old}" + (f" (mapped to {moved[old]}, not collected)" if old in moved else "")
        )
    print(
        f"before {len(before)}, after {len(after)}, moved {len(before - after)}, lost {len(lost)}"
    )
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(collect() if sys.argv[1:] == ["collect"] else check())
