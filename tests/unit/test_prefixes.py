"""The series is committed onto `pristine`, every prefix is one commit, and
`ukl kernel export` writes the commits back, keeping the cover letter."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ukltool.linux import prefixes
from ukltool.source import series, sources
from ukltool.util.errors import UklError


def _git(repo: Path, *args: str) -> str:
    env = dict(os.environ, **sources.GIT_ID)
    return subprocess.run(["git", "-C", str(repo), *args], check=True, env=env,
                          capture_output=True, text=True).stdout.strip()


def _patch(repo: Path, out: Path, name: str, text: str) -> Path:
    """A format-patch file adding NAME with TEXT on top of the repo's HEAD (not committed)."""
    (repo / name).write_text(text)
    _git(repo, "add", name)
    _git(repo, "commit", "-q", "-m", f"add {name}")
    path = Path(_git(repo, "format-patch", "-1", "-o", str(out)))
    _git(repo, "reset", "-q", "--hard", "HEAD~1")
    return path


@pytest.fixture
def tree(tmp_path):
    repo = tmp_path / "tree"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "ukl")
    (repo / "README").write_text("pristine\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "pristine")
    _git(repo, "tag", "pristine")
    return repo


def test_every_prefix_is_a_commit_of_the_series(tree, tmp_path):
    pdir = tmp_path / "patches"
    first = _patch(tree, pdir, "a.c", "int a;\n")
    _git(tree, "checkout", "-q", "pristine")
    (tree / "a.c").write_text("int a;\n")
    _git(tree, "add", "a.c")
    _git(tree, "commit", "-q", "-m", "a")
    second = _patch(tree, pdir, "b.c", "int b;\n")
    _git(tree, "checkout", "-q", "ukl")
    s = series.Series("kernel", pdir, "./ukl kernel")
    tip = series.commit_series(s, tree, [first, second])
    got = prefixes.prefixes(tree, tip, [first, second])
    assert [(p.number, p.patch) for p in got] == [(1, first.name), (2, second.name)]
    assert _git(tree, "ls-tree", "--name-only", got[0].commit).split() == ["README", "a.c"]
    assert _git(tree, "ls-tree", "--name-only", got[1].commit).split() == ["README", "a.c", "b.c"]
    # the work tree was not touched
    assert not (tree / "b.c").exists()
    with pytest.raises(UklError, match="2 commits"):
        prefixes.prefixes(tree, tip, [first])


def test_export_keeps_the_cover_letter(tree, tmp_path):
    (tree / "a.c").write_text("int a;\n")
    _git(tree, "add", "a.c")
    _git(tree, "commit", "-q", "-m", "add a")
    pdir = tmp_path / "patches"
    pdir.mkdir()
    (pdir / "0001-old.patch").write_text("old\n")
    (pdir / series.COVER_LETTER).write_text("cover\n")
    s = series.Series("kernel", pdir, "./ukl kernel")
    assert series.export(s, tree) == ["0001-add-a.patch"]
    assert sorted(p.name for p in pdir.glob("*.patch")) == [series.COVER_LETTER, "0001-add-a.patch"]
    assert (pdir / series.COVER_LETTER).read_text() == "cover\n"
    assert (pdir / "series").read_text() == "0001-add-a.patch\n"
