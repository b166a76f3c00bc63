"""bench/object_store_clients.py's model, analysis and table, on made-up runs.

The benchmark itself needs the bench venv (moto, gcp-storage-emulator and the
clients; `make bench-object-store`): these check its arithmetic, never a timing.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from bench import object_store_clients as osc


def test_the_model_is_saved_model_shaped_with_the_asked_size() -> None:
    files = osc.model_files(0.5)
    assert len(files["variables/variables.data-00000-of-00001"]) == 512 * 1024
    assert {"saved_model.pb", "variables/variables.index"} <= set(files)
    assert any(path.startswith("assets/") for path in files)
    assert osc.model_files(0.5) == files  # the same bytes every run
    assert set(osc.manifest(files)) == set(files)


def test_a_listing_keeps_only_the_prefix_and_strips_it() -> None:
    keys = ["m/1/a", "m/1/v/b", "m/10/a", "m/1"]
    assert osc._relative(keys, "m/1") == ["a", "v/b"]


def test_server_packages_are_the_lock_names_normalized(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    lock.write_text(
        "grpcio==1.0 \\\n    --hash=sha256:00\nGoogle_Pasta==0.2 ; python_version < '4'\n# c\n"
    )
    assert osc.server_packages(lock) == {"grpcio", "google-pasta"}


def _run(arm: str, rep: int, download_s: float) -> dict[str, Any]:
    return {
        "arm": arm,
        "rep": rep,
        "client_s": 0.1,
        "rss_after_import_kib": 10240,
        "list_s": [0.5, 0.01 * (rep + 1), 0.01 * (rep + 1)],
        "download_s": download_s,
        "bytes": 10_000_000,
        "peak_rss_kib": 20480,
    }


FAILED = (
    "GenericError: Error performing list request: Error performing GET "
    "http://127.0.0.1:1/b?list-type=2&prefix=m in 1s - Server returned non-2xx status "
    "code: 501 Not Implemented: \n\nDebug"
)


def test_analysis_takes_medians_and_keeps_the_failure_as_a_failure() -> None:
    runs = [_run("obstore S3", rep, d) for rep, d in enumerate([1.0, 2.0, 4.0])]
    runs.append({"arm": "obstore GCS", "rep": 0, "error": FAILED, "peak_rss_kib": 1})
    cells = osc.analyse(runs, 10_000_000)
    s3 = cells["obstore S3"]
    assert (s3["runs"], s3["ok"]) == (3, 3)
    assert s3["download_s"] == 2.0
    assert s3["download_mb_s"] == 5.0
    assert s3["first_list_ms"] == 500.0
    assert s3["list_ms"] == pytest.approx(20.0)  # the later listings, the first apart
    assert s3["peak_rss_mib"] == 20.0
    gcs = cells["obstore GCS"]
    assert (gcs["ok"], gcs["errors"]) == (0, [FAILED])
    assert "list_ms" not in gcs
    assert cells["s3fs (fsspec)"] == {"runs": 0, "ok": 0}


def test_the_tables_have_a_row_per_client_and_per_size_and_arm() -> None:
    runs = [_run(arm.name, 0, 1.0) for arm in osc.ARMS if arm.name != "obstore GCS"]
    runs.append({"arm": "obstore GCS", "rep": 0, "error": FAILED, "peak_rss_kib": 1})
    size = {"bytes": 10_000_000, "arms": osc.analyse(runs, 10_000_000)}
    data = {
        "sizes": [size, size],
        "import_ms": {arm.module: 100.0 for arm in osc.ARMS},
        "installed": {arm.dist: {"bytes": 2_000_000} for arm in osc.ARMS},
    }
    clients, arms = (part.splitlines() for part in osc.table(data).split("\n\n"))
    assert len(clients) == 2 + len({arm.dist for arm in osc.ARMS})
    assert "| obstore | 100 ms | 2.0 MB |" in clients
    assert len(arms) == 2 + 2 * len(osc.ARMS)
    assert all(row.count("|") == arms[0].count("|") for row in arms)
    failed = next(row for row in arms if "obstore GCS" in row)
    assert "GET ?list-type=2 answered 501 Not Implemented" in failed
    s3fs = next(row for row in arms if "s3fs" in row)
    assert "| 1.00 s | 10 | 20 MiB (10) |" in s3fs  # 10 MB in 1 s; peak and after import


def test_an_arm_not_installed_is_a_row_that_says_so() -> None:
    """A --quick smoke in the dev venv (no obstore): the arm ran as failed, named why."""
    runs = [_run(arm.name, 0, 1.0) for arm in osc.ARMS if arm.dist != "obstore"]
    runs += [{"arm": arm.name, "rep": 0, "error": osc.NOT_INSTALLED} for arm in osc.ARMS
             if arm.dist == "obstore"]  # fmt: skip
    size = {"bytes": 10_000_000, "arms": osc.analyse(runs, 10_000_000)}
    data = {
        "sizes": [size],
        "import_ms": {arm.module: 100.0 for arm in osc.ARMS if arm.dist != "obstore"},
        "installed": {arm.dist: {"bytes": 0} for arm in osc.ARMS},
    }
    clients, arms = (part.splitlines() for part in osc.table(data).split("\n\n"))
    assert f"| obstore | {osc.NOT_INSTALLED} | |" in clients
    assert all(osc.NOT_INSTALLED in row for row in arms if "obstore" in row)


def test_a_plain_error_is_cut_short() -> None:
    assert osc.short_error("OSError: x | y" * 20).startswith("OSError: x / y")
    assert len(osc.short_error("E" * 500)) == 90


@pytest.mark.parametrize(
    "given",
    [{"reps": 0}, {"size_mib": (1.0, 0.0)}, {"lists": -1}, {"import_reps": 0}],
)
def test_nonpositive_counts_are_refused(given: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        osc.ObjectStoreConfig(**given)


def test_outside_the_bench_venv_it_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(osc, "_importable", lambda module: module != "s3fs")
    with pytest.raises(RuntimeError, match="s3fs missing: this needs the bench venv"):
        osc.run_all(osc.ObjectStoreConfig())


def test_the_runner_skips_it_outside_the_bench_venv_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench.__main__ import unmet  # noqa: PLC0415
    from bench.scenarios import BY_NAME  # noqa: PLC0415

    monkeypatch.setattr(osc, "_importable", lambda module: module != "s3fs")
    args = argparse.Namespace(before="", quick=False)
    assert unmet(BY_NAME["object_store"], args) == "needs the bench venv (s3fs missing)"
