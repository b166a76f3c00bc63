"""The model server's lifecycle in the real image: swaps under load, policies, labels,
TF Serving's model config file (live edits too), warm-up records, bad configurations.

Models are the model library's (harness/models.py), tiny SavedModels made in the
image by make_models.py: version V of "plus" answers y = x + V, so every answer
tells which version served it. Each test that swaps versions or edits the
config has a server of its own (the pool's private ones); the config file's
read-only test uses a shared one. All traffic goes to 127.0.0.1; every loop is
bounded in count and time.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from harness import web
from harness.docker import Containers, poll
from harness.models import ModelLibrary
from harness.servers import READY_TIMEOUT, SHAPES, ServerPool, serve

#: The images this module tests (tests/container/conftest.py): the server is
#: the same in both; what the CUDA image changes is tested by the modules that run on both.
IMAGE_FLAVORS = ("cpu",)

#: Answers that make steady load before and after a swap (a count, not seconds).
STEADY = 100


def models_dir(tmp_path: Path, library: ModelLibrary, **wanted: list[int]) -> Path:
    """tmp_path/models with copies of library versions: models_dir(..., plus=[1, 2])."""
    return library.tree(
        tmp_path / "models", {name: (name, versions) for name, versions in wanted.items()}
    )


#: A saved_model.pb that TensorFlow cannot parse (a version whose load fails).
BROKEN_GRAPH = b"\x08\x01 truncated"


def swap_in(
    model_dir: Path, library: ModelLibrary, source: str, version: int, *, graph: bytes | None = None
) -> None:
    """Copy library export `source` (e.g. "plus/2") beside the model, then rename it
    into place (the atomic way); `graph`: the saved_model.pb's bytes instead of the export's."""
    staged = library.copy(source, model_dir / f".staged-{version}")
    if graph is not None:
        (staged / "saved_model.pb").write_bytes(graph)
    staged.rename(model_dir / str(version))


# -- versions while serving


@pytest.mark.parametrize("mode", SHAPES)
def test_a_new_version_is_swapped_in_under_load_without_a_failed_request(
    servers: ServerPool, model_library: ModelLibrary, tmp_path: Path, mode: str
) -> None:
    models = models_dir(tmp_path, model_library, plus=[1])
    staged = model_library.copy("plus/2", models / "plus" / ".staged-2")  # not a version yet
    extra, cpus = SHAPES[mode]
    with servers.private(
        serve("--model-name", "plus", "--file_system_poll_wait_seconds=0.5", *extra, cpus=cpus),
        models,
    ) as server:
        stop = threading.Event()
        lock = threading.Lock()
        # (sent at, received at, status, y) for every predict; readiness answers.
        answers: list[tuple[float, float, int, float | None]] = []
        ready: list[int] = []

        def client() -> None:
            with web.client(base_url=server.url, timeout=30) as http:
                while not stop.is_set():
                    sent = time.monotonic()
                    response = http.post("/v1/models/plus:predict", json={"instances": [10.0]})
                    y = response.json()["predictions"][0] if response.status_code == 200 else None
                    with lock:
                        answers.append((sent, time.monotonic(), response.status_code, y))

        def probe() -> None:
            with web.client(base_url=server.url, timeout=30) as http:
                while not stop.is_set():
                    ready.append(http.get("/readyz").status_code)
                    time.sleep(0.05)

        threads = [threading.Thread(target=client) for _ in range(8)]
        threads.append(threading.Thread(target=probe))
        for thread in threads:
            thread.start()

        def v1_answers() -> int:
            with lock:
                return sum(y == 11.0 for *_, y in answers)

        def sent_after_v2() -> int:
            """Predicts answered that were sent after version 2's first answer (-1: none yet)."""
            with lock:
                v2 = [received for _, received, _, y in answers if y == 12.0]
                return sum(sent > min(v2) for sent, *_ in answers) if v2 else -1

        try:
            # Steady load is counted in answers, not slept in seconds: a loaded
            # machine answers fewer a second, and the checks need the answers.
            assert poll(lambda: v1_answers() >= STEADY, 120, 0.05), server.logs()
            renamed = time.monotonic()
            staged.rename(models / "plus" / "2")
            assert poll(lambda: sent_after_v2() >= 0, 120, 0.05), server.logs()
            assert poll(lambda: sent_after_v2() >= STEADY, 120, 0.05), server.logs()
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
        failed = [a for a in answers if a[2] != 200]
        assert failed == [], server.logs()
        assert {y for *_, y in answers} == {11.0, 12.0}
        first_v2 = min(received for _, received, _, y in answers if y == 12.0)
        # Once version 2 has answered, every request sent afterwards gets version 2.
        late_v1 = [a for a in answers if a[0] > first_v2 and a[3] == 11.0]
        assert late_v1 == []
        assert ready
        assert set(ready) == {200}
        assert poll(lambda: server.states("plus") == {2: "AVAILABLE", 1: "END"}, 30)
        assert server.metric("serving_model_loads_total", model="plus", result="success") == 2
        assert server.metric("serving_model_unloads_total", model="plus", result="success") == 1
        print(
            f"swap: {len(answers)} predicts, 0 failed; first answer from version 2 "
            f"{first_v2 - renamed:.2f} s after the rename"
        )


