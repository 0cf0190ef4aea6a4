"""Core dumps of UKL processes (issue 44, item 4; kernel patch 0032): a
child killed by a core-dumping signal writes an ELF core of its memory
under Linux's rules (RLIMIT_CORE, core_pattern, PR_SET_DUMPABLE) and the
wait status says so; the core holds the global and the heap string with
the child's values, and no kernel memory but the application's data. The
one documented difference from Linux: a UKL process that is not root
dumps as root, and only to an absolute core_pattern
(tests/apps/coredump.c). `ukl run --core DIR` brings a core out, and gdb
opens it with the image's vmlinux at the faulting frame."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import DEBUG_CONFIGS, REPO, assert_clean, build, ukl

APP = REPO / "tests" / "apps" / "coredump.c"
DEBUG = max(DEBUG_CONFIGS, key=lambda c: c.count("+"))


_images: dict[str, Path] = {}


def image(outdir: Path, config: str) -> Path:
    """The test program built for CONFIG, once per session."""
    if config not in _images:
        _images[config] = build(APP, config, outdir / f"coredump-{config}")
    return _images[config]


def cases(out: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^case (\S+ \S+): (.*)$", out, re.M)}


def expected(ukl_config: bool) -> dict[str, str]:
    ok = "segments \\d+ ok"
    owner = 0 if ukl_config else 65534  # of the core of a process that is not root
    # Linux writes a core as the process's user; UKL as root, where the
    # process is not root only to an absolute path (Documentation/x86/ukl.rst)
    return {
        "segv core": f"signal 11, core dumped: yes, core: /core uid 0 {ok}",
        "abort /tmp/core.%p": f"signal 6, core dumped: yes, core: /tmp/core.\\d+ uid 0 {ok}",
        "rlimit0 core": "signal 11, core dumped: no, core: none",
        "nodump core": "signal 11, core dumped: no, core: none",
        "nobody core": "signal 11, core dumped: no, core: none" if ukl_config else
        f"signal 11, core dumped: yes, core: /tmp/core uid 65534 {ok}",
        "nobody /tmp/core.%p": f"signal 11, core dumped: yes, core: /tmp/core.\\d+ uid {owner} {ok}",
        # to a pipe: the helper is told the process is dumpable as setuid
        # programs are (%d 2), and so grants its user nothing
        "segv pipe": "signal 11, core dumped: yes, piped: dumpable 1 uid 0 bytes \\d+",
        "nobody pipe": f"signal 11, core dumped: yes, piped: dumpable {2 if ukl_config else 1} uid 65534 bytes \\d+",
    }


@pytest.mark.parametrize("config", ["linux", "base", DEBUG])
def test_cores_follow_linux_s_rules(outdir, config):
    out = image(outdir, config)
    res = ukl("run", out, "--", "all")
    assert res.returncode == 0, res.stdout[-3000:]
    got = cases(res.stdout)
    want = expected(config != "linux")
    assert set(got) == set(want), res.stdout
    for case, pattern in want.items():
        assert re.fullmatch(pattern, got[case]), (case, got[case])
    assert "coredump: 0 failed" in res.stdout
    # a dumpable process's /proc files are its user's, a UKL process's root's
    owners = re.findall(r"^child: /proc/self/environ uid (\d+)$", res.stdout, re.M)
    assert owners and set(owners) == {"0" if config != "linux" else "65534"}, res.stdout
    if config != "linux":
        assert "can only dump core to fully qualified path" in (out / "console.log").read_text()
    assert_clean(out / "console.log")


@pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (scripts/install-host-deps)")
def test_run_core_brings_it_out_and_gdb_shows_the_faulting_frame(outdir, tmp_path):
    out = image(outdir, "base")
    dest = tmp_path / "cores"
    dest.mkdir()
    (dest / "keep.txt").write_text("the user's file")
    res = ukl("run", out, "--core", dest, "--", "segv")
    assert res.returncode == 0, res.stdout[-3000:]
    assert "core dumped: yes" in res.stdout and "ukl-init: 1 core file saved" in res.stdout
    cores = sorted(dest.glob("core.coredump.*"))
    assert len(cores) == 1 and (dest / "keep.txt").read_text() == "the user's file"
    m = re.search(r"ukl: debug with: gdb (\S+) (\S+)", res.stdout)
    assert m and m.group(2) == str(cores[0]), res.stdout[-2000:]
    gdb = subprocess.run(["gdb", "-batch", "-nx", "-ex", "bt 3", "-ex", "print/x core_marker",
                          "-ex", "print heap_text", m.group(1), m.group(2)],
                         capture_output=True, text=True, timeout=300)
    assert "Program terminated with signal SIGSEGV" in gdb.stdout, gdb.stdout + gdb.stderr
    assert re.search(r"^#0 +crash_here \(where=.*coredump\.c:\d+", gdb.stdout, re.M), gdb.stdout
    assert re.search(r"^#1 .* in child \(", gdb.stdout, re.M), gdb.stdout
    assert "= 0x5eedc0de" in gdb.stdout, gdb.stdout
    assert "\"the child's heap string\"" in gdb.stdout, gdb.stdout
    assert_clean(out / "console.log")

