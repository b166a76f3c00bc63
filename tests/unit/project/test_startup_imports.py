"""The modules that run before every command stay cheap to import.

The entrypoint adds its import time to every container start, so the hand-off
path must not pull in heavy stdlib modules it does not need (typing alone is
several milliseconds), let alone TensorFlow. Each module is imported in a
fresh interpreter without site (so nothing else is preloaded).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

#: Never on the hand-off path: dataclasses imports inspect (and ast, dis,
#: tokenize...) and execs every method; together with our classes that was most
#: of the entrypoint's start-up (entrypoint/frozen.py replaces it). re and
#: pathlib (json imports re) were most of what remained; see the README's
#: "Start-up" for the measurements.
HEAVY = {"typing", "json", "re", "pathlib", "dataclasses", "inspect", "tensorflow"}

# module -> what importing it must not load
CASES = {
    "tf_entrypoint.frozen": HEAVY,
    "tf_entrypoint.problems": HEAVY,
    "tf_entrypoint.settings": HEAVY | {"decimal", "fractions"},
    "tf_entrypoint.tfconfig": HEAVY,  # json only once TF_CONFIG is set
    "tf_entrypoint.common": HEAVY,
    "tf_entrypoint.kernel": HEAVY,
    "tf_entrypoint.cgroups": HEAVY,
    "tf_entrypoint.cpu": HEAVY,
    "tf_entrypoint.gpus": HEAVY | {"pynvml"},
    "tf_entrypoint.handoff": HEAVY,
    "tf_entrypoint.plan": HEAVY | {"tf_entrypoint.hook"},
    # Loaded lazily, only when the command is tensorflow_model_server.
    "tf_entrypoint.tfserving": HEAVY,
    # The flag table and tokenizer: tfserving reads the thread flags with it.
    "tf_entrypoint.server_flags": HEAVY | {"difflib", "textwrap"},
    # The whole hand-off path: the hook and the server are never imported. (explain
    # and tfserving were imported lazily once; they cost about 0.5 ms, so no longer.)
    "tf_entrypoint.cli": HEAVY | {"tf_entrypoint.hook", "tf_entrypoint.serving", "starlette"},
}


@pytest.mark.parametrize("module", sorted(CASES))
def test_import_stays_cheap(module: str) -> None:
    code = f"import sys, {module}; print(sorted(set({sorted(CASES[module])!r}) & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=REPO / "entrypoint",
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert result.stdout.strip() == "[]"


#: At the moment of the hand-off (execvpe), after planning and encoding the plan.
HAND_OFF_SCRIPT = """
import os, sys
from tf_entrypoint import cli
def handed_off(file, argv, env):
    print(sorted(set(sys.argv[1].split(",")) & set(sys.modules)))
    sys.stdout.flush()
    os._exit(0)
os.execvpe = handed_off
sys.exit(cli.main(["true"]))
"""


@pytest.mark.parametrize("command", ["true", "tensorflow_model_server"])
def test_hand_off_stays_cheap(command: str) -> None:
    """The whole path, planning and plan encoding included, up to the exec."""
    heavy = HEAVY | {"tf_entrypoint.hook", "tf_entrypoint.serving", "starlette"}
    script = HAND_OFF_SCRIPT.replace('["true"]', repr([command]))
    result = subprocess.run(
        [sys.executable, "-S", "-c", script, ",".join(sorted(heavy))],
        cwd=REPO / "entrypoint",
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "TF_ENTRYPOINT_QUIET": "1"},
    )
    assert result.stdout.strip() == "[]", result.stderr


def test_serving_is_never_imported_by_the_entrypoint() -> None:
    # The entrypoint runs before every command: it must not pay for
    # TensorFlow, Starlette and uvicorn (running `-m tf_entrypoint.serving` is fine).
    root = REPO / "entrypoint" / "tf_entrypoint"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert not any(n.startswith("tf_entrypoint.serving") for n in names), path
