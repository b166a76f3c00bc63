"""Every benchmark, declared as data: the one registry `python -m bench` runs.

    python -m bench list                          # the scenarios, what each shows
    python -m bench run SCENARIO|all [--quick] [--image IMAGE] [--out DIR] [--before IMAGE]
    python -m bench report                        # docs/bench/results.md and docs/benchmarks.md

A scenario is one `Scenario` in SCENARIOS: its name (also its result file,
OUT/NAME.json, unless `result` says otherwise), what it shows, the models it
serves (folders of the harness model library, harness/models.py), the
protocol, the connections, the arms it compares, its windows, the full run's
configuration and the --quick one (a frozen dataclass of the measuring
module, or of this module), and two functions:

- `measure(context, config) -> dict`: runs it and returns the results (a
  JSON-able dict); the runner wraps them in the one result schema
  (bench/results.py: scenario, machine, image, config, when, command,
  results, schema version);
- `cells(config) -> set` and `found(results) -> set`: the cells the
  configuration declares and the cells a result has; the smoke test
  (tests/container/test_bench.py) checks that they are equal after a --quick
  run, and never a timing.

Adding a scenario:

1. write the measurement in a module of bench/ as `run_x(image, config) -> dict`
   (no argparse, no main: the runner owns the command line, the pinned image,
   the machine's facts, the quiet-machine wait and the result file). Models
   come from the library: `bench.common.library(image).copy(...)` (add an
   Export to harness/models.py for a new one); load through harness/load.py's
   `closed_loop`, percentiles through harness/stats.py; an in-container probe
   runs as `python -m bench.PROBE` with `bench.common.LOAD_MOUNTS`;
2. declare it below: a config dataclass with the full run's defaults, a
   `quick` one (a second or two a window, one repetition, the fewest cells
   that still run every code path), `cells`/`found`, and the section
   heading it gets in docs/benchmarks.md (`title`);
3. add its assertions (what is not a timing) to tests/container/test_bench.py;
4. run `python -m bench run NAME`, then `python -m bench report`, and write
   what the figures mean in its section of docs/benchmarks.md (the report
   keeps the prose and rewrites the generated block).

`needs` says what the scenario needs besides Python: "image" (Docker and the
CPU image), "dev venv" (imports the server: .venv), "bench venv" (the object
store clients: requirements/bench.lock), "before image" (a second image).
Modules are imported when a scenario runs, so `list` and `report` work in any
venv.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Cells = set[tuple[Any, ...]]


@dataclass(frozen=True)
class Context:
    """What a scenario's measure gets from the runner."""

    image: str  # pinned: the exact image, under a private tag for the run
    out: Path  # the result folder (a scenario may write files beside its JSON)
    quick: bool
    before: str = ""  # before_after's BEFORE image (pinned); default: the same image


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str  # its heading in docs/benchmarks.md
    shows: str
    models: tuple[str, ...]  # folders of the harness model library
    protocol: str
    connections: tuple[int, ...]
    arms: tuple[str, ...]
    windows: str
    config: Any
    quick: Any
    measure: Callable[[Context, Any], dict[str, Any]]
    cells: Callable[[Any], Cells]
    found: Callable[[dict[str, Any]], Cells]
    needs: tuple[str, ...] = ("image",)
    #: Wait until the 1-minute load average is below this before a full run (None: never).
    quiet_load: float | None = 0.6
    result: str = ""  # the result file's name (default: NAME); history keeps old names
    files: tuple[str, ...] = field(default=())  # other files it writes under OUT

    @property
    def result_name(self) -> str:
        return self.result or self.name


def _module(name: str) -> Any:
    return importlib.import_module(f"bench.{name}")


def _config(module: str, name: str, **quick: Any) -> tuple[Any, Any]:
    """(the full run's config, the quick one): module.NAME() and module.NAME(**quick)."""
    kind = getattr(_module(module), name)
    return kind(), kind(**quick)


# --- the configs of scenarios whose module has no dataclass of its own --------------


@dataclass(frozen=True)
class OverheadConfig:
    pairs: int = 40  # container-start pairs (entrypoint / bypassed)
    rounds: int = 200  # in-container rounds of each process
    tf_rounds: int = 5  # fresh interpreters importing TensorFlow


