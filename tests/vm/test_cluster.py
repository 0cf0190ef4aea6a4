"""`ukl cluster`: several guests of one image on a private bridge, each
with its own address, rank and peers (tests/apps/ring.c passes a token
around the ring over TCP); a failing node stops the others."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from conftest import REPO, UKL, assert_clean, build

RING = REPO / "tests" / "apps" / "ring.c"


def cluster(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(UKL), "cluster", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.mark.parametrize("config", ["linux", "base", "base-debug+ret+byp"])
def test_a_token_goes_around_a_ring_of_three(config, tmp_path):
    out = build(RING, config.split("+")[0], tmp_path / "ring")
    before = namespaces()
    opts = ["--opts", config.split("+", 1)[1].replace("+", ",")] if "+" in config else []
    res = cluster(str(out), "--nodes", "3", "--timeout", "600", *opts)
    assert res.returncode == 0, res.stdout
    for i, pred in ((0, 2), (1, 0), (2, 1)):
        assert f"[{i}] node {i} of 3 at 10.0.3.{11 + i}: token from node {pred}" in res.stdout, res.stdout
        assert f"ukl: node {i} (10.0.3.{11 + i}): exit 0" in res.stdout
        assert_clean(out / "cluster" / f"node{i}.log")
    assert namespaces() == before   # the network is removed


def test_a_failed_node_stops_the_others_and_gives_its_status(tmp_path):
    out = build(RING, "base", tmp_path / "ring")
    before = namespaces()
    res = cluster(str(out), "--nodes", "3", "--timeout", "600", "--", "fail", timeout=300)
    # node 1 exits 3 at once; nodes 0 and 2 would wait for it until the timeout
    assert res.returncode == 3, res.stdout
    assert "ukl: node 1 failed (status 3)" in res.stdout
    assert "node 0 (10.0.3.11): stopped (another node failed)" in res.stdout
    assert namespaces() == before


def qemus_of(out) -> int:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return sum(1 for line in ps.splitlines() if "qemu-system" in line and str(out) in line)


def test_a_stopped_cluster_leaves_no_guest_and_no_network(tmp_path):
    """SIGTERM (and a closed terminal's SIGHUP) stop every node's QEMU and
    remove the network namespace."""
    out = build(RING, "base", tmp_path / "ring")
    before = namespaces()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        proc = subprocess.Popen([str(UKL), "cluster", str(out), "--nodes", "3", "--timeout", "600", "--", "hang"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL)
        assert proc.stdout is not None
        seen = set()
        deadline = time.monotonic() + 300
        for line in proc.stdout:   # every node has passed the token on and hangs
            seen |= {i for i in range(3) if line.startswith(f"[{i}] node {i} of 3")}
            if len(seen) == 3 or time.monotonic() > deadline:
                break
        assert len(seen) == 3
        proc.send_signal(sig)
        proc.communicate(timeout=120)
        assert proc.returncode != 0
        assert qemus_of(out) == 0 and namespaces() == before


def test_bad_requests_are_named(tmp_path):
    out = build(RING, "base", tmp_path / "ring")
    res = cluster(str(out), "--nodes", "1")
    assert res.returncode == 2 and "--nodes 1: a cluster has 2 to 16 nodes" in res.stdout
    res = cluster(str(tmp_path / "nothing"), "--nodes", "3")
    assert res.returncode == 2 and "Traceback" not in res.stdout
    res = cluster(str(out), "--log-dir", "/dev/null")
    assert res.returncode == 2 and "/dev/null exists and is not a directory" in res.stdout