def test_a_broken_new_version_leaves_the_old_one_serving(
    servers: ServerPool, model_library: ModelLibrary, tmp_path: Path
) -> None:
    models = models_dir(tmp_path, model_library, plus=[1])
    # One attempt per change (no timed retries): the failed state is what this test reads.
    with servers.private(serve(
        "--model-name", "plus", "--file_system_poll_wait_seconds", "0.5",
        "--max_num_load_retries", "0",
    ), models) as server:  # fmt: skip
        swap_in(models / "plus", model_library, "plus/2", 2, graph=BROKEN_GRAPH)
        assert poll(lambda: server.states("plus").get(2) == "END", 60), server.logs()
        status = {v["version"]: v for v in server.get("/v1/models/plus").json()[
            "model_version_status"
        ]}  # fmt: skip
        # TF Serving's code and words for a graph that does not parse (ReadBinaryProto).
        assert status["2"]["status"] == {
            "error_code": "DATA_LOSS",
            "error_message": "loading /models/plus/2 failed: Can't parse "
            "/models/plus/2/saved_model.pb as binary proto",
        }
        assert status["1"]["state"] == "AVAILABLE"
        assert server.predict("/v1/models/plus:predict") == 1.0
        assert server.get("/readyz").status_code == 200
        assert server.metric("serving_model_loads_total", model="plus", result="failure") == 1
        assert "no version is serving" not in server.logs()
        assert "still serving version(s) [1]" in server.logs()
        # Replaced by a good export (renamed into place): loaded and swapped in.
        shutil.rmtree(models / "plus" / "2")
        swap_in(models / "plus", model_library, "plus/2", 2)
        assert poll(lambda: server.states("plus") == {2: "AVAILABLE", 1: "END"}, 60), server.logs()
        assert server.predict("/v1/models/plus:predict") == 2.0


