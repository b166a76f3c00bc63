"""bench/app_cost.py runs and checks its answers (its figures are in the docs, not a test)."""

from __future__ import annotations

import json

import pytest

from bench import app_cost


def test_app_cost_measures_both_apps_after_checking_their_answers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert app_cost.main(["--requests", "20"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(result) == ["bare_us", "server_us"]
    assert all(value > 0 for value in result.values())
