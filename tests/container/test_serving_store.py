"""The model store failing for real, in the real image (docs/robustness.md:
"The control thread and the model store").

The faults are real ones: a version directory another uid (root) wrote with
mode 0700, which the server's non-root uid cannot look into. Nothing here
sleeps in place of work: every wait is on something the server shows or the
test controls.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.container.dockerkit import Containers, poll
from tests.container.test_serving_versions import (
    Server,
    library,
    models_dir,
    serving,
)

__all__ = ["library"]  # the fixture, shared with test_serving_versions

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
    containers: Containers, library: Path, tmp_path: Path
) -> None:
    models = models_dir(tmp_path, library, plus=[1])
    shutil.copytree(library / "plus" / "2", models / "plus" / ".staged-2")
    with serving(
        containers, models, "--model-name", "plus", "--file_system_poll_wait_seconds=0.5"
    ) as server:
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
        shutil.copytree(library / "plus" / "1", models / "plus" / ".staged-t")
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
