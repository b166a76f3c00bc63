"""The composition root (serving/main.py): the transport table, built only when turned on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.unit.serving.helpers import config
from tf_entrypoint.serving import main

REPO = Path(__file__).resolve().parents[2]


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
