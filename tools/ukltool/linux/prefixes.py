"""Build every prefix of the kernel series (`ukl kernel build-prefixes`).

Each patch must leave a kernel that builds, so that `git bisect` through the
series works. The series in kernel/patches is committed onto `pristine`
(series.py, as for a normal build), then a separate work tree in the cache
is moved from one commit to the next and vmlinux is rebuilt in its own
build directory: moving a work tree rewrites only the files a patch
changes, so make rebuilds only what depends on them. The normal tree and
its build directories are not touched."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from ukltool.linux import kernel
from ukltool.source import series as series_mod
from ukltool.source import sources
from ukltool.util import lock, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import cache_dir
from ukltool.util.proc import git, run, stream


@dataclass(frozen=True)
class Prefix:
    number: int   # patches applied: 1..N
    patch: str    # the last one's file name
    commit: str


def prefixes(tree: Path, tip: str, patches: list[Path]) -> list[Prefix]:
    """One Prefix per patch, from the commits between `pristine` and TIP."""
    commits = git(tree, "rev-list", "--reverse", f"pristine..{tip}").split()
    if len(commits) != len(patches):
        raise UklError(f"the series has {len(patches)} patches but {len(commits)} commits were made",
                       "run `./ukl kernel reset`, then try again")
    return [Prefix(i + 1, p.name, c) for i, (p, c) in enumerate(zip(patches, commits, strict=True))]


def _worktree(tree: Path, where: Path, commit: str) -> None:
    """A detached work tree of TREE at WHERE, moved to COMMIT."""
    if not (where / ".git").exists():
        git(tree, "worktree", "prune")
        git(tree, "worktree", "add", "-q", "--detach", str(where), commit)
    else:
        git(where, "checkout", "-q", "--force", "--detach", commit)


def _report(rows: list[tuple[str, str, str]]) -> None:
    t = Table("#", "patch", "vmlinux", title="the kernel series, patch by patch")
    for r in rows:
        t.add_row(*r)
    ui.err.print(t)


def build_prefixes(config: str, first: int = 1) -> None:
    """Build vmlinux for CONFIG at every prefix from FIRST patches on;
    stop with an error (naming the patch and its log) at the first that
    does not build."""
    kernel.fragments(config)  # validates the name before any work
    patches = kernel.series()
    if not patches:
        raise UklError("kernel/patches has no series", "nothing to build")
    if not 1 <= first <= len(patches):
        raise UklError(f"--from {first}: the series has {len(patches)} patches",
                       f"give a number from 1 to {len(patches)}")
    _, tree = sources.linux_tree()
    with lock.held(kernel.TREE_LOCK, "the kernel tree"):
        tip = series_mod.commit_series(kernel.SERIES, tree, patches)
    todo = prefixes(tree, tip, patches)[first - 1:]
    base = cache_dir() / "build" / "prefixes"
    wt, bdir = base / "tree", base / config
    bdir.mkdir(parents=True, exist_ok=True)
    allconfig = bdir / ".ukl-allconfig"
    allconfig.write_text("".join(f.read_text() + "\n" for f in kernel.fragments(config)))
    env = dict(os.environ, KCONFIG_ALLCONFIG=str(allconfig))
    jobs = str(os.cpu_count() or 2)
    rows: list[tuple[str, str, str]] = []
    for p in todo:
        log = bdir / f"prefix-{p.number:04d}.log"
        title = f"[{p.number}/{len(patches)}] {p.patch}"
        start = time.monotonic()
        _worktree(tree, wt, p.commit)
        try:
            # Kconfig symbols a later patch adds are unknown before it: no
            # check that the fragments were all honoured, only that it builds.
            run(["make", "-s", "-C", wt, f"O={bdir}", "allnoconfig"], env=env,
                what=f"configuring '{config}' at patch {p.number}")
            with ui.step(title) as st:
                stream(["make", "-C", wt, f"O={bdir}", f"-j{jobs}", "LOCALVERSION=", "vmlinux"], log,
                       kernel.make_progress(st), what=f"building '{config}' with patches 1-{p.number}",
                       hint=f"the log is {log}; `./ukl kernel build-prefixes --from {p.number}` resumes")
        except UklError:
            rows.append((str(p.number), p.patch, "FAILED"))
            _report(rows)
            raise
        rows.append((str(p.number), p.patch, f"built in {time.monotonic() - start:.0f} s"))
    _report(rows)
    ui.info(f"every prefix of the series from patch {first} on builds with configuration '{config}'")
