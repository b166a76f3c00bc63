"""bench/results.py's schema and bench/report.py, on docs/bench/ (the recorded history) and
on made-up results. Never a timing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import report
from bench import results as schema
from bench.common import REPO
from bench.scenarios import BY_NAME, SCENARIOS

HISTORY = REPO / "docs" / "bench"


def test_every_recorded_result_is_still_read_and_rendered() -> None:
    parts = report.load_parts(HISTORY)
    # Every scenario with a file in docs/bench/ (the history) is read, in either form.
    on_disk = {s.name for s in SCENARIOS if (HISTORY / f"{s.result_name}.json").exists()}
    assert set(parts) == on_disk
    assert {"sweep", "overhead", "serving", "swap", "grpc", "batching", "cost", "v2"} <= on_disk
    text = report.markdown(parts)
    for heading in ("## Quota sweep", "## Overhead", "## gRPC vs REST", "## Server-side batching"):
        assert heading in text


def test_docs_benchmarks_md_is_what_the_report_makes_of_it() -> None:
    """docs/benchmarks.md is up to date: ordered by scenario, every block regenerated."""
    docs = REPO / "docs" / "benchmarks.md"
    text = docs.read_text()
    assert report.benchmarks_doc(text, report.load_parts(HISTORY)) == text
    order = [m.group(1) for m in report.HEADING.finditer(text)]
    assert order == [s.name for s in SCENARIOS]


def test_the_report_keeps_prose_and_rewrites_blocks_in_the_registry_order() -> None:
    text = (
        "# Benchmarks\n\nintro\n\n"
        "<!-- scenario: swap -->\n## Swap\n\nprose about the swap\n\n"
        "<!-- figures: swap -->\nold figures\n<!-- /figures -->\n\nafter the block\n\n"
        "<!-- scenario: sweep -->\n## Sweep\n\nsweep prose\n"
    )
    made = report.benchmarks_doc(text, {})
    assert made.index("<!-- scenario: sweep -->") < made.index("<!-- scenario: swap -->")
    assert "prose about the swap" in made
    assert "after the block" in made
    assert "old figures" not in made
    assert "No result yet: `python -m bench run swap`." in made
    # a scenario without a section gets one: its title, what it shows, the block
    assert f"## {BY_NAME['soak'].title}" in made
    assert made.count("<!-- figures: ") == len(SCENARIOS)


def _doc(**results: Any) -> dict[str, Any]:
    scenario = BY_NAME["startup"]
    return schema.document(
        scenario=scenario,
        command="python -m bench run startup --quick",
        quick=True,
        when={
            "started": "2026-11-28T00:00:00Z",
            "finished": "2026-11-28T00:00:01Z",
            "seconds": 1.0,
        },
        machine={"cpu_model": "x", "cpus": 2, "memory_gib": 1.0, "kernel": "6"},
        image=None,
        quiet=None,
        config=scenario.quick,
        results=results,
    )


def test_a_result_is_checked_against_the_schema_and_its_declared_cells() -> None:
    scenario = BY_NAME["startup"]
    commands = {
        "python -c pass": {"median_ms": 20.0, "work_ms": 0.0, "work_vs_python": 0.0},
        "/repo: tf-entrypoint true": {"median_ms": 28.0, "work_ms": 8.0, "work_vs_python": 0.4},
    }
    good = json.loads(json.dumps(_doc(rounds=3, commands=commands)))
    assert schema.problems(good, scenario) == []
    missing = _doc(rounds=3, commands={"python -c pass": commands["python -c pass"]})
    assert any("cells: missing" in p for p in schema.problems(missing, scenario))
    nan = _doc(rounds=3, commands={**commands, "python -c pass": {"median_ms": float("nan")}})
    assert any("not finite" in p for p in schema.problems(nan, scenario))
    del good["machine"]
    assert schema.problems(good, scenario)


def test_a_legacy_file_is_wrapped_in_the_schema(tmp_path: Path) -> None:
    (tmp_path / "swap.json").write_text(
        json.dumps({"machine": {"cpus": 2}, "started": "then", "config": {"reps": 5}})
    )
    doc = schema.load(tmp_path / "swap.json")
    assert doc is not None
    assert doc["schema"] == 0
    assert doc["scenario"] == "swap"
    assert doc["config"] == {"reps": 5}
    assert doc["when"]["started"] == "then"
    assert schema.load(tmp_path / "none.json") is None
