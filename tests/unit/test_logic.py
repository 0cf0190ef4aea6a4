"""Unit tests of the logic that needs no VM."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from conftest import fake_image
from ukltool import cli
from ukltool.build import initramfs, protocol
from ukltool.cli import bench as cli_bench
from ukltool.cli import common
from ukltool.cli import run as cli_run
from ukltool.linux import kernel
from ukltool.run import logscan
from ukltool.util.errors import UklError


def test_failure_lines_find_panics_oopses_bugs_warnings():
    log = "\n".join([
        "[    0.000000] Booting",
        "ukl-init: starting /bin/app",
        "[    1.500000] BUG: kernel NULL pointer dereference, address: 0000000000000000",
        "[    1.500001] #PF: supervisor read access in kernel mode",
        "[    1.600000] WARNING: CPU: 0 PID: 1 at kernel/fork.c:10 foo+0x1/0x2",
        "[   12.000000] Kernel panic - not syncing: Fatal exception",
    ])
    bad = logscan.failure_lines(log)
    assert bad == [log.splitlines()[2], log.splitlines()[4], log.splitlines()[5]]
    assert len(logscan.failure_lines(log, context=1)) == 4


def test_failure_lines_find_the_debug_checkers_reports():
    for line in ("BUG: sleeping function called from invalid context at mm/memory.c:5000",
                 "WARNING: possible circular locking dependency detected",
                 "WARNING: suspicious RCU usage", "BUG: KASAN: slab-out-of-bounds in foo+0x1/0x2",
                 "rcu: INFO: rcu_preempt self-detected stall on CPU",
                 "watchdog: BUG: soft lockup - CPU#1 stuck for 22s!",
                 "INFO: task app:42 blocked for more than 120 seconds."):
        stamped = f"[  123.456789] {line}"
        assert logscan.failure_lines(f"[    0.1000000] Booting\n{stamped}\nmore\n") == [stamped]


def test_only_the_kernels_messages_count():
    assert logscan.failure_lines("[    0.000000] Linux version 6.1\n"
                                 "ukl-init: application exited with status 0\n") == []
    # An application printing the word "warning" is not a kernel failure,
    # nor is one printing what looks like one (LevelDB's db_bench does)...
    assert logscan.failure_lines("warning: disk almost full\nbugfix applied\n"
                                 "WARNING: Snappy compression is not enabled\n") == []
    # ...but a kernel message after an application's unfinished line is.
    line = "... finished 100 ops[    5.000000] BUG: unable to handle page fault for address: 0"
    assert logscan.failure_lines(f"{line}\n") == [line]
    assert logscan.failure_lines("[    5.000000] ok [ 6.000000] WARNING: CPU: 1 PID: 2 at x\n") != []
    # The emulated Skylake's unmitigable Retbleed is a state, not a failure;
    # nothing else Linux words as a warning is excused by it.
    retbleed = ("[    0.041277] RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable to "
                "RETBleed attacks, data leaks possible!")
    assert logscan.failure_lines(retbleed + "\n") == []
    worse = "[    0.041277] RETBleed: WARNING: something else"
    assert logscan.failure_lines(f"{worse}\n{retbleed} [    0.1] BUG: x\n") == [worse, f"{retbleed} [    0.1] BUG: x"]


def test_parse_status_takes_the_last_report():
    assert protocol.parse_status("") is None
    assert protocol.parse_status("status 7\n") == 7
    assert protocol.parse_status("garbage\nstatus 1\nstatus 139\n") == 139


def test_parse_fragment_and_mismatches():
    frag = kernel.parse_fragment('CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_S="x y"\n# comment\n')
    assert frag == {"CONFIG_A": "y", "CONFIG_B": "n", "CONFIG_S": '"x y"'}
    final = {"CONFIG_A": "y", "CONFIG_S": '"x y"'}
    assert kernel.config_mismatches(frag, final) == []
    assert kernel.config_mismatches({"CONFIG_C": "y"}, final) == ["CONFIG_C=y (got n)"]


def test_known_configurations_and_unknown_one():
    assert "linux" in kernel.config_names()
    frags = kernel.fragments("linux")
    assert frags[0].name == "vm-base.config" and frags[-1].name == "linux.config"
    with pytest.raises(UklError, match="unknown configuration 'nope'"):
        kernel.fragments("nope")


def test_tcg_cpu_comes_from_the_configuration(tmp_path: Path):
    assert kernel.tcg_cpu("linux") == "max" and kernel.tcg_cpu("base+byp") == "max"
    # The mitigated configurations boot on a CPU that Linux mitigates
    assert kernel.tcg_cpu("linux-mitigated").startswith("Skylake-Server")
    assert kernel.tcg_cpu("base-mitigated+ret") == kernel.tcg_cpu("linux-mitigated")
    assert "CONFIG_PAGE_TABLE_ISOLATION" not in kernel.parse_fragment(
        (kernel.CONFIG_DIR / "base-mitigated.config").read_text())
    # An image knows its configuration; without a manifest, 'max'
    (tmp_path / "manifest.json").write_text('{"config": "base-mitigated+byp"}')
    assert kernel.image_tcg_cpu(tmp_path) == kernel.tcg_cpu("base-mitigated")
    (tmp_path / "manifest.json").write_text('{"config": "gone"}')
    assert kernel.image_tcg_cpu(tmp_path) == "max"
    assert kernel.image_tcg_cpu(tmp_path / "none") == "max"
    (tmp_path / "manifest.json").write_text("[1]")
    assert kernel.image_tcg_cpu(tmp_path) == "max"
    # a header with a typo is an error naming the file, not ignored
    from unittest import mock
    bad = tmp_path / "bad.config"
    bad.write_text("# ukl-tcg-cpu: Skylake-Server, check=off\n# ukl-tests: measurement-only\n")
    with mock.patch.object(kernel, "fragments", return_value=[bad]), \
            pytest.raises(UklError, match="bad 'ukl-tcg-cpu' line"):
        kernel.tcg_cpu("linux")
    with mock.patch.object(kernel, "_fragments", return_value=[bad]), \
            pytest.raises(UklError, match="bad 'ukl-tests' line"):
        kernel.measurement_only("linux")


def test_series_key_changes_with_content(tmp_path: Path):
    a = tmp_path / "0001-a.patch"
    a.write_text("one")
    k1 = kernel.series_key([a])
    a.write_text("two")
    assert kernel.series_key([a]) != k1


def test_initramfs_archives_are_newc_cpio_that_cpio_reads(tmp_path: Path):
    import subprocess
    (tmp_path / "has space").write_bytes(b"x" * 5)
    s = initramfs.runtime_skeleton().file("/bin/x y", tmp_path / "has space").slink("/bin/sh", "busybox")
    out = tmp_path / "a.cpio"
    initramfs.write(s, out)
    data = out.read_bytes()
    assert data.startswith(b"070701") and len(data) % 4 == 0
    listing = subprocess.run(["cpio", "-itv", "--quiet"], input=data, capture_output=True, check=True).stdout
    lines = [l.split() for l in listing.decode().splitlines()]
    by_name = {" ".join(l[l.index("2000") + 1:]): l for l in lines}
    assert by_name["dev/console"][0] == "crw-------" and by_name["dev/console"][4:6] == ["5,", "1"]
    assert by_name["tmp"][0] == "drwxrwxrwt" and by_name["bin/x y"][0] == "-rwxr-xr-x"
    assert by_name["bin/sh -> busybox"][0] == "lrwxrwxrwx"
    assert all(l[2:4] == ["root", "root"] for l in lines)
    content = subprocess.run(["cpio", "-i", "--quiet", "--to-stdout", "bin/x y"], input=data,
                             capture_output=True, check=True).stdout
    assert content == b"xxxxx"
    again = tmp_path / "b.cpio"
    initramfs.write(s, again)
    assert again.read_bytes() == data, "archives are reproducible"
    with pytest.raises(UklError, match="not an absolute path"):
        initramfs.Spec().file("etc/x", tmp_path / "has space")
    with pytest.raises(UklError, match="cannot read"):
        initramfs.write(initramfs.Spec().file("/a", tmp_path / "missing"), tmp_path / "c.cpio")
    assert not (tmp_path / "c.cpio").exists() and not (tmp_path / "c.cpio.partial").exists()


def test_forward_and_timeout_arguments():
    assert common.forward_arg("5555:6666") == (5555, 6666)
    for bad in ("5555", "a:b", "0:1", "1:70000"):
        with pytest.raises(argparse.ArgumentTypeError):
            common.forward_arg(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        common.positive_arg("-1")


def test_cflags_are_split_and_flags_ukl_owns_are_refused():
    assert common.cflags_arg("-fno-omit-frame-pointer -DNAME='a b'") == ["-fno-omit-frame-pointer", "-DNAME=a b"]
    for bad in ("-mcmodel=large", "-O2 -mred-zone", "-fPIC", "-o x", "'unclosed"):
        with pytest.raises(argparse.ArgumentTypeError):
            common.cflags_arg(bad)


def test_cli_reports_user_errors_without_traceback(tmp_path: Path, capsys):
    assert cli.main(["build", str(tmp_path / "missing.c")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err
    assert cli.main(["run", str(tmp_path)]) == 2
    assert "not a ukl build output" in capsys.readouterr().err
    (tmp_path / "a.c").write_text("int main(){}")
    assert cli.main(["build", str(tmp_path / "a.c"), "--config", "nope"]) == 2
    assert "unknown configuration" in capsys.readouterr().err


def test_icount_runs_one_cpu_and_refuses_more():
    assert cli_run.run_smp(None, False) == 2
    assert cli_run.run_smp(None, True) == 1
    assert cli_run.run_smp(1, True) == 1 and cli_run.run_smp(3, False) == 3
    for smp, icount in ((2, True), (0, False)):
        try:
            cli_run.run_smp(smp, icount)
        except UklError as e:
            assert "--smp" in e.message
        else:
            raise AssertionError((smp, icount))


def test_checkpatch_outcomes_are_read_from_status_and_summary():
    from ukltool.linux import kernel
    assert kernel.checkpatch_errors(0, "") == 0
    summary = "total: {} errors, 1 warnings, 0 checks, 9 lines checked\n"
    assert kernel.checkpatch_errors(1, "p:3: WARNING:X: y\n" + summary.format(0)) == 0
    assert kernel.checkpatch_errors(1, "p:1: ERROR:X: y\n" + summary.format(2)) == 2
    for rc, out in ((1, ""), (2, "Can't locate Foo.pm in @INC"), (127, "perl: not found"), (255, "died")):
        with pytest.raises(UklError, match="checkpatch.pl did not run"):
            kernel.checkpatch_errors(rc, out)


def test_every_subcommand_dispatches_through_the_parser():
    """A new subcommand without a handler would otherwise do nothing."""
    def leaves(parser: argparse.ArgumentParser, path: list[str]):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield path, parser
        for action in subs:
            for name, child in action.choices.items():
                yield from leaves(child, [*path, name])

    found = list(leaves(cli.parser(), []))
    assert len(found) >= 14
    for path, leaf in found:
        assert callable(leaf.get_default("func")), " ".join(path)


def test_builds_of_one_thing_are_serialized(tmp_path, monkeypatch):
    """Two threads (glibctests boots from two) and two processes exclude
    each other; different names do not."""
    import subprocess
    import sys
    import threading
    import time

    from ukltool.util import lock
    monkeypatch.setenv("UKL_CACHE", str(tmp_path))
    inside: list[str] = []
    overlap = []

    def work(tag: str) -> None:
        with lock.held("kernel-x", "kernel 'x'"):
            inside.append(tag)
            if len(inside) > 1:
                overlap.append(tag)
            time.sleep(0.2)
            inside.remove(tag)

    threads = [threading.Thread(target=work, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlap
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); from ukltool.util import lock\n"
            "with lock.held('kernel-x', 'x'):\n    print('in', flush=True); time.sleep(1.5)\n")
    other = subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).parents[2] / "tools")],
                             stdout=subprocess.PIPE, text=True, env={"UKL_CACHE": str(tmp_path), "PATH": "/usr/bin"})
    assert other.stdout is not None and other.stdout.readline() == "in\n"
    t0 = time.monotonic()
    with lock.held("kernel-y", "y"):
        assert time.monotonic() - t0 < 0.5  # another name is free
    with lock.held("kernel-x", "x"):
        assert time.monotonic() - t0 > 1.0  # waited for the other process
    other.wait()


def test_the_kernel_key_covers_the_build_code():
    from ukltool.linux import kernel
    assert len(kernel.build_logic()) == 64 and kernel.build_logic() == kernel.build_logic()


def test_recipes_load_and_bad_ones_are_named(tmp_path, monkeypatch):
    from ukltool.apps import recipes
    for name in recipes.names():
        r = recipes.load(name)
        assert len(r.source.dsc_sha256) == 64 or r.source.kind != "debian"
        assert r.build.library or (r.build.program and r.smoke and r.smoke.expect)
    monkeypatch.setattr(recipes, "APPS_DIR", tmp_path)
    (tmp_path / "x").mkdir()
    good = ('schema = 1\ndescription = "x"\n[source]\npackage = "x"\nversion = "1"\ndsc_sha256 = "' + "0" * 64 + '"\n'
            '[build]\nprogram = "x"\n')
    (tmp_path / "x" / "recipe.toml").write_text(good + "colour = 1\n")
    with pytest.raises(UklError, match="unknown key.*colour"):
        recipes.load("x")
    (tmp_path / "x" / "recipe.toml").write_text(good.replace('program = "x"\n', ""))
    with pytest.raises(UklError, match="lacks 'program'"):
        recipes.load("x")
    (tmp_path / "x" / "recipe.toml").write_text(good + '[image]\nfiles = [["missing.conf", "/etc/x"]]\n')
    with pytest.raises(UklError, match="missing.conf does not exist"):
        recipes.load("x")
    with pytest.raises(UklError, match="no recipe named 'y'"):
        recipes.load("y")


def test_recipe_sources_from_tarballs_and_from_this_repository(tmp_path, monkeypatch):
    """[source] tarballs: upstream tarballs from the shared sources, each
    checked against its pinned sha256 and unpacked where `into` says;
    [source] tree: a directory of this repository, copied by content."""
    import hashlib
    import tarfile

    from ukltool.apps import recipes
    from ukltool.util import paths
    monkeypatch.setattr(recipes, "APPS_DIR", tmp_path / "apps")
    monkeypatch.setattr(paths, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(recipes, "cache_dir", lambda: tmp_path / "cache")
    shared = tmp_path / "shared"
    monkeypatch.setenv("UKL_SHARED_DIR", str(shared))
    sums = {}
    for name, files in (("main", {"CMakeLists.txt": "x"}), ("dep", {"dep.h": "y"})):
        src = tmp_path / "t" / f"{name}-1"
        src.mkdir(parents=True)
        for f, text in files.items():
            (src / f).write_text(text)
            (src / f"{f}.hard").hardlink_to(src / f)   # a hard link names its target from the top
        (shared / "pkg").mkdir(parents=True, exist_ok=True)
        with tarfile.open(shared / "pkg" / f"{name}.tar.xz", "w:xz") as tf:
            tf.add(src, arcname=f"{name}-1")
        sums[name] = hashlib.sha256((shared / "pkg" / f"{name}.tar.xz").read_bytes()).hexdigest()

    def write(source: str) -> None:
        (tmp_path / "apps" / "x").mkdir(parents=True, exist_ok=True)
        (tmp_path / "apps" / "x" / "recipe.toml").write_text(
            'schema = 1\ndescription = "x"\n[source]\n' + source + '[build]\nprogram = "x"\n')
    write(f'version = "1"\ntarballs = [{{ file = "pkg/main.tar.xz", sha256 = "{sums["main"]}" }},\n'
          f'  {{ file = "pkg/dep.tar.xz", sha256 = "{sums["dep"]}", into = "lib/dep" }}]\n')
    tree = recipes.fetch(recipes.load("x"))
    assert (tree / "CMakeLists.txt").read_text() == "x" and (tree / "lib" / "dep" / "dep.h").read_text() == "y"
    assert (tree / "lib" / "dep" / "dep.h.hard").read_text() == "y"
    assert tree.name.startswith("x-1-") and not tree.with_name(tree.name + ".partial").exists()
    # a link out of the tree is refused (tar's data filter), and nothing is left
    evil = tmp_path / "t" / "evil-1"
    evil.mkdir()
    (evil / "inc").symlink_to(tmp_path / "outside")
    with tarfile.open(shared / "pkg" / "evil.tar.xz", "w:xz") as tf:
        tf.add(evil, arcname="evil-1")
    evil_sum = hashlib.sha256((shared / "pkg" / "evil.tar.xz").read_bytes()).hexdigest()
    write(f'version = "4"\ntarballs = [{{ file = "pkg/evil.tar.xz", sha256 = "{evil_sum}" }}]\n')
    with pytest.raises(UklError, match="link to an absolute path"):
        recipes.fetch(recipes.load("x"))
    assert not list((tmp_path / "cache" / "apps" / "src").glob("x-4*"))
    # a tarball that is not the pinned one is refused, and nothing is left
    write(f'version = "2"\ntarballs = [{{ file = "pkg/main.tar.xz", sha256 = "{"0" * 64}" }}]\n')
    with pytest.raises(UklError, match="checksum mismatch"):
        recipes.fetch(recipes.load("x"))
    assert not list((tmp_path / "cache" / "apps" / "src").glob("x-2*"))
    write(f'version = "3"\ntarballs = [{{ file = "pkg/gone.tar.xz", sha256 = "{"0" * 64}" }}]\n')
    with pytest.raises(UklError, match="pkg/gone.tar.xz is missing") as e:
        recipes.fetch(recipes.load("x"))
    assert e.value.hint and "UKL_SHARED_DIR" in e.value.hint
    for bad, match in ((f'version = "1"\ntarballs = [{{ file = "../x.tar", sha256 = "{"0" * 64}" }}]\n',
                        "not a path inside the shared sources"),
                       ('version = "1"\ntarballs = [{ file = "a.tar", sha256 = "abc" }]\n', "64 lowercase hex"),
                       (f'version = "1"\ntarballs = [{{ file = "a.tar", sha256 = "{"0" * 64}", into = "../up" }}]\n',
                        "not a directory inside the tree"),
                       ('tree = "guest"\npackage = "x"\n', "not package and tree"),
                       ('tree = "../etc"\n', "not a directory of this repository"),
                       ('version = "1"\n', "name one of package")):
        write(bad)
        with pytest.raises(UklError, match=match):
            recipes.load("x")
    # a directory of this repository, named by its content
    write('tree = "guest/etc"\n')
    tree = recipes.fetch(recipes.load("x"))
    assert (tree / "passwd").is_file() and tree.name.startswith("x-")


def test_every_recipe_says_its_schema_and_others_are_refused(tmp_path, monkeypatch):
    from ukltool.apps import recipes
    for path in sorted(recipes.APPS_DIR.glob("*/recipe.toml")):
        assert path.read_text().startswith(f"schema = {recipes.SCHEMA}\n"), f"{path}: say its schema first"
    monkeypatch.setattr(recipes, "APPS_DIR", tmp_path)
    (tmp_path / "x").mkdir()
    body = ('description = "x"\n[source]\npackage = "x"\nversion = "1"\ndsc_sha256 = "' + "0" * 64 + '"\n'
            '[build]\nprogram = "x"\n')
    (tmp_path / "x" / "recipe.toml").write_text(body)
    with pytest.raises(UklError, match="lacks 'schema'") as e:
        recipes.load("x")
    assert e.value.hint and f"schema = {recipes.SCHEMA}" in e.value.hint
    for bad in ("2", '"v1"', "true", "1.0"):
        (tmp_path / "x" / "recipe.toml").write_text(f"schema = {bad}\n" + body)
        with pytest.raises(UklError, match=r"is not a recipe format this ukl reads \(it reads 1\)"):
            recipes.load("x")
    (tmp_path / "x" / "recipe.toml").write_text("schema = 1\n" + body)
    assert recipes.load("x").description == "x"


def test_recipe_dependencies_are_built_first_and_their_prefixes_substituted(tmp_path, monkeypatch):
    from ukltool.apps import recipes
    from ukltool.build import project
    monkeypatch.setattr(recipes, "APPS_DIR", tmp_path)
    head = 'schema = 1\ndescription = "x"\n[source]\npackage = "{0}"\nversion = "1"\ndsc_sha256 = "' + "0" * 64 + '"\n'

    def write(name: str, build: str) -> None:
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "recipe.toml").write_text(head.format(name) + "[build]\n" + build)
    write("lib", 'library = true\nconfigure_args = ["--prefix={prefix}"]\nmake_targets = ["install"]\n')
    write("app", 'program = "app"\ndepends = ["lib"]\nconfigure_args = ["--with-lib={prefix:lib}"]\n')
    built: list[tuple[str, str, list[str]]] = []
    monkeypatch.setattr(recipes, "fetch", lambda r: tmp_path / "src" / r.name)
    monkeypatch.setattr(project, "build", lambda tree, target, opts: built.append(
        (tree.name, target, opts.configure_args)))
    opts = recipes.options(recipes.load("app"), "base")
    lib_prefix = str(recipes.install_prefix(tmp_path / "src" / "lib", "base"))
    assert built == [("lib", "base", [f"--prefix={lib_prefix}"])]
    assert opts.configure_args == [f"--with-lib={lib_prefix}"] and opts.program == "app"
    assert recipes.install_prefix(tmp_path / "src" / "lib", "linux") != recipes.install_prefix(
        tmp_path / "src" / "lib", "base")
    # what is wrong is named
    write("bad", 'program = "bad"\nconfigure_args = ["--prefix={prefix}"]\n')
    with pytest.raises(UklError, match="is for library recipes"):
        recipes.load("bad")
    write("bad", 'program = "bad"\nconfigure_args = ["--with={prefix:other}"]\n')
    with pytest.raises(UklError, match="'other', which is not in depends"):
        recipes.load("bad")
    write("bad", 'program = "bad"\ndepends = ["app"]\n')
    with pytest.raises(UklError, match="'app', which is not a library recipe"):
        recipes.options(recipes.load("bad"), "base")
    write("lib", 'library = true\ndepends = ["lib2"]\n')
    write("lib2", 'library = true\ndepends = ["lib"]\n')
    with pytest.raises(UklError, match="depends on itself"):
        recipes.options(recipes.load("app"), "base")


def test_recipe_directory_placeholder_names_the_recipe_that_wrote_it(tmp_path, monkeypatch):
    """{recipe} in configure and make arguments: the directory of the recipe
    whose file has it (lighttpd's plugin-static.h on the include path)."""
    from ukltool.apps import recipes
    from ukltool.util.paths import cache_dir
    monkeypatch.setattr(recipes, "APPS_DIR", tmp_path / "apps")
    monkeypatch.setenv("UKL_CACHE", str(tmp_path / "cache"))
    tmp_path = tmp_path / "apps"
    head = 'schema = 1\ndescription = "x"\n[source]\npackage = "x"\nversion = "1"\ndsc_sha256 = "' + "0" * 64 + '"\n'
    for name, build in (("base", 'program = "p"\nconfigure_args = ["-DCMAKE_C_FLAGS=-I{recipe}"]\n'
                                 'make_args = ["CONF={recipe}/x.conf"]\n'),
                        ("child", 'make_args = ["MORE={recipe}"]\n')):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "recipe.toml").write_text(
            ('schema = 1\nextends = "base"\ndescription = "y"\n' if name == "child" else head) + "[build]\n" + build)
    (tmp_path / "base" / "x.conf").write_text("conf\n")
    r = recipes.load("base")
    # a copy of the recipe's directory in the cache, named by its content:
    # one path in every checkout
    (flag,), (conf,) = r.build.configure_args, r.build.make_args
    here = Path(flag.removeprefix("-DCMAKE_C_FLAGS=-I"))
    assert here.parent == cache_dir() / "apps" / "recipes" and here.name.startswith("base-")
    assert conf == f"CONF={here}/x.conf" and (here / "x.conf").read_text() == "conf\n"
    assert recipes.load("base").build.configure_args == [flag]          # the same copy again
    c = recipes.load("child")   # its own arguments name its own directory, the parent's the parent's
    assert c.build.configure_args == [flag]
    (more,) = c.build.make_args
    assert Path(more.removeprefix("MORE=")).name.startswith("child-")
    (tmp_path / "base" / "x.conf").write_text("changed\n")                # new content, a new copy
    assert recipes.load("base").build.configure_args != [flag]


