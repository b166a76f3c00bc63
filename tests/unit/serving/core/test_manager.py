"""Model versions while serving: policies, swaps, unloads, labels, live config (no TensorFlow)."""

from __future__ import annotations

import collections
import errno
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.unit.serving.core.manager_helpers import (
    Fake,
    Loader,
    export,
    manager_for,
    route,
    sample,
    served,
    spec,
    states,
)
from tf_entrypoint.serving.codec import metadata
from tf_entrypoint.serving.core import manager as manager_module
from tf_entrypoint.serving.core import repository
from tf_entrypoint.serving.core import types as p
from tf_entrypoint.serving.core.errors import Code, ConfigError, ServingError
from tf_entrypoint.serving.core.manager import Manager
from tf_entrypoint.serving.core.metrics import Metrics
from tf_entrypoint.serving.core.model_specs import (
    All,
    Latest,
    ModelSpec,
    Policy,
    ServingConfig,
    Specific,
)
from tf_entrypoint.serving.core.models import Version
from tf_entrypoint.serving.core.submission import LoadRetries
from tf_entrypoint.serving.core.types import AVAILABLE, END, LOADING, UNLOADING


def test_a_new_version_is_loaded_then_the_old_one_unloaded(tmp_path: Path) -> None:
    export(tmp_path, 1)
    loader = Loader(warmup_records=3)
    manager, metrics = manager_for(spec(tmp_path), loader=loader)
    assert manager.initial_load(1, lambda: False) == ""
    assert (served(manager), states(manager)) == (1, {1: AVAILABLE})
    export(tmp_path, 2)
    assert manager.sync() == []
    assert served(manager) == 2
    assert states(manager) == {2: AVAILABLE, 1: END}
    assert loader.loaded == [("m", 1), ("m", 2)]
    assert sample(metrics, "serving_model_loads_total", model="m", result="success") == 2
    assert sample(metrics, "serving_model_unloads_total", model="m", result="success") == 1
    assert sample(metrics, "serving_model_warmup_records_total", model="m") == 6
    assert sample(metrics, "serving_model_load_duration_seconds_count", model="m") == 2
    assert sample(metrics, "serving_model_versions_available", model="m") == 1
    assert sample(metrics, "serving_model_version", model="m") == 2
    # The status API lists every version newest first, like TF Serving's.
    body = metadata.status_body(manager.status(route("status")))
    assert [v["version"] for v in body["model_version_status"]] == ["2", "1"]


def test_a_retired_version_finishes_its_requests_before_it_is_unloaded(tmp_path: Path) -> None:
    export(tmp_path, 1)
    manager, metrics = manager_for(spec(tmp_path))
    manager.initial_load(1, lambda: False)
    with manager.lease(route()) as running:
        assert running.number == 1
        export(tmp_path, 2)
        manager.sync()
        # New requests go to 2 at once; 1 stays loaded for the request running on it.
        assert served(manager) == 2
        assert states(manager) == {2: AVAILABLE, 1: UNLOADING}
        assert running.servable is not None
        assert sample(metrics, "serving_model_unloads_total", model="m", result="success") == 0
        with pytest.raises(ServingError) as gone:
            manager.check(route(version=1))
        assert (gone.value.code, gone.value.message) == (
            Code.NOT_FOUND,
            "Servable not found for request: Specific(m, 1)",
        )
    assert states(manager) == {2: AVAILABLE, 1: END}
    assert running.servable is None
    assert sample(metrics, "serving_model_unloads_total", model="m", result="success") == 1


def test_a_broken_new_version_leaves_the_old_one_serving(tmp_path: Path) -> None:
    export(tmp_path, 1)
    loader = Loader()
    manager, metrics = manager_for(spec(tmp_path), loader=loader)
    manager.initial_load(1, lambda: False)
    broken = export(tmp_path, 2)
    loader.broken.add(broken)
    errors = manager.sync()
    assert len(errors) == 1
    assert "variables is incomplete" in errors[0]
    assert served(manager) == 1
    status = {s.version: s for s in manager.status(route("status"))}
    assert (status[2].state, status[2].error_code) == (END, "UNKNOWN")
    assert "variables is incomplete" in status[2].error_message
    assert status[1].state == AVAILABLE
    assert sample(metrics, "serving_model_loads_total", model="m", result="failure") == 1
    # Not retried while the same files are there ...
    manager.sync()
    assert loader.loaded.count(("m", 2)) == 1
    # ... but retried once the directory is replaced (the recommended rename).
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    (fixed / "saved_model.pb").write_bytes(b"")
    (broken / "saved_model.pb").unlink()
    broken.rmdir()
    fixed.rename(broken)
    loader.broken.clear()
    assert manager.sync() == []
    assert served(manager) == 2
    assert states(manager) == {2: AVAILABLE, 1: END}


def test_an_incomplete_directory_is_not_a_version(tmp_path: Path) -> None:
    export(tmp_path, 1)
    manager, _ = manager_for(spec(tmp_path))
    manager.initial_load(1, lambda: False)
    (tmp_path / "m" / "2").mkdir()  # no saved_model.pb yet
    (tmp_path / "m" / ".tmp-3").mkdir()
    manager.sync()
    assert states(manager) == {1: AVAILABLE}


