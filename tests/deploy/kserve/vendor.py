"""Copy what tests/deploy/test_kserve.py checks against out of a KServe git repository.

    python -m tests.deploy.kserve.vendor /path/to/kserve.git v0.20.0

Writes, next to this file: KServe's own TF Serving runtime, byte for byte
(config/runtimes/kserve-tensorflow-serving.yaml), and the OpenAPI v3 schema of
the ServingRuntime and InferenceService CRDs (config/crd/full/...: the schema
of the version that is served and stored, `spec.versions[].schema.openAPIV3Schema`,
unchanged, as compact JSON with sorted keys); then prints the lines of
UPSTREAM.md that record where they came from. Only `git show` reads the
repository, so a bare mirror works.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
RUNTIME = "config/runtimes/kserve-tensorflow-serving.yaml"
CRDS = {
    "servingruntime.schema.json": "config/crd/full/serving.kserve.io_servingruntimes.yaml",
    "inferenceservice.schema.json": "config/crd/full/serving.kserve.io_inferenceservices.yaml",
}


def show(repo: str, ref: str, path: str) -> bytes:
    return subprocess.run(
        ["git", "-C", repo, "show", f"{ref}:{path}"], capture_output=True, check=True
    ).stdout


def stored_schema(crd: dict[str, object]) -> dict[str, object]:
    spec = crd["spec"]
    assert isinstance(spec, dict)
    (version,) = [v for v in spec["versions"] if v["served"] and v["storage"]]
    schema: dict[str, object] = version["schema"]["openAPIV3Schema"]
    return schema


def main(repo: str, ref: str) -> None:
    commit = subprocess.run(
        ["git", "-C", repo, "rev-parse", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    lines = [f"KServe {ref}, commit {commit}:", ""]
    runtime = show(repo, commit, RUNTIME)
    (HERE / Path(RUNTIME).name).write_bytes(runtime)
    lines.append(
        f"- `{Path(RUNTIME).name}`: `{RUNTIME}`, sha256 {hashlib.sha256(runtime).hexdigest()}"
    )
    for name, path in CRDS.items():
        source = show(repo, commit, path)
        schema = stored_schema(yaml.safe_load(source))
        text = json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n"
        (HERE / name).write_text(text)
        lines.append(f"- `{name}`: `{path}`, sha256 {hashlib.sha256(source).hexdigest()}")
    print("\n".join(lines))


if __name__ == "__main__":
    main(*sys.argv[1:])