def test_app_benchmark_scripts_results_and_report():
    from ukltool.apps import recipes
    from ukltool.bench import appbench
    assert {"redis", "memcached", "nginx", "sqlite3", "leveldb"} <= set(appbench.names())
    sh = appbench.script(recipes.load("redis"), 500)
    assert sh.count("/bin/appload redis 6379 ") == 8 and " redis-server 500 30 16 " in sh
    assert sh.rstrip().endswith("echo APPLOAD-DONE")
    assert appbench.script(recipes.load("sqlite3"), None).startswith('/bin/appload run "$UKL_APP" --size 10')
    text = ("noise\nAPPLOAD redis get 1000 30 16 2000000 9000000\nAPPLOAD redis set 1000 1 1 3000000 1\n"
            "APPLOAD-DONE\n")
    pts = appbench.parse(text)
    assert [(p.label, p.per_request) for p in pts] == [("GET c=30 P=16", 2000.0), ("SET c=1 P=1", 3000.0)]
    assert appbench.parse("APPRUN 123 456\n")[0].server_ns == 123
    for bad in ("APPLOAD redis get 1 1 1 1 1\n", "APPLOAD-DONE\n", "x\nAPPLOAD-FAILED\nAPPLOAD-DONE\n"):
        with pytest.raises(UklError):
            appbench.parse(bad)
    rep = appbench.AppReport("redis", "Redis", True, "tcg", "m", ["linux", "base"], {"linux": "6.1", "base": "6.1"},
                             {"linux": pts, "base": [appbench.Point("get", 30, 16, 1000, 1000000, 1),
                                                     appbench.Point("set", 1, 1, 1000, 3300000, 1)]})
    md = appbench.markdown([rep])
    assert "| GET c=30 P=16 | 2,000 | 1,000 | 0.500 |" in md and "| SET c=1 P=1 | 3,000 | 3,300 | 1.100 |" in md


