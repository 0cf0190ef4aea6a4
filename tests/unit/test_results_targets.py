"""Every generated report under docs/results/ is written by a make target
(issue 48): named in the Makefile, or written beside a named one by the
command that writes it (a `--plot FILE.png` of `ukl bench apps` also
writes FILE-latency.png; a `--json FILE.json` of the wall-time benches
also writes FILE-runs.json). A report nobody can regenerate is a defect."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results"

# what a command writes beside a file it is given: suffix of the given
# stem -> suffix of the extra file's
BESIDE = {".png": ("-latency.png",), ".json": ("-runs.json",)}

# reports whose make target is newer than their last run; empty once run
PENDING: set[str] = {"results-secrecy-8192.json", "results-secrecy-8192.md", "results-secrecy-8192.png"}


def named_in_makefile() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"docs/results/([\w-]+(?:\.[\w-]+)*\.(?:md|json|png))\b", text))


def written(named: set[str]) -> set[str]:
    out = set(named)
    for name in named:
        stem, ext = name.rsplit(".", 1)
        out.update(stem + extra for extra in BESIDE.get("." + ext, ()))
    return out


def test_every_report_has_a_make_target() -> None:
    orphans = sorted(p.name for p in RESULTS.iterdir()
                     if p.is_file() and p.name not in written(named_in_makefile()))
    assert not orphans, ("docs/results/ files no make target writes (add them to a results-* "
                         "target, or remove them): " + ", ".join(orphans))


def test_every_make_target_report_is_there() -> None:
    missing = sorted(n for n in named_in_makefile()
                     if not (RESULTS / n).exists() and n not in PENDING)
    assert not missing, "make targets write these, but they are not committed: " + ", ".join(missing)



def test_beside_rule() -> None:
    assert written({"a.png", "b.json", "c.md"}) == {"a.png", "a-latency.png", "b.json", "b-runs.json", "c.md"}
