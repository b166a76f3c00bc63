"""compose.yaml's `distributed` profile, read without Docker: what `up` starts, and TF_CONFIG.

The run itself is tests/compose/test_distributed.py.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.deploy.kustomize import REPO
from tf_entrypoint.tfconfig import check_tf_config

COMPOSE: dict[str, Any] = yaml.safe_load((REPO / "compose.yaml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
WORKERS = ("worker-0", "worker-1")


def test_default_up_is_unchanged() -> None:
    """`docker compose up` starts the demo only; the new services need their profile."""
    default = sorted(name for name, s in SERVICES.items() if not s.get("profiles"))
    assert default == ["serve", "train"]
    for name in (*WORKERS, "serve-distributed"):
        assert SERVICES[name]["profiles"] == ["distributed"]


def test_each_worker_has_its_own_task_of_one_cluster() -> None:
    configs = [json.loads(SERVICES[w]["environment"]["TF_CONFIG"]) for w in WORKERS]
    clusters = [c["cluster"] for c in configs]
    assert clusters[0] == clusters[1] == {"worker": [f"{w}:2222" for w in WORKERS]}
    assert [c["task"] for c in configs] == [
        {"type": "worker", "index": i} for i in range(len(WORKERS))
    ]
    for worker in WORKERS:
        assert check_tf_config(SERVICES[worker]["environment"]["TF_CONFIG"]) == ()


def test_workers_have_cpu_limits_and_the_hardened_settings() -> None:
    for name in (*WORKERS, "serve-distributed"):
        service = SERVICES[name]
        assert float(service["cpus"]) > 0, name
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"], name
        assert service["security_opt"] == ["no-new-privileges:true"], name
        assert "/tmp" in service["tmpfs"], name


def test_only_the_chief_writes_the_model_and_the_server_waits_for_it() -> None:
    assert "models-distributed:/models" in SERVICES["worker-0"]["volumes"]
    assert not any("/models" in v for v in SERVICES["worker-1"]["volumes"])
    serve = SERVICES["serve-distributed"]
    assert serve["depends_on"] == {"worker-0": {"condition": "service_completed_successfully"}}
    assert "models-distributed:/models:ro" in serve["volumes"]
    # `up serve-distributed` brings up both workers (worker-0 depends on worker-1).
    assert SERVICES["worker-0"]["depends_on"] == ["worker-1"]
    assert "models-distributed" in COMPOSE["volumes"]