def test_recipe_bench_sections_are_checked(tmp_path, monkeypatch):
    from ukltool.apps import recipes
    monkeypatch.setattr(recipes, "APPS_DIR", tmp_path)
    (tmp_path / "x").mkdir()
    good = ('schema = 1\ndescription = "x"\n[source]\npackage = "x"\nversion = "1"\ndsc_sha256 = "' + "0" * 64 + '"\n'
            '[build]\nprogram = "x"\n')
    for bench, message in (('protocol = "gopher"\n', "not one of"), ('protocol = "redis"\n', "needs a port"),
                           ('protocol = "redis"\nport = 1\ncomm = "x"\nops = ["del"]\n', "ops get or set"),
                           ('protocol = "run"\nspeed = 1\n', "unknown key")):
        (tmp_path / "x" / "recipe.toml").write_text(good + "[bench]\n" + bench)
        with pytest.raises(UklError, match=message):
            recipes.load("x")


def test_app_benchmark_runs_combine_to_medians_and_spread():
    from ukltool.bench import appbench
    runs = [[appbench.Point("get", 1, 1, 100, v, 10 * v)] for v in (1000, 1100, 1050)]
    merged, spread = appbench.combine(runs)
    assert merged[0].server_ns == 1050 and merged[0].elapsed_ns == 10500
    assert abs(spread["GET c=1 P=1"] - 100 / 1050) < 1e-9
    with pytest.raises(UklError, match="different loads"):
        appbench.combine([[appbench.Point("get", 1, 1, 100, 1, 1)], [appbench.Point("set", 1, 1, 100, 1, 1)]])


