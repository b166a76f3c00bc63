"""Settings for the unit tests.

Hypothesis's per-example deadline (200 ms by default) and its `too_slow`
health check are bounds on a CPU's speed: on a loaded machine one example
that takes longer fails the run (DeadlineExceeded, "Unreliable test
timings", FailedHealthCheck), whatever the code under test does. The tests
never assume a CPU's speed, so neither applies here; a test that must
finish in bounded time says so itself.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from tf_entrypoint import cli

settings.register_profile("unit", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("unit")


@pytest.fixture
def handed_off(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[str, ...], dict[str, str]]]:
    """The hand-offs `cli` would exec (argv, child environment), recorded instead."""
    calls: list[tuple[tuple[str, ...], dict[str, str]]] = []

    def hand_off(argv: tuple[str, ...], env: dict[str, str]) -> int:
        calls.append((argv, env))
        return 0

    monkeypatch.setattr(cli, "hand_off", hand_off)
    return calls
