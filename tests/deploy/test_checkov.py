"""The static security scan: checkov on every rendered manifest, with justified skips only.

deploy/kserve's predictor pods (the demo's and each example's in deploy/kserve/examples)
are scanned too, as Deployments (see kserve_predictors), with their NetworkPolicies.

checkov lives in its own venv (requirements/security.lock, `.venv-security`,
built by `make security`), or wherever $CHECKOV points. Without it this test
is skipped on a developer's machine and fails in CI (CI=true), so a missing
install step cannot hide behind a green run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.kserve import EXAMPLES, ISVC_POD_LABEL, KSERVE, predictor_pod
from tests.deploy.kustomize import DEPLOY, REPO, pod_templates, render, render_all

CONFIG = DEPLOY / "checkov.yaml"


def checkov() -> str:
    found = os.environ.get("CHECKOV") or str(REPO / ".venv-security" / "bin" / "checkov")
    if not Path(found).is_file():
        message = f"checkov not found at {found}: run `make security` (or set CHECKOV)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def write_rendered(directory: Path) -> None:
    """One file per kustomization, plus each TFJob replica's pod template as a Job.

    checkov knows Pods, Deployments and Jobs, not Kubeflow's TFJob, so its pod
    templates are scanned as Jobs: run-to-completion pods, which is what the
    operator makes of them (so the long-running-server checks, such as
    probes, apply to them no more than to the training Job).
    """
    for name, docs in render_all().items():
        jobs = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": t.where.replace("/", "-").lower(),
                    "namespace": t.owner["metadata"]["namespace"],
                },
                "spec": {"template": t.template},
            }
            for t in pod_templates(docs)
            if t.owner["kind"] == "TFJob"
        ]
        path = directory / f"{name.replace('/', '-')}.yaml"
        path.write_text(yaml.safe_dump_all([*docs, *jobs], sort_keys=False))
    docs = [*render(KSERVE), *render(EXAMPLES)]
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    (directory / "kserve.yaml").write_text(
        yaml.safe_dump_all([*policies, *kserve_predictors()], sort_keys=False)
    )


def kserve_predictors() -> list[dict[str, Any]]:
    """deploy/kserve's predictor pods (the runtime's container with each
    InferenceService's fields: the demo's and the examples'), as the Deployments
    KServe's Standard mode makes of them; checkov knows neither ServingRuntime nor
    InferenceService."""
    (runtime,) = [d for d in render(KSERVE) if d["kind"] == "ServingRuntime"]
    isvcs = [d for d in [*render(KSERVE), *render(EXAMPLES)] if d["kind"] == "InferenceService"]
    assert len(isvcs) == 4, "the demo and one example per other protocol"
    return [kserve_predictor(runtime, isvc) for isvc in isvcs]


def kserve_predictor(runtime: dict[str, Any], isvc: dict[str, Any]) -> dict[str, Any]:
    """One InferenceService's predictor pod as a Deployment."""
    labels = {ISVC_POD_LABEL: isvc["metadata"]["name"]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": f"{isvc['metadata']['name']}-predictor",
            "namespace": isvc["metadata"]["namespace"],
        },
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": predictor_pod(runtime, isvc)},
        },
    }


def test_checkov_passes(tmp_path: Path) -> None:
    write_rendered(tmp_path)
    result = subprocess.run(
        [checkov(), "--config-file", str(CONFIG), "-d", str(tmp_path), "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )
    assert result.stdout, result.stderr[-4000:]
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [
        f"{c['check_id']} {c['check_name']}: {c['resource']} ({Path(c['file_path']).name})"
        for report in reports
        for c in report["results"]["failed_checks"]
    ]
    passed = sum(report["summary"]["passed"] for report in reports)
    assert failed == [], "\n".join(failed)
    assert passed > 100, "checkov checked next to nothing"
    scanned = {Path(c["file_path"]).name for r in reports for c in r["results"]["passed_checks"]}
    assert {
        "tfjob.yaml",
        "base.yaml",
        "training.yaml",
        "overlays-gpu.yaml",
        "kserve.yaml",
    } <= scanned
    assert result.returncode == 0, result.stderr[-4000:]


def test_every_skip_is_justified() -> None:
    """Each skipped check has a comment right above it naming the check and why."""
    lines = CONFIG.read_text().splitlines()
    skips = yaml.safe_load(CONFIG.read_text())["skip-check"]
    assert skips
    for check in skips:
        (at,) = [i for i, line in enumerate(lines) if re.fullmatch(rf"\s*- {check}", line)]
        comment = []
        for line in reversed(lines[:at]):
            if not line.strip().startswith("#"):
                break
            comment.append(line)
        text = " ".join(reversed(comment))
        assert check in text, f"{check}: no justification right above it in {CONFIG.name}"
        assert len(text) > 120, f"{check}: the justification is too short"