def test_kernel_references_link_to_the_kernels_own_names():
    from ukltool.build import app
    assert app.kernel_name("ukl_kernel.msleep") == "msleep"
    assert app.kernel_name("ukl_entry_SYSCALL_64") == "ukl_entry_SYSCALL_64"
    assert app.kernel_name("ukl_kernel.") == "ukl_kernel."


def test_a_recipe_extends_another_with_patches_of_its_own(tmp_path, monkeypatch):
    from ukltool.apps import recipes
    monkeypatch.setattr(recipes, "APPS_DIR", tmp_path)
    for d in ("srv", "srv-x", "srv-y"):
        (tmp_path / d).mkdir()
    (tmp_path / "srv" / "srv.conf").write_text("x\n")
    (tmp_path / "srv" / "recipe.toml").write_text(
        'schema = 1\ndescription = "a server"\n'
        '[source]\npackage = "srv"\nversion = "1"\ndsc_sha256 = "' + "0" * 64 + '"\n'
        '[build]\nprogram = "srv"\nmake_args = ["A=1"]\n[image]\nfiles = [["srv.conf", "/etc/srv.conf"]]\n'
        'args = ["-p", "1"]\n[tests]\ncommand = ["{recipe}/check.sh", "{port}"]\nport = 1\nprobe = "x"\n'
        'finished = "done"\nverdicts = { ok = "^ok", err = "^err" }\n')
    (tmp_path / "srv-x" / "one.patch").write_text("--- a/f\n+++ b/f\n")
    (tmp_path / "srv-x" / "recipe.toml").write_text(
        'schema = 1\nextends = "srv"\ndescription = "the server, patched"\n[source]\npatches = ["one.patch"]\n'
        '[build]\nmake_args = ["A=2"]\n[tests]\nverdicts = { ok = "^passed" }\n')
    base, x = recipes.load("srv"), recipes.load("srv-x")
    assert x.extends == "srv" and not base.extends and x.description == "the server, patched"
    # tables merge: the parent's keys stay unless replaced; paths stay the declaring recipe's
    assert x.source.package == "srv" and x.source.patches == [tmp_path / "srv-x" / "one.patch"]
    assert x.build.program == "srv" and x.build.make_args == ["A=2"] and x.args == ["-p", "1"]
    assert x.files == [(tmp_path / "srv" / "srv.conf", "/etc/srv.conf")] == base.files
    assert base.source.patches == []
    # deeper than the top-level tables, values are replaced whole; the parent's
    # {recipe} stays the parent's directory
    assert x.tests is not None and x.tests.verdicts == {"ok": "^passed"}
    assert x.tests.command == [f"{tmp_path / 'srv'}/check.sh", "{port}"]
    assert base.tests is not None and base.tests.command == ["{recipe}/check.sh", "{port}"]
    for text, message in (('extends = "srv-x"\n', "which extends another recipe"),
                          ('extends = "srv-y"\n', "names the recipe this one modifies"),
                          ('extends = "srv"\n[source]\npatches = ["two.patch"]\n', "two.patch does not exist"),
                          ('extends = "none"\n', "no recipe named 'none'")):
        (tmp_path / "srv-y" / "recipe.toml").write_text("schema = 1\n" + text)
        with pytest.raises(UklError, match=message):
            recipes.load("srv-y")


