"""The kernel series by concern (`ukl kernel stat`): how many patches and
changed lines each concern of kernel/concerns.toml has, counted in the
patch files themselves, with Documentation/ apart."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ukltool.util.errors import UklError
from ukltool.util.paths import REPO

CONCERNS_FILE = REPO / "kernel" / "concerns.toml"


@dataclass(frozen=True)
class PatchSize:
    name: str
    subject: str
    added: int     # lines, outside Documentation/
    removed: int
    doc_lines: int  # lines added or removed under Documentation/


@dataclass(frozen=True)
class Concern:
    name: str
    what: str
    patches: list[PatchSize]

    @property
    def added(self) -> int:
        return sum(p.added for p in self.patches)

    @property
    def removed(self) -> int:
        return sum(p.removed for p in self.patches)

    @property
    def doc_lines(self) -> int:
        return sum(p.doc_lines for p in self.patches)


def _subject(text: str) -> str:
    """The Subject: header of a format-patch file, folded lines joined."""
    m = re.search(r"^Subject: (.*(?:\n[ \t].*)*)", text, re.M)
    if not m:
        return ""
    subject = " ".join(m.group(1).split())
    return re.sub(r"^\[PATCH[^]]*\] ", "", subject)


def patch_size(path: Path) -> PatchSize:
    """Count the + and - lines of each file's diff in a format-patch file."""
    text = path.read_text(errors="replace")
    added = removed = doc = 0
    in_doc = None
    in_diff = False
    for line in text.splitlines():
        if line.startswith("diff --git "):
            in_diff = True
            in_doc = line.split(" b/", 1)[-1].startswith("Documentation/")
            continue
        if not in_diff or line.startswith(("+++ ", "--- ")):
            continue
        if line.startswith("+") or line.startswith("-"):
            if in_doc:
                doc += 1
            elif line.startswith("+"):
                added += 1
            else:
                removed += 1
    return PatchSize(path.name, _subject(text), added, removed, doc)


def concerns(patches: list[Path], concerns_file: Path = CONCERNS_FILE) -> list[Concern]:
    """The series cut into the concerns of CONCERNS_FILE, which must cover
    every patch once and in order."""
    try:
        data = tomllib.loads(concerns_file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UklError(f"cannot read {concerns_file}: {e}", "restore it from git") from None
    sizes = [patch_size(p) for p in patches]
    out: list[Concern] = []
    expect = 1
    for c in data.get("concern", []):
        first, last = int(c["first"]), int(c["last"])
        if first != expect or last < first or last > len(sizes):
            raise UklError(f"{concerns_file}: concern {c['name']!r} covers {first}-{last}, "
                           f"but the next patch is {expect} of {len(sizes)}",
                           "give every patch of kernel/patches/series one concern, in order")
        out.append(Concern(c["name"], c.get("what", ""), sizes[first - 1:last]))
        expect = last + 1
    if expect != len(sizes) + 1:
        raise UklError(f"{concerns_file} ends at patch {expect - 1}, the series has {len(sizes)}",
                       "add the new patches to a concern")
    return out


def markdown_table(cs: list[Concern]) -> str:
    """docs/dev/kernel.md's table: one row per concern and a total."""
    rows = ["| concern | patches | lines outside Documentation/ (+/−) | Documentation/ lines |",
            "|---|---|---|---|"]
    for c in cs:
        first = int(c.patches[0].name[:4])
        last = int(c.patches[-1].name[:4])
        span = f"{first:04d}" if first == last else f"{first:04d}–{last:04d}"
        rows.append(f"| {c.name} | {span} ({len(c.patches)}) | {c.added + c.removed} "
                    f"(+{c.added} −{c.removed}) | {c.doc_lines} |")
    n = sum(len(c.patches) for c in cs)
    add = sum(c.added for c in cs)
    rem = sum(c.removed for c in cs)
    doc = sum(c.doc_lines for c in cs)
    rows.append(f"| **total** | {n} | {add + rem} (+{add} −{rem}) | {doc} |")
    return "\n".join(rows) + "\n"