def test_policy_all_serves_every_version_and_unloads_deleted_ones(tmp_path: Path) -> None:
    for version in (1, 2, 3):
        export(tmp_path, version)
    manager, metrics = manager_for(spec(tmp_path, All()))
    manager.initial_load(1, lambda: False)
    assert states(manager) == {3: AVAILABLE, 2: AVAILABLE, 1: AVAILABLE}
    assert [served(manager, route(version=v)) for v in (1, 2, 3)] == [1, 2, 3]
    assert served(manager) == 3
    assert sample(metrics, "serving_model_versions_available", model="m") == 3
    (tmp_path / "m" / "2" / "saved_model.pb").unlink()
    manager.sync()
    assert states(manager) == {3: AVAILABLE, 2: END, 1: AVAILABLE}


def test_each_load_of_a_version_is_numbered_apart(tmp_path: Path) -> None:
    """Version.load tells two loads of the same version number apart (a front-end's
    cached description names the load it describes, ipc/engine.py): a version that
    is unloaded and loaded again gets a new number, never one seen before."""
    for version in (1, 2):
        export(tmp_path, version)
    manager, _ = manager_for(spec(tmp_path, All()))
    manager.initial_load(1, lambda: False)

    def loads() -> dict[int, int]:
        found = {}
        for number in (1, 2):
            with manager.lease(route(version=number)) as leased:
                found[number] = leased.load
        return found

    first = loads()
    assert 0 not in first.values()
    assert first[1] != first[2]
    (tmp_path / "m" / "2" / "saved_model.pb").unlink()
    manager.sync()
    assert states(manager) == {2: END, 1: AVAILABLE}
    (tmp_path / "m" / "2" / "saved_model.pb").write_bytes(b"")
    manager.sync()
    again = loads()
    assert again[1] == first[1]
    assert again[2] not in first.values()


def test_policy_latest_n(tmp_path: Path) -> None:
    for version in (1, 2, 3):
        export(tmp_path, version)
    manager, _ = manager_for(spec(tmp_path, Latest(2)))
    manager.initial_load(1, lambda: False)
    assert states(manager) == {3: AVAILABLE, 2: AVAILABLE}
    export(tmp_path, 4)
    manager.sync()
    assert states(manager) == {4: AVAILABLE, 3: AVAILABLE, 2: END}


def test_policy_specific(tmp_path: Path) -> None:
    for version in (1, 2, 3):
        export(tmp_path, version)
    loader = Loader()
    manager, _ = manager_for(spec(tmp_path, Specific((1, 3))), loader=loader)
    manager.initial_load(1, lambda: False)
    assert states(manager) == {3: AVAILABLE, 1: AVAILABLE}
    assert sorted(v for _, v in loader.loaded) == [1, 3]
    export(tmp_path, 4)
    manager.sync()
    assert states(manager) == {3: AVAILABLE, 1: AVAILABLE}


def test_specific_versions_none_of_which_appears_are_fatal_at_start(tmp_path: Path) -> None:
    # Moved from "version 7 never appears" with (1, 7): as TF Serving, start-up
    # now ends once any listed version serves, so only none of them is fatal.
    export(tmp_path, 1)
    manager, _ = manager_for(spec(tmp_path, Specific((5, 7))))
    fatal = manager.initial_load(0.2, lambda: False, poll=0.05)
    assert fatal == (
        "test.config:1 (model 'm'): model_version_policy.specific.versions: version(s) 5, 7 "
        f"did not appear in {tmp_path / 'm'} within 0.2 s (on disk: 1)"
    )


def test_specific_starts_once_any_listed_version_serves(tmp_path: Path) -> None:
    export(tmp_path, 1)
    manager, _ = manager_for(spec(tmp_path, Specific((1, 7))))
    assert manager.initial_load(0.2, lambda: False, poll=0.05) == ""
    assert states(manager) == {1: AVAILABLE}
    assert manager.readiness() == ([], {"m": [1]})
    export(tmp_path, 7)  # the other one arrives later, as a new version does
    manager.sync()
    assert states(manager) == {7: AVAILABLE, 1: AVAILABLE}