def test_the_explicit_redis_recipe_is_redis_with_three_changed_lines():
    from ukltool.apps import recipes
    redis, explicit = recipes.load("redis"), recipes.load("redis-explicit")
    assert explicit.extends == "redis" and explicit.source.package == redis.source.package
    assert explicit.build == redis.build and explicit.bench == redis.bench
    (patch,) = explicit.source.patches
    changed = [line for line in patch.read_text().splitlines()
               if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]
    assert len([c for c in changed if c.startswith("+")]) == 3 and len(changed) == 5, changed
    assert any("ukl_tcp_read(conn->fd" in c for c in changed) and any("ukl_tcp_write(conn->fd" in c for c in changed)


def test_bench_app_names_choose_among_the_benchmarks():
    every = ["memcached", "redis", "redis-explicit"]
    assert cli_bench._bench_apps([], every) == every
    assert cli_bench._bench_apps(["redis-explicit", "redis", "redis"], every) == ["redis-explicit", "redis"]
    with pytest.raises(UklError, match="nope: not among these benchmarks"):
        cli_bench._bench_apps(["redis", "nope"], every)


def test_cluster_nodes_get_an_address_a_rank_and_their_peers():
    from ukltool.run import cluster, netns
    words = cluster.node_env(1, 3)
    assert words == ["ip=10.0.3.12::10.0.3.1:255.255.255.0:node1:eth0:off", "UKL_RANK=1",
                     "UKL_HOSTS=10.0.3.11,10.0.3.12,10.0.3.13"]
    macs = {cluster.node_mac(i) for i in range(cluster.MAX_NODES)}
    assert len(macs) == cluster.MAX_NODES and all(int(m.split(":")[0], 16) % 2 == 0 for m in macs)
    cmds = netns.bridge_commands("ns", 3)
    assert ["ip", "-n", "ns", "link", "set", "ukltap2", "master", netns.BRIDGE] in cmds
    assert ["ip", "-n", "ns", "addr", "add", "10.0.3.1/24", "dev", netns.BRIDGE] in cmds
    cmd = cluster.run_command(Path("out/x"), 2, 3, Path("l/node2.log"), ["--icount"], ["128", "1"])
    assert cmd[:3] == ["setpriv", "--pdeathsig", "TERM"]   # a node outlives no cluster
    assert cmd[4:9] == ["run", "out/x", "--tap", "ukltap2", "--mac"] and cmd[-3:] == ["--", "128", "1"]
    assert "--append=UKL_RANK=2" in cmd and "--icount" in cmd
    counted = cluster.run_command(Path("out/x"), 2, 3, Path("l/node2.log"), [], ["1"], count_insns=True)
    assert counted[-4:] == ["--count-insns", "l/node2.insns.json", "--", "1"]
    # the report and the plugin's temporary file are checked as the logs are
    assert {Path("l/node2.insns.json"), Path("l/node2.insns.json.partial")} <= set(cluster.node_files(Path("l"), 2))