def test_a_graph_over_max_graph_bytes_fails_its_version_before_it_is_read(
    servers: ServerPool, model_library: ModelLibrary, tmp_path: Path
) -> None:
    """--max-graph-bytes at version 2's graph size (N) + 2: version 1 loads under it;
    version 2 with its graph 3 bytes longer (a valid one: an unknown field) fails
    with DATA_LOSS naming the file, its size and the flag, and version 1 serves on;
    version 2 as exported (N bytes) then loads."""
    models = models_dir(tmp_path, model_library, plus=[1])
    graph = model_library.path("plus", "2", "saved_model.pb").read_bytes()
    size = len(graph)
    assert (models / "plus" / "1" / "saved_model.pb").stat().st_size <= size + 2
    # Field 500, varint 0: a SavedModel with an unknown field, which protobuf keeps.
    longer = graph + b"\xa0\x1f\x00"
    with servers.private(serve(
        "--model-name", "plus", "--file_system_poll_wait_seconds=0.5",
        "--max_num_load_retries=0", f"--max-graph-bytes={size + 2}",
    ), models) as server:  # fmt: skip
        assert server.predict("/v1/models/plus:predict") == 1.0
        swap_in(models / "plus", model_library, "plus/2", 2, graph=longer)
        assert poll(lambda: server.states("plus").get(2) == "END", 60), server.logs()
        status = server.get("/v1/models/plus/versions/2").json()["model_version_status"][0]
        assert status["status"] == {
            "error_code": "DATA_LOSS",
            "error_message": f"loading /models/plus/2 failed: /models/plus/2/saved_model.pb is "
            f"{len(longer):,} bytes, more than the limit of {size + 2:,} bytes on a "
            "SavedModel's graph (--max-graph-bytes, SERVE_MAX_GRAPH_BYTES): not read; a "
            "graph's weights belong in variables/, or raise --max-graph-bytes",
        }
        assert server.states("plus")[1] == "AVAILABLE"
        assert server.predict("/v1/models/plus:predict") == 1.0
        # The same graph without the extra bytes loads under the same limit.
        shutil.rmtree(models / "plus" / "2")
        swap_in(models / "plus", model_library, "plus/2", 2)
        assert poll(lambda: server.states("plus") == {2: "AVAILABLE", 1: "END"}, 60), server.logs()
        assert server.predict("/v1/models/plus:predict") == 2.0


def test_a_broken_version_is_retried_on_a_timer_then_fails(
    servers: ServerPool, model_library: ModelLibrary, tmp_path: Path
) -> None:
    """--max_num_load_retries and --load_retry_interval_micros, as TF Serving: the load is
    tried again N times, the interval apart, the version LOADING with its error meanwhile
    and version 1 serving; then END, each attempt counted."""
    models = models_dir(tmp_path, model_library, plus=[1])
    with servers.private(serve(
        "--model-name", "plus", "--file_system_poll_wait_seconds=0.5",
        "--max_num_load_retries=2", "--load_retry_interval_micros=1000000",
    ), models) as server:  # fmt: skip
        swap_in(models / "plus", model_library, "plus/2", 2, graph=BROKEN_GRAPH)
        assert poll(lambda: "retry 1 of 2" in server.logs(), 60), server.logs()
        status = server.get("/v1/models/plus/versions/2").json()["model_version_status"][0]
        if "retry 2 of 2" not in server.logs():  # still between two attempts
            assert status["state"] == "LOADING", status
            assert status["status"]["error_code"] == "DATA_LOSS", status
        assert server.predict("/v1/models/plus:predict") == 1.0
        assert poll(lambda: server.states("plus").get(2) == "END", 60), server.logs()
        assert "retry 2 of 2" in server.logs()
        assert server.metric("serving_model_loads_total", model="plus", result="failure") == 3
        assert server.predict("/v1/models/plus:predict") == 1.0


def test_a_failing_warm_up_record_fails_the_load_and_the_old_version_serves(
    servers: ServerPool, model_library: ModelLibrary, tmp_path: Path
) -> None:
    models = models_dir(tmp_path, model_library, plus=[1])
    with servers.private(serve(
        "--model-name", "plus", "--file_system_poll_wait_seconds=0.5",
        "--max_num_load_retries=0",
    ), models) as server:  # fmt: skip
        swap_in(models / "plus", model_library, "badwarm/1", 2)
        assert poll(lambda: server.states("plus").get(2) == "END", 60), server.logs()
        status = server.get("/v1/models/plus/versions/2").json()["model_version_status"][0]
        assert status["status"]["error_code"] == "UNKNOWN"
        assert (
            "warm-up record 0 of /models/plus/2/assets.extra/tf_serving_warmup_requests"
            in (status["status"]["error_message"])
        )
        assert server.predict("/v1/models/plus:predict") == 1.0
        assert server.metric("serving_model_loads_total", model="plus", result="failure") == 1
        assert server.metric("serving_model_warmup_records_total", model="plus") == 0


# -- TF Serving's model config file


