"""The README is the front door and docs/ the manual: the README stays short and
every relative link in them leads to a file that exists (and, for a link into a
Markdown page, to a heading that page has)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

#: The README is the front door, not the manual (issue 23).
MAX_README_LINES = 400

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6} (.*?)\s*#*\s*$")


def prose(text: str) -> list[str]:
    """The lines of a Markdown page outside code blocks (fenced or indented)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith(("    ", "\t")):
            continue
        lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, code marks and punctuation
    dropped, spaces turned into hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose(page.read_text()):
        match = _HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    """The link targets of a page; a link inside a code span is no link."""
    text = "\n".join(prose(page.read_text()))
    return [m.group(1) for m in _LINK.finditer(_CODE_SPAN.sub("``", text))]


def test_readme_is_the_front_door() -> None:
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines, more than {MAX_README_LINES}: move the detail to docs/"
    )


def test_the_pages_are_found() -> None:
    names = {page.name for page in PAGES}
    wanted = {"README.md", "configuration.md", "serving.md", "tf-serving.md", "architecture.md"}
    assert wanted <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(ROOT)}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def test_the_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    """The checker itself: a heading's anchor is found, a missing one is not."""
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## TF Serving's `--port` (gRPC)\n\n[a](#title) `[b](#nope)`\n")
    assert anchors(page) == {"title", "tf-servings---port-grpc"}
    assert links(page) == ["#title"]


#: A source path named in the docs: `entrypoint/...py`, or a module under the package.
_SOURCE_PATH = re.compile(r"`((?:entrypoint/|tf_entrypoint/)[\w/.-]+\.(?:py|pth))`")


def named_sources(text: str) -> list[str]:
    return _SOURCE_PATH.findall(text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_source_files_exist(page: Path) -> None:
    """A file the manual names by path is there (the module map follows the code)."""
    missing = []
    for name in named_sources(page.read_text()):
        candidates = [ROOT / name, ROOT / "entrypoint" / name]
        if not any(c.exists() for c in candidates):
            missing.append(name)
    assert missing == [], f"{page.name} names files that do not exist"


def test_the_source_path_checker_sees_a_missing_file() -> None:
    text = "see `entrypoint/tf_entrypoint/cli.py` and `entrypoint/serving/nope.py`"
    assert named_sources(text) == ["entrypoint/tf_entrypoint/cli.py", "entrypoint/serving/nope.py"]
    assert not (ROOT / "entrypoint/serving/nope.py").exists()


ARCHITECTURE = ROOT / "docs" / "architecture.md"
SERVING = ROOT / "entrypoint" / "tf_entrypoint" / "serving"
#: A table's first cell: one or more `name.py` (or `__init__.py  __main__.py`).
_ROW = re.compile(r"^\| ((?:`[\w./]+`(?:, )?)+) \|", re.MULTILINE)
_LAYER = re.compile(r"^### `(\w+)/`", re.MULTILINE)


def mapped_modules(text: str) -> set[str]:
    """serving/'s modules named in the page's layer tables, as LAYER/NAME.py."""
    found: set[str] = set()
    starts = [(m.start(), m.group(1)) for m in _LAYER.finditer(text)]
    for index, (start, layer) in enumerate(starts):
        end = starts[index + 1][0] if index + 1 < len(starts) else len(text)
        section = text[start:end].split("\n## ", 1)[0]
        for row in _ROW.finditer(section):
            for name in re.findall(r"`([\w./]+)`", row.group(1)):
                found.add(f"{layer}/{name}")
    return found


def test_the_module_map_names_every_server_module_and_only_those() -> None:
    files = {
        str(path.relative_to(SERVING))
        for path in SERVING.glob("*/*.py")
        if path.name != "__init__.py" or path.stat().st_size > 200
    }
    assert mapped_modules(ARCHITECTURE.read_text()) == files


def test_the_module_map_reader_sees_a_missing_row() -> None:
    text = "### `core/`: x\n\n| module | concern |\n|---|---|\n| `a.py`, `b.py` | two |\n"
    assert mapped_modules(text) == {"core/a.py", "core/b.py"}