@pytest.mark.parametrize("where,refused", [("nodir/r.json", "is not a directory"),
                                           ("adir", "exists and is not a plain file"),
                                           ("link.json", "exists and is not a plain file")])
def test_run_refuses_an_instruction_report_it_cannot_write(capsys, tmp_path, where, refused):
    out = fake_image(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "victim").write_text("x")
    (tmp_path / "link.json").symlink_to(tmp_path / "victim")
    assert cli.main(["run", str(out), "--count-insns", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err
    assert refused in err and "hint:" in err and "Traceback" not in err, err
    assert (tmp_path / "victim").read_text() == "x"


def test_a_recipe_says_how_many_guests_its_default_run_needs(tmp_path, monkeypatch):
    from ukltool.apps import recipes
    assert recipes.load("secrecy").nodes == 3 and recipes.load("redis").nodes == 1
    monkeypatch.setattr(recipes, "APPS_DIR", tmp_path)
    (tmp_path / "x").mkdir()
    head = 'schema = 1\ndescription = "x"\n[source]\ntree = "guest/mpi"\n[build]\nprogram = "x"\n[image]\n'
    for bad in ("0", "17", "true"):
        (tmp_path / "x" / "recipe.toml").write_text(head + f"nodes = {bad}\n")
        with pytest.raises(UklError, match="nodes|'nodes' must be"):
            recipes.load("x")


def test_a_tree_outside_a_git_checkout_is_copied_without_build_debris(tmp_path, monkeypatch):
    from ukltool.apps import recipes
    (tmp_path / "guest" / "lib" / "__pycache__").mkdir(parents=True)
    for f in ("lib.c", "lib.h", "Makefile", "lib.o", "libx.a", "__pycache__/x.pyc"):
        (tmp_path / "guest" / "lib" / f).write_text(f)
    monkeypatch.setattr(recipes, "REPO", tmp_path)
    assert recipes._tree_files("guest/lib") == ["guest/lib/Makefile", "guest/lib/lib.c", "guest/lib/lib.h"]
    # in this checkout: what git tracks, and never an object built there by hand
    monkeypatch.undo()
    built = recipes.REPO / "guest" / "mpi" / "ukl-mpi.o"
    had = built.exists()
    built.touch()
    try:
        assert "guest/mpi/ukl-mpi.o" not in recipes._tree_files("guest/mpi")
        assert "guest/mpi/ukl-mpi.c" in recipes._tree_files("guest/mpi")
    finally:
        if not had:
            built.unlink()


def test_ukl_writes_its_own_files_never_through_a_link(tmp_path):
    """run.vm.write_own_file (LOG.cmd beside an image): ukl runs as root,
    so a link planted where it writes must not make it overwrite the
    file the link names, nor a FIFO or device block it."""
    from ukltool.run import vm
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    (tmp_path / "x.cmd").symlink_to(target)
    with pytest.raises(UklError, match="is a symbolic link"):
        vm.write_own_file(tmp_path / "x.cmd", "qemu ...\n")
    assert target.read_text() == "keep me\n"
    os.mkfifo(tmp_path / "f.cmd")
    with pytest.raises(UklError, match="not a regular file"):
        vm.write_own_file(tmp_path / "f.cmd", "qemu ...\n")
    vm.write_own_file(tmp_path / "ok.cmd", "qemu ...\n")
    vm.write_own_file(tmp_path / "ok.cmd", "qemu 2\n")
    assert (tmp_path / "ok.cmd").read_text() == "qemu 2\n"
