"""The model store failing for real, in the real image (docs/robustness.md:
"The control thread and the model store").

The faults are real ones: a version directory another uid (root) wrote with
mode 0700, which the server's non-root uid cannot look into; a version named
by a timestamp beyond int64; a URL with a 5,000-digit version; a config file
whose read hangs (a FIFO nobody writes to, as an NFS read that does not
return) while a HandleReloadConfigRequest waits. Nothing here sleeps in place
of work: every wait is on something the server shows or the test controls.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from harness.docker import Containers, poll
from harness.models import ModelLibrary
from harness.servers import READY_TIMEOUT, Server, ServerPool, serve

#: The images this module tests (tests/container/conftest.py): the server is
#: the same in both; what the CUDA image changes is tested by the modules that run on both.
IMAGE_FLAVORS = ("cpu",)

#: A version named by a timestamp in microseconds: beyond int64.
TIMESTAMP = "20240101123045000000"


def as_root(containers: Containers, models: Path, script: str) -> None:
    """Run `script` as root on the models directory (mounted at /m), as another
    user's exporter would write there."""
    ran = containers.run(
        ["sh", "-c", script],
        user="0:0",
        volumes={str(models): {"bind": "/m", "mode": "rw"}},
        timeout=120,
    )
    assert ran.exit_code == 0, ran.stderr


def version_status(server: Server, model: str, version: int) -> dict[str, object]:
    response = server.get(f"/v1/models/{model}/versions/{version}")
    assert response.status_code == 200, response.text
    status: dict[str, object] = response.json()["model_version_status"][0]
    return status


def test_an_unreadable_version_is_reported_and_loaded_once_readable(
    containers: Containers, servers: ServerPool, model_library: ModelLibrary, tmp_path: Path
) -> None:
    models = model_library.tree(tmp_path / "models", {"plus": ("plus", (1,))})
    model_library.copy("plus/2", models / "plus" / ".staged-2")
    # One attempt per change (no timed retries): the report is what this test reads.
    with servers.private(serve(
        "--model-name", "plus", "--file_system_poll_wait_seconds=0.5",
        "--max_num_load_retries=0",
    ), models) as server:  # fmt: skip
        # Version 2 arrives owned by root with mode 0700 (renamed into place).
        as_root(
            containers,
            models,
            "chown -R 0:0 /m/plus/.staged-2 && chmod 700 /m/plus/.staged-2 "
            "&& mv /m/plus/.staged-2 /m/plus/2",
        )
        assert poll(lambda: server.states("plus").get(2) == "END", 60), server.logs()
        message = (
            "cannot read /models/plus/2: Permission denied (EACCES): /models/plus/2/saved_model.pb"
        )
        status = version_status(server, "plus", 2)
        assert status["status"] == {"error_code": "PERMISSION_DENIED", "error_message": message}
        # Version 1 keeps serving, the server stays ready and alive.
        assert server.states("plus")[1] == "AVAILABLE"
        assert server.predict("/v1/models/plus:predict") == 1.0
        assert server.get("/readyz").status_code == 200
        assert server.get("/healthz").status_code == 200
        assert server.metric("serving_model_loads_total", model="plus", result="failure") == 1
        line = f"model 'plus': {message}; still serving version(s) [1]"
        assert server.logs().count(line) == 1, server.logs()
        # Polls go on (a later poll logs the ignored timestamp directory) and
        # do not report the same unreadable directory again.
        model_library.copy("plus/1", models / "plus" / ".staged-t")
        (models / "plus" / ".staged-t").rename(models / "plus" / TIMESTAMP)
        assert poll(lambda: f"ignoring /models/plus/{TIMESTAMP}" in server.logs(), 60)
        # Made readable (chmod changes the directory's change time): loaded, swapped in.
        as_root(containers, models, "chmod 755 /m/plus/2")
        assert poll(lambda: server.states("plus") == {2: "AVAILABLE", 1: "END"}, 60), server.logs()
        assert server.predict("/v1/models/plus:predict") == 2.0
        assert server.metric("serving_model_loads_total", model="plus", result="failure") == 1
        assert server.metric("serving_model_loads_total", model="plus", result="success") == 2
        assert server.logs().count(line) == 1, server.logs()
        assert "Traceback" not in server.logs()


