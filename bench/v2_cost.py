"""The Open Inference Protocol beside TF Serving's API: CPU per request, side by side (issue 25).

    python -m bench run v2 [--image IMAGE] [--out DIR] [--quick]

ONE server container of the CPU image under `--cpus 1` (bench/cost.py's
server: `tf-entrypoint serve`, a model config of the demo's half_plus_two and
the sweep's MLP 32-512-512-10, REST on 8501, gRPC on 8500) answers the same
batch-1 predict (half_plus_two 3 values, the MLP 8 rows of 32) five ways, from
one load client (bench/protocol_load.py --v2 in a container of the image on
the server's network namespace, no CPU limit):

* v1 rest: TF Serving's POST /v1/models/M:predict, `{"instances": ...}`;
* v2 json: POST /v2/models/M/infer, the JSON tensor form;
* v2 binary: the same with the binary tensor data extension (the input's raw
  bytes after a JSON header, the output asked for as raw bytes);
* tfs grpc: TF Serving's PredictionService/Predict (one channel);
* v2 grpc: inference.GRPCInferenceService/ModelInfer, raw_input_contents
  (one channel).

Per repetition, model and concurrency (1 and 8) the arms take turns, in the
order above and reversed in the next cell (bench/cost.py's `turns`), each a
warm-up window and a timed one (bench/grpc_rest.py's measure_cell): req/s,
p50/p99, and the server's CPU per request from the container's cgroup.
Medians of 3 repetitions; ratios of each arm's CPU per request over v1
REST's, and of v2 gRPC over TF Serving's gRPC. Every timed window's first
answer is decoded and checked against the SavedModel's own output; a wrong
answer fails the run. The runner (python -m bench) waits for a
quiet machine before a full run, writes OUT/v2.json, and the report renders
the Markdown table (`table`).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import NAMES, docker, loadavg, now_iso
from bench.cost import (
    MODELS,
    CostConfig,
    arm_stats,
    arm_text,
    check_answers,
    ratio,
    start_target,
    times,
    turns,
)
from bench.grpc_rest import LoadClient, idle_cpu, served_models
from bench.protocol_load import V1_MODES, V2_MODES
from bench.serving import wait_ready

TARGET = "server"
#: arm -> (target, protocol_load mode), in the order of one turn.
ARMS = {
    "v1 rest": (TARGET, "rest"),
    "v2 json": (TARGET, "v2-json"),
    "v2 binary": (TARGET, "v2-binary"),
    "tfs grpc": (TARGET, "grpc"),
    "v2 grpc": (TARGET, "v2-grpc"),
}
#: The arm every CPU per request is divided by, and gRPC's own pair.
BASE = "v1 rest"
GRPC_PAIR = ("v2 grpc", "tfs grpc")
CPU = "server_cpu_ms_per_request"


@dataclass(frozen=True)
class V2Config:
    cpus: str = "1"
    models: tuple[str, ...] = MODELS
    concurrencies: tuple[int, ...] = (1, 8)
    seconds: float = 5.0
    warmup: float = 1.5
    reps: int = 3

    def windows(self) -> CostConfig:
        """The same windows as bench/cost.py's configuration (what `turns` reads)."""
        return CostConfig(
            cpus=self.cpus,
            models=self.models,
            concurrencies=self.concurrencies,
            seconds=self.seconds,
            warmup=self.warmup,
            reps=self.reps,
        )


QUICK = V2Config(concurrencies=(2,), seconds=0.5, warmup=0.3, reps=1)


# --- analysis -----------------------------------------------------------------


def analyse(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, concurrency): each arm's medians and the ratios the issue names."""
    cells = []
    for model, concurrency in dict.fromkeys((r["model"], r["concurrency"]) for r in runs):
        mine = [r for r in runs if (r["model"], r["concurrency"]) == (model, concurrency)]
        arms = {arm: arm_stats([r for r in mine if r["arm"] == arm])
                for arm in dict.fromkeys(r["arm"] for r in mine)}  # fmt: skip
        over, under = GRPC_PAIR
        cells.append(
            {
                "model": model,
                "concurrency": concurrency,
                "arms": arms,
                "ratios": {
                    "cpu_vs_v1_rest": {
                        arm: ratio(arms, arm, BASE, CPU) for arm in arms if arm != BASE
                    },
                    "rps_vs_v1_rest": {
                        arm: ratio(arms, arm, BASE, "rps") for arm in arms if arm != BASE
                    },
                    "v2_grpc_vs_tfs_grpc": {
                        "cpu": ratio(arms, over, under, CPU),
                        "rps": ratio(arms, over, under, "rps"),
                        "p99": ratio(arms, over, under, "p99_ms"),
                    },
                },
            }
        )
    return cells


# --- the report ---------------------------------------------------------------


def table(data: dict[str, Any]) -> str:
    """The results as Markdown (printed; docs/v2.md quotes it)."""
    config = data["config"]
    arms = list(ARMS)
    lines = [
        f"One server under `--cpus {config['cpus']}`, {config['reps']} interleaved "
        f"{config['seconds']:g} s windows per arm (medians); server CPU per request from "
        "the container's cgroup, req/s and p99 beside it; the ratios are CPU per request.",
        "",
        "| model | conns | " + " | ".join(arms) + " | v2 json / v1 | v2 binary / v1 "
        "| v2 gRPC / TFS gRPC |",
        "|---|---|" + "---|" * (len(arms) + 3),
    ]
    for cell in data["cells"]:
        cpu = cell["ratios"]["cpu_vs_v1_rest"]
        lines.append(
            f"| {cell['model']} | {cell['concurrency']} | "
            + " | ".join(arm_text(cell["arms"], arm) for arm in arms)
            + f" | {times(cpu.get('v2 json'))} | {times(cpu.get('v2 binary'))} "
            f"| {times(cell['ratios']['v2_grpc_vs_tfs_grpc']['cpu'])} |"
        )
    return "\n".join(lines)


# --- the run ------------------------------------------------------------------


def run(image: str, config: V2Config) -> dict[str, Any]:
    began, load_before = now_iso(), loadavg()
    workdir = Path(tempfile.mkdtemp(prefix="tfe-bench-v2-"))
    client: LoadClient | None = None
    name = ""
    try:
        models, config_dir = served_models(image, workdir, config.models, "v2")
        name = start_target(TARGET, image, models, config_dir, config.cpus)
        port = docker("port", name, "8501/tcp").splitlines()[0].rsplit(":", 1)[1]
        wait_ready(name, f"http://127.0.0.1:{port}")
        client = LoadClient(
            image, name, "bench.protocol_load", ["--v2", *config.models],
            docker_args=["-v", f"{models}:/models:ro"],
        )  # fmt: skip
        check_answers(client, TARGET, config.models, V1_MODES[:2] + V2_MODES)
        idle = idle_cpu(name, 2.0)
        cells = [(m, c) for m in config.models for c in config.concurrencies]
        runs = turns(
            {TARGET: client}, {TARGET: name}, ARMS, cells, config=config.windows(), part="v2"
        )
    finally:
        if client is not None:
            client.close()
        if name:
            NAMES.remove(name)
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "config": asdict(config),
        "started": began,
        "finished": now_iso(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "server_idle_cpu_s_per_s": idle,
        "arms": {arm: {"target": t, "mode": m} for arm, (t, m) in ARMS.items()},
        "runs": runs,
        "cells": analyse(runs),
    }
