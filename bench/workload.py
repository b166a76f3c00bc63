"""TensorFlow workloads for the quota sweep; runs INSIDE the image.

    python /bench/workload.py [--seconds 2] [--warmup 0.5] [--workloads infer1,infer64,train]
    python /bench/workload.py --slices [--warmup 0.1]    # windows on demand (bench/sweep.py)
    python /bench/workload.py --export /models/mlp/1

The model is a small Keras MLP (32 -> 512 -> 512 -> 10, ReLU, float32, about
280 k multiply-adds per sample). Each workload is a `tf.function` called from
Python, as a server or a training loop calls it:

* infer1:  batch-1 inference (per-call overhead and scheduling dominate)
* infer64: batch-64 inference (the matrix multiplies dominate)
* train:   one Adam training step on a batch of 64 (forward, backward, update)

Each is warmed up (tracing plus --warmup seconds), then timed call by call for
--seconds. Prints one JSON object on stdout: per workload the calls, samples
per second, p50/p99 latency in ms, the CFS throttling the container saw
while it ran (from cpu.stat), and the CPU it used against what other
processes and the hypervisor (steal) took from its CPUs meanwhile (from
/proc/stat, which shows the whole machine), so the harness can repeat a
disturbed run; plus the thread settings TensorFlow ended up with. Nothing
else is written to stdout.

--slices (what the quota sweep uses) warms every workload up, prints
{"ready": true, "threads": ...}, then runs one timed window per stdin line
({"workload": W, "seconds": S, "warmup": U}) and answers with its raw
latencies, throttling and CPU figures, until EOF.

--export writes the same model, with random but fixed weights, as a
SavedModel in TF Serving's layout (signature serving_default: x float32
[batch, 32] -> y float32 [batch, 10]) for the serving benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (the model library's export): harness/ is
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # beside bench/

from harness.stats import percentile

INPUT, HIDDEN, CLASSES = 32, 512, 10
#: workload -> samples per call
SAMPLES = {"infer1": 1, "infer64": 64, "train": 64}
WORKLOADS = tuple(SAMPLES)


def cpu_stat() -> dict[str, int]:
    """The container's cgroup cpu.stat (v1 or v2) as numbers; {} when unreadable."""
    for path in (
        "/sys/fs/cgroup/cpu/cpu.stat",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.stat",
        "/sys/fs/cgroup/cpu.stat",
    ):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        stat = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                stat[key] = int(value)
        return stat
    return {}