def test_without_a_wait_start_up_waits_for_a_first_version(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    manager, _ = manager_for(spec(tmp_path))
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the version appears during the third wait
        slept.append(seconds)
        if len(slept) == 3:
            export(tmp_path, 1)

    assert manager.initial_load(None, lambda: False, poll=0.05, sleep=sleep) == ""
    assert len(slept) == 3
    assert states(manager) == {1: AVAILABLE}


def test_a_saved_model_in_the_model_directory_is_version_1(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "saved_model.pb").write_bytes(b"")
    loader = Loader()
    manager, _ = manager_for(spec(tmp_path), loader=loader)
    assert manager.initial_load(1, lambda: False) == ""
    assert states(manager) == {1: AVAILABLE}
    assert loader.loaded == [(tmp_path.name, 1)]  # the model directory itself
    export(tmp_path, 2)  # a version folder appears: it is the model's versions from now on
    manager.sync()
    assert states(manager) == {2: AVAILABLE, 1: END}


class Clock:
    """A manager clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_failed_load_is_retried_as_tf_serving_retries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    export(tmp_path, 1)
    loader = Loader()
    clock = Clock()
    metrics = Metrics()
    manager = Manager(loader, metrics, metadata.rest_answer,
                      retries=LoadRetries(2, 60.0), clock=clock)  # fmt: skip
    manager.apply(ServingConfig((spec(tmp_path),)), initial=True)
    assert manager.initial_load(1, lambda: False) == ""
    broken = export(tmp_path, 2)
    loader.broken.add(broken)
    caplog.set_level(logging.INFO, "tf_entrypoint.serving")
    assert manager.sync() == []  # not final: no error yet
    status = {s.version: s for s in manager.status(route("status"))}
    assert status[2].state == LOADING
    assert "variables is incomplete" in status[2].error_message
    assert served(manager) == 1  # the loaded version keeps serving
    assert manager.next_retry() == 160.0
    assert any("retry 1 of 2 in 60 s" in r.getMessage() for r in caplog.records)
    manager.sync(retries_only=True)  # not due yet
    assert loader.loaded.count(("m", 2)) == 1
    clock.now = 160.0
    assert manager.sync(retries_only=True) == []
    assert loader.loaded.count(("m", 2)) == 2
    assert any("retry 2 of 2 in 60 s" in r.getMessage() for r in caplog.records)
    clock.now = 220.0
    errors = manager.sync(retries_only=True)  # the last retry fails: END, as today
    assert loader.loaded.count(("m", 2)) == 3
    assert errors == [f"model 'm': loading {broken} failed: OSError: {broken}/variables is "
                      "incomplete"]  # fmt: skip
    assert states(manager) == {2: END, 1: AVAILABLE}
    assert manager.next_retry() == float("inf")
    assert sample(metrics, "serving_model_loads_total", model="m", result="failure") == 3
    clock.now = 1000.0
    manager.sync()  # the same files: not tried again
    assert loader.loaded.count(("m", 2)) == 3


def test_a_retry_that_succeeds_serves_and_start_up_waits_for_it(tmp_path: Path) -> None:
    broken = export(tmp_path, 1)
    loader = Loader()
    loader.broken.add(broken)
    clock = Clock()
    manager = Manager(loader, Metrics(), metadata.rest_answer,
                      retries=LoadRetries(5, 30.0), clock=clock)  # fmt: skip
    manager.apply(ServingConfig((spec(tmp_path),)), initial=True)
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # time passes; the second retry finds it fixed
        slept.append(seconds)
        clock.now += seconds
        if len(slept) == 2:
            loader.broken.clear()

    assert manager.initial_load(None, lambda: False, poll=100, sleep=sleep) == ""
    assert slept == [30.0, 30.0]
    assert loader.loaded == [("m", 1)] * 3
    status = manager.status(route("status"))
    assert [(s.state, s.error_code) for s in status] == [(AVAILABLE, "OK")]


def test_a_pending_retry_of_an_unwanted_version_is_cancelled(tmp_path: Path) -> None:
    export(tmp_path, 1)
    loader = Loader()
    manager = Manager(loader, Metrics(), metadata.rest_answer,
                      retries=LoadRetries(5, 30.0), clock=Clock())  # fmt: skip
    manager.apply(ServingConfig((spec(tmp_path),)), initial=True)
    manager.initial_load(1, lambda: False)
    broken = export(tmp_path, 2)
    loader.broken.add(broken)
    manager.sync()
    assert states(manager)[2] == LOADING
    (broken / "saved_model.pb").unlink()
    broken.rmdir()
    manager.sync()
    assert states(manager) == {2: END, 1: AVAILABLE}
    assert manager.next_retry() == float("inf")


def test_no_version_and_a_failed_first_load_are_fatal_at_start(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    manager, _ = manager_for(spec(tmp_path))
    fatal = manager.initial_load(0.1, lambda: False, poll=0.05)
    assert fatal.startswith(f"no version of model 'm' appeared in {tmp_path / 'm'} within 0.1 s")
    loader = Loader()
    broken = export(tmp_path, 1)
    loader.broken.add(broken)
    manager, _ = manager_for(spec(tmp_path), loader=loader)
    assert manager.initial_load(1, lambda: False) == (
        f"model 'm': loading {broken} failed: OSError: {broken}/variables is incomplete"
    )


def test_labels_resolve_like_tf_serving(tmp_path: Path) -> None:
    for version in (1, 2):
        export(tmp_path, version)
    manager, _ = manager_for(spec(tmp_path, All(), stable=1, canary=2, future=9))
    manager.initial_load(1, lambda: False)
    assert served(manager, p.Route("predict", "m", None, "stable")) == 1
    assert served(manager, p.Route("predict", "m", None, "canary")) == 2
    with pytest.raises(ServingError) as unknown:
        manager.check(p.Route("predict", "m", None, "nope"))
    assert (unknown.value.code, unknown.value.message) == (
        Code.INVALID_ARGUMENT,
        "Unrecognized servable version label: nope",
    )
    with pytest.raises(ServingError) as unavailable:
        manager.check(p.Route("predict", "m", None, "future"))
    assert (unavailable.value.code, unavailable.value.message) == (
        Code.NOT_FOUND,
        "Servable not found for request: Specific(m, 9)",
    )
    # TF Serving's status API ignores a label: every version is listed.
    assert len(manager.status(p.Route("status", "m", None, "stable"))) == 2


def test_the_config_adds_changes_and_removes_models_live(tmp_path: Path) -> None:
    export(tmp_path, 1, "a")
    export(tmp_path, 1, "b")
    manager, metrics = manager_for(spec(tmp_path, name="a"))
    manager.initial_load(1, lambda: False)
    assert manager.readiness() == ([], {"a": [1]})
    with manager.lease(route(name="a")) as held:
        manager.apply(ServingConfig((spec(tmp_path, name="b"),)))
        assert manager.readiness() == ([], {"b": []})  # added live: not a reason to be unready
        manager.sync()
        assert manager.readiness() == ([], {"b": [1]})
        with pytest.raises(ServingError) as gone:
            manager.check(route(name="a"))
        assert gone.value.code == Code.NOT_FOUND
        assert held.state == UNLOADING
        assert held.servable is not None
    assert held.state == END
    assert sample(metrics, "serving_model_unloads_total", model="a", result="success") == 1
    # A changed policy applies at the next scan.
    export(tmp_path, 2, "b")
    manager.apply(ServingConfig((spec(tmp_path, Specific((1,)), name="b"),)))
    manager.sync()
    assert states(manager, "b") == {1: AVAILABLE}


def test_a_bad_config_on_reload_keeps_the_previous_one(tmp_path: Path) -> None:
    export(tmp_path, 1)
    manager, metrics = manager_for(spec(tmp_path))
    manager.initial_load(1, lambda: False)
    before = manager.config

    def broken() -> ServingConfig:
        raise ConfigError("models.config:3:4: Message type ... has no field named 'nme'")

    manager._reload(broken, lambda: False)
    assert manager.config is before
    assert served(manager) == 1
    assert sample(metrics, "serving_model_config_reloads_total", result="failure") == 1


def test_an_emptied_or_missing_directory_keeps_what_serves(tmp_path: Path) -> None:
    export(tmp_path, 1)
    manager, _ = manager_for(spec(tmp_path))
    manager.initial_load(1, lambda: False)
    (tmp_path / "m" / "1" / "saved_model.pb").unlink()
    manager.sync()
    assert states(manager) == {1: AVAILABLE}
    (tmp_path / "m" / "1").rmdir()
    (tmp_path / "m").rmdir()
    manager.sync()
    assert states(manager) == {1: AVAILABLE}


def test_while_loading_requests_get_503_and_status_says_loading(tmp_path: Path) -> None:
    export(tmp_path, 1)
    release = threading.Event()

    class Slow(Loader):
        def __call__(self, directory: Path, version: int) -> Fake:
            release.wait(5)
            return super().__call__(directory, version)

    manager, _ = manager_for(spec(tmp_path), loader=Slow())
    thread = threading.Thread(target=manager.initial_load, args=(5, lambda: False))
    thread.start()
    deadline = time.monotonic() + 5
    while states_or_none(manager) != {1: LOADING} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert states(manager) == {1: LOADING}
    with pytest.raises(ServingError) as loading:
        manager.check(route())
    assert loading.value.code == Code.UNAVAILABLE
    assert loading.value.retry_after == 1
    assert manager.readiness() == (["m"], {"m": []})
    release.set()
    thread.join(5)
    assert served(manager) == 1


def test_until_the_start_up_models_load_not_found_is_unavailable(tmp_path: Path) -> None:
    """TF Serving opens its ports once the start-up models are loaded, and its
    clients (its own test harness among them) take "Servable not found" as the
    sign that they are: until then, what would be NOT_FOUND is UNAVAILABLE."""
    export(tmp_path, 1)
    export(tmp_path, 1, name="n")
    release = threading.Event()

    class Gated(Loader):
        def __call__(self, directory: Path, version: int) -> Fake:
            if directory.parent.name == "n":
                assert release.wait(30)  # the test sets it
            return super().__call__(directory, version)

    manager, _ = manager_for(spec(tmp_path), spec(tmp_path, name="n"), loader=Gated())
    thread = threading.Thread(target=manager.initial_load, args=(30, lambda: False))
    thread.start()
    try:
        assert wait_until(lambda: served_or_none(manager) == 1)  # m serves, n loads
        for missing in (route(name="missing"), route(version=7)):
            with pytest.raises(ServingError) as starting:
                manager.check(missing)
            assert starting.value.code == Code.UNAVAILABLE
            assert starting.value.message == (
                "The server is starting: model(s) n of its configuration are not available "
                "yet; retry later"
            )
            assert "Servable" not in starting.value.message
            assert starting.value.retry_after == 1
    finally:
        release.set()
        thread.join(30)
    assert served(manager, route(name="n")) == 1
    with pytest.raises(ServingError) as missing_model:
        manager.check(route(name="missing"))
    assert (missing_model.value.code, missing_model.value.message) == (
        Code.NOT_FOUND,
        "Servable not found for request: Latest(missing)",
    )
    # For good: a start-up model that later has no version does not bring it back.
    manager.apply(ServingConfig((spec(tmp_path),)))
    with pytest.raises(ServingError) as after:
        manager.check(route(version=7))
    assert after.value.code == Code.NOT_FOUND


def states_or_none(manager: Manager) -> dict[int, str] | None:
    try:
        return states(manager)
    except ServingError:
        return None


@pytest.mark.parametrize("keep", [1, 2])
def test_swaps_under_concurrent_requests_never_fail_a_request(tmp_path: Path, keep: int) -> None:
    """Eight threads lease and use versions while the manager swaps 40 times.

    Counts, not seconds, so that no machine is too fast or too slow for it:
    each load lasts until the clients have answered 20 requests since it
    began (requests keep coming while a version loads, as with a real one);
    the next swap waits for the new version's first answer; four clients
    hold each version they lease until it is retired (a swap under a request
    in use), and the swaps begin once all four hold version 1.
    """
    export(tmp_path, 1)
    failures: list[str] = []
    answers: collections.Counter[int] = collections.Counter()  # per version
    holding: collections.Counter[int] = collections.Counter()  # holders per version
    retired_in_use = [0]  # requests that held their version while it was retired
    lock = threading.Lock()

    def answered() -> int:
        with lock:
            return sum(answers.values())

    class Busy(Loader):
        def __call__(self, directory: Path, version: int) -> Fake:
            if version > 1:
                wanted = answered() + 20
                if not wait_until(lambda: answered() >= wanted):
                    failures.append(f"no requests were answered while version {version} loaded")
            return super().__call__(directory, version)

    manager, metrics = manager_for(spec(tmp_path, Latest(keep)), loader=Busy())
    manager.initial_load(1, lambda: False)
    stop = threading.Event()

    def client(hold: bool) -> None:
        while not stop.is_set():
            try:
                with manager.lease(route()) as version:
                    servable = version.servable
                    if servable is None or version.state not in (AVAILABLE, UNLOADING):
                        failures.append(f"version {version.number} in state {version.state}")
                        continue
                    if hold:
                        with lock:
                            holding[version.number] += 1
                        while version.state == AVAILABLE and not stop.is_set():
                            time.sleep(0.001)
                        if version.state == UNLOADING:
                            with lock:
                                retired_in_use[0] += 1
                    if version.servable is not servable:  # unloaded while in use
                        failures.append(f"version {version.number} unloaded during a request")
                    result = servable.run(
                        "serving_default", {"x": p.Tensor("DT_FLOAT", (1,), [0.0])}, ["y"]
                    )
                    with lock:
                        answers[int(result["y"].values[0])] += 1
            except ServingError as err:
                failures.append(err.message)

    threads = [threading.Thread(target=client, args=(index < 4,)) for index in range(8)]
    for thread in threads:
        thread.start()
    try:
        assert wait_until(lambda: holding[1] == 4), "the four holding clients never leased"
        for version in range(2, 42):
            export(tmp_path, version)
            manager.sync()
            assert wait_until(functools.partial(lambda v: answers[v] > 0, version)), version
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert failures == []
    assert sorted(answers) == list(range(1, 42))  # every version answered requests
    assert retired_in_use[0] >= 4  # version 1, at least, was swapped out under requests
    assert served(manager) == 41
    unloaded = sample(metrics, "serving_model_unloads_total", model="m", result="success")
    assert unloaded == 41 - len(manager.models()["m"].serving)
    assert all(
        v.servable is None for v in manager.models()["m"].versions.values() if v.state == END
    )


def test_version_records_of_old_versions_are_bounded(tmp_path: Path) -> None:
    export(tmp_path, 0)
    manager, _ = manager_for(spec(tmp_path))
    manager.initial_load(1, lambda: False)
    for version in range(1, 40):
        export(tmp_path, version)
        manager.sync()
    assert len(manager.models()["m"].versions) == 21  # 20 ended + the one serving
    assert isinstance(manager.models()["m"].versions[39], Version)
    assert os.path.isdir(tmp_path / "m" / "0")


def test_submitted_configs_apply_on_the_control_thread(tmp_path: Path) -> None:
    # HandleReloadConfigRequest: the gRPC handler submits, the manager's own
    # thread applies and loads, the future carries the load errors.
    export(tmp_path, 1, "a")
    export(tmp_path, 1, "b")
    broken = export(tmp_path, 1, "c")
    loader = Loader()
    loader.broken.add(broken)
    manager, metrics = manager_for(spec(tmp_path, name="a"), loader=loader)
    stop = threading.Event()
    fatal: list[str] = []
    applied_on: list[str] = []
    original_apply = manager.apply

    def apply(config: ServingConfig, *, initial: bool = False) -> None:
        applied_on.append(threading.current_thread().name)
        original_apply(config, initial=initial)

    manager.apply = apply  # type: ignore[method-assign]
    thread = threading.Thread(
        target=manager.run,
        name="model-manager",
        kwargs={"wait": 5, "file_system_poll": 0, "config_poll": 0, "reload": None,
                "stop": stop, "on_fatal": fatal.append},
    )  # fmt: skip
    thread.start()
    try:
        errors = manager.submit(ServingConfig((spec(tmp_path, name="b"),))).done.result(timeout=10)
        assert errors == []
        assert served(manager, route(name="b")) == 1
        with pytest.raises(ServingError, match=r"Servable not found for request: Latest\(a\)"):
            served(manager, route(name="a"))
        failed = manager.submit(ServingConfig((spec(tmp_path, name="c"),))).done.result(timeout=10)
        assert len(failed) == 1
        assert "variables is incomplete" in failed[0]
        assert applied_on == ["model-manager", "model-manager"]
        assert sample(metrics, "serving_model_config_reloads_total", result="success") == 2
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert fatal == []
    late = manager.submit(ServingConfig((spec(tmp_path, name="a"),)))
    manager._refuse_submitted("the server is stopping")
    with pytest.raises(RuntimeError, match="the server is stopping"):
        late.done.result(timeout=1)


# -- the control thread and the model store (docs/robustness.md)


def _fail_stat_under(
    monkeypatch: pytest.MonkeyPatch, directory: Path, code: int
) -> Callable[[], None]:
    """os.stat raises OSError(`code`) for every path inside `directory` (not for
    `directory` itself, as for a directory another uid wrote with mode 0700: its
    own stat works, a look inside does not). Returns a function that undoes it."""
    real_stat = os.stat
    prefix = str(directory) + os.sep
    failing = [True]

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if failing[0] and os.fspath(path).startswith(prefix):
            raise OSError(code, os.strerror(code), os.fspath(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)

    def undo() -> None:
        failing[0] = False

    return undo


@pytest.mark.parametrize(
    "fault",
    [
        (errno.EACCES, "EACCES", "PERMISSION_DENIED"),
        (errno.ESTALE, "ESTALE", "ABORTED"),
        (errno.EIO, "EIO", "UNKNOWN"),
    ],
    ids=["EACCES", "ESTALE", "EIO"],
)
def test_an_unreadable_version_is_reported_once_and_retried_when_it_changes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fault: tuple[int, str, str],
) -> None:
    code, name, status_code = fault
    export(tmp_path, 1)
    loader = Loader()
    manager, metrics = manager_for(spec(tmp_path), loader=loader)
    assert manager.initial_load(1, lambda: False) == ""
    unreadable = export(tmp_path, 2)
    readable_again = _fail_stat_under(monkeypatch, unreadable, code)
    caplog.set_level(logging.INFO, "tf_entrypoint.serving")
    errors = manager.sync()
    graph = unreadable / "saved_model.pb"
    message = f"cannot read {unreadable}: {os.strerror(code)} ({name}): {graph}"
    assert errors == [f"model 'm': {message}"]
    # The old version keeps serving; the new one is END with the error and a code.
    assert served(manager) == 1
    status = {s.version: s for s in manager.status(route("status"))}
    assert status[2] == p.VersionStatus(2, END, status_code, message)
    assert status[1].state == AVAILABLE
    assert sample(metrics, "serving_model_loads_total", model="m", result="failure") == 1
    logged = [r.getMessage() for r in caplog.records if message in r.getMessage()]
    assert logged == [
        f"model 'm': {message}; still serving version(s) [1]; retried when the directory changes"
    ]
    assert ("m", 2) not in loader.loaded  # no load of a directory that cannot be read
    # The same directory again: not retried, not logged, not counted again.
    assert manager.sync() == []
    assert sample(metrics, "serving_model_loads_total", model="m", result="failure") == 1
    assert len([r for r in caplog.records if message in r.getMessage()]) == 1
    # chmod changes the directory's ctime: retried (still failing: counted again) ...
    unreadable.chmod(0o700)
    assert len(manager.sync()) == 1
    assert sample(metrics, "serving_model_loads_total", model="m", result="failure") == 2
    # ... and once it can be read, loaded and swapped in.
    readable_again()
    unreadable.chmod(0o755)
    assert manager.sync() == []
    assert served(manager) == 2
    assert states(manager) == {2: AVAILABLE, 1: END}


def test_an_unreadable_version_at_start_is_fatal_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unreadable = export(tmp_path, 1)
    _fail_stat_under(monkeypatch, unreadable, errno.EACCES)
    manager, _ = manager_for(spec(tmp_path))
    assert manager.initial_load(1, lambda: False) == (
        f"model 'm': cannot read {unreadable}: Permission denied (EACCES): "
        f"{unreadable / 'saved_model.pb'}"
    )


def test_a_load_failing_with_an_os_error_reports_its_code(tmp_path: Path) -> None:
    broken = export(tmp_path, 1)

    def loader(directory: Path, version: int) -> Fake:
        raise PermissionError(errno.EACCES, "Permission denied", str(directory / "variables"))

    manager, _ = manager_for(spec(tmp_path), loader=loader)  # type: ignore[arg-type]
    manager.initial_load(1, lambda: False)
    assert manager.status(route("status"))[0].error_code == "PERMISSION_DENIED"
    assert str(broken / "variables") in manager.status(route("status"))[0].error_message


def test_version_directories_beyond_int64_are_ignored_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    export(tmp_path, 1)
    timestamp = tmp_path / "m" / "20240101123045000000"  # microseconds: > 2**63 - 1
    timestamp.mkdir()
    (timestamp / "saved_model.pb").write_bytes(b"")
    largest = export(tmp_path, 2**63 - 1)  # int64's largest: a version
    loader = Loader()
    manager, _ = manager_for(spec(tmp_path, All()), loader=loader)
    caplog.set_level(logging.WARNING, "tf_entrypoint.serving")
    assert manager.initial_load(1, lambda: False) == ""
    manager.sync()
    assert states(manager) == {2**63 - 1: AVAILABLE, 1: AVAILABLE}
    assert loader.loaded == [("m", 2**63 - 1), ("m", 1)]
    warnings = [r.getMessage() for r in caplog.records if "does not fit int64" in r.getMessage()]
    assert warnings == [
        f"model 'm': ignoring {timestamp}: its version number does not fit int64 (at most "
        "9223372036854775807), as TF Serving ignores it; name versions with smaller numbers "
        "(a Unix timestamp in seconds fits)"
    ]
    assert largest.name == "9223372036854775807"


def test_version_names_are_checked_without_converting_long_strings() -> None:
    assert repository.version_number("0009223372036854775807") == 2**63 - 1
    assert repository.version_number("9223372036854775808") is None
    assert repository.version_number("9" * 5000) is None  # int() would raise ValueError
    assert repository.version_number("١٢") is None  # Unicode digits are not versions
    assert repository.version_number("0") == 0


@pytest.mark.parametrize(
    "code", [errno.ESTALE, errno.EIO, errno.EACCES], ids=["ESTALE", "EIO", "EACCES"]
)
def test_io_errors_never_end_the_control_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """The model store failing with OSError in each step of a poll (listing, a
    version's identity, the config file): every poll fails for a while, the
    thread lives through it, keeps what serves, and picks up the new version
    once the store answers again."""
    export(tmp_path, 1)
    manager, metrics = manager_for(spec(tmp_path))
    failing: set[str] = set()
    raised: collections.Counter[str] = collections.Counter()
    real_scan, real_identity = repository.scan, repository.identity

    def fail(step: str, path: object) -> None:
        if step in failing:
            raised[step] += 1
            raise OSError(code, os.strerror(code), str(path))

    def scan(model_dir: Path) -> repository.Listing | None:
        fail("scan", model_dir)
        return real_scan(model_dir)

    def identity(directory: Path) -> repository.Identity | None:
        fail("identity", directory)
        return real_identity(directory)

    edited: list[ModelSpec] = []  # what the config file adds once it is edited

    def read_config() -> ServingConfig:
        fail("config", "models.config")
        return ServingConfig((spec(tmp_path), *edited))

    monkeypatch.setattr(repository, "scan", scan)
    monkeypatch.setattr(repository, "identity", identity)
    stop = threading.Event()
    fatal: list[str] = []
    thread = threading.Thread(
        target=manager.run,
        kwargs={"wait": 5, "file_system_poll": 0.01, "config_poll": 0.01,
                "reload": read_config, "stop": stop, "on_fatal": fatal.append},
    )  # fmt: skip
    thread.start()
    try:
        assert wait_until(lambda: states_or_none(manager) == {1: AVAILABLE})
        for version, step in enumerate(("scan", "identity"), start=2):
            failing.add(step)
            export(tmp_path, version)  # a new version the failing step hides
            wanted = raised[step] + 3  # three polls fail in this step
            assert wait_until(functools.partial(lambda s, n: raised[s] >= n, step, wanted)), step
            assert thread.is_alive(), step
            assert served(manager) == version - 1
            failing.discard(step)
            assert wait_until(functools.partial(lambda v: served_or_none(manager) == v, version))
        # The config file cannot be read: its edit applies once it can.
        failing.add("config")
        export(tmp_path, 1, "n")
        edited.append(spec(tmp_path, name="n"))
        assert wait_until(lambda: raised["config"] >= 3)
        assert thread.is_alive()
        assert "n" not in manager.models()
        failing.discard("config")
        assert wait_until(lambda: served_or_none(manager, route(name="n")) == 1)
        assert thread.is_alive()
        assert fatal == []
        assert sample(metrics, "serving_model_config_reloads_total", result="failure") >= 3
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def wait_until(check: Callable[[], bool], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def served_or_none(manager: Manager, r: p.Route | None = None) -> int | None:
    try:
        return served(manager, r)
    except ServingError:
        return None


def test_requests_never_wait_for_the_model_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look at the files that hangs (NFS, FUSE) while a poll runs: status,
    check, lease and readiness answer all the same (no I/O under their lock)."""
    export(tmp_path, 1)
    manager, _ = manager_for(spec(tmp_path))
    manager.initial_load(1, lambda: False)
    entered, release = threading.Event(), threading.Event()
    real_stat = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        # The version directory's own stat (its identity), as a stale NFS handle hangs it.
        if os.fspath(path) == str(tmp_path / "m" / "2") and not release.is_set():
            entered.set()
            release.wait(60)
        return real_stat(path, *args, **kwargs)

    export(tmp_path, 2)
    monkeypatch.setattr(os, "stat", stat)
    poll = threading.Thread(target=manager.sync)
    poll.start()
    answered: list[object] = []
    try:
        assert entered.wait(30)

        def requests() -> None:
            answered.append(manager.status(route("status")))
            manager.check(route())
            answered.append(served(manager))
            answered.append(manager.readiness())

        client = threading.Thread(target=requests)
        client.start()
        client.join(30)  # returns at once unless blocked behind the hanging stat
        assert not client.is_alive(), "a request waited for the model store"
        assert answered[1:] == [1, ([], {"m": [1]})]
    finally:
        release.set()
        poll.join(30)
    assert served(manager) == 2


def test_a_bug_in_the_control_thread_ends_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    export(tmp_path, 1)
    manager, _ = manager_for(spec(tmp_path))
    polls = [0]

    def buggy(policy: Policy, on_disk: Sequence[int]) -> frozenset[int]:
        polls[0] += 1
        if polls[0] > 2:  # after start-up
            raise ZeroDivisionError("a bug")
        return frozenset(on_disk)

    monkeypatch.setattr(manager_module, "aspired_versions", buggy)
    stop = threading.Event()
    fatal: list[str] = []
    thread = threading.Thread(
        target=manager.run,
        kwargs={"wait": 5, "file_system_poll": 0.01, "config_poll": 0, "reload": None,
                "stop": stop, "on_fatal": fatal.append},
    )  # fmt: skip
    thread.start()
    try:
        thread.join(30)
        assert not thread.is_alive()
    finally:
        stop.set()
    assert fatal == ["the model manager thread failed: ZeroDivisionError: a bug"]
    assert "the model manager thread failed" in caplog.text
    # A reload handed over after the failure is refused at once, never left waiting.
    late = manager.submit(ServingConfig((spec(tmp_path),)))
    with pytest.raises(RuntimeError, match="the model manager thread failed"):
        late.done.result(timeout=1)


def test_an_accepted_reload_is_applied_even_when_its_call_gives_up(tmp_path: Path) -> None:
    """HandleReloadConfigRequest's deadline passes (or its client cancels) while
    the control thread is busy: the configuration still applies, and the answer
    said truthfully that it was queued, then applied."""
    export(tmp_path, 1, "a")
    export(tmp_path, 1, "b")
    busy, release = threading.Event(), threading.Event()

    class Busy(Loader):
        def __call__(self, directory: Path, version: int) -> Fake:
            if directory.parent.name == "a" and version == 2:
                busy.set()
                release.wait(60)
            return super().__call__(directory, version)

    manager, _ = manager_for(spec(tmp_path, name="a"), loader=Busy())
    stop = threading.Event()
    fatal: list[str] = []
    thread = threading.Thread(
        target=manager.run,
        kwargs={"wait": 5, "file_system_poll": 0.01, "config_poll": 0, "reload": None,
                "stop": stop, "on_fatal": fatal.append},
    )  # fmt: skip
    thread.start()
    try:
        assert wait_until(lambda: served_or_none(manager, route(name="a")) == 1)
        export(tmp_path, 2, "a")
        assert busy.wait(30)  # the control thread is loading a/2
        submission = manager.submit(ServingConfig((spec(tmp_path, name="b"),)))
        # The call's time runs out: asyncio's wait_for cancels the future it waited on.
        assert submission.done.cancel()
        late = submission.late(2)
        assert late.code == Code.DEADLINE_EXCEEDED
        assert late.message.startswith("The new configuration is not applied yet")
        release.set()
        assert wait_until(lambda: served_or_none(manager, route(name="b")) == 1)
        assert submission.applied.is_set()
        assert "a" not in manager.models()
        applied = submission.late(2)
        assert applied.message == (
            "The new configuration is applied, but its versions did not finish loading within "
            "2 s; GetModelStatus shows their progress"
        )
    finally:
        release.set()
        stop.set()
        thread.join(10)
    assert fatal == []


def test_a_load_failing_with_a_serving_error_reports_its_code_and_message(tmp_path: Path) -> None:
    """The backend's own refusals (a graph over --max-graph-bytes, one that does not
    parse: DATA_LOSS as TF Serving) keep their code, and their message without a type."""
    broken = export(tmp_path, 1)

    def loader(directory: Path, version: int) -> Fake:
        raise ServingError(
            Code.DATA_LOSS, f"Can't parse {directory}/saved_model.pb as binary proto"
        )

    manager, _ = manager_for(spec(tmp_path), loader=loader)  # type: ignore[arg-type]
    manager.initial_load(1, lambda: False)
    (status,) = manager.status(route("status"))
    assert (status.state, status.error_code) == (END, "DATA_LOSS")
    assert status.error_message == (
        f"loading {broken} failed: Can't parse {broken}/saved_model.pb as binary proto"
    )
