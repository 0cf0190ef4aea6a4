"""`ukl run --pid1`: the kernel starts the UKL application itself, as PID 1,
with no init program (issue 36, item 4). Its output, arguments, exit
status and fatal signals are as when init starts it; abort() ends it
(init's SIGNAL_UNKILLABLE would discard SIGABRT); and the kernel, not init,
reports the status. With --no-initramfs the VMM loads the kernel alone and
the kernel makes the application's file (ukl.init=)."""

from __future__ import annotations

import re

import pytest

from conftest import REPO, assert_clean, build, ukl


@pytest.fixture(scope="module")
def basics(outdir):
    return build(REPO / "tests" / "apps" / "basics.c", "base", outdir / "basics-pid1")


def test_hello_is_pid_1_with_its_arguments(outdir):
    out = build(REPO / "examples" / "hello" / "hello.c", "base", outdir / "hello-pid1")
    res = ukl("run", out, "--pid1", "--machine", "microvm", "--direct", "--", "a", "b c", "")
    assert res.returncode == 0, res.stdout
    # argv[0] is the path the kernel started, as for any init it starts
    assert "Hello from /ukl/hello (pid 1, running in ring 0)" in res.stdout
    assert "argv[1] = a" in res.stdout and "argv[2] = b c" in res.stdout and "argv[3] = \n" in res.stdout
    console = (out / "console.log").read_text()
    assert "ukl-init:" not in console and "ukl: init exited: status 0" in console
    assert_clean(out / "console.log")


@pytest.mark.parametrize("machine", ["pc", "microvm"])
def test_the_debug_kernel_boots_direct(outdir, machine):
    # KASAN, lockdep and the rest through the PVH entry (kernel patch 0001:
    # the entry code runs before KASAN's shadow is mapped), as PID 1 and
    # under init
    out = build(REPO / "examples" / "hello" / "hello.c", "base-debug", outdir / "hello-debug-direct")
    for pid1 in ([], ["--pid1"]):
        res = ukl("run", out, *pid1, "--machine", machine, "--direct", "--", "x")
        assert res.returncode == 0, res.stdout[-3000:]
        assert "running in ring 0" in res.stdout and "argv[1] = x" in res.stdout
        assert_clean(out / "console.log")


@pytest.mark.parametrize("args,status", [(["exit", "3"], 3), (["segv"], 139), (["abort"], 134)])
def test_status_and_fatal_signals_as_under_init(basics, args, status):
    res = ukl("run", basics, "--pid1", "--", *args)
    assert res.returncode == status, res.stdout
    assert f"ukl: init exited: status {status}" in (basics / "console.log").read_text()
    assert "Attempted to kill init" not in res.stdout
    assert_clean(basics / "console.log")


@pytest.mark.parametrize("append", [[], ["--append", "printk.time=0"]])
def test_a_status_line_the_application_prints_is_not_its_status(basics, append):
    """Issue 44: the status was parsed from the console the application
    writes; without printk's time stamps a line it printed was taken for
    the kernel's."""
    fake = "[    1.000000] ukl: init exited: status 42"
    res = ukl("run", basics, "--pid1", *append, "--", "say", fake, "3")
    assert res.returncode == 3 and fake in (basics / "console.log").read_text(), res.stdout
    res = ukl("run", basics, "--pid1", *append, "--", "say", "ukl: init exited: status 42", "0")
    assert res.returncode == 0, res.stdout
    assert_clean(basics / "console.log")


def test_init_makes_no_siblings(basics):
    res = ukl("run", basics, "--pid1", "--", "cloneparent")
    assert res.returncode == 0 and "clone(CLONE_PARENT): Invalid argument" in res.stdout, res.stdout


def test_what_needs_init_is_refused(basics, outdir):
    linux = build(REPO / "examples" / "hello" / "hello.c", "linux", outdir / "hello-pid1-linux")
    for args, message in (([linux, "--pid1"], "UKL configuration"),
                          ([basics, "--pid1", "--sh", "true"], "need init"),
                          ([basics, "--pid1", "--", "x" * 10] + ["y"] * 40, "at most 31 arguments"),
                          ([basics, "--pid1", "--", 'say "hi"'], "double quote")):
        res = ukl("run", *map(str, args))
        assert res.returncode == 2 and message in res.stdout and "Traceback" not in res.stdout, res.stdout


def entries(stdout: str) -> set[str]:
    return set(re.findall(r"^entry: (.*)$", stdout, re.M))


def test_no_initramfs_the_kernel_alone(basics):
    res = ukl("run", basics, "--pid1", "--no-initramfs", "--machine", "microvm", "--direct", "--", "ls", "/")
    assert res.returncode == 0, res.stdout
    # the kernel's built-in initramfs (/dev/console, /root) and the file it made
    assert entries(res.stdout) == {"dev", "root", "ukl"}, res.stdout
    cmd = (basics / "console.cmd").read_text()
    assert "-initrd" not in cmd and "ukl.init=/ukl/basics rdinit=/ukl/basics --" in cmd, cmd
    res = ukl("run", basics, "--pid1", "--no-initramfs", "--", "ls", "/ukl")
    assert res.returncode == 0 and entries(res.stdout) == {"basics"}, res.stdout
    for args, status in ((["exit", "3"], 3), (["abort"], 134)):
        res = ukl("run", basics, "--pid1", "--no-initramfs", "--", *args)
        assert res.returncode == status, res.stdout
    assert_clean(basics / "console.log")
    # with the initramfs, its files; the kernel keeps the initramfs's file
    # and makes another beside it (and says why it ignores a relative path)
    res = ukl("run", basics, "--pid1", "--", "ls", "/")
    assert res.returncode == 0 and {"etc", "init", "tmp", "ukl"} <= entries(res.stdout), res.stdout
    assert "ukl.init=" not in (basics / "console.cmd").read_text()
    res = ukl("run", basics, "--pid1", "--append", "ukl.init=/ukl/basics", "--append", "ukl.init=/ukl/other",
              "--append", "ukl.init=rel", "--", "ls", "/ukl")
    assert res.returncode == 0 and entries(res.stdout) == {"basics"}, res.stdout
    assert "ukl.init: 'rel' is not an absolute path" in (basics / "console.log").read_text()
    res = ukl("run", basics, "--pid1", "--append", "ukl.init=/ukl/other", "--", "ls", "/ukl")
    assert res.returncode == 0 and entries(res.stdout) == {"basics", "other"}, res.stdout
    # what cannot be made panics, and says why
    res = ukl("run", basics, "--pid1", "--append", "ukl.init=/dev/console", "--", "ls")
    made = re.search(r"ukl.init: cannot create /dev/console: -(EEXIST|17)", res.stdout)
    assert res.returncode != 0 and made, res.stdout


def test_no_initramfs_is_refused_where_files_or_init_are_needed(basics, outdir, tmp_path):
    conf = tmp_path / "app.conf"
    conf.write_text("x\n")
    with_file = build(REPO / "examples" / "hello" / "hello.c", "base", outdir / "hello-pid1-file",
                      "--file", f"{conf}:/etc/app.conf")
    for args, message in (([with_file, "--pid1", "--no-initramfs"], "carries files"),
                          ([basics, "--no-initramfs"], "needs --pid1")):
        res = ukl("run", *map(str, args))
        assert res.returncode == 2 and message in res.stdout and "Traceback" not in res.stdout, res.stdout