SEVERAL = """
model_config_list {
  config {
    name: "all"
    base_path: "/models/plus"
    model_platform: "tensorflow"
    model_version_policy { all {} }
    version_labels { key: "stable" value: 1 }
    version_labels { key: "canary" value: 3 }
    version_labels { key: "ghost" value: 7 }
  }
  config {
    name: "pinned"
    base_path: "/models/plus"
    model_platform: "tensorflow"
    model_version_policy { specific { versions: 2 } }
  }
  config {
    name: "latest2"
    base_path: "/models/plus"
    model_platform: "tensorflow"
    model_version_policy { latest { num_versions: 2 } }
  }
  config {
    name: "warm"
    base_path: "/models/warm"
    model_platform: "tensorflow"
  }
}
"""


def write_config(directory: Path, text: str) -> None:
    """Write models.config the way an operator should: beside it, then rename."""
    directory.mkdir(exist_ok=True)
    staged = directory / ".models.config.new"
    staged.write_text(text)
    staged.rename(directory / "models.config")


def test_several_models_policies_labels_and_warm_up_from_the_config_file(
    servers: ServerPool,
) -> None:
    # Read only (its request count is a delta): the pool's shared server.
    server = servers.shared(
        serve(
            "--model_config_file=/models/models.config",
            models={"plus": "plus", "warm": "warm"},
            files={"models.config": SEVERAL},
        )
    )
    answered = server.metric(
        "serving_requests_total", api="predict", code="200", model="all", protocol="v1"
    )
    ready = server.get("/readyz").json()
    assert ready == {
        "status": "ready",
        "models": {"all": [1, 2, 3], "pinned": [2], "latest2": [2, 3], "warm": [1]},
    }
    assert server.states("all") == {3: "AVAILABLE", 2: "AVAILABLE", 1: "AVAILABLE"}
    assert server.states("pinned") == {2: "AVAILABLE"}
    assert server.states("latest2") == {3: "AVAILABLE", 2: "AVAILABLE"}
    assert server.predict("/v1/models/all:predict") == 3.0
    assert server.predict("/v1/models/all/versions/1:predict") == 1.0
    assert server.predict("/v1/models/all/labels/stable:predict") == 1.0
    assert server.predict("/v1/models/all/labels/canary:predict") == 3.0
    assert server.predict("/v1/models/pinned:predict") == 2.0
    assert server.predict("/v1/models/latest2/versions/2:predict") == 2.0
    metadata = server.get("/v1/models/all/labels/stable/metadata")
    assert metadata.json()["model_spec"]["version"] == "1"
    for path, code, message in (
        ("all/labels/nope", 400, "Unrecognized servable version label: nope"),
        ("all/labels/ghost", 404, "Servable not found for request: Specific(all, 7)"),
        ("pinned/versions/3", 404, "Servable not found for request: Specific(pinned, 3)"),
        ("latest2/versions/1", 404, "Servable not found for request: Specific(latest2, 1)"),
    ):
        response = server.post(f"/v1/models/{path}:predict", {"instances": [0.0]})
        assert (response.status_code, response.json()) == (code, {"error": message})
    assert server.metric("serving_model_warmup_records_total", model="warm") == 5
    assert "5 warm-up record(s) replayed" in server.logs()
    assert (
        server.metric(
            "serving_requests_total", api="predict", code="200", model="all", protocol="v1"
        )
        - answered
        == 4
    )
    assert server.metric("serving_model_versions_available", model="all") == 3
    # A ghost label points at a version that does not exist: said at start.
    assert "version_labels 'ghost' -> 7" in server.logs()


