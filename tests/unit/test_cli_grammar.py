"""One CLI grammar (issue 35, item 2): every command's help has examples
that parse; the options shared by several commands have one help text;
old spellings still work, with a warning; `ukl build` refuses options
that do not apply to its kind of input; host clients refuse the in-guest
options; none of it ends in a traceback."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import UKL
from ukltool import cli
from ukltool.bench import appbench, hostbench
from ukltool.cli import build as cli_build
from ukltool.cli import common
from ukltool.util.errors import UklError

SHARED = {"--json": common.HELP_JSON, "--markdown": common.HELP_MARKDOWN, "--plot": common.HELP_PLOT,
          "--from-json": common.HELP_FROM_JSON, "--timeout": common.HELP_TIMEOUT, "--icount": common.HELP_ICOUNT,
          "--configs": common.HELP_CONFIGS}


def commands(parser: argparse.ArgumentParser, path: list[str]) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    """Every command and subcommand, with its path of names."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from commands(child, [*path, name])


def parse(argv: list[str]) -> argparse.Namespace:
    if "--" in argv:
        argv = argv[:argv.index("--")]
    return cli.parser().parse_args(cli.old_spellings(argv))


def test_every_command_has_a_description_and_examples_that_parse(capsys):
    found = list(commands(cli.parser(), []))
    assert len(found) >= 25
    for path, p in found:
        name = " ".join(["ukl", *path])
        assert p.description and p.epilog and p.epilog.startswith("examples:\n  "), name
        for line in p.epilog.splitlines()[1:]:
            example = line.strip()
            if example.startswith("cd $("):   # `cd $(ukl kernel tree)`
                example = example[len("cd $("):-1]
            words = shlex.split(example)
            assert words[0] == "ukl" and words[1:len(path) + 1] == path, (name, example)
            ns = parse(words[1:])
            assert callable(ns.func), example
        assert "deprecated" not in capsys.readouterr().err, name   # examples use the new spellings


def test_the_top_level_help_groups_every_command():
    text = cli.parser().format_help()
    for title, _ in cli.GROUPS:
        assert f"\n{title}:\n" in text
    listed = {n for _, names in cli.GROUPS for n in names}
    assert listed == set(next(a for a in cli.parser()._actions
                              if isinstance(a, argparse._SubParsersAction)).choices)
    assert "examples:\n  ukl build" in text


def test_shared_options_have_one_help_text():
    seen: dict[str, int] = dict.fromkeys(SHARED, 0)
    for path, p in commands(cli.parser(), []):
        for action in p._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for opt in action.option_strings:
                if opt in SHARED:
                    assert action.help == SHARED[opt], (" ".join(path), opt, action.help)
                    seen[opt] += 1
    assert seen["--json"] >= 7 and seen["--markdown"] >= 7 and seen["--plot"] >= 4, seen
    assert seen["--from-json"] >= 6 and seen["--timeout"] >= 7 and seen["--icount"] >= 4, seen
    # one meaning: --timeout is the limit of one boot; LTP's per-test limit has its own name
    ltp = dict((" ".join(path), p) for path, p in commands(cli.parser(), []))["conformance ltp"]
    assert "--test-timeout" in ltp.format_help() and "--timeout" not in ltp.format_help()


def test_function_profiles_have_one_name():
    # a switch everywhere; bench syscalls' points are --points'
    ns = parse(["bench", "syscalls", "--icount", "--by-function", "--points", "getppid,read:1"])
    assert ns.by_function is True and ns.points == "getppid,read:1"
    ns = parse(["bench", "syscalls", "--icount", "--by-function"])
    assert ns.by_function is True and ns.points is None
    ns = parse(["bench", "boot", "--icount", "--by-function"])
    assert ns.by_function is True
    ns = parse(["bench", "app", "redis", "--icount", "--by-function"])
    assert ns.by_function is True and ns.names == ["redis"]
    ns = parse(["conformance", "ltp", "--test-timeout", "30"])
    assert ns.test_timeout == 30.0