def throttling(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
    periods = after.get("nr_periods", 0) - before.get("nr_periods", 0)
    throttled = after.get("nr_throttled", 0) - before.get("nr_throttled", 0)
    if "throttled_time" in after:  # v1: ns
        ms = (after["throttled_time"] - before.get("throttled_time", 0)) / 1e6
    else:  # v2: us
        ms = (after.get("throttled_usec", 0) - before.get("throttled_usec", 0)) / 1e3
    return {"periods": periods, "throttled_periods": throttled, "throttled_ms": round(ms, 1)}


#: Where a cgroup's CPU time is kept: v1 cpuacct (two mount names), v2.
CGROUP_CPU_DIRS = ("/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup")


def cgroup_cpu_seconds(directory: Path) -> float | None:
    """CPU time used by a cgroup: v1 cpuacct.usage (ns) or v2 cpu.stat usage_usec."""
    try:
        return int((directory / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        pass
    try:
        text = (directory / "cpu.stat").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec" and value.strip().isdigit():
            return int(value) / 1e6
    return None


def own_cpu_seconds() -> float:
    """CPU time this container has used; 0 if unknown."""
    for directory in CGROUP_CPU_DIRS:
        seconds = cgroup_cpu_seconds(Path(directory))
        if seconds is not None:
            return seconds
    return 0.0


def host_cpu_seconds(cpus: set[int]) -> tuple[float, float]:
    """(busy, stolen) CPU seconds since boot on these CPUs, machine-wide (/proc/stat).

    /proc/stat is not namespaced: inside a container it shows the whole
    machine, so busy time minus this container's own CPU time is what other
    processes took from the CPUs this benchmark runs on.
    """
    tick = os.sysconf("SC_CLK_TCK")
    busy = stolen = 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, rest.split()[:8])
        busy += user + nice + system + irq + softirq
        stolen += steal
    return busy / tick, stolen / tick


class Disturbance:
    """How much CPU others (processes outside this container, the hypervisor) took."""

    def __init__(self) -> None:
        self.cpus = set(os.sched_getaffinity(0))
        self.start = (time.perf_counter(), own_cpu_seconds(), *host_cpu_seconds(self.cpus))

    def result(self) -> dict[str, float]:
        wall, own, busy, stolen = (
            time.perf_counter(),
            own_cpu_seconds(),
            *host_cpu_seconds(self.cpus),
        )
        elapsed = wall - self.start[0]
        foreign = (busy - self.start[2]) - (own - self.start[1])
        return {
            "own_cpus": round((own - self.start[1]) / elapsed, 3),
            "foreign_cpus": round(max(0.0, foreign) / elapsed, 3),
            "steal_cpus": round((stolen - self.start[3]) / elapsed, 3),
        }


def build_model(tf: Any) -> Any:
    keras = tf.keras
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((INPUT,), dtype="float32"),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )


def make_steps(tf: Any, model: Any) -> dict[str, tuple[Any, int]]:
    """workload -> (a no-argument callable doing one call, samples per call)."""
    spec = tf.TensorSpec([None, INPUT], tf.float32)
    infer = tf.function(lambda x: model(x, training=False), input_signature=[spec])
    optimizer = tf.keras.optimizers.Adam(1e-3)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def train(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    train_step = tf.function(train, input_signature=[spec, tf.TensorSpec([None], tf.int32)])
    rng = tf.random.Generator.from_seed(1)
    x1 = rng.normal([1, INPUT])
    x64 = rng.normal([64, INPUT])
    y64 = rng.uniform([64], maxval=CLASSES, dtype=tf.int32)
    # .numpy() fetches the result, as a caller that uses it must.
    steps = {
        "infer1": lambda: infer(x1).numpy(),
        "infer64": lambda: infer(x64).numpy(),
        "train": lambda: train_step(x64, y64).numpy(),
    }
    return {name: (step, SAMPLES[name]) for name, step in steps.items()}


def timed_window(step: Any, seconds: float, warmup: float) -> dict[str, Any]:
    """warmup untimed seconds, then each call timed for `seconds` (at least 20 calls)."""
    clock = time.perf_counter
    end = clock() + warmup
    while clock() < end:
        step()
    latencies: list[float] = []
    before = cpu_stat()
    disturbance = Disturbance()
    started = clock()
    end = started + seconds
    now = started
    while now < end or len(latencies) < 20:
        step()
        after_call = clock()
        latencies.append(after_call - now)
        now = after_call
    return {
        "seconds": now - started,
        "latencies": latencies,
        "throttling": throttling(before, cpu_stat()),
        "cpu": disturbance.result(),
    }


def summary(windows: list[dict[str, Any]], samples: int) -> dict[str, Any]:
    """One workload's figures over one or more timed windows."""
    latencies = sorted(x for w in windows for x in w["latencies"])
    elapsed = sum(w["seconds"] for w in windows)
    throttled = {
        key: round(sum(w["throttling"][key] for w in windows), 1)
        for key in ("periods", "throttled_periods", "throttled_ms")
    }
    cpu = {key: max(w["cpu"][key] for w in windows) for key in windows[0]["cpu"]}
    return {
        "calls": len(latencies),
        "seconds": round(elapsed, 3),
        "throughput": round(len(latencies) * samples / elapsed, 2),
        "unit": "samples/s",
        "p50_ms": round(percentile(latencies, 50) * 1e3, 4),
        "p99_ms": round(percentile(latencies, 99) * 1e3, 4),
        "max_ms": round(latencies[-1] * 1e3, 4),
        "windows": len(windows),
        "throttling": throttled,
        "cpu": cpu,
    }


def measure(step: Any, samples: int, seconds: float, warmup: float) -> dict[str, Any]:
    for _ in range(3):  # trace and build
        step()
    return summary([timed_window(step, seconds, warmup)], samples)


def serve_slices(tf: Any, steps: dict[str, tuple[Any, int]], warmup: float) -> None:
    """Slice mode: warm every workload, say ready, then run the windows asked on stdin.

    Each stdin line is {"workload": W, "seconds": S, "warmup": U}; the answer
    (one stdout line) is the window's raw figures, latencies in seconds. EOF
    ends the process. The harness keeps one such process per mode alive and
    gives them windows in turn, so slow drifts of the machine's speed hit
    every mode alike.
    """
    for step, _ in steps.values():
        for _ in range(3):  # trace and build
            step()
        timed_window(step, 0, warmup)
    sys.stdout.write(json.dumps({"ready": True, "threads": thread_facts(tf)}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        ask = json.loads(line)
        step, _ = steps[ask["workload"]]
        window = timed_window(step, float(ask["seconds"]), float(ask["warmup"]))
        window["latencies"] = [round(x, 7) for x in window["latencies"]]
        sys.stdout.write(json.dumps(window) + "\n")
        sys.stdout.flush()


def thread_facts(tf: Any) -> dict[str, Any]:
    names = (
        "TF_NUM_INTRAOP_THREADS",
        "TF_NUM_INTEROP_THREADS",
        "OMP_NUM_THREADS",
        "TF_ENTRYPOINT_PLAN",
        "TF_ENTRYPOINT_HOOK",
        "TF_ENTRYPOINT_CPU_ROUNDING",
    )
    return {
        "env": {name: os.environ[name] for name in names if name in os.environ},
        "getters": {
            "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
        },
        "os_threads": len(os.listdir("/proc/self/task")),
        "affinity": len(os.sched_getaffinity(0)),
    }


def export(tf: Any, target: Path) -> None:
    model = build_model(tf)
    serve = tf.function(
        lambda x: {"y": model(x, training=False)},
        input_signature=[tf.TensorSpec([None, INPUT], tf.float32, name="x")],
    )
    module = tf.Module()
    module.model = model  # tracks the weights
    module.serve = serve
    tf.saved_model.save(module, str(target), signatures={"serving_default": serve})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per workload")
    parser.add_argument("--warmup", type=float, default=0.5, help="untimed seconds per workload")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--export", type=Path, help="write the model as a SavedModel here")
    parser.add_argument(
        "--slices", action="store_true", help="slice mode: take timed windows from stdin"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    import tensorflow as tf  # noqa: PLC0415 - after the arguments are good

    import_s = time.perf_counter() - started
    if args.export:
        export(tf, args.export)
        return 0
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(chosen) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workloads: {', '.join(unknown)}")
    steps = make_steps(tf, build_model(tf))
    if args.slices:
        serve_slices(tf, steps, args.warmup)
        return 0
    results = {name: measure(*steps[name], args.seconds, args.warmup) for name in chosen}
    out = {"import_s": round(import_s, 3), "threads": thread_facts(tf), "workloads": results}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
