"""A smoke of bench/session_call.py (Session bundles against tf.saved_model.load) in the image.

A benchmark, not a timed test: this runs it with --quick and checks that
every part ran, on both loaders, and wrote every cell and figure as a
number. It asserts what is not a timing: each path loaded the bundle it
names, both gave the same answers, and no request failed. It never compares
the two paths' speed; docs/bench/session_call.json holds the figures.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import session_call
from harness.docker import REPO

#: The images this module tests (tests/container/conftest.py): the benchmarks measure the CPU image.
IMAGE_FLAVORS = ("cpu",)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.fixture(scope="module")
def quick_out(
    flavor: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    image: str = request.getfixturevalue("image")
    out = tmp_path_factory.mktemp("session-bench")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.session_call",
            "--quick",
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


@pytest.fixture(scope="module")
def quick_run(quick_out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((quick_out / "session_call.json").read_text())
    return data


def test_calls_measure_both_paths_on_every_model(quick_run: dict[str, Any]) -> None:
    calls = quick_run["calls"]
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


def test_the_profile_covers_both_paths(quick_run: dict[str, Any]) -> None:
    profile = quick_run["profile"]
    assert set(profile) == {"session", "tf.saved_model.load"}
    for path in profile.values():
        assert _number(path["profiled_us_per_call"])
        assert path["top_own_time"], path
        assert all(_number(row["us_per_call"]) for row in path["top_own_time"])


def test_servers_answer_every_cell_on_both_loaders(quick_run: dict[str, Any]) -> None:
    served = quick_run["servers"]
    assert {(r["loader"], r["model"], r["mode"]) for r in served["runs"]} == {
        (loader, model, mode)
        for loader in session_call.LOADERS
        for model in session_call.MODELS
        for mode in session_call.PROTOCOLS
    }
    for run in served["runs"]:
        assert run["answer_ok"], run  # the first answer matched the SavedModel's output
        assert run["errors"] == 0, run["error_kinds"]
        assert all(_number(run[k]) for k in ("rps", "p50_ms", "p99_ms"))
    for cell in served["cells"]:
        assert _number(cell["session_vs_tf2"]["rps"]), cell


def test_startup_is_measured_for_each_model_and_loader(quick_run: dict[str, Any]) -> None:
    summary = quick_run["startup"]["summary"]
    assert set(summary) == set(session_call.STARTUP_MODELS)
    for by_loader in summary.values():
        assert set(by_loader) == set(session_call.LOADERS)
        for figures in by_loader.values():
            assert all(_number(value) for value in figures.values()), figures


def test_the_report_has_the_section(quick_out: Path) -> None:
    text = (quick_out / "results.md").read_text()
    assert "## Session bundles against `tf.saved_model.load` (`bench/session_call.py`)" in text
    assert "| model | batch | level | Session: µs |" in text
