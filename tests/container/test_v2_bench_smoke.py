"""A smoke of bench/v2_cost.py (issue 25's side-by-side figures) in the image.

A benchmark, not a timed test: this runs it with --quick and checks that
every arm of every cell ran on the one server, that every window's first
answer matched the SavedModel's own output (bench/protocol_load.py decodes
each protocol's answer: v1 JSON, v2 JSON, v2 binary, TF Serving's and the
v2 gRPC messages), that no request failed, that every figure and ratio is a
number, and that the table renders. It never compares one protocol's speed
with another's; docs/bench/v2.json holds the figures.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import v2_cost
from tests.container.test_cost_bench_smoke import _number, _run, image_for_bench

#: The images this module tests (tests/container/conftest.py): the benchmarks measure the CPU image.
IMAGE_FLAVORS = ("cpu",)
__all__ = ["image_for_bench"]  # the fixture, shared with the cost benchmark's smoke


@pytest.fixture(scope="module")
def v2_run(image_for_bench: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("v2-bench")
    _run("bench.v2_cost", image_for_bench, out)
    data: dict[str, Any] = json.loads((out / "v2.json").read_text())
    return data


def test_every_arm_of_every_cell_ran_with_right_answers(v2_run: dict[str, Any]) -> None:
    config = v2_cost.QUICK
    assert v2_run["quick"] is True
    expected = {
        (model, concurrency, arm)
        for model in config.models
        for concurrency in config.concurrencies
        for arm in v2_cost.ARMS
    }
    runs = v2_run["runs"]
    assert {(r["model"], r["concurrency"], r["arm"]) for r in runs} == expected
    assert len(runs) == len(expected) * config.reps
    for run in runs:
        assert run["answer_ok"], run  # the first answer matched the SavedModel's output
        assert run["errors"] == 0, run["error_kinds"]
        assert run["ok"] > 0
        assert all(_number(run[k]) for k in ("rps", "p50_ms", "p99_ms", "server_cpu_s"))
        assert run["server_cpu_ms_per_request"] > 0
    assert v2_run["arms"] == {arm: {"target": t, "mode": m} for arm, (t, m) in v2_cost.ARMS.items()}
    assert _number(v2_run["server_idle_cpu_s_per_s"])


def test_every_cell_has_its_ratios(v2_run: dict[str, Any]) -> None:
    config = v2_cost.QUICK
    cells = {(c["model"], c["concurrency"]): c for c in v2_run["cells"]}
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


def test_the_table_renders(v2_run: dict[str, Any]) -> None:
    text = v2_cost.table(v2_run)
    for model in v2_cost.QUICK.models:
        assert f"| {model} |" in text
    for arm in v2_cost.ARMS:
        assert f" {arm} |" in text
    assert "v2 gRPC / TFS gRPC" in text
