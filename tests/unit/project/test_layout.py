"""The package's shape: no import cycle (lazy imports included), one record per name."""

from __future__ import annotations

import ast
from pathlib import Path

from tf_entrypoint import hook

PACKAGE = Path(__file__).resolve().parents[3] / "entrypoint" / "tf_entrypoint"
#: The package's import name (its folder is entrypoint/tf_entrypoint/).
NAME = hook.__package__ or ""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((NAME, *parts))


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Every package module `path` imports, at the top or inside a function.

    `from pkg import sub` names the module pkg.sub when that is a module (the
    package's own __init__ has already run by then), else pkg.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return {name for name in found if name.startswith(f"{NAME}.")}


def graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path): path for path in paths}
    names = set(modules)
    return {name: (imports_of(path, names) & names) - {name} for name, path in modules.items()}


def test_no_import_cycle_anywhere() -> None:
    edges = graph()
    done: set[str] = set()

    def visit(name: str, stack: tuple[str, ...]) -> None:
        assert name not in stack, "import cycle: " + " -> ".join((*stack, name))
        if name in done:
            return
        for other in sorted(edges[name]):
            visit(other, (*stack, name))
        done.add(name)

    for name in sorted(edges):
        visit(name, ())


def test_the_plan_variable_and_the_hand_off_record_are_defined_once() -> None:
    for name in ("PLAN_VARIABLE = ", "class HookPlan", "class CpuBudget", "Rounding: TypeAlias"):
        where = [
            str(path.relative_to(PACKAGE))
            for path in PACKAGE.rglob("*.py")  # the core and serving/
            if name in path.read_text()
        ]
        assert len(where) == 1, (name, where)