@pytest.mark.parametrize("old, new, want", [
    (["bench", "redis", "--icount"], "`ukl bench app redis`", {"bcmd": "app", "names": ["redis"]}),
    (["bench", "apps", "--icount"], "`ukl bench app`", {"bcmd": "app", "names": []}),
    (["bench", "apps", "--only", "redis,memcached"], "`ukl bench app NAME...`",
     {"names": [], "only_old": ["redis", "memcached"]}),
    (["bench", "syscalls", "--icount", "--profile", "getppid"], "--by-function --points",
     {"by_function": True, "points": "getppid"}),
    (["bench", "syscalls", "--icount", "--by-function", "getppid"], "--by-function --points getppid",
     {"by_function": True, "points": "getppid"}),
    (["bench", "boot", "--apps", "hello,redis"], "`ukl bench boot APP...`", {"apps_old": ["hello", "redis"]}),
    (["conformance", "ltp", "-o", "x"], "--logs DIR", {"logs": Path("x")}),
    (["bench", "app", "redis", "--icount", "--profile"], "--by-function", {"by_function": True}),
    (["bench", "redis", "--profile"], "--by-function", {"by_function": True, "names": ["redis"]}),
    (["libc", "tests", "--only", "tst-a", "tst-b"], "--tests A,B", {"tests": ["tst-a", "tst-b"]}),
    (["apptest", "redis", "--unit", "unit/a", "--unit", "unit/b"], "--units A,B", {"units": ["unit/a", "unit/b"]}),
    (["conformance", "ltp", "--timeout", "30"], "--test-timeout S", {"test_timeout": 30.0}),
])
def test_old_spellings_still_work_and_warn(capsys, old, new, want):
    ns = parse(old)
    for key, value in want.items():
        assert getattr(ns, key) == value, (old, key)
    err = capsys.readouterr().err
    assert "ukl: warning:" in err and "deprecated" in err and f"use {new}" in err, err
    assert all(line.startswith("ukl: warning:") for line in err.splitlines()), err   # one line each


def test_new_spellings_do_not_warn(capsys):
    for argv in (["bench", "app", "redis", "memcached", "--icount"], ["libc", "tests", "--tests", "tst-a,tst-b"],
                 ["apptest", "redis", "--units", "unit/a,unit/b"],
                 ["bench", "syscalls", "--by-function", "--points", "getppid"],
                 ["bench", "boot", "hello", "redis"], ["conformance", "ltp", "--logs", "x"]):
        parse(argv)
    assert capsys.readouterr().err == ""
    assert parse(["libc", "tests", "--tests", "tst-a,tst-b"]).tests == ["tst-a", "tst-b"]
    assert parse(["apptest", "redis", "--units", "unit/a,unit/b"]).units == ["unit/a", "unit/b"]


def test_old_app_subcommands_run_through_the_new_handler(capsys):
    """`ukl bench redis --model cycles` reaches `ukl bench app`'s checks."""
    assert cli.main(["bench", "redis", "--model", "cycles"]) == 2
    err = capsys.readouterr().err
    assert "use `ukl bench app redis`" in err and "--model cycles needs --icount" in err


