"""The rules between the server's packages (docs/architecture.md, "The rules between packages").

Every import is walked, lazy ones inside functions included, and a broken
rule names the file, the line and the import. The transports are read from
the composition root's table (`TRANSPORTS` in serving/main.py), so a third
protocol is covered without editing this file.
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "entrypoint" / "tf_entrypoint"
SERVING = PACKAGE / "serving"
PREFIX = "tf_entrypoint.serving"
MAX_LINES = 600

#: Web and RPC frameworks: never in core/ or codec/.
FRAMEWORKS = ("starlette", "uvicorn", "grpc", "grpc_health", "httptools", "uvloop")
#: Generated protobuf modules: wire formats, allowed where wire formats are handled.
PROTO_PREFIXES = ("tensorflow.core.", "tensorflow_serving.")
#: TensorFlow's Python API and what rides on it: only model/.
TENSORFLOW = ("tensorflow", "keras", "tensorflow_text")
#: Where NumPy may be imported.
NUMPY_ALLOWED = ("model", "codec.tensor_proto")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    path: Path
    line: int
    name: str  # what it imports, dotted

    def __str__(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}: imports {self.name}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, module: str | None = None) -> Iterator[Import]:
    module = module or module_name(path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, path, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield Import(module, path, node.lineno, f"{node.module}.{alias.name}")


def serving_imports() -> list[Import]:
    return [found for path in sorted(SERVING.rglob("*.py")) for found in imports(path)]


def layer(dotted: str) -> str:
    """core, codec, rest, grpc, model, config, main... of a serving module ('' outside)."""
    if not dotted.startswith(PREFIX + "."):
        return ""
    return dotted[len(PREFIX) + 1 :].split(".", maxsplit=1)[0]


def within(dotted: str, layer_and_module: str) -> bool:
    rest = dotted[len(PREFIX) + 1 :] if dotted.startswith(PREFIX + ".") else ""
    return rest == layer_and_module or rest.startswith(layer_and_module + ".")


def top(name: str) -> str:
    return name.split(".", maxsplit=1)[0]


def transports() -> set[str]:
    """The layers named in main.py's TRANSPORTS table."""
    tree = ast.parse((SERVING / "main.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if not any(isinstance(t, ast.Name) and t.id == "TRANSPORTS" for t in targets):
            continue
        for leaf in ast.walk(node):
            if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str) and layer(leaf.value):
                found.add(layer(leaf.value))
    return found


def test_main_names_its_transports() -> None:
    assert transports() >= {"rest", "grpc"}, "serving/main.py: TRANSPORTS names rest and grpc"


def broken(rule: str) -> list[str]:  # noqa: PLR0912 - one branch per rule
    peers = transports()
    below = {"core", "codec", "model", "config"}
    out = []
    for found in serving_imports():
        here, there = layer(found.module), layer(found.name)
        if rule == "transports are peers":
            bad = here in peers and there in peers and here != there
        elif rule == "nothing below the core imports a transport":
            bad = here in below and there in peers
        elif rule == "core and codec import no framework":
            bad = here in {"core", "codec"} and top(found.name) in FRAMEWORKS
        elif rule == "core imports only core":
            bad = here == "core" and bool(there) and there != "core"
        elif rule == "ipc imports only core, ipc and the standard library":
            bad = here == "ipc" and (
                (bool(there) and there not in {"core", "ipc"})
                or top(found.name) in {*FRAMEWORKS, *TENSORFLOW, "numpy"}
            )
        elif rule == "transports import no ipc":
            bad = here in peers and there == "ipc"
        elif rule == "transports import no model":
            bad = here in peers and there == "model"
        elif rule == "only model imports TensorFlow":
            proto = found.name.startswith(PROTO_PREFIXES)
            bad = here != "model" and top(found.name) in TENSORFLOW and not proto
        elif rule == "protos only where wire formats are":
            proto = found.name.startswith(PROTO_PREFIXES)
            bad = proto and here not in {"codec", "grpc", "config", "model"}
        elif rule == "NumPy only in its places":
            bad = top(found.name) == "numpy" and not any(
                within(found.module, allowed) for allowed in NUMPY_ALLOWED
            )
        else:
            raise AssertionError(rule)
        if bad:
            out.append(str(found))
    return out


RULES = (
    "transports are peers",
    "nothing below the core imports a transport",
    "core and codec import no framework",
    "core imports only core",
    "ipc imports only core, ipc and the standard library",
    "transports import no ipc",
    "transports import no model",
    "only model imports TensorFlow",
    "protos only where wire formats are",
    "NumPy only in its places",
)


@pytest.mark.parametrize("rule", RULES)
def test_rule(rule: str) -> None:
    assert broken(rule) == [], rule


#: What only the core's one call does (core/calls.py): lease a version, record the
#: inference's timing and TF Serving's metrics.
CORE_CALL_ONLY = frozenset(
    ("lease", "observe_inference", "runtime_done", "request_done", "examples_counted")
)


def test_transports_make_one_core_call() -> None:
    """A transport decodes, calls the core (ServingCore.call) and encodes: it never
    leases a version or records the core's metrics itself (docs/architecture.md)."""
    found = []
    for peer in sorted(transports()):
        for path in sorted((SERVING / peer).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in CORE_CALL_ONLY
                ):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: .{node.func.attr}()")
    assert found == []


def test_no_module_over_600_lines() -> None:
    long = {
        str(path.relative_to(REPO)): n
        for path in sorted(PACKAGE.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"modules over {MAX_LINES} lines"


def test_no_symlink_in_the_tree() -> None:
    """Every tool reads one tree: no tracked symbolic link anywhere."""
    listed = subprocess.run(
        ["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    links = [line.split("\t", 1)[1] for line in listed.splitlines() if line.startswith("120000")]
    assert links == []


def test_the_rules_see_lazy_imports(tmp_path: Path) -> None:
    """The walker finds imports inside functions and from-imports (the rules depend on it)."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    import numpy\n    from grpc import aio\n")
    found = [(i.line, i.name) for i in imports(source, PREFIX + ".core.probe")]
    assert found == [(2, "numpy"), (3, "grpc.aio")]
