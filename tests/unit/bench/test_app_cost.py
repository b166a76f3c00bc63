"""bench/app_cost.py runs and checks its answers (its figures are in the docs, not a test)."""

from __future__ import annotations

from bench import app_cost


def test_app_cost_measures_both_apps_after_checking_their_answers() -> None:
    result = app_cost.run(app_cost.AppCostConfig(requests=20))
    assert sorted(result) == ["bare_us", "server_us"]
    assert all(value > 0 for value in result.values())
