"""The composition root (serving/main.py): the transports built only when on; fatal errors."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.unit.serving.helpers import (
    HalfPlusTwo,
    config,
    export,
)
from tf_entrypoint.serving import main

REPO = Path(__file__).resolve().parents[3]


def test_grpc_starts_before_rest_so_a_taken_port_exits_before_rest_listens() -> None:
    assert [row.name for row in main.TRANSPORTS] == ["gRPC", "REST"]


def test_only_the_transports_the_configuration_turns_on_are_wanted(tmp_path: Path) -> None:
    def wanted(*args: str) -> list[str]:
        conf = config(tmp_path, *args)
        return [row.name for row in main.TRANSPORTS if row.wanted(conf)]

    assert wanted("--port=8500", "--rest_api_port=8501") == ["gRPC", "REST"]
    assert wanted("--port=8500", "--rest_api_port=0") == ["gRPC"]
    assert wanted("--port=0", "--rest_api_port=8501") == ["REST"]
    assert wanted("--port=0", "--grpc_socket_path=/tmp/s", "--rest_api_port=0") == ["gRPC"]


BUILD_WITHOUT_REST = """
import sys, types
from tf_entrypoint.serving import main
from tf_entrypoint.serving.config import PlannedCpus, parse_config
# gRPC's transport imports TensorFlow's protos (not on the host): a stand-in.
fake = types.ModuleType("tf_entrypoint.serving.grpc.transport")
fake.GrpcServer = lambda core, config, ended: "gRPC"
sys.modules[fake.__name__] = fake
conf = parse_config(["--model_base_path", sys.argv[1], "--port=8500", "--rest_api_port=0"], {},
                    budget=PlannedCpus(1, "test"))
core = main.build_core(conf, loader=lambda directory, version: None)
built = [row.build(core, conf, lambda: None) for row in main.TRANSPORTS if row.wanted(conf)]
core.close()
print(built, sorted({"starlette", "uvicorn"} & set(sys.modules)))
"""


def test_with_rest_off_no_starlette_app_exists_nor_is_starlette_imported(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", BUILD_WITHOUT_REST, str(tmp_path)],
        cwd=REPO / "entrypoint",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.strip() == "['gRPC'] []", result.stderr


def test_a_bug_in_the_model_manager_stops_the_server_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The control thread failing on a bug must not leave a server that answers
    /healthz 200 while nothing updates its models: it exits 1, saying why."""
    from tf_entrypoint.serving import main as server  # noqa: PLC0415
    from tf_entrypoint.serving.core import manager as manager_module  # noqa: PLC0415

    export(tmp_path)

    def bug(models: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(
        server, "tensorflow_loader", lambda *conf: lambda directory, version: HalfPlusTwo()
    )
    # The labels' warnings run right after start-up, on the manager's thread.
    monkeypatch.setattr(manager_module, "warn_unavailable_labels", bug)
    frozen: list[bool] = []  # TensorFlow is not on the host: no model layer to import
    monkeypatch.setattr(server, "_freeze_the_loaded", lambda: frozen.append(True))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # --frontends 1: one process, whatever the host's CPUs.
    argv = ["--model_base_path", str(tmp_path / "model"), "--rest_api_port", str(port),
            "--port", "0", "--host", "127.0.0.1", "--wait-for-model", "5",
            "--frontends", "1"]  # fmt: skip
    exits: list[int] = []
    thread = threading.Thread(target=lambda: exits.append(server.main(argv)), daemon=True)
    thread.start()
    thread.join(120)  # at once, unless the server goes on without its model manager
    assert not thread.is_alive(), "the server kept running after its model manager failed"
    assert exits == [server.EXIT_FATAL]
    assert frozen == [True]
    assert "the model manager thread failed: KeyError: 'a bug'; exiting" in caplog.text
