"""The README and the configuration page stay true to the code they document."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tf_entrypoint.problems import EXIT_CANNOT_EXECUTE, EXIT_CONFIG, EXIT_NOT_FOUND, EXIT_USAGE
from tf_entrypoint.settings import TABLE, Variable

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
#: The command line and its exit codes (they were the README's).
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", TABLE, ids=lambda d: d.name)
def test_every_variable_has_a_row(doc: Variable) -> None:
    name = doc.name
    rows = [line for line in README.splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"{name} needs exactly one row in the README's variable table"
    assert f"| {doc.default} |" in rows[0]


def markdown_row(variable: Variable) -> str:
    """The variable's row in the README's table."""
    cells = (f"`{variable.name}`", variable.accepted, variable.default, variable.doc)
    return "| " + " | ".join(cells) + " |"


def test_the_variable_table_is_the_codes_table() -> None:
    header = "| Variable | Accepted values | Default | Meaning |\n|---|---|---|---|\n"
    start = README.index(header) + len(header)
    table = README[start : README.index("\n\n", start)]
    assert table.splitlines() == [markdown_row(doc) for doc in TABLE]


@pytest.mark.parametrize("code", [EXIT_USAGE, EXIT_CONFIG, EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND])
def test_exit_codes_are_documented(code: int) -> None:
    assert re.search(rf"^\| {code} \|", CONFIGURATION, re.MULTILINE)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_placeholders_left(page: Path) -> None:
    assert not re.search(r"\b[A-Z]+(-[A-Z]+)+-TABLE\b", page.read_text())
