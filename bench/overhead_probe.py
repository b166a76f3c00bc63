"""Start-up costs measured inside one container; runs INSIDE the image.

    python -m bench.overhead_probe [--rounds 200] [--tf-rounds 5]   # in the image, the hook
                                                                     # off, bench/ at /load

Times whole processes (fork, exec, run, exit), interleaved round by round in
a rotating order, so the container start is out of the picture:

* `true` vs `tf-entrypoint true`: what the entrypoint adds before a command;
* `python -c pass` with the import hook's .pth on vs TF_ENTRYPOINT_HOOK=off:
  what the hook adds to every interpreter start;
* `tf-entrypoint explain` and `explain --json`.

Then, in fresh interpreters that have imported TensorFlow with the hook off,
the hook's own work when it fires (load entrypoint/tf_entrypoint/hook.py, find the plan,
call the tf.config setters): with the plan from TF_ENTRYPOINT_PLAN (after the
entrypoint) and computed in-process (docker exec). And `python -X importtime`
of `python -m tf_entrypoint true` and of `python -c pass`, to show where the time
goes. Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from harness.stats import spread

PLAN = (
    '{"version":1,"intra_op_threads":1,"inter_op_threads":1,'
    '"allow_growth":null,"memory_limits_mb":{}}'
)

HOOK_SCRIPT = """
import json, os, sys, time
t0 = time.perf_counter()
import tensorflow as tf
t1 = time.perf_counter()
env = dict(os.environ)
env.pop("TF_ENTRYPOINT_HOOK", None)
if sys.argv[1] == "plan":
    env["TF_ENTRYPOINT_PLAN"] = sys.argv[2]
import _tf_entrypoint_pth
t2 = time.perf_counter()
done = _tf_entrypoint_pth.load_hook().on_tensorflow_imported(tf, environ=env)
t3 = time.perf_counter()
print(json.dumps({"hook_ms": (t3 - t2) * 1e3, "import_tf_ms": (t1 - t0) * 1e3, "done": done}))
"""


def environments() -> tuple[dict[str, str], dict[str, str]]:
    on = dict(os.environ)
    on.pop("TF_ENTRYPOINT_HOOK", None)
    on.pop("TF_ENTRYPOINT_PLAN", None)
    return on, {**on, "TF_ENTRYPOINT_HOOK": "off"}


def variants() -> dict[str, tuple[list[str], dict[str, str]]]:
    on, off = environments()
    return {
        "true": (["true"], on),
        "tf-entrypoint true": (["tf-entrypoint", "true"], on),
        "python -c pass (hook on)": (["python", "-c", "pass"], on),
        "python -c pass (hook off)": (["python", "-c", "pass"], off),
        "tf-entrypoint explain": (["tf-entrypoint", "explain"], on),
        "tf-entrypoint explain --json": (["tf-entrypoint", "explain", "--json"], on),
    }


def spread_ms(values_ns: list[int]) -> dict[str, float]:
    ms = sorted(v / 1e6 for v in values_ns)
    return {**spread(ms), "min": round(ms[0], 3), "n": len(ms)}


def time_processes(rounds: int) -> dict[str, Any]:
    cases = variants()
    names = list(cases)
    samples: dict[str, list[int]] = {name: [] for name in names}
    for rnd in range(rounds):
        shift = rnd % len(names)
        for name in names[shift:] + names[:shift]:
            argv, env = cases[name]
            started = time.perf_counter_ns()
            subprocess.run(
                argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
            )
            samples[name].append(time.perf_counter_ns() - started)

    def paired(a: str, b: str) -> dict[str, float]:
        return spread_ms([x - y for x, y in zip(samples[a], samples[b], strict=True)])

    return {
        "rounds": rounds,
        "variants": {name: spread_ms(values) for name, values in samples.items()},
        "added": {
            "entrypoint (tf-entrypoint true - true)": paired("tf-entrypoint true", "true"),
            "hook .pth (python -c pass, on - off)": paired(
                "python -c pass (hook on)", "python -c pass (hook off)"
            ),
        },
    }


def importtime(argv: list[str], top: int = 10) -> dict[str, Any]:
    """Top-level imports by cumulative time (python -X importtime), in ms."""
    on, _ = environments()
    done = subprocess.run(
        ["python", "-X", "importtime", *argv], env=on, capture_output=True, text=True, check=False
    )
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3 or "cumulative" in line:
            continue
        name = parts[2]
        if name.startswith("   "):  # nested: already in its parent's cumulative time
            continue
        rows.append((int(parts[1]) / 1e3, name.strip()))
    rows.sort(reverse=True)
    return {
        "command": " ".join(["python", "-X", "importtime", *argv]),
        "top_level_total_ms": round(sum(ms for ms, _ in rows), 2),
        "top": [{"module": name, "cumulative_ms": round(ms, 2)} for ms, name in rows[:top]],
    }


def hook_at_tf_import(rounds: int) -> dict[str, Any]:
    _, off = environments()
    out: dict[str, Any] = {}
    for source in ("plan", "computed"):
        hooks, imports, done = [], [], []
        for _ in range(rounds):
            ran = subprocess.run(
                ["python", "-c", HOOK_SCRIPT, source, PLAN],
                env=off,
                capture_output=True,
                text=True,
                check=True,
            )
            result = json.loads(ran.stdout.strip().splitlines()[-1])
            hooks.append(result["hook_ms"])
            imports.append(result["import_tf_ms"])
            done = result["done"]
        out[source] = {
            "hook_ms": round(statistics.median(hooks), 3),
            "hook_ms_max": round(max(hooks), 3),
            "import_tensorflow_ms": round(statistics.median(imports), 1),
            "applied": done,
            "n": rounds,
        }
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--tf-rounds", type=int, default=5)
    args = parser.parse_args(argv)
    for argv_ in (["true"], ["tf-entrypoint", "true"], ["python", "-c", "pass"]):  # warm caches
        subprocess.run(argv_, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    out = {
        "processes": time_processes(args.rounds),
        "importtime": {
            "entrypoint": importtime(["-m", "tf_entrypoint", "true"]),
            "interpreter": importtime(["-c", "pass"]),
        },
        "hook_at_tf_import": hook_at_tf_import(args.tf_rounds),
    }
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
