"""The documentation's relative links resolve, and README.md stays a map:
at most 180 lines, at most 80 columns outside code blocks and tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# [text](target) and ![alt](target); an optional "title" after the target.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")

# Files that other work in progress is writing; a link to them is allowed
# before they exist. Remove an entry once its file is committed.
PENDING: set[str] = set()


def documents() -> list[Path]:
    return [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "apps" / "README.md",
            *sorted((REPO / "docs").rglob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced and indented code blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith(("    ", "\t")):
            continue
        out.append((n, line))
    return out


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for n, line in prose_lines(path.read_text()):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            found.append((n, target))
    return found


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for n, target in links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http(s), mailto: and anchors in the same file
        file = target.split("#", 1)[0]
        resolved = (doc.parent / file).resolve()
        rel = resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else resolved
        if not resolved.exists() and str(rel) not in PENDING:
            broken.append(f"{doc.relative_to(REPO)}:{n}: {target}")
    assert not broken, "links to missing files:\n" + "\n".join(broken)


def test_link_pattern() -> None:
    line = "see [a](docs/a.md#x), ![b](b.png) and [c](https://e.org) `[d](no.md)`"
    assert LINK.findall(re.sub(r"`[^`]*`", "", line)) == ["docs/a.md#x", "b.png", "https://e.org"]


def test_readme_is_a_map() -> None:
    text = (REPO / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 180, f"README.md has {len(lines)} lines (at most 180)"
    wide = [f"{n}: {len(line)} columns" for n, line in prose_lines(text)
            if len(line) > 80 and not line.lstrip().startswith("|")]
    assert not wide, "README.md lines over 80 columns:\n" + "\n".join(wide)
