"""A smoke of the benchmark harness (bench/run.py --quick) against the real image.

Benchmarks are not timed tests: this checks only that the harness runs every
part and writes well-formed JSON with every expected cell and a Markdown
report. It never asserts on a timing.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import batching, grpc_rest, serving, sweep
from harness.docker import REPO

#: The images this module tests (tests/container/conftest.py): the benchmarks measure the CPU image.
IMAGE_FLAVORS = ("cpu",)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.fixture(scope="module")
def quick_run(
    flavor: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    image: str = request.getfixturevalue("image")
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.run",
            "--quick",
            "--no-plot",
            "--image",
            image,
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_sweep_has_every_cell(quick_run: Path) -> None:
    data = json.loads((quick_run / "sweep.json").read_text())
    config = data["config"]
    assert config["limits"] == ["cpus=1"]
    assert config["modes"] == ["defaults", "auto", "manual 1/1"]
    assert {(r["limit"], r["mode"]) for r in data["runs"]} == {
        ("cpus=1", mode) for mode in config["modes"]
    }
    for run in data["runs"]:
        assert "error" not in run, run.get("error")
        assert set(run["result"]["workloads"]) == set(sweep.WORKLOADS)
        for result in run["result"]["workloads"].values():
            assert result["calls"] > 0
            assert all(_number(result[k]) for k in ("throughput", "p50_ms", "p99_ms"))
    assert {(c["limit"], c["workload"]) for c in data["cells"]} == {
        ("cpus=1", w) for w in sweep.WORKLOADS
    }
    for cell in data["cells"]:
        assert cell["auto_plan"] == "1/1"  # --cpus 1
        assert set(cell["targets"]) == {
            "throughput_vs_best",
            "p99_vs_best",
            "throughput_vs_defaults",
        }
        assert _number(cell["auto_vs_best"]["throughput"])
        assert _number(cell["auto_vs_defaults"]["p99"])
        # the control: auto against the manual mode asking for the same threads
        assert cell["auto_vs_same_manual"]["against"] == "manual 1/1"
        assert _number(cell["auto_vs_same_manual"]["throughput"])
    # every mode ran every round of every workload, in windows
    for run in data["runs"]:
        for result in run["result"]["workloads"].values():
            assert result["windows"] == config["rounds"]


def test_defaults_mode_bypasses_the_entrypoint(quick_run: Path) -> None:
    runs = json.loads((quick_run / "sweep.json").read_text())["runs"]
    threads = {r["mode"]: r["result"]["threads"] for r in runs}
    assert "TF_NUM_INTRAOP_THREADS" not in threads["defaults"]["env"]
    assert threads["defaults"]["getters"] == {"intra_op": 0, "inter_op": 0}
    assert threads["auto"]["getters"] == {"intra_op": 1, "inter_op": 1}
    assert threads["manual 1/1"]["env"]["TF_NUM_INTEROP_THREADS"] == "1"


def test_overhead_has_every_measurement(quick_run: Path) -> None:
    data = json.loads((quick_run / "overhead.json").read_text())
    starts = data["container_start"]["to_command_start_ms"]
    assert set(starts) == {"entrypoint", "bypassed"}
    assert all(_number(s["median"]) for s in starts.values())
    variants = data["in_container"]["processes"]["variants"]
    assert {
        "true",
        "tf-entrypoint true",
        "python -c pass (hook on)",
        "python -c pass (hook off)",
        "tf-entrypoint explain",
        "tf-entrypoint explain --json",
    } <= set(variants)
    hook = data["in_container"]["hook_at_tf_import"]
    assert hook["plan"]["applied"] == ["intra_op_threads=1", "inter_op_threads=1"]
    assert _number(hook["computed"]["hook_ms"])
    assert set(data["targets"]) == {"container_added_ms", "hook_added_ms"}


def test_serving_has_every_cell(quick_run: Path) -> None:
    data = json.loads((quick_run / "serving.json").read_text())
    assert [c["concurrency"] for c in data["cells"]] == [2]
    (cell,) = data["cells"]
    assert cell["model"] == "half_plus_two"
    assert set(cell["modes"]) == set(serving.MODES)
    for mode in serving.MODES:
        assert cell["modes"][mode]["rps"]["median"] > 0
        assert _number(cell["modes"][mode]["p99_ms"]["median"])
    runs = data["models"][0]["runs"]
    assert {r["mode"] for r in runs} == set(serving.MODES)


def test_swap_has_every_phase(quick_run: Path) -> None:
    data = json.loads((quick_run / "swap.json").read_text())
    (rep,) = data["reps"]
    assert set(rep["phases"]) == {"before", "during", "after"}
    for phase in rep["phases"].values():
        assert phase["requests"] > 0
        assert all(_number(phase[k]) for k in ("rps", "p50_ms", "p99_ms"))
    # A swap fails no request (the container tests assert it under more load).
    assert rep["errors"] == 0
    assert 0 < rep["swap_available_s"] <= rep["swap_end_s"]
    assert _number(rep["load_s"])
    assert _number(data["summary"]["during_vs_before"]["p99"])


def test_grpc_has_every_cell(quick_run: Path) -> None:
    data = json.loads((quick_run / "grpc.json").read_text())
    assert [(c["model"], c["concurrency"]) for c in data["cells"]] == [
        ("half_plus_two", 1),
        ("half_plus_two", 2),
    ]
    # both protocols at every concurrency; one channel per caller only where it differs
    assert {(r["concurrency"], r["mode"]) for r in data["runs"]} == {
        (1, "rest"),
        (1, "grpc"),
        *((2, mode) for mode in grpc_rest.MODES),
    }
    for run in data["runs"]:
        assert run["answer_ok"], run  # the first answer matched the SavedModel's output
        assert run["errors"] == 0, run["error_kinds"]
        assert run["ok"] > 0
        assert all(_number(run[k]) for k in ("rps", "p50_ms", "p99_ms", "server_cpu_s"))
        assert run["server_cpu_ms_per_request"] > 0
        # connections seen during the window: one per REST caller, one channel, or one each
        expected = 1 if run["mode"] == "grpc" else run["concurrency"]
        assert run["connections"] == expected, run
    for cell in data["cells"]:
        assert _number(cell["grpc_vs_rest"]["rps"]["median"])
        assert _number(cell["grpc_vs_rest"]["p99"]["median"])
    assert _number(data["cells"][1]["channels_vs_grpc"]["rps"]["median"])


def test_batching_has_every_cell(quick_run: Path) -> None:
    data = json.loads((quick_run / "batching.json").read_text())
    (cell,) = data["cells"]
    assert (cell["cpus"], cell["model"], cell["concurrency"]) == ("1", "half_plus_two", 2)
    for mode in batching.MODES:
        assert cell[mode]["rps"] > 0
        assert _number(cell[mode]["p99_ms"])
    assert cell["on"]["mean_batch_rows"] >= 1
    (result,) = data["results"]
    assert result["limits"]["model_rows_per_s"] > 0
    assert result["limits"]["bare"]["rps"] > 0


def test_report_renders(quick_run: Path) -> None:
    text = (quick_run / "results.md").read_text()
    for heading in (
        "## Quota sweep",
        "## Overhead",
        "## Serving under load",
        "## A version swap under load",
        "## gRPC vs REST",
        "## Server-side batching",
    ):
        assert heading in text
