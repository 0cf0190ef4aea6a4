"""TCP shortcuts (Documentation/x86/ukl.rst, "TCP shortcuts"; runtime/ukl.h
ukl_tcp_*; option `shortcut`): read, write, recv and send on a TCP socket
go straight to TCP and keep the system calls' semantics. tcp_shortcut.c
runs 46 cases (errors and their order, O_NONBLOCK, MSG_DONTWAIT/PEEK/
WAITALL, SO_RCVTIMEO, EINTR and SA_RESTART, EOF, EPIPE with and without
SIGPIPE, ECONNRESET, a descriptor closed by another thread during a read,
partial writes, pipes, Unix and UDP sockets that must take the system
call) through every path: the C library's calls, the explicit ukl_tcp_*
calls, and the C library's calls under the `shortcut` option, with and
without `byp`. Every path must give what an ordinary process gives on
Linux, with a clean log under the debug kernel. Under --icount the
shortcut must really be taken: fewer instructions per call."""

from __future__ import annotations

import re

import pytest

from conftest import BASELINE, REPO, UKL_CONFIGS, assert_clean, build, ukl

SRC = REPO / "tests" / "apps" / "tcp_shortcut.c"
# Each UKL kernel once: the program takes every path itself
PLAIN = sorted({c.split("+")[0] for c in UKL_CONFIGS})
PATHS = ["libc", "ukl", "libc+shortcut", "libc+shortcut+byp", "ukl+byp"]
CASE = re.compile(r"^case (\S+) (\S+): (.*)$")


def cases(stdout: str) -> dict[str, list[tuple[str, str]]]:
    """Each path's (case, result) lines, in order."""
    out: dict[str, list[tuple[str, str]]] = {}
    for line in stdout.splitlines():
        m = CASE.match(line.strip())
        if m:
            out.setdefault(m.group(1), []).append((m.group(2), m.group(3)))
    return out


@pytest.fixture(scope="module")
def images(outdir):
    return {c: build(SRC, c, outdir / f"tcp-shortcut-{c}") for c in [BASELINE, *PLAIN]}


@pytest.fixture(scope="module")
def on_linux(images) -> list[tuple[str, str]]:
    """The cases as an ordinary process on Linux gets them: the reference."""
    res = ukl("run", images[BASELINE], "--timeout", "300", "--", "cases")
    assert res.returncode == 0 and "done" in res.stdout, res.stdout[-3000:]
    got = cases(res.stdout)
    # In ring 3 the explicit calls are the ordinary system calls
    assert set(got) == {"libc", "ukl"} and got["libc"] == got["ukl"], got
    assert len(got["libc"]) >= 46, got
    return got["libc"]


@pytest.mark.parametrize("config", PLAIN)
def test_every_path_keeps_the_system_calls_semantics(images, on_linux, config):
    image = images[config]
    res = ukl("run", image, "--timeout", "600", "--", "cases")
    assert res.returncode == 0 and "done" in res.stdout, res.stdout[-3000:]
    got = cases(res.stdout)
    assert list(got) == PATHS, list(got)
    for path in PATHS:
        assert len(got[path]) == len(on_linux), (path, got[path])
        diff = [(a, b) for a, b in zip(on_linux, got[path], strict=True) if a != b]
        assert not diff, (path, diff)
    assert_clean(image / "console.log")


def test_the_shortcut_is_taken_and_costs_fewer_instructions(images):
    """1-byte write+read pairs on a loopback connection, in guest
    instructions (--icount: the TSC counts them)."""
    n = 200
    res = ukl("run", images["base"], "--icount", "--timeout", "600", "--", "cost", str(n))
    assert res.returncode == 0 and "done" in res.stdout, res.stdout[-3000:]
    cost = {m.group(1): int(m.group(2)) / n for m in re.finditer(r"^cost (\S+): (\d+)", res.stdout, re.M)}
    assert list(cost) == PATHS, res.stdout
    # Both calls skip the VFS and socket layers: 132 instructions per pair
    # when this was written, of about 11,400 (loopback TCP is most of it)
    assert cost["libc"] - cost["ukl"] > 100, cost
    # The option gives the C library's calls the same path
    assert abs(cost["libc+shortcut"] - cost["ukl"]) < 0.02 * cost["ukl"], cost
    assert cost["libc+shortcut+byp"] < cost["libc+shortcut"], cost
    assert abs(cost["ukl+byp"] - cost["libc+shortcut+byp"]) < 0.02 * cost["ukl"], cost


def test_the_option_is_named_in_ukl_run(images):
    res = ukl("run", images["base"], "--opts", "shortcut", "--", "cost", "1")
    assert res.returncode == 0 and "opts: 8" in res.stdout, res.stdout[-3000:]

