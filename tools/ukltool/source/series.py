"""A patch series (a `series` file and `git format-patch` files in one
directory) applied to a pristine source tree kept as a git repository.

The series becomes commits on top of the tag `pristine`, made with git
plumbing and a private index; the work tree is then moved with
`git reset --hard`, which rewrites only files whose content changes, so an
edit to one patch rebuilds incrementally. A tree with local edits (commits
on top of the applied series, or uncommitted changes) is built as it is."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ukltool.source import sources
from ukltool.util import ui
from ukltool.util.errors import UklError
from ukltool.util.proc import git, run

APPLIED_REF = "refs/ukl/applied"
KEY_FILE = "ukl-series-key"
# Not a patch of the series: the posting's first mail, which export keeps
COVER_LETTER = "0000-cover-letter.patch"


@dataclass(frozen=True)
class Series:
    what: str        # "kernel", "glibc": for messages
    patch_dir: Path  # kernel/patches, libc/patches
    cli: str         # the CLI command that manages it: "./ukl kernel"

    def patches(self) -> list[Path]:
        sfile = self.patch_dir / "series"
        if not sfile.is_file():
            return []
        out = []
        for line in sfile.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            p = self.patch_dir / line
            if not p.is_file():
                raise UklError(f"{sfile} names {line}, which does not exist",
                               "fix the series file or restore the patch")
            out.append(p)
        return out


def key(patches: list[Path]) -> str:
    h = hashlib.sha256()
    for p in patches:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def commit_series(s: Series, tree: Path, patches: list[Path]) -> str:
    """Commit the patches onto `pristine` without touching the work tree; return the tip."""
    idx = tree / ".git" / "ukl-apply.index"
    env = dict(os.environ, GIT_INDEX_FILE=str(idx), **sources.GIT_ID)
    git(tree, "read-tree", "pristine", env=env)
    tip = git(tree, "rev-parse", "pristine^{commit}")
    with tempfile.TemporaryDirectory() as td:
        for p in patches:
            msg, body = Path(td) / "msg", Path(td) / "patch"
            info = run(["git", "-C", tree, "mailinfo", msg, body], input=p.read_bytes(),
                       what=f"reading {p.name}")
            fields = dict(l.split(": ", 1) for l in info.splitlines() if ": " in l)
            try:
                run(["git", "-C", tree, "apply", "--cached", "--whitespace=nowarn", body], env=env,
                    what=f"applying {s.what} patch {p.name}")
            except UklError as e:
                raise UklError(f"{s.what} patch {p.name} does not apply: {e.message}",
                               f"fix the patch (the file and hunk are named above), or edit the tree "
                               f"and run `{s.cli} export`") from None
            tree_id = git(tree, "write-tree", env=env)
            cenv = dict(env, GIT_AUTHOR_NAME=fields.get("Author", "ukl"),
                        GIT_AUTHOR_EMAIL=fields.get("Email", "ukl@localhost"),
                        GIT_AUTHOR_DATE=fields.get("Date", sources.GIT_ID["GIT_AUTHOR_DATE"]))
            message = fields.get("Subject", p.stem) + "\n\n" + msg.read_text()
            tip = run(["git", "-C", tree, "commit-tree", tree_id, "-p", tip, "-F", "-"],
                      env=cenv, input=message.encode(), what="git commit-tree").strip()
    idx.unlink(missing_ok=True)
    return tip


def _dirty(tree: Path) -> bool:
    return bool(git(tree, "status", "--porcelain", "--untracked-files=no"))


def sync(s: Series, tree: Path) -> str:
    """Bring the tree to the series; return a key for its content."""
    patches = s.patches()
    k = key(patches)
    key_file = tree / ".git" / KEY_FILE
    head = git(tree, "rev-parse", "HEAD")
    applied = git(tree, "rev-parse", "-q", "--verify", APPLIED_REF) \
        if (tree / ".git" / APPLIED_REF).exists() else git(tree, "rev-parse", "pristine^{commit}")
    edited = head != applied or _dirty(tree)
    old_key = key_file.read_text().strip() if key_file.is_file() else None
    if edited:
        if old_key != k:
            raise UklError(f"the {s.what} tree {tree} has local edits and {s.patch_dir.name} changed too",
                           f"save the edits with `{s.cli} export` or drop them with `{s.cli} reset`")
        ui.warn(f"building the edited {s.what} tree {tree}; `{s.cli} export` saves it to {s.patch_dir}")
        diff = run(["git", "-C", tree, "diff", "HEAD"])
        return hashlib.sha256((head + diff).encode()).hexdigest()
    if old_key != k:
        with ui.step(f"applying {len(patches)} {s.what} patches"):
            tip = commit_series(s, tree, patches)
            git(tree, "update-ref", APPLIED_REF, tip)
            git(tree, "reset", "-q", "--hard", tip)
            key_file.write_text(k + "\n")
    return k


def reset(s: Series, tree: Path) -> Path:
    (tree / ".git" / KEY_FILE).unlink(missing_ok=True)
    base = git(tree, "rev-parse", "pristine^{commit}")
    git(tree, "update-ref", APPLIED_REF, base)
    git(tree, "reset", "-q", "--hard", base)
    sync(s, tree)
    return tree


def export(s: Series, tree: Path) -> list[str]:
    """Write the tree's commits since `pristine` to the patch directory."""
    if _dirty(tree):
        raise UklError(f"the {s.what} tree {tree} has uncommitted changes",
                       "commit them (one logical change per commit) before exporting")
    with tempfile.TemporaryDirectory() as td:
        git(tree, "format-patch", "-q", "--zero-commit", "--no-signature", "-o", td, "pristine..HEAD")
        new = sorted(Path(td).glob("*.patch"))
        for old in s.patch_dir.glob("*.patch"):
            if old.name != COVER_LETTER:
                old.unlink()
        s.patch_dir.mkdir(parents=True, exist_ok=True)
        for p in new:
            shutil.copy(p, s.patch_dir / p.name)
    (s.patch_dir / "series").write_text("".join(p.name + "\n" for p in new))
    git(tree, "update-ref", APPLIED_REF, git(tree, "rev-parse", "HEAD"))
    (tree / ".git" / KEY_FILE).write_text(key(s.patches()) + "\n")
    return [p.name for p in new]
