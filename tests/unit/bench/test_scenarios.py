"""bench/scenarios.py: the registry is consistent data; the runner's command line."""

from __future__ import annotations

import dataclasses

import pytest

from bench import __main__ as runner
from bench.scenarios import BY_NAME, SCENARIOS
from harness.models import EXPORTS


def test_names_are_unique_and_every_field_is_filled() -> None:
    assert len(BY_NAME) == len(SCENARIOS)
    for s in SCENARIOS:
        assert s.name.isidentifier(), s.name
        assert s.title
        assert s.shows
        assert s.protocol
        assert s.arms
        assert s.windows


def test_models_are_folders_of_the_model_library() -> None:
    library = {e.name for e in EXPORTS}
    for s in SCENARIOS:
        assert set(s.models) <= library, (s.name, set(s.models) - library)


@pytest.mark.parametrize(
    "scenario", [s for s in SCENARIOS if s.config is not None], ids=lambda s: s.name
)
def test_quick_is_a_smaller_run_of_the_same_config(scenario: object) -> None:
    from bench.scenarios import Scenario  # noqa: PLC0415

    assert isinstance(scenario, Scenario)
    assert type(scenario.quick) is type(scenario.config)
    assert dataclasses.is_dataclass(scenario.config)
    assert scenario.quick != scenario.config
    quick = scenario.cells(scenario.quick)
    assert quick  # a smoke still runs every code path: at least one cell
    assert len(quick) <= len(scenario.cells(scenario.config))


def test_the_scenarios_the_issue_names_are_all_there() -> None:
    assert {
        "sweep", "overhead", "startup", "serving", "swap", "grpc", "batching", "workers",
        "cost", "profiles", "app_cost", "v2", "session_call", "request_memory", "soak",
        "object_store", "before_after", "processes",
    } == set(BY_NAME)  # fmt: skip


def test_unknown_scenarios_and_unmet_needs_are_usage_errors() -> None:
    assert runner.main(["run", "nope"]) == 2
    assert runner.main(["run", "before_after"]) == 2  # needs --before IMAGE


def test_list_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["list"]) == 0
    text = capsys.readouterr().out
    for s in SCENARIOS:
        assert f"\n{s.name} " in "\n" + text


def test_a_result_records_the_command_of_its_scenario_alone() -> None:
    command = "python -m bench run all --quick --image 'a b'"
    assert runner._one(command, "swap") == "python -m bench run swap --quick --image 'a b'"


def test_the_full_profiles_run_records_every_cell_of_profiles_py() -> None:
    from bench import profiles  # noqa: PLC0415

    assert BY_NAME["profiles"].config.cells == profiles.CELLS
    assert set(BY_NAME["profiles"].quick.cells) < set(profiles.CELLS)
