"""The kernel series' table by concern and its cover letter agree with the
patches (docs/dev/kernel.md, kernel/patches/0000-cover-letter.patch)."""

from __future__ import annotations

import re

import pytest

from ukltool.linux import kernel, seriesstat
from ukltool.source import series
from ukltool.util.errors import UklError
from ukltool.util.paths import PATCH_DIR, REPO

COVER = PATCH_DIR / series.COVER_LETTER


def test_every_patch_has_one_concern_and_the_counts_add_up():
    patches = kernel.series()
    cs = seriesstat.concerns(patches)
    assert sum(len(c.patches) for c in cs) == len(patches)
    assert [p.name for c in cs for p in c.patches] == [p.name for p in patches]
    # No concern is only documentation but the last; no patch is empty
    for c in cs[:-1]:
        assert c.added + c.removed > 0, c.name
    assert all(p.added + p.removed + p.doc_lines > 0 for c in cs for p in c.patches)


def test_the_developers_page_carries_the_current_table():
    table = seriesstat.markdown_table(seriesstat.concerns(kernel.series()))
    assert table in (REPO / "docs" / "dev" / "kernel.md").read_text(), \
        "docs/dev/kernel.md's table is stale: paste `./ukl kernel stat` into it"


def test_the_cover_letter_names_every_patch_in_order_and_its_table():
    patches = kernel.series()
    text = COVER.read_text()
    assert COVER.name not in [p.name for p in patches]
    assert re.search(rf"^Subject: \[PATCH 00/{len(patches)}\] ", text, re.M)
    shortlog = re.split(r"^\S.* \(\d+\):$", text, maxsplit=1, flags=re.M)[1]
    listed = re.findall(r"^  (\S.*)$", shortlog.strip("\n").split("\n\n", 1)[0], re.M)
    assert listed == [seriesstat.patch_size(p).subject for p in patches]
    assert seriesstat.markdown_table(seriesstat.concerns(patches)) in text, \
        "the cover letter's table is stale: paste `./ukl kernel stat` into it"


def test_patch_size_counts_code_and_documentation_apart(tmp_path):
    p = tmp_path / "0001-x.patch"
    p.write_text("From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x86: a\n thing\n\n"
                 "- not a line of the diff\n---\n"
                 "diff --git a/Documentation/a.rst b/Documentation/a.rst\n--- a/Documentation/a.rst\n"
                 "+++ b/Documentation/a.rst\n@@ -1 +1,2 @@\n a\n+b\n"
                 "diff --git a/arch/x86/a.c b/arch/x86/a.c\n--- a/arch/x86/a.c\n+++ b/arch/x86/a.c\n"
                 "@@ -1,2 +1,2 @@\n-int a;\n+int b;\n+int c;\n")
    s = seriesstat.patch_size(p)
    assert (s.subject, s.added, s.removed, s.doc_lines) == ("x86: a thing", 2, 1, 1)


def test_concerns_must_cover_the_series_in_order(tmp_path):
    patches = kernel.series()[:3]
    bad = tmp_path / "concerns.toml"
    bad.write_text('[[concern]]\nname = "a"\nfirst = 1\nlast = 1\n'
                   '[[concern]]\nname = "b"\nfirst = 3\nlast = 3\n')
    with pytest.raises(UklError, match="next patch is 2"):
        seriesstat.concerns(patches, bad)
    bad.write_text('[[concern]]\nname = "a"\nfirst = 1\nlast = 2\n')
    with pytest.raises(UklError, match="ends at patch 2"):
        seriesstat.concerns(patches, bad)