def test_a_version_beyond_int64_is_ignored_and_a_5000_digit_version_is_400(
    servers: ServerPool, model_library: ModelLibrary, tmp_path: Path
) -> None:
    models = model_library.tree(tmp_path / "models", {"plus": ("plus", (1,))})
    model_library.copy("plus/2", models / "plus" / TIMESTAMP)
    with servers.private(serve("--model-name", "plus"), models) as server:
        # Latest is still version 1: the timestamp is not a version, as in TF Serving.
        assert server.states("plus") == {1: "AVAILABLE"}
        assert server.predict("/v1/models/plus:predict") == 1.0
        warning = (
            f"model 'plus': ignoring /models/plus/{TIMESTAMP}: its version number does not "
            "fit int64"
        )
        assert server.logs().count(warning) == 1, server.logs()
        (status,) = server.grpc({"op": "status", "model": "plus"})
        assert status["code"] == "OK", status
        assert [v["version"] for v in status["response"]["model_version_status"]] == ["1"]
        # A 5,000-digit version in a URL: TF Serving's 400, no traceback.
        digits = "7" * 5000
        for response in (
            server.get(f"/v1/models/plus/versions/{digits}"),
            server.post(f"/v1/models/plus/versions/{digits}:predict", {"instances": [1.0]}),
        ):
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error.startswith("Failed to convert version: 7777"), error
            assert error.endswith("... to numeric."), error
        assert "Traceback" not in server.logs()


FIRST = 'model_config_list { config { name: "plus" base_path: "/models/plus" } }'
SECOND = """model_config_list {
  config { name: "plus" base_path: "/models/plus" }
  config { name: "other" base_path: "/models/plus" }
}"""


def open_writer(fifo: Path, timeout: float) -> int:
    """A write end of `fifo`, once the server has opened it for reading."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as err:  # ENXIO: no reader yet
            if err.errno != errno.ENXIO or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def test_a_reload_whose_deadline_passes_while_queued_is_applied_all_the_same(
    servers: ServerPool, model_library: ModelLibrary, tmp_path: Path
) -> None:
    """The model manager is stuck reading the config file (a FIFO the test
    holds open without writing, as an NFS read that does not return) when a
    HandleReloadConfigRequest arrives with a 3 s deadline: the answer says it is
    queued, not applied; once the read returns, the configuration applies."""
    models = model_library.tree(tmp_path / "models", {"plus": ("plus", (1,))})
    config = tmp_path / "config"
    config.mkdir()
    config.chmod(0o755)
    fifo = config / "models.config"
    os.mkfifo(fifo, 0o644)
    spec = serve(
        "--model_config_file=/config/models.config",
        "--model_config_file_poll_wait_seconds=0.5", "--file_system_poll_wait_seconds=0.5",
        volumes=((str(config), "/config", "ro"),),
        ready=False,  # it reads its config (the FIFO) first: ready once the test writes it
    )  # fmt: skip
    writer: int | None = None
    with servers.private(spec, models) as server:
        try:
            start = open_writer(fifo, READY_TIMEOUT)  # the server reads its config at start
            os.write(start, FIRST.encode())
            os.close(start)
            server.wait_ready()
            # The next re-read opens the file and waits for data that does not come.
            writer = open_writer(fifo, 60)
            (reload,) = server.grpc({"op": "reload", "config": SECOND, "timeout": 3})
            assert reload["code"] == "DEADLINE_EXCEEDED", reload
            assert reload["message"].startswith("The new configuration is not applied yet"), reload
            assert server.get("/v1/models/other").status_code == 404
            # The read returns (the file is unchanged): the queued configuration applies.
            os.write(writer, FIRST.encode())
            os.close(writer)
            writer = None
            assert poll(lambda: server.states("other") == {1: "AVAILABLE"}, 60), server.logs()
            assert server.predict("/v1/models/other:predict") == 1.0
            logs = server.logs()
            assert "HandleReloadConfigRequest: The new configuration is not applied yet" in logs
            assert "model configuration received: plus, other" in logs
        finally:
            if writer is not None:
                os.close(writer)
