"""The one smoke of the benchmarks: every scenario once, `python -m bench run all --quick`.

Benchmarks are not timed tests. One run of the runner (bench/__main__.py)
over the shared model library measures every scenario of bench/scenarios.py
with its quick config (a second or two a window, one repetition, the fewest
cells that still run each code path); then each result file is checked
against the one schema (bench/results.py) and against the cells its
scenario declares, and for what is not a timing: every window's first answer
matched the SavedModel's own output, no request failed, each path loaded the
bundle it names, every figure is a finite number, the report renders. It
never asserts on a timing or compares two figures.

before_after runs the image against itself (--before IMAGE); object_store
runs in the dev venv, where obstore is not installed: its arms are recorded
as failed ("not installed in this venv"), the S3 and GCS arms that are
installed run against the emulators.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import results as schema
from bench.common import REPO
from bench.scenarios import BY_NAME, SCENARIOS
from harness import models as model_library

#: The images this module tests (tests/container/conftest.py): the benchmarks measure the CPU image.
IMAGE_FLAVORS = ("cpu",)
#: Scenarios measured at once (python -m bench run --jobs).
JOBS = 4


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.fixture(scope="session")
def library(flavor: str, request: pytest.FixtureRequest) -> model_library.ModelLibrary:
    """The shared model library (harness/models.py): exported once, cached across runs."""
    image: str = request.getfixturevalue("image")
    return model_library.library(image)


@pytest.fixture(scope="module")
def quick_run(
    library: model_library.ModelLibrary,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    image: str = request.getfixturevalue("image")
    out = tmp_path_factory.mktemp("bench")
    # --jobs: scenarios at once (a smoke's timings mean nothing; containers mostly wait)
    command = [sys.executable, "-m", "bench", "run", "all", "--quick", "--no-plot",
               "--jobs", str(JOBS), "--image", image, "--before", image,
               "--out", str(out)]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    (out / "run.log").write_text(done.stderr)
    print(f"python -m bench run all --quick --jobs {JOBS}: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stderr[-4000:]
    for scenario in SCENARIOS:  # where the smoke's time goes (with JOBS at once)
        doc = json.loads((out / f"{scenario.result_name}.json").read_text())
        print(f"  {scenario.name}: {doc['when']['seconds']:.0f} s")
    return out


def _results(out: Path, name: str) -> dict[str, Any]:
    doc = json.loads((out / f"{BY_NAME[name].result_name}.json").read_text())
    found: dict[str, Any] = doc["results"]
    return found


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_every_scenario_wrote_its_schema_and_declared_cells(quick_run: Path, name: str) -> None:
    scenario = BY_NAME[name]
    doc = json.loads((quick_run / f"{scenario.result_name}.json").read_text())
    assert schema.problems(doc, scenario) == []
    assert doc["quick"] is True
    assert doc["command"].startswith(f"python -m bench run {name} --quick")
    assert doc["config"] == schema.as_json(scenario.quick)


# --- sweep, overhead, startup -----------------------------------------------------


def test_sweep_has_every_cell(quick_run: Path) -> None:
    from bench import sweep  # noqa: PLC0415

    data = _results(quick_run, "sweep")
    config = data["config"]
    assert config["limits"] == ["cpus=1"]
    assert config["modes"] == ["defaults", "auto", "manual 1/1"]
    for run in data["runs"]:
        assert "error" not in run, run.get("error")
        assert set(run["result"]["workloads"]) == set(sweep.WORKLOADS)
        for result in run["result"]["workloads"].values():
            assert result["calls"] > 0
            assert all(_number(result[k]) for k in ("throughput", "p50_ms", "p99_ms"))
            assert result["windows"] == config["rounds"]  # every round of every workload
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


def test_defaults_mode_bypasses_the_entrypoint(quick_run: Path) -> None:
    runs = _results(quick_run, "sweep")["runs"]
    threads = {r["mode"]: r["result"]["threads"] for r in runs}
    assert "TF_NUM_INTRAOP_THREADS" not in threads["defaults"]["env"]
    assert threads["defaults"]["getters"] == {"intra_op": 0, "inter_op": 0}
    assert threads["auto"]["getters"] == {"intra_op": 1, "inter_op": 1}
    assert threads["manual 1/1"]["env"]["TF_NUM_INTEROP_THREADS"] == "1"


def test_overhead_has_every_measurement(quick_run: Path) -> None:
    data = _results(quick_run, "overhead")
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


def test_startup_measures_the_hand_off(quick_run: Path) -> None:
    data = _results(quick_run, "startup")
    assert data["rounds"] == BY_NAME["startup"].quick.rounds
    for figures in data["commands"].values():
        assert all(_number(v) for v in figures.values()), figures


# --- serving, swap, grpc, batching, workers -----------------------------------------


def test_serving_has_every_cell(quick_run: Path) -> None:
    from bench import serving  # noqa: PLC0415

    data = _results(quick_run, "serving")
    (cell,) = data["cells"]
    assert (cell["model"], cell["concurrency"]) == ("half_plus_two", 2)
    assert set(cell["modes"]) == set(serving.MODES)
    for mode in serving.MODES:
        assert cell["modes"][mode]["rps"]["median"] > 0
        assert _number(cell["modes"][mode]["p99_ms"]["median"])
        assert cell["modes"][mode]["errors"] == 0
    assert {r["mode"] for r in data["models"][0]["runs"]} == set(serving.MODES)


def test_swap_has_every_phase(quick_run: Path) -> None:
    data = _results(quick_run, "swap")
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
    data = _results(quick_run, "grpc")
    # 2 callers: REST, gRPC on one channel, and one channel per caller (every mode's path)
    assert [(c["model"], c["concurrency"]) for c in data["cells"]] == [("half_plus_two", 2)]
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
    assert _number(data["cells"][0]["channels_vs_grpc"]["rps"]["median"])


def test_batching_has_every_cell(quick_run: Path) -> None:
    from bench import batching  # noqa: PLC0415

    data = _results(quick_run, "batching")
    (cell,) = data["cells"]
    assert (cell["cpus"], cell["model"], cell["concurrency"]) == ("1", "half_plus_two", 2)
    for mode in batching.MODES:
        assert cell[mode]["rps"] > 0
        assert _number(cell[mode]["p99_ms"])
    assert cell["on"]["mean_batch_rows"] >= 1
    (result,) = data["results"]
    assert result["limits"]["model_rows_per_s"] > 0
    assert result["limits"]["bare"]["rps"] > 0


def test_workers_answer_every_cell(quick_run: Path) -> None:
    for run in _results(quick_run, "workers")["runs"]:
        assert run["errors"] == 0, run
        assert run["requests"] > 0
        assert all(_number(run[k]) for k in ("rps", "p50_ms", "p99_ms"))


def test_processes_every_arm_answered_and_was_measured(quick_run: Path) -> None:
    data = _results(quick_run, "processes")
    assert {run["arm"] for run in data["runs"]} == {"one@2", "frontends@2"}
    for run in data["runs"]:
        assert run["errors"] == 0, run
        assert run["requests"] > 0, run
        assert all(_number(run[k]) for k in ("rps", "cpus", "p50_ms", "memory_mb")), run
        assert run["idle_memory_mb"] > 0, run
    assert {run["protocol"] for run in data["runs"]} == {"rest"}  # the quick run's
    assert [run for run in data["runs"] if run.get("connections") == 1]
    (rest,) = [c for c in data["cells"] if c.get("protocol") == "rest"]
    assert _number(rest["frontends@2 / one@2"])


# --- cost, profiles, app_cost, v2 ------------------------------------------------------


def test_cost_every_arm_of_every_cell_ran_with_right_answers(quick_run: Path) -> None:
    for run in _results(quick_run, "cost")["runs"]:
        assert run["answer_ok"], run  # the first answer matched the SavedModel's output
        assert run["errors"] == 0, run["error_kinds"]
        assert run["ok"] > 0
        assert all(_number(run[k]) for k in ("rps", "p50_ms", "p99_ms", "server_cpu_s"))
        assert run["server_cpu_ms_per_request"] > 0


def test_cost_every_goal_has_its_ratio(quick_run: Path) -> None:
    from bench import cost  # noqa: PLC0415

    data = _results(quick_run, "cost")
    cells = {(c["part"], c["model"], c["concurrency"]): c for c in data["cells"]}
    for model in cost.QUICK.models:
        for concurrency in cost.QUICK.concurrencies:
            cell = cells["cost", model, concurrency]
            assert set(cell["arms"]) == set(cost.ARMS)
            for ratios in cell["ratios"].values():
                assert all(_number(v) for v in ratios.values()), ratios
            assert set(cell["goals"]) == {
                "rest_cpu_vs_floor",
                "grpc_cpu_vs_aio",
                "grpc_cpu_vs_threaded",
            }
            for goal in cell["goals"].values():
                assert _number(goal["value"])
                assert isinstance(goal["met"], bool)
    (batching,) = [c for c in data["cells"] if c["part"] == "batching"]
    assert set(batching["arms"]) == set(cost.BATCH_ARMS)
    assert all(_number(v) for v in batching["ratios"]["on_vs_off"].values())
    assert set(batching["goals"]) == {"rps", "p99"}  # at 2 connections: the 32's goals


def test_cost_measures_the_model_call_and_the_edges(quick_run: Path) -> None:
    from bench import cost  # noqa: PLC0415

    data = _results(quick_run, "cost")
    calls = data["calls"]
    assert set(calls) == set(cost.MODELS)
    for model in calls.values():
        assert model["same_answer"]  # the Session callable and the function agree
        for path in ("session_callable", "saved_model_function"):
            assert model[path]["wall_us"] > 0
            assert model[path]["cpu_us"] > 0
    (run,) = data["edges"]["runs"]
    assert run["ready_s"] > 0
    assert run["rss_idle_mib"] > 0
    assert run["rss_load_peak_mib"] >= run["rss_idle_mib"]
    assert run["load_rps"] > 0
    for target in cost.TARGETS:
        assert _number(data["idle_cpu_s_per_s"][target])


def test_cost_table_renders(quick_run: Path) -> None:
    from bench import cost  # noqa: PLC0415

    text = cost.table(_results(quick_run, "cost"))
    for model in cost.MODELS:
        assert f"| {model} |" in text
    assert "| batching (MLP, REST) |" in text
    assert "MLP alone" in text


def test_profiles_cover_both_protocols(quick_run: Path) -> None:
    from bench import profiles  # noqa: PLC0415

    data = _results(quick_run, "profiles")
    recorded = quick_run / "profiles"
    assert [(c["mode"], c["model"]) for c in data["cells"]] == list(BY_NAME["profiles"].quick.cells)
    for cell in data["cells"]:
        assert (recorded / f"{cell['name']}.svg").read_text().lstrip().startswith("<?xml")
        speedscope = json.loads((recorded / f"{cell['name']}.speedscope.json").read_text())
        assert speedscope["profiles"], cell["name"]
        assert cell["samples"] > 0
        assert math.isclose(sum(cell["categories"].values()), 1.0, abs_tol=0.01)
        assert _number(cell["cpu_us_per_request"])
        assert _number(cell["python_visible"])
        assert cell["rps"] > 0
    assert data["py_spy"]["version"] == profiles.PYSPY


def test_app_cost_measures_both_apps(quick_run: Path) -> None:
    data = _results(quick_run, "app_cost")
    assert sorted(data) == ["bare_us", "server_us"]
    assert all(value > 0 for value in data.values())


def test_v2_every_arm_of_every_cell_ran_with_right_answers(quick_run: Path) -> None:
    from bench import v2_cost  # noqa: PLC0415

    data = _results(quick_run, "v2")
    runs = data["runs"]
    assert len(runs) == len(BY_NAME["v2"].cells(v2_cost.QUICK)) * v2_cost.QUICK.reps
    for run in runs:
        assert run["answer_ok"], run  # the first answer matched the SavedModel's output
        assert run["errors"] == 0, run["error_kinds"]
        assert run["ok"] > 0
        assert all(_number(run[k]) for k in ("rps", "p50_ms", "p99_ms", "server_cpu_s"))
        assert run["server_cpu_ms_per_request"] > 0
    assert data["arms"] == {arm: {"target": t, "mode": m} for arm, (t, m) in v2_cost.ARMS.items()}
    assert _number(data["server_idle_cpu_s_per_s"])


def test_v2_every_cell_has_its_ratios(quick_run: Path) -> None:
    from bench import v2_cost  # noqa: PLC0415

    data = _results(quick_run, "v2")
    config = v2_cost.QUICK
    cells = {(c["model"], c["concurrency"]): c for c in data["cells"]}
    assert set(cells) == {(m, c) for m in config.models for c in config.concurrencies}
    others = set(v2_cost.ARMS) - {v2_cost.BASE}
    for cell in cells.values():
        assert set(cell["arms"]) == set(v2_cost.ARMS)
        for stats in cell["arms"].values():
            assert _number(stats["server_cpu_ms_per_request"]["median"])
            assert _number(stats["rps"]["median"])
        ratios = cell["ratios"]
        assert set(ratios["cpu_vs_v1_rest"]) == others
        assert set(ratios["rps_vs_v1_rest"]) == others
        assert all(_number(v) for v in ratios["cpu_vs_v1_rest"].values()), ratios
        assert all(_number(v) for v in ratios["rps_vs_v1_rest"].values()), ratios
        assert set(ratios["v2_grpc_vs_tfs_grpc"]) == {"cpu", "rps", "p99"}
        assert all(_number(v) for v in ratios["v2_grpc_vs_tfs_grpc"].values()), ratios


def test_v2_table_renders(quick_run: Path) -> None:
    from bench import v2_cost  # noqa: PLC0415

    text = v2_cost.table(_results(quick_run, "v2"))
    for model in v2_cost.QUICK.models:
        assert f"| {model} |" in text
    for arm in v2_cost.ARMS:
        assert f" {arm} |" in text
    assert "v2 gRPC / TFS gRPC" in text


# --- session_call, request_memory, soak, object_store, before_after ---------------------


def test_session_calls_measure_both_paths_on_every_model(quick_run: Path) -> None:
    from bench import session_call  # noqa: PLC0415

    calls = _results(quick_run, "session_call")["calls"]
    assert calls["bundles"] == {
        model: ["SessionBundle", "FunctionBundle"] for model in session_call.MODELS
    }
    assert set(calls["same_answers"]) == {
        f"{model} batch {batch}" for model in session_call.MODELS for batch in (1, 64)
    }
    assert all(calls["same_answers"].values()), calls["largest_difference"]
    cells = {(c["model"], c["batch"], c["level"]): c for c in calls["cells"]}
    assert set(cells) == {
        (model, batch, level)
        for model in session_call.MODELS
        for batch in (1, 64)
        for level in ("run", "predict")
    }
    for cell in cells.values():
        assert set(cell["paths"]) == {"session", "tf.saved_model.load"}
        for path in cell["paths"].values():
            assert path["calls"] > 0
            assert all(_number(path[k]) for k in ("median_us", "p99_us", "calls_per_cpu_s"))
        assert _number(cell["session_vs_tf2"])


def test_session_profile_covers_both_paths(quick_run: Path) -> None:
    profile = _results(quick_run, "session_call")["profile"]
    assert set(profile) == {"session", "tf.saved_model.load"}
    for path in profile.values():
        assert _number(path["profiled_us_per_call"])
        assert path["top_own_time"], path
        assert all(_number(row["us_per_call"]) for row in path["top_own_time"])


def test_session_servers_answer_every_cell_on_both_loaders(quick_run: Path) -> None:
    served = _results(quick_run, "session_call")["servers"]
    for run in served["runs"]:
        assert run["answer_ok"], run  # the first answer matched the SavedModel's output
        assert run["errors"] == 0, run["error_kinds"]
        assert all(_number(run[k]) for k in ("rps", "p50_ms", "p99_ms"))
    for cell in served["cells"]:
        assert _number(cell["session_vs_tf2"]["rps"]), cell


def test_session_startup_is_measured_for_each_model_and_loader(quick_run: Path) -> None:
    from bench import session_call  # noqa: PLC0415

    summary = _results(quick_run, "session_call")["startup"]["summary"]
    assert set(summary) == set(session_call.QUICK.startup_models)
    for by_loader in summary.values():
        assert set(by_loader) == set(session_call.LOADERS)
        for figures in by_loader.values():
            assert all(_number(value) for value in figures.values()), figures


def test_request_memory_answers_every_case(quick_run: Path) -> None:
    for case, found in _results(quick_run, "request_memory")["cases"].items():
        assert found["answer"] in (200, "OK"), (case, found)  # the bounded cases answer
        assert found["peak_bytes"] >= found["idle_bytes"] > 0, case
        assert _number(found["factor"]), case


#: The figures issue 21 asks the soak to report.
SOAK_FIGURES = (
    "requests_answered",
    "good_failed",
    "versions_swapped",
    "reloads_applied",
    "hostile_refused_as_documented",
    "rss_max_mib",
    "rss_grew",
    "healthz_max_ms",
)


def test_soak_every_figure_is_a_number(quick_run: Path) -> None:
    doc = json.loads((quick_run / "soak.json").read_text())
    summary = doc["results"]["summary"]
    assert set(SOAK_FIGURES) <= set(summary)
    for key, value in summary.items():
        assert _number(value) or isinstance(value, bool), (key, value)
    assert doc["command"].startswith("python -m bench run soak ")
    assert doc["config"]["cpus"] == "1"


def test_soak_every_class_and_path_is_counted(quick_run: Path) -> None:
    client = _results(quick_run, "soak")["client"]
    for name, counts in client["hostile"]["classes"].items():
        for key in ("sent", "as_documented", "unexpected"):
            assert _number(counts[key]), (name, key)
        assert all(_number(n) for n in counts["answers"].values()), name
    for key, path in client["good"]["paths"].items():
        for field in ("answered", "correct", "failed", "p50_ms", "p99_ms", "max_ms"):
            assert _number(path[field]), (key, field)
    for section, fields in (
        ("swaps", ("renamed_in", "versions_swapped", "versions_answered")),
        ("reloads", ("file_flips", "file_flips_applied", "applied", "grpc_received")),
        ("deadlines", ("pairs", "ran_in_tensorflow")),
        ("healthz", ("count", "max_ms", "failed")),
    ):
        for field in fields:
            assert _number(client[section][field]), (section, field)


def test_soak_memory_server_and_shutdown_are_recorded(quick_run: Path) -> None:
    data = _results(quick_run, "soak")
    memory = data["memory"]
    assert _number(memory["max_mib"])
    assert isinstance(memory["grew"], bool)
    assert all(len(sample) == 3 for sample in memory["series"])
    log = data["server"]["log"]
    assert _number(log["tracebacks"])
    assert _number(log["grpc_reloads_taken"])
    shutdown = data["shutdown"]
    assert "skipped" in shutdown or (
        _number(shutdown["seconds"]) and isinstance(shutdown["within_grace"], bool)
    )


def test_object_store_arms_ran_or_say_why_not(quick_run: Path) -> None:
    from bench import object_store_clients as osc  # noqa: PLC0415

    (size,) = _results(quick_run, "object_store")["sizes"]
    for run in size["runs"]:
        arm = next(a for a in osc.ARMS if a.name == run["arm"])
        if not osc._importable(arm.module):
            assert run["error"] == osc.NOT_INSTALLED
        elif arm.name != "obstore GCS":  # its failure against the emulator is the record
            assert "error" not in run, run
            assert _number(run["download_s"])


def test_before_after_compares_every_cell(quick_run: Path) -> None:
    data = _results(quick_run, "before_after")
    for run in data["runs"]:
        assert run["answer_ok"], run
        assert run["errors"] == 0, run["error_kinds"]
    for cell in data["cells"]:
        for key in ("rps", "p99_ms", "server_cpu_ms_per_request"):
            assert _number(cell[key]["after_over_before"]), cell
        assert cell["errors"] == {"before": 0, "after": 0}
    assert all(_number(v) for v in data["idle_rss_mib"].values())


def test_the_report_renders_every_scenario(quick_run: Path) -> None:
    text = (quick_run / "results.md").read_text()
    for heading in (
        "## Quota sweep",
        "## Overhead",
        "## Serving under load",
        "## A version swap under load",
        "## gRPC vs REST",
        "## Server-side batching",
        "## Session bundles against `tf.saved_model.load` (`bench/session_call.py`)",
        "## The soak benchmark (`bench/soak.py`)",
    ):
        assert heading in text
    assert "| model | batch | level | Session: µs |" in text
    assert "| failed good requests (goal 0) |" in text
    for scenario in SCENARIOS:
        assert scenario.name in json.dumps(
            json.loads((quick_run / f"{scenario.result_name}.json").read_text())["scenario"]
        )
