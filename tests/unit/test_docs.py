"""The README is the front door and docs/ the manual: the README stays short and
every relative link in them leads to a file that exists (and, for a link into a
Markdown page, to a heading that page has)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
