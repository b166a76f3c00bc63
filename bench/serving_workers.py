"""How many inference workers for a CPU budget? Throughput and tail latency.

    .venv/bin/python bench/serving_workers.py [--image tf-entrypoint:cpu] [--requests 1500]

For each CPU limit (docker --cpus) and worker count (SERVE_WORKERS), starts
the model server on the demo model, sends a bounded number of predicts to
127.0.0.1 at a fixed concurrency, and prints req/s, p50 and p99. Everything
it starts is removed at the end. The client runs on the same host, so keep
the CPU limits below the host's core count for numbers that mean something.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx2

REPO = Path(__file__).resolve().parents[1]
LABEL = "tf-entrypoint.test=1"


def docker(*args: str) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def wait_ready(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx2.get(f"{url}/readyz", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{url} not ready")


async def load(url: str, requests: int, concurrency: int, batch: int) -> tuple[float, list[float]]:
    body = {"instances": [float(i) for i in range(batch)]}
    latencies: list[float] = []
    limits = httpx2.Limits(max_connections=concurrency)
    async with httpx2.AsyncClient(base_url=url, limits=limits, timeout=60, trust_env=False) as c:
        gate = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with gate:
                started = time.perf_counter()
                response = await c.post("/v1/models/model:predict", json=body)
                latencies.append(time.perf_counter() - started)
                response.raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(requests)))
        return requests / (time.perf_counter() - started), latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="tf-entrypoint:cpu")
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--cpus", default="1,2")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--batches", default="1,256")
    args = parser.parse_args()
    volume = f"tfe-bench-models-{int(time.time())}"
    docker("volume", "create", "--label", LABEL, volume)
    containers: list[str] = []
    try:
        docker("run", "--rm", "--label", LABEL, "-v", f"{REPO / 'demo'}:/demo:ro",
               "-v", f"{volume}:/models", args.image, "python", "/demo/train.py")  # fmt: skip
        print("cpus workers batch   req/s   p50 ms   p99 ms", flush=True)
        for cpus in args.cpus.split(","):
            for workers in args.workers.split(","):
                name = docker("run", "-d", "--label", LABEL, "--cpus", cpus,
                              "-e", f"SERVE_WORKERS={workers}", "-p", "127.0.0.1::8501",
                              "-v", f"{volume}:/models:ro", args.image,
                              "python", "-m", "tf_entrypoint.serving")  # fmt: skip
                containers.append(name)
                url = f"http://127.0.0.1:{docker('port', name, '8501/tcp').split(':')[-1]}"
                wait_ready(url)
                for batch in (int(b) for b in args.batches.split(",")):
                    asyncio.run(load(url, 200, args.concurrency, batch))  # warm-up
                    rate, latencies = asyncio.run(load(url, args.requests, args.concurrency, batch))
                    cuts = statistics.quantiles(latencies, n=100)
                    print(f"{cpus:>4} {workers:>7} {batch:>5} {rate:7.0f} {cuts[49] * 1e3:8.1f} "
                          f"{cuts[98] * 1e3:8.1f}", flush=True)  # fmt: skip
                docker("rm", "-f", name)
                containers.remove(name)
    finally:
        for name in containers:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        subprocess.run(["docker", "volume", "rm", volume], capture_output=True, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
