"""Boot tests of the pipeline on stock Linux (--config linux)."""

from __future__ import annotations

import os
import re
import stat

from conftest import REPO, assert_clean, build, ukl


def test_hello_prints_args_and_status(outdir):
    out = build(REPO / "examples" / "hello" / "hello.c", "linux", outdir / "hello")
    res = ukl("run", out, "--", "x", "y")
    assert res.returncode == 0, res.stdout
    assert "Hello from hello" in res.stdout
    assert "running in ring 3" in res.stdout
    assert "argv[1] = x" in res.stdout and "argv[2] = y" in res.stdout
    assert_clean(out / "console.log")


def test_args_file_fds_and_exit_status(basics_linux):
    res = ukl("run", basics_linux, "--", "all", "two words", "42")
    assert res.returncode == 42, res.stdout
    assert "arg 1: all" in res.stdout
    assert "arg 2: two words" in res.stdout
    assert "file: written in the guest" in res.stdout
    fds = re.findall(r"^fd: (\d+)$", res.stdout, re.M)
    assert {"0", "1", "2"} <= set(fds), res.stdout
    assert_clean(basics_linux / "console.log")


def test_a_log_into_a_device_makes_no_file_beside_it(basics_linux, tmp_path):
    """`--log /dev/null` writes the console into the device; the QEMU
    command line goes to OUTDIR, not beside the device (into /dev). A
    private null device stands in for /dev/null."""
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    res = ukl("run", basics_linux, "--log", null, "--", "all", "two words", "42")
    assert res.returncode == 42 and "arg 2: two words" in res.stdout, res.stdout
    assert stat.S_ISCHR(null.stat().st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["null"]
    assert "qemu-system-x86_64" in (basics_linux / "null.cmd").read_text()


def test_sigsegv_is_139(basics_linux):
    res = ukl("run", basics_linux, "--", "segv")
    assert res.returncode == 139, res.stdout
    assert_clean(basics_linux / "console.log")


def test_sigabrt_is_134(basics_linux):
    res = ukl("run", basics_linux, "--", "abort")
    assert res.returncode == 134, res.stdout


def test_kernel_panic_is_reported(basics_linux):
    res = ukl("run", basics_linux, "--", "panic")
    assert res.returncode == 125, res.stdout
    assert "the kernel failed" in res.stdout
    assert "Kernel panic" in res.stdout or "sysrq" in res.stdout.lower()


def test_timeout_is_124(basics_linux):
    res = ukl("run", basics_linux, "--timeout", "20", "--", "sleep", "1000")
    assert res.returncode == 124, res.stdout
    assert "timed out" in res.stdout


def test_icount_runs_repeat_exactly(basics_linux):
    counts = []
    for _ in range(2):
        res = ukl("run", basics_linux, "--icount", "--", "loop", "20000")
        assert res.returncode == 0, res.stdout
        m = re.search(r"loop: 20000 calls took (\d+) ns", res.stdout)
        assert m, res.stdout
        counts.append(int(m.group(1)))
    assert counts[0] == counts[1] > 0, counts