@dataclass(frozen=True)
class ProfilesConfig:
    seconds: float = 20.0  # seconds per py-spy recording
    cells: tuple[tuple[str, str], ...] = (
        ("rest", "half_plus_two"), ("rest", "mlp"), ("grpc", "half_plus_two"), ("grpc", "mlp"),
    )  # fmt: skip
    margin: float = 20.0  # seconds of load beyond the two recordings (py-spy's starts)


@dataclass(frozen=True)
class BeforeAfterConfig:
    concurrencies: tuple[int, ...] = (1, 8)
    seconds: float = 5.0
    warmup: float = 1.5
    reps: int = 3


# --- measure functions (modules imported late) --------------------------------------


def _sweep(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("sweep").run_sweep(ctx.image, config)
    return result


def _overhead(ctx: Context, config: OverheadConfig) -> dict[str, Any]:
    result: dict[str, Any] = _module("overhead").run_overhead(
        ctx.image, config.pairs, config.rounds, config.tf_rounds
    )
    return result


def _startup(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("handoff_startup").run(config)
    return result


def _serving(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("serving").run_serving(ctx.image, config)
    return result


def _swap(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("swap").run_swap(ctx.image, config)
    return result


def _grpc(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("grpc_rest").run_grpc(ctx.image, config)
    return result


def _batching(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("batching").run_batching(ctx.image, config)
    return result


def _workers(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("serving_workers").run_workers(ctx.image, config)
    return result


def _processes(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("processes").run_processes(ctx.image, config)
    return result


def _cost(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("cost").run(ctx.image, config)
    return result


def _profiles(ctx: Context, config: ProfilesConfig) -> dict[str, Any]:
    result: dict[str, Any] = _module("profiles").run(
        ctx.image, ctx.out / "profiles", config.seconds, config.cells, config.margin
    )
    return result


def _app_cost(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("app_cost").run(config)
    return result


def _v2(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("v2_cost").run(ctx.image, config)
    return result


def _session(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("session_call").run(ctx.image, config)
    return result


def _request_memory(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("request_memory").run(ctx.image, config)
    return result


def _soak(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("soak").run_soak(config, ctx.image)
    return result


def _object_store(ctx: Context, config: Any) -> dict[str, Any]:
    result: dict[str, Any] = _module("object_store_clients").run_all(config)
    return result


def _before_after(ctx: Context, config: BeforeAfterConfig) -> dict[str, Any]:
    grpc = _module("grpc_rest")
    before_after = _module("before_after")
    windows = grpc.GrpcConfig(
        concurrencies=config.concurrencies, seconds=config.seconds, warmup=config.warmup,
        reps=config.reps, models=before_after.MODELS,
    )  # fmt: skip
    result: dict[str, Any] = before_after.run(ctx.before or ctx.image, ctx.image, windows)
    return result


# --- the cells ----------------------------------------------------------------------


def _grpc_cells(config: Any) -> Cells:
    modes = _module("grpc_rest").modes_for
    return {
        (m, c, mode)
        for m in config.models
        for c in config.concurrencies
        for mode in modes(c, config)
    }


def _cost_cells(config: Any) -> Cells:
    cost = _module("cost")
    return {
        ("cost", m, c, arm)
        for m in config.models
        for c in config.concurrencies
        for arm in cost.ARMS
    } | {
        ("batching", cost.BATCH_MODEL, c, arm)
        for c in config.batch_concurrencies
        for arm in cost.BATCH_ARMS
    }


def _session_cells(config: Any) -> Cells:
    session = _module("session_call")
    return {
        (loader, model, mode)
        for loader in session.LOADERS
        for model in session.MODELS
        for mode in session.PROTOCOLS
    }


def _soak_cells(config: Any) -> Cells:
    soak_load = _module("soak_load")
    good = {
        ("good", f"{protocol} {path}")
        for protocol in ("rest", "grpc")
        for path in ("plus predict", "cr predict", "cr regress", "cr classify")
    }
    return good | {("hostile", c) for c in (*config.classes, *soak_load.RELOAD_CLASSES)}


def _soak_found(results: dict[str, Any]) -> Cells:
    client = results["client"]
    return {("good", p) for p in client["good"]["paths"]} | {
        ("hostile", c) for c in client["hostile"]["classes"]
    }


def _object_store_cells(config: Any) -> Cells:
    arms = _module("object_store_clients").ARMS
    return {(size, arm.name) for size in config.size_mib for arm in arms}


def _object_store_found(results: dict[str, Any]) -> Cells:
    return {(s["variables_data_mib"], r["arm"]) for s in results["sizes"] for r in s["runs"]}


def _before_after_cells(config: BeforeAfterConfig) -> Cells:
    before_after = _module("before_after")
    return {
        (m, c, mode)
        for m in before_after.MODELS
        for c in config.concurrencies
        for mode in before_after.MODES
    }


def _v2_cells(config: Any) -> Cells:
    arms = _module("v2_cost").ARMS
    return {(m, c, arm) for m in config.models for c in config.concurrencies for arm in arms}


def _request_memory_cells(config: Any) -> Cells:
    return {(case,) for case in config.cases}


def _lazy_config(module: str, name: str, **quick: Any) -> tuple[Any, Any]:
    """As _config, for a module that imports the server (entrypoint/tf_entrypoint, as the
    tests' pythonpath has it): (None, None) in a venv without the server's dependencies."""
    package = str(Path(__file__).resolve().parents[1] / "entrypoint")
    if package not in sys.path:
        sys.path.append(package)
    try:
        return _config(module, name, **quick)
    except ImportError:
        return None, None


def _scenarios() -> tuple[Scenario, ...]:
    sweep_full, sweep_quick = _config(
        "sweep", "SweepConfig", limits=("cpus=1",), manual=((1, 1),), reps=1, rounds=2,
        seconds=0.1, warmup=0.05, retries=0,
    )  # fmt: skip
    serving_full, serving_quick = _config(
        "serving", "ServingConfig", concurrencies=(2,), seconds=1, warmup=0.5, reps=1,
        models=("half_plus_two",), client="python",
    )  # fmt: skip
    swap_full, swap_quick = _config(
        "swap", "SwapConfig", concurrency=2, baseline=1, after=1, reps=1
    )
    grpc_full, grpc_quick = _config(
        "grpc_rest", "GrpcConfig", concurrencies=(2,), seconds=0.5, warmup=0.3, reps=1,
        models=("half_plus_two",),
    )  # fmt: skip
    batching_full, batching_quick = _config(
        "batching", "BatchingConfig", cpus=("1",), concurrencies=(2,), seconds=1, warmup=0.5,
        reps=1, models=("half_plus_two",), client="python",
    )  # fmt: skip
    workers_full, workers_quick = _config(
        "serving_workers", "WorkersConfig", cpus=("1",), workers=(1,), batches=(1,),
        concurrency=2, seconds=0.5, warmup=0.2,
    )  # fmt: skip
    processes_full, processes_quick = _config(
        # REST alone: gRPC's load generator (h2load) is not on every machine the smoke runs on.
        "processes", "ProcessesConfig", arms=("one@2", "frontends@2"), requests=("hp2-1",),
        protocols=("rest",), seconds=1, warmup=0.5, repetitions=1, single=0.5,
    )  # fmt: skip
    cost_full, cost_quick = _module("cost").CostConfig(), _module("cost").QUICK
    v2_full, v2_quick = _module("v2_cost").V2Config(), _module("v2_cost").QUICK
    session_full, session_quick = (
        _module("session_call").SessionConfig(),
        _module("session_call").QUICK,
    )
    startup_full, startup_quick = _config("handoff_startup", "StartupConfig", rounds=3)
    app_full, app_quick = _lazy_config("app_cost", "AppCostConfig", requests=20)
    memory_full, memory_quick = _config(
        "request_memory", "RequestMemoryConfig", cases=("rest_flat_zeros", "grpc_tensor_content")
    )
    soak_full, soak_quick = _config(
        "soak", "SoakConfig", duration=15, memory="2g", max_body_bytes=1 << 20, swap_every=3,
        reload_every=5, unreadable_every=6, unreadable_for=2, hostile_every=1.5,
        bomb_every=6, large_every=7, large_burst=2, deadline_every=5, poison_every=8,
    )  # fmt: skip
    store_full, store_quick = _config(
        "object_store_clients", "ObjectStoreConfig", size_mib=(1.0,), reps=1, lists=1,
        import_reps=1, missing_arms=True,
    )  # fmt: skip
    return (
        Scenario(
            name="sweep",
            title="The quota sweep: TensorFlow's threads under CPU limits",
            shows="the automatic plan against TensorFlow's defaults and every manual "
            "intra/inter setting, under --cpus 0.5-2 and --cpuset-cpus, for batch-1 and "
            "batch-64 inference and a training step of a small MLP",
            models=("mlp",),
            protocol="in process (bench/workload.py in one container per mode)",
            connections=(),
            arms=("defaults", "auto", "manual i/j"),
            windows="0.5 s windows taking turns, 3 rounds a workload, 6 repetitions",
            config=sweep_full,
            quick=sweep_quick,
            measure=_sweep,
            cells=lambda c: {(limit, mode) for limit in c.limits for mode in c.modes},
            found=lambda r: {(run["limit"], run["mode"]) for run in r["runs"]},
            files=("quota-sweep.png",),
        ),
        Scenario(
            name="overhead",
            title="Overhead of the entrypoint and the hook",
            shows="what the entrypoint adds from docker run to the command, what the "
            "import hook adds to every interpreter and to import tensorflow, explain's cost",
            models=(),
            protocol="none (processes)",
            connections=(),
            arms=("entrypoint", "bypassed"),
            windows="40 interleaved container-start pairs, 200 in-container rounds",
            config=OverheadConfig(),
            quick=OverheadConfig(pairs=1, rounds=3, tf_rounds=1),
            measure=_overhead,
            cells=lambda c: {("entrypoint",), ("bypassed",)},
            found=lambda r: {(k,) for k in r["container_start"]["to_command_start_ms"]},
        ),
        Scenario(
            name="startup",
            title="The start-up budget: the hand-off before the exec",
            shows="`tf-entrypoint true` as its console script runs it against `python -c "
            "pass` (the entrypoint's own work before the exec), on this host",
            models=(),
            protocol="none (processes on the host)",
            connections=(),
            arms=("python -c pass", "tf-entrypoint true"),
            windows="60 interleaved rounds, medians",
            config=startup_full,
            quick=startup_quick,
            measure=_startup,
            cells=lambda c: {("python -c pass",), ("tf-entrypoint true",)},
            found=lambda r: {(k.rsplit(": ", 1)[-1],) for k in r["commands"]},
            needs=(),
            quiet_load=None,
        ),
        Scenario(
            name="serving",
            title="Serving under load: the plan against TensorFlow's defaults",
            shows="req/s and p99 of `tf-entrypoint serve` under --cpus 1 with the automatic "
            "plan against the same server with the entrypoint and hook bypassed",
            models=("half_plus_two", "mlp"),
            protocol="REST",
            connections=(1, 4, 16, 32),
            arms=("auto", "defaults"),
            windows="4 s timed after 2 s warm-up, 3 repetitions, modes alternating",
            config=serving_full,
            quick=serving_quick,
            measure=_serving,
            cells=lambda c: {(m, n) for m in c.models for n in c.concurrencies},
            found=lambda r: {(c["model"], c["concurrency"]) for c in r["cells"]},
            files=("serving.png",),
        ),
        Scenario(
            name="swap",
            title="A version swap under load",
            shows="req/s, p50/p99 and errors before, during and after a new version is "
            "renamed into place under load, and how long the swap takes",
            models=("mlp",),
            protocol="REST",
            connections=(8,),
            arms=("before", "during", "after"),
            windows="4 s before, the swap, 4 s after; 3 repetitions (a fresh server each)",
            config=swap_full,
            quick=swap_quick,
            measure=_swap,
            cells=lambda c: {
                (rep, phase) for rep in range(c.reps) for phase in ("before", "during", "after")
            },
            found=lambda r: {(i, p) for i, rep in enumerate(r["reps"]) for p in rep["phases"]},
        ),
        Scenario(
            name="grpc",
            title="gRPC against REST on one server",
            shows="req/s, p99 and server CPU per request of the same predict over gRPC "
            "(one channel, or one per caller) and REST, from one load client",
            models=("half_plus_two", "mlp"),
            protocol="REST and gRPC",
            connections=(1, 8, 32),
            arms=("rest", "grpc", "grpc-channels"),
            windows="5 s timed after 1.5 s warm-up, 3 repetitions, modes taking turns",
            config=grpc_full,
            quick=grpc_quick,
            measure=_grpc,
            cells=_grpc_cells,
            found=lambda r: {(x["model"], x["concurrency"], x["mode"]) for x in r["runs"]},
        ),
        Scenario(
            name="batching",
            title="Server-side batching",
            shows="batch-1 predicts with --enable_batching on and off from 1 to 128 "
            "connections, against the model's in-process throughput and a bare endpoint",
            models=("half_plus_two", "mlp"),
            protocol="REST",
            connections=(1, 8, 32, 128),
            arms=("off", "on"),
            windows="4 s timed after 2 s warm-up, 2 repetitions, modes alternating",
            config=batching_full,
            quick=batching_quick,
            measure=_batching,
            cells=lambda c: {
                (cpus, m, n) for cpus in c.cpus for m in c.models for n in c.concurrencies
            },
            found=lambda r: {(c["cpus"], c["model"], c["concurrency"]) for c in r["cells"]},
        ),
        Scenario(
            name="workers",
            title="Inference workers for a CPU budget",
            shows="req/s and p50/p99 of the server (entrypoint bypassed) for each CPU "
            "limit, SERVE_WORKERS and rows per predict",
            models=("half_plus_two",),
            protocol="REST",
            connections=(16,),
            arms=("workers 1", "workers 2", "workers 4"),
            windows="4 s timed after 1 s warm-up per cell",
            config=workers_full,
            quick=workers_quick,
            measure=_workers,
            cells=lambda c: {(cpus, w, b) for cpus in c.cpus for w in c.workers for b in c.batches},
            found=lambda r: {(x["cpus"], x["workers"], x["batch"]) for x in r["runs"]},
        ),
        Scenario(
            name="processes",
            title="Every CPU the container is given: front-end processes over one engine",
            shows="req/s, CPUs used, p50/p99 and memory of the server as one process and "
            "with --frontends, against the raw-ASGI floor in as many processes (a model "
            "copy each), per CPU limit, request size and protocol; p50 at one connection",
            models=("half_plus_two", "mlp"),
            protocol="REST (wrk) and gRPC (h2load)",
            connections=(32, 1),
            arms=("one@1", "one@2", "frontends@2", "floor@2"),
            windows="10 s timed after 2 s warm-up per cell, arms in turn, 2 repetitions",
            config=processes_full,
            quick=processes_quick,
            measure=_processes,
            cells=lambda c: {
                (arm, protocol, kind)
                for arm in c.arms
                for protocol in c.protocols
                for kind in c.requests
                if not (protocol == "grpc" and arm.startswith("floor"))
            },
            found=lambda r: {
                (x["arm"], x["protocol"], x["request"])
                for x in r["runs"]
                if x.get("connections") != 1
            },
        ),
        Scenario(
            name="cost",
            title="CPU per predict against the Python floors",
            shows="the server's CPU per request over REST and gRPC against the least a "
            "Python server can do (bench/floor.py), batching on against off, the model "
            "call alone, start-up and memory",
            models=("half_plus_two", "mlp"),
            protocol="REST and gRPC",
            connections=(1, 8, 32),
            arms=(
                "server rest",
                "floor rest",
                "server grpc",
                "aio grpc",
                "threaded grpc",
                "batching on",
                "batching off",
            ),
            windows="5 s timed after 1.5 s warm-up, 3 repetitions, arms taking turns",
            config=cost_full,
            quick=cost_quick,
            measure=_cost,
            cells=_cost_cells,
            found=lambda r: {
                (x["part"], x["model"], x["concurrency"], x["arm"]) for x in r["runs"]
            },
        ),
        Scenario(
            name="profiles",
            title="Where the server's time goes: py-spy profiles",
            shows="py-spy recordings of the server under load over REST and gRPC, each "
            "sample put in a category of the server's code",
            models=("half_plus_two", "mlp"),
            protocol="REST and gRPC",
            connections=(8,),
            arms=("rest", "grpc"),
            windows="20 s recordings",
            config=ProfilesConfig(),
            # both protocols, both models: each code path once
            quick=ProfilesConfig(
                seconds=2.0, cells=(("rest", "half_plus_two"), ("grpc", "mlp")), margin=12.0
            ),
            measure=_profiles,
            cells=lambda c: set(c.cells),
            found=lambda r: {(x["mode"], x["model"]) for x in r["cells"]},
            result="profiles/profiles",
        ),
        Scenario(
            name="app_cost",
            title="The REST application's own cost per predict",
            shows="µs per predict of the server's ASGI app around a pure-Python model, "
            "called in process, against a bare ASGI app doing the same JSON",
            models=(),
            protocol="ASGI in process",
            connections=(1,),
            arms=("server", "bare"),
            windows="5 runs of 3,000 requests, medians",
            config=app_full,
            quick=app_quick,
            measure=_app_cost,
            cells=lambda c: {("server_us",), ("bare_us",)},
            found=lambda r: {(k,) for k in r},
            needs=("dev venv",),
            quiet_load=None,
        ),
        Scenario(
            name="v2",
            title="The Open Inference Protocol beside TF Serving's API",
            shows="CPU per request, req/s and p99 of the same predict five ways on one "
            "server: v1 REST, v2 JSON, v2 binary, TF Serving's gRPC, v2 gRPC",
            models=("half_plus_two", "mlp"),
            protocol="REST and gRPC, v1 and v2",
            connections=(1, 8),
            arms=("v1 rest", "v2 json", "v2 binary", "tfs grpc", "v2 grpc"),
            windows="5 s timed after 1.5 s warm-up, 3 repetitions, arms taking turns",
            config=v2_full,
            quick=v2_quick,
            measure=_v2,
            cells=_v2_cells,
            found=lambda r: {(x["model"], x["concurrency"], x["arm"]) for x in r["runs"]},
            quiet_load=1.0,
        ),
        Scenario(
            name="session_call",
            title="Session bundles against tf.saved_model.load",
            shows="the model call, the served predict, start-up and idle memory of the "
            "Session loader against tf.saved_model.load's functions",
            models=("session",),
            protocol="in process, REST and gRPC",
            connections=(1, 8),
            arms=("session", "tf2"),
            windows="4 s timed after 1.5 s warm-up, 3 repetitions; 5 rounds of 1 s calls",
            config=session_full,
            quick=session_quick,
            measure=_session,
            cells=_session_cells,
            found=lambda r: {(x["loader"], x["model"], x["mode"]) for x in r["servers"]["runs"]},
        ),
        Scenario(
            name="request_memory",
            title="Memory per request",
            shows="what one worst-case request of about 8 MiB adds to a server's cgroup "
            "memory peak, over its size (docs/robustness.md's factors)",
            models=("plus", "batch", "examples"),
            protocol="REST and gRPC",
            connections=(1,),
            arms=("one request a fresh server",),
            windows="one request per case",
            config=memory_full,
            quick=memory_quick,
            measure=_request_memory,
            cells=_request_memory_cells,
            found=lambda r: {(case,) for case in r["cases"]},
            quiet_load=None,
        ),
        Scenario(
            name="soak",
            title="The soak: production's load, swaps, reloads and hostile requests at once",
            shows="failed good requests, hostile requests answered otherwise than "
            "documented, reloads not applied, versions never served, RSS growth, the "
            "longest /healthz answer and the shutdown, over ten minutes",
            models=("soak",),
            protocol="REST and gRPC",
            connections=(4, 4),
            arms=("good", "hostile", "swaps", "reloads", "deadlines", "healthz"),
            windows="600 s of everything at once",
            config=soak_full,
            quick=soak_quick,
            measure=_soak,
            cells=_soak_cells,
            found=_soak_found,
            quiet_load=None,
        ),
        Scenario(
            name="object_store",
            title="Object-store clients",
            shows="import time, installed size, listing and download time and peak RSS "
            "of s3fs, gcsfs, google-cloud-storage and obstore against local emulators",
            models=(),
            protocol="S3 and GCS (moto, gcp-storage-emulator)",
            connections=(),
            arms=tuple(a.name for a in _module("object_store_clients").ARMS),
            windows="5 download runs per arm and size (64 and 256 MiB), arms taking turns",
            config=store_full,
            quick=store_quick,
            measure=_object_store,
            cells=_object_store_cells,
            found=_object_store_found,
            needs=("bench venv",),
            quiet_load=None,
        ),
        Scenario(
            name="before_after",
            title="Two builds side by side: the cost of a change",
            shows="req/s, p99 and server CPU per request of two images at once (--before "
            "IMAGE against --image), taking turns cell by cell, and their idle RSS",
            models=("half_plus_two", "mlp"),
            protocol="REST and gRPC",
            connections=(1, 8),
            arms=("before", "after"),
            windows="5 s timed after 1.5 s warm-up, 3 repetitions",
            config=BeforeAfterConfig(),
            quick=BeforeAfterConfig(concurrencies=(1,), seconds=1.0, warmup=0.3, reps=1),
            measure=_before_after,
            cells=_before_after_cells,
            found=lambda r: {(c["model"], c["concurrency"], c["mode"]) for c in r["cells"]},
            needs=("image", "before image"),
            quiet_load=None,
        ),
    )


SCENARIOS: tuple[Scenario, ...] = _scenarios()
BY_NAME = {s.name: s for s in SCENARIOS}
