"""ukl-cc as a drop-in compiler on builds nobody here wrote (issue 34): a
Debian source package, unpacked as `dpkg-source -x --skip-patches` leaves
it (upstream's code, as in Debian's orig tarball), built by `./ukl build
DIR` with only the options its own documentation names, and run in ring 0.
The pinned source packages are the recipes' (apps/lua, apps/zstd,
apps/lighttpd), whose smoke tests run in test_apps.py; here the tree is
a fresh directory of the test's own, so nothing is shared with the
recipes' build directories, and the tree is never written to."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO, assert_clean, ukl
from ukltool.apps import recipes
from ukltool.build import project
from ukltool.util.paths import cache_dir

# recipe, `ukl build DIR` options, `ukl run` arguments, lines the run prints
TREES = [
    # Lua's Makefile guesses the platform (`make` is `make linux` here) and
    # links lua and luac: --name says which is the application
    ("lua", ["--name", "lua"],
     ["--", "-e", "local s = 0 for i = 1, 100000 do s = s + i end print('sum', s) "
                  "print(_VERSION, ('ring 0'):upper()) os.exit(7)"],
     ["sum\t5000050000", "Lua 5.4\tRING 0"], 7),
    # zstd's default target also builds libzstd.so: the program alone
    ("zstd", ["--make-args", "zstd-release", "--name", "zstd"], ["--", "-b1", "-i0"],
     ["1#"], 0),
    # lighttpd statically (CMake's BUILD_STATIC and lighttpd's plugin-static.h,
    # found on the include path); -tt loads every module of its configuration
    ("lighttpd", ["--configure-args", f"-DBUILD_STATIC=1 -DCMAKE_C_FLAGS=-I{REPO / 'apps' / 'lighttpd'} "
                  "-DZLIB_USE_STATIC_LIBS=ON", "--make-args", "lighttpd", "--name", "lighttpd",
                  "--file", f"{REPO / 'apps' / 'lighttpd' / 'lighttpd.conf'}:/etc/lighttpd/lighttpd.conf"],
     ["--", "-tt", "-f", "/etc/lighttpd/lighttpd.conf"], [], 0),
]


def unpack(name: str, dest):
    """The recipe's pinned source package, unpacked afresh into DEST."""
    r = recipes.load(name)
    recipes.fetch(r)   # downloads and checks the .dsc once (the cache)
    dsc = cache_dir() / "apps" / "downloads" / f"{r.source.package}_{r.source.version.split(':', 1)[-1]}.dsc"
    subprocess.run(["dpkg-source", "-x", "--skip-patches", str(dsc), str(dest)], check=True,
                   capture_output=True)
    return dest


@pytest.mark.parametrize("name,opts,run_args,expect,status",
                         [pytest.param(*t, marks=[] if t[0] == "lua" else [pytest.mark.test_all], id=t[0])
                          for t in TREES])
def test_a_debian_source_tree_builds_with_ukl_build_dir(tmp_path, name, opts, run_args, expect, status):
    tree = unpack(name, tmp_path / f"{name}-src")
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))
    out = tmp_path / "out"
    try:
        res = ukl("build", tree, "--config", "base", "-o", out, *opts)
        assert res.returncode == 0, res.stdout[-3000:]
        res = ukl("run", out, "--timeout", "120", *run_args)
        assert res.returncode == status, res.stdout[-3000:]
        for want in expect:
            assert want in res.stdout, (want, res.stdout[-3000:])
        assert "plugin not found" not in res.stdout and "error" not in res.stdout.lower(), res.stdout[-3000:]
        assert_clean(out / "console.log")
        assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before, "the tree must not be written to"
    finally:
        # the build directory is keyed by the tree's path, which is new each run
        shutil.rmtree(project.build_dir_for(tree, "base").parent, ignore_errors=True)