def test_models_are_added_and_removed_by_editing_the_config_file(
    servers: ServerPool, model_library: ModelLibrary, tmp_path: Path
) -> None:
    models = models_dir(tmp_path, model_library, plus=[1], warm=[1])
    one = 'model_config_list { config { name: "%s" base_path: "/models/%s" } }'
    write_config(tmp_path / "config", one % ("a", "plus"))
    spec = serve(
        "--model_config_file",
        "/config/models.config",
        "--model_config_file_poll_wait_seconds=0.5",
        volumes=((str(tmp_path / "config"), "/config", "ro"),),
    )
    with servers.private(spec, models) as server:
        assert server.predict("/v1/models/a:predict") == 1.0
        write_config(tmp_path / "config", one % ("b", "warm"))
        assert poll(lambda: server.states("b") == {1: "AVAILABLE"}, 60), server.logs()
        assert poll(lambda: server.get("/v1/models/a").status_code == 404, 30), server.logs()
        assert server.predict("/v1/models/b:predict") == 1.0
        assert server.get("/readyz").json() == {"status": "ready", "models": {"b": [1]}}
        # A broken edit is refused and logged; the previous configuration keeps serving.
        write_config(tmp_path / "config", "model_config_list { config { nme: 'c' } }")
        assert poll(lambda: "keeping the previous configuration" in server.logs(), 30)
        assert server.predict("/v1/models/b:predict") == 1.0
        assert server.metric("serving_model_config_reloads_total", result="failure") >= 1
        assert server.metric("serving_model_config_reloads_total", result="success") == 1
        assert server.metric("serving_model_unloads_total", model="a", result="success") == 1


@pytest.mark.parametrize(
    ("text", "code", "expected"),
    [
        (
            "model_config_list {\n  config {\n    nme: 'a'\n  }\n}\n",
            78,
            '/config/models.config:3:5: Message type "tensorflow.serving.ModelConfig" has no '
            'field named "nme".',
        ),
        (
            "model_config_list {\n config { name: 'a' base_path: '/models/plus' }\n"
            " config { name: 'a' base_path: '/models/plus' }\n}\n",
            78,
            "/config/models.config:3: name 'a' is listed twice (first at /config/models.config:2)",
        ),
        (
            "model_config_list { config { name: 'a' base_path: '/models/none' } }",
            78,
            "/config/models.config:1 (model 'a'): base_path '/models/none' is not a directory",
        ),
        (  # none of the listed versions (TF Serving starts once any of them serves)
            "model_config_list {\n config { name: 'a' base_path: '/models/plus'\n"
            "   model_version_policy { specific { versions: 8 versions: 9 } } }\n}\n",
            1,
            "/config/models.config:2 (model 'a'): model_version_policy.specific.versions: "
            "version(s) 8, 9 did not appear in /models/plus within 3 s (on disk: 1)",
        ),
    ],
)
def test_a_bad_model_config_stops_the_server_with_file_line_and_field(  # noqa: PLR0917
    containers: Containers,
    model_library: ModelLibrary,
    tmp_path: Path,
    text: str,
    code: int,
    expected: str,
) -> None:
    models = models_dir(tmp_path, model_library, plus=[1])
    write_config(tmp_path / "config", text)
    ran = containers.run(
        ["serve", "--model_config_file=/config/models.config", "--wait-for-model", "3"],
        volumes={
            str(models): {"bind": "/models", "mode": "ro"},
            str(tmp_path / "config"): {"bind": "/config", "mode": "ro"},
        },
        timeout=180,
    )
    assert ran.exit_code == code, ran.stderr
    assert expected in ran.stderr
    assert "Traceback" not in ran.stderr
    assert ran.stdout == ""


def test_the_config_file_from_the_environment(
    servers: ServerPool, model_library: ModelLibrary, tmp_path: Path
) -> None:
    models = models_dir(tmp_path, model_library, warm=[1])
    write_config(
        tmp_path / "config", 'model_config_list { config { name: "w" base_path: "/models/warm" } }'
    )
    spec = serve(
        "--file_system_poll_wait_seconds=0",
        env={"MODEL_CONFIG_FILE": "/config/models.config"},
        volumes=((str(tmp_path / "config"), "/config", "ro"),),
    )
    with servers.private(spec, models) as server:
        assert poll(lambda: "is available" in server.logs(), READY_TIMEOUT)
        logs = server.logs()
        assert "serving 1 model(s) (from /config/models.config): 'w' from /models/warm" in logs
        assert "versions loaded once" in logs
    assert os.path.isdir(models / "warm" / "1")
