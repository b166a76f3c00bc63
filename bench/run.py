"""Run the benchmarks of issue 7 and regenerate docs/bench/ (JSON, Markdown, PNG).

    python -m bench.run                      # everything, about an hour on 2 cores
    python -m bench.run --parts overhead     # one part; the others' JSON is kept
    python -m bench.run --quick --out DIR    # a smoke of the harness (a minute or two)

Parts:

* sweep: bench/workload.py (batch-1 and batch-64 inference of a small Keras
  MLP, and a training-step loop) under no limit, --cpus 0.5/1/1.5/2 and
  --cpuset-cpus=0, with TensorFlow's defaults, the automatic plan and manual
  intra/inter settings (bench/sweep.py);
* overhead: container start with and without the entrypoint, the hook's and
  explain's cost (bench/overhead.py, bench/overhead_probe.py);
* serving: tf-entrypoint serve under --cpus 1, automatic plan vs TensorFlow's
  defaults, at several concurrencies (bench/serving.py);
* swap: a new model version renamed into place while the server is under
  load: requests per second, p50/p99 and errors before, during and after
  the swap, and how long it took (bench/swap.py);
* grpc: one server under --cpus 1 answering the same predict over gRPC (8500)
  and REST (8501) at once, one load client for both protocols, the modes
  taking turns cell by cell: requests per second, p50/p99, server CPU per
  request (bench/grpc_rest.py, bench/protocol_load.py).
* batching: server-side batching on vs off, batch-1 predicts of the MLP and
  half_plus_two from 1 to 128 connections under --cpus 1 and 2, against the
  model's in-process throughput and a bare endpoint (bench/batching.py).

Before measuring (not with --quick) it waits until the 1-minute load average
is below --quiet-load (up to --max-wait seconds, then runs anyway) and
records the load average before and after each part. Writes
OUT/{sweep,overhead,serving,swap,grpc}.json, then OUT/results.md and the plots
(bench/report.py). Needs Docker, the image (`make image-cpu`), and for the
plots matplotlib (requirements/bench.lock); serving uses wrk when installed.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import batching, grpc_rest, overhead, report, serving, swap, sweep
from bench.common import NAMES, REPO, docker, log, machine, wait_for_quiet, write_json

PARTS = ("sweep", "overhead", "serving", "swap", "grpc", "batching")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2],
    )
    add = parser.add_argument
    add("--image", default="tf-entrypoint:cpu")
    add("--out", type=Path, default=REPO / "docs" / "bench", help="default: docs/bench")
    add("--parts", default=",".join(PARTS), help="comma-separated subset of " + ",".join(PARTS))
    add("--quick", action="store_true", help="one tiny cell per mode: a smoke of the harness")
    add("--reps", type=int, default=6, help="sweep repetitions (fresh containers each)")
    add("--rounds", type=int, default=3, help="sweep windows per workload and repetition")
    add("--window", type=float, default=0.5, help="timed seconds per sweep window")
    add(
        "--limits",
        default=",".join(sweep.LIMITS),
        help="sweep limits, of: " + ",".join(sweep.LIMITS),
    )
    add("--pairs", type=int, default=40, help="container-start pairs (overhead)")
    add("--probe-rounds", type=int, default=200, help="in-container rounds (overhead)")
    add(
        "--client", default="auto", choices=["auto", "wrk", "python"], help="serving load generator"
    )
    add("--serving-reps", type=int, default=5, help="serving repetitions")
    add("--serving-seconds", type=float, default=3.0, help="seconds per serving run")
    add("--swap-reps", type=int, default=5, help="version swaps (a fresh server each)")
    add("--grpc-reps", type=int, default=3, help="gRPC vs REST repetitions")
    add("--grpc-seconds", type=float, default=5.0, help="timed seconds per gRPC/REST window")
    add("--quiet-load", type=float, default=0.6, help="wait for a 1-min load average below this")
    add("--max-wait", type=float, default=2400, help="seconds to wait for it (0: do not wait)")
    add("--no-plot", action="store_true", help="skip the PNGs (no matplotlib needed)")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    limits = [x.strip() for x in args.limits.split(",") if x.strip()]
    if set(parts) - set(PARTS) or set(limits) - set(sweep.LIMITS) or not parts:
        parser.error(f"--parts from {','.join(PARTS)}; --limits from {','.join(sweep.LIMITS)}")
    args.parts, args.limits = parts, limits
    return args


def configs(args: argparse.Namespace, image: str) -> dict[str, Callable[[], dict[str, Any]]]:
    if args.quick:
        sweep_config = sweep.SweepConfig(
            limits=("cpus=1",),
            manual=((1, 1),),
            reps=1,
            rounds=2,
            seconds=0.1,
            warmup=0.05,
            retries=0,
        )
        serving_config = serving.ServingConfig(
            concurrencies=(2,),
            seconds=1,
            warmup=1,
            reps=1,
            models=("half_plus_two",),
            client=args.client,
        )
        swap_config = swap.SwapConfig(concurrency=2, baseline=1, after=1, reps=1)
        grpc_config = grpc_rest.GrpcConfig(
            concurrencies=(1, 2), seconds=0.5, warmup=0.3, reps=1, models=("half_plus_two",)
        )
        batching_config = batching.BatchingConfig(
            cpus=("1",), concurrencies=(2,), seconds=1, warmup=1, models=("half_plus_two",),
            client=args.client,
        )  # fmt: skip
        pairs, rounds, tf_rounds = 2, 3, 1
    else:
        sweep_config = sweep.SweepConfig(
            limits=tuple(args.limits), reps=args.reps, rounds=args.rounds, seconds=args.window
        )
        serving_config = serving.ServingConfig(
            reps=args.serving_reps, seconds=args.serving_seconds, client=args.client
        )
        swap_config = swap.SwapConfig(reps=args.swap_reps)
        grpc_config = grpc_rest.GrpcConfig(reps=args.grpc_reps, seconds=args.grpc_seconds)
        batching_config = batching.BatchingConfig(client=args.client)
        pairs, rounds, tf_rounds = args.pairs, args.probe_rounds, 5
    return {
        "sweep": lambda: sweep.run_sweep(image, sweep_config),
        "overhead": lambda: overhead.run_overhead(image, pairs, rounds, tf_rounds),
        "serving": lambda: serving.run_serving(image, serving_config),
        "swap": lambda: swap.run_swap(image, swap_config),
        "grpc": lambda: grpc_rest.run_grpc(image, grpc_config),
        "batching": lambda: batching.run_batching(image, batching_config),
    }


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # runs the cleanup in main's finally


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)  # even when started in the background
    quiet = None
    if not args.quick and args.max_wait > 0:
        quiet = wait_for_quiet(args.quiet_load, args.max_wait)
    facts = machine(args.image)
    # Every container runs this exact image even if the tag moves during the
    # run (a test session rebuilding it): a private tag keeps it from being
    # pruned as dangling meanwhile.
    pinned = f"tf-entrypoint-bench:{os.getpid()}"
    docker("tag", docker("image", "inspect", "-f", "{{.Id}}", args.image), pinned)
    runners = configs(args, pinned)
    failed = []
    started = time.monotonic()
    try:
        for part in args.parts:
            log(f"{part}: starting ({time.monotonic() - started:.0f} s in)")
            try:
                data = runners[part]()
            except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as err:
                log(f"{part}: FAILED: {err}")
                failed.append(part)
                continue
            data = {"machine": facts, "quiet": quiet, "quick": args.quick, **data}
            write_json(args.out / f"{part}.json", data)
    finally:
        NAMES.remove_all()
        docker("rmi", pinned, check=False)
    log(f"done in {time.monotonic() - started:.0f} s")
    report.render(args.out, plots=not args.no_plot)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