@pytest.mark.parametrize("kind, extra, refused", [
    ("recipe", ["--name", "x"], "--name does not apply to a recipe"),
    ("recipe", ["--cflags=-O1"], "--cflags does not apply to a recipe"),
    ("recipe", ["--freestanding", "--build-system", "make"],
     "--freestanding and --build-system do not apply to a recipe"),
    ("files", ["--make-args", "V=1"], "--make-args does not apply to C files"),
    ("files", ["--configure-args=--x"], "--configure-args does not apply to C files"),
    ("files", ["--build-system", "cmake"], "--build-system does not apply to C files"),
    ("directory", ["--cflags=-O1"], "--cflags does not apply to a project directory"),
    ("directory", ["--freestanding"], "--freestanding does not apply to a project directory"),
])
def test_build_refuses_options_that_do_not_apply_to_its_input(capsys, tmp_path, kind, extra, refused):
    src = {"recipe": "hello", "files": str(tmp_path / "a.c"), "directory": str(tmp_path)}[kind]
    (tmp_path / "a.c").write_text("int main(void) { return 0; }\n")
    assert cli.main(["build", src, *extra, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert refused in err and "hint:" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["a b", "../x", "-x", ".x", "a/b", "x" * 65, "é", ""])
@pytest.mark.parametrize("kind", ["files", "directory"])
def test_build_refuses_a_name_that_is_not_an_application_name(capsys, tmp_path, kind, name):
    """Issue 44: a space in --name broke rdinit= under --pid1."""
    (tmp_path / "a.c").write_text("int main(void) { return 0; }\n")
    src = str(tmp_path / "a.c") if kind == "files" else str(tmp_path)
    assert cli.main(["build", src, f"--name={name}", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "is not an application name" in err and "hint:" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_build_names_each_kind_of_input(tmp_path):
    (tmp_path / "a.c").write_text("int main(void) { return 0; }\n")
    assert cli_build.build_input([tmp_path / "a.c"]) == ("files", None)
    assert cli_build.build_input([tmp_path]) == ("directory", None)
    assert cli_build.build_input([Path("hello")]) == ("recipe", "hello")
    with pytest.raises(UklError, match="a project directory is built on its own"):
        cli_build.build_input([tmp_path, tmp_path / "a.c"])
    applies = {"files": ["--name", "x", "--freestanding", "--cflags=-O1"],
               "directory": ["--name", "x", "--configure-args=--y", "--make-args", "V=1", "--build-system", "make"],
               "recipe": ["--configure-args=--y", "--make-args", "V=1", "--userspace"]}
    for kind, opts in applies.items():
        cli_build.check_build_options(parse(["build", "x", *opts]), kind)   # no refusal


@pytest.mark.parametrize("opt", [["--icount"], ["--requests", "10"], ["--model", "cycles"], ["--cpu", "x"],
                                 ["--by-function"]])
def test_host_clients_refuse_the_in_guest_options(capsys, opt):
    assert cli.main(["bench", "app", "redis", "--clients", "host", *opt]) == 2
    err = capsys.readouterr().err
    assert f"{opt[0]} does not apply to --clients host" in err and "--clients guest" in err
    assert "Traceback" not in err
    app = dict((" ".join(path), p) for path, p in commands(cli.parser(), []))["bench app"]
    assert "in-guest load only (--clients guest):\n  --icount" in app.format_help()


def test_one_file_reports_refuse_two_from_json(capsys, tmp_path):
    for suite in ("syscalls", "remote"):
        assert cli.main(["bench", suite, "--from-json", str(tmp_path / "a"), "--from-json", str(tmp_path / "b")]) == 2
        assert "reports one file" in capsys.readouterr().err


def test_unknown_application_names_the_choices(capsys):
    assert cli.main(["bench", "app", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nope: not among these benchmarks" in err and "redis" in err and "Traceback" not in err


def _wall() -> hostbench.WallReport:
    return hostbench.WallReport("redis", "Redis", "m", ["linux", "base"], 1,
                                results={"linux": [hostbench.Result("GET", 1000.0, 1.0, 2.0)],
                                         "base": [hostbench.Result("GET", 1100.0, 0.9, 1.8)]})


def _run() -> appbench.AppReport:
    return appbench.AppReport("sqlite3", "SQLite", False, "tcg", "m", ["linux", "base"],
                              results={"linux": [appbench.Point("run", 1, 1, 1, 2 * 10**9, 1)],
                                       "base": [appbench.Point("run", 1, 1, 1, 10**9, 1)]}, baseline="linux")


def test_host_clients_write_one_file_and_read_the_old_pair(tmp_path):
    path = tmp_path / "wall.json"
    hostbench.save_json([_wall()], [_run()], path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wall.json"]   # no wall-runs.json beside it
    reports, runs = hostbench.load_json(path)
    assert [r.app for r in reports] == ["redis"] and [r.app for r in runs] == ["sqlite3"]
    assert runs[0].results == _run().results
    # without runs to completion, the file is the list of reports, as before
    hostbench.save_json([_wall()], [], path)
    assert [d["app"] for d in json.loads(path.read_text())] == ["redis"]
    # an earlier ukl's pair: the reports, and the runs beside them in -runs.json
    appbench.save_json([_run()], tmp_path / "wall-runs.json")
    reports, runs = hostbench.load_json(path)
    assert [r.app for r in reports] == ["redis"] and [r.app for r in runs] == ["sqlite3"]


def test_every_command_help_works_without_a_checkout(tmp_path):
    env = dict(os.environ, UKL_REPO=str(tmp_path))
    for path, _ in commands(cli.parser(), []):
        if len(path) != 1 and path[:2] != ["bench", "app"]:
            continue
        res = subprocess.run([UKL, *path, "--help"], env=env, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (path, res.stderr)
        assert res.stdout.startswith(f"usage: ukl {' '.join(path)}") and "examples:" in res.stdout, path
