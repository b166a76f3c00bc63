"""A smoke of bench/cost.py and bench/profiles.py (issue 24's measurements) in the image.

Benchmarks, not timed tests: this runs both with --quick and checks that
every arm of every cell ran, that every window's first answer matched the
SavedModel's own output (protocol_load.py checks it, the floors included),
that no request failed, and that every figure and ratio is a number. It
never compares the server's speed with a floor's; docs/bench/cost.json and
docs/bench/profiles/ hold the figures.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import cost
from harness.docker import REPO

#: The images this module tests (tests/container/conftest.py): the benchmarks measure the CPU image.
IMAGE_FLAVORS = ("cpu",)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _run(module: str, image: str, out: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--quick", "--image", image, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def image_for_bench(flavor: str, request: pytest.FixtureRequest) -> str:
    image: str = request.getfixturevalue("image")
    return image


@pytest.fixture(scope="module")
def cost_run(image_for_bench: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("cost-bench")
    _run("bench.cost", image_for_bench, out)
    data: dict[str, Any] = json.loads((out / "cost.json").read_text())
    return data


@pytest.fixture(scope="module")
def profiles_run(image_for_bench: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("profiles-bench")
    _run("bench.profiles", image_for_bench, out)
    return out


def test_every_arm_of_every_cell_ran_with_right_answers(cost_run: dict[str, Any]) -> None:
    config = cost.QUICK
    expected = {
        ("cost", model, concurrency, arm)
        for model in config.models
        for concurrency in config.concurrencies
        for arm in cost.ARMS
    } | {
        ("batching", cost.BATCH_MODEL, concurrency, arm)
        for concurrency in config.batch_concurrencies
        for arm in cost.BATCH_ARMS
    }
    runs = cost_run["runs"]
    assert {(r["part"], r["model"], r["concurrency"], r["arm"]) for r in runs} == expected
    for run in runs:
        assert run["answer_ok"], run  # the first answer matched the SavedModel's output
        assert run["errors"] == 0, run["error_kinds"]
        assert run["ok"] > 0
        assert all(_number(run[k]) for k in ("rps", "p50_ms", "p99_ms", "server_cpu_s"))
        assert run["server_cpu_ms_per_request"] > 0


def test_every_goal_has_its_ratio(cost_run: dict[str, Any]) -> None:
    cells = {(c["part"], c["model"], c["concurrency"]): c for c in cost_run["cells"]}
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
    (batching,) = [c for c in cost_run["cells"] if c["part"] == "batching"]
    assert set(batching["arms"]) == set(cost.BATCH_ARMS)
    assert all(_number(v) for v in batching["ratios"]["on_vs_off"].values())
    assert set(batching["goals"]) == {"rps", "p99"}  # at 2 connections: the 32's goals


def test_the_model_call_and_the_edges_are_measured(cost_run: dict[str, Any]) -> None:
    calls = cost_run["calls"]
    assert set(calls) == set(cost.MODELS)
    for model in calls.values():
        assert model["same_answer"]  # the Session callable and the function agree
        for path in ("session_callable", "saved_model_function"):
            assert model[path]["wall_us"] > 0
            assert model[path]["cpu_us"] > 0
    (run,) = cost_run["edges"]["runs"]
    assert run["ready_s"] > 0
    assert run["rss_idle_mib"] > 0
    assert run["rss_load_peak_mib"] >= run["rss_idle_mib"]
    assert run["load_rps"] > 0
    for target in cost.TARGETS:
        assert _number(cost_run["idle_cpu_s_per_s"][target])


def test_the_table_renders(cost_run: dict[str, Any]) -> None:
    text = cost.table(cost_run)
    for model in cost.MODELS:
        assert f"| {model} |" in text
    assert "| batching (MLP, REST) |" in text
    assert "MLP alone" in text


def test_profiles_cover_both_protocols(profiles_run: Path) -> None:
    data = json.loads((profiles_run / "profiles.json").read_text())
    from bench import profiles  # noqa: PLC0415

    assert [(c["mode"], c["model"]) for c in data["cells"]] == list(profiles.CELLS)
    for cell in data["cells"]:
        assert (profiles_run / f"{cell['name']}.svg").read_text().lstrip().startswith("<?xml")
        speedscope = json.loads((profiles_run / f"{cell['name']}.speedscope.json").read_text())
        assert speedscope["profiles"], cell["name"]
        assert cell["samples"] > 0
        assert math.isclose(sum(cell["categories"].values()), 1.0, abs_tol=0.01)
        assert _number(cell["cpu_us_per_request"])
        assert _number(cell["python_visible"])
        assert cell["rps"] > 0
    assert data["py_spy"]["version"] == profiles.PYSPY
