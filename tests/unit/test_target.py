"""One application type for every command that builds one (apps.target):
the same options reach the image's build for every configuration."""

from __future__ import annotations

import dataclasses

import pytest

from ukltool.apps import target
from ukltool.util.errors import UklError


def test_a_files_target_builds_the_same_way_for_every_configuration(tmp_path):
    src = tmp_path / "prog.c"
    src.write_text("int main(void) { return 0; }\n")
    extra = (tmp_path / "strace", "/bin/strace")
    app = target.AppTarget(str(src), sources=[src], name="prog", freestanding=True, cflags=["-O1"],
                           files=[(src, "/prog.c")], build_system="make", make_args=["V=1"],
                           compression="xz", optimize="Os", perf=True)
    a = app.spec("base", tmp_path / "a")
    b = app.spec("linux", tmp_path / "b", [extra])
    for s in (a, b):
        assert (s.sources, s.name, s.freestanding, s.cflags) == ([src], "prog", True, ["-O1"])
        assert (s.project_opts.system, s.project_opts.make_args) == ("make", ["V=1"])
        assert (s.compression, s.optimize, s.perf) == ("xz", "Os", True)
    assert (a.config, a.outdir, a.files) == ("base", tmp_path / "a", [(src, "/prog.c")])
    assert (b.config, b.files) == ("linux", [(src, "/prog.c"), extra])
    # a spec is the build's own: changing it leaves the target alone
    a.cflags.append("-g")
    assert app.cflags == ["-O1"]
    rec = dataclasses.replace(app, userspace=True, compression=None)
    assert rec.spec("linux", tmp_path / "r").userspace and rec.spec("linux", tmp_path / "r").compression is None
    assert app.record_name == str(src).strip("/")


def test_targets_resolve_as_ukl_build_reads_its_input(tmp_path):
    assert target.resolve(str(tmp_path), "--apps").sources == [tmp_path]
    t = target.resolve("redis", "--apps")
    assert t.recipe is not None and t.label == "redis" and t.record_name == "redis"
    with pytest.raises(UklError, match="--apps: 'nope' is neither"):
        target.resolve("nope", "--apps")
    with pytest.raises(UklError, match="--apps: .*missing.c does not exist"):
        target.resolve(str(tmp_path / "missing.c"), "--apps")
    with pytest.raises(UklError, match="'libevent' is a library recipe") as e:
        target.recipe_target("libevent")
    assert "memcached" in e.value.hint
