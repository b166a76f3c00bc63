"""A smoke of the soak benchmark (bench/soak.py) against the real image: its structure only.

The soak is a benchmark, run for ten minutes by `make soak`; this runs it
for half a minute with small bodies and checks that the harness runs every
actor and writes soak.json with every counter, each a number, and the
report's section. It never asserts on a figure or a timing: what the server
got right or wrong is the soak's report, not this test's verdict.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import soak, soak_load
from harness.docker import REPO

#: The images this module tests (tests/container/conftest.py): the soak measures the CPU image.
IMAGE_FLAVORS = ("cpu",)

#: The figures issue 21 asks the soak to report.
FIGURES = (
    "requests_answered",
    "good_failed",
    "versions_swapped",
    "reloads_applied",
    "hostile_refused_as_documented",
    "rss_max_mib",
    "rss_grew",
    "healthz_max_ms",
)
GOOD_PATHS = {
    f"{protocol} {path}"
    for protocol in ("rest", "grpc")
    for path in ("plus predict", "cr predict", "cr regress", "cr classify")
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.fixture(scope="module")
def soaked(
    flavor: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    image: str = request.getfixturevalue("image")
    out = tmp_path_factory.mktemp("soak")
    # fmt: off
    argv = [
        sys.executable, "-m", "bench.soak", "--image", image, "--out", str(out),
        "--duration", "30", "--memory", "2g", "--max-body-bytes", str(1 << 20),
        "--swap-every", "3", "--reload-every", "5", "--unreadable-every", "10",
        "--unreadable-for", "3", "--hostile-every", "2", "--bomb-every", "10",
        "--large-every", "15", "--large-burst", "2", "--deadline-every", "8",
        "--poison-every", "12",
    ]
    # fmt: on
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_every_figure_is_a_number(soaked: Path) -> None:
    data = json.loads((soaked / "soak.json").read_text())
    summary = data["summary"]
    assert set(FIGURES) <= set(summary)
    for key, value in summary.items():
        assert _number(value) or isinstance(value, bool), (key, value)
    assert data["command"].startswith("python -m bench.soak ")
    assert data["config"]["cpus"] == "1"


def test_every_class_and_path_is_counted(soaked: Path) -> None:
    client = json.loads((soaked / "soak.json").read_text())["client"]
    classes = client["hostile"]["classes"]
    assert set(classes) == set(soak.CLASSES) | set(soak_load.RELOAD_CLASSES)
    for name, counts in classes.items():
        for key in ("sent", "as_documented", "unexpected"):
            assert _number(counts[key]), (name, key)
        assert all(_number(n) for n in counts["answers"].values()), name
    assert set(client["good"]["paths"]) == GOOD_PATHS
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


def test_memory_server_and_shutdown_are_recorded(soaked: Path) -> None:
    data = json.loads((soaked / "soak.json").read_text())
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


def test_report_has_the_section(soaked: Path) -> None:
    text = (soaked / "results.md").read_text()
    assert "## The soak benchmark (`bench/soak.py`)" in text
    assert "| failed good requests (goal 0) |" in text
