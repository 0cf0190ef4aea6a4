"""`ukl cluster`: several guests of one image on a private bridge, each
with its own address, rank and peers (tests/apps/ring.c passes a token
around the ring over TCP); a failing node stops the others."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, UKL, assert_clean, build
from ukltool.run import cluster as cluster_mod
from ukltool.run import netns
from ukltool.util.errors import UklError

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


def test_nothing_is_written_through_a_link_in_the_log_directory(tmp_path, monkeypatch):
    """A symbolic link at a node's log or command file, or at the log
    directory, is refused before the network is made (the tool runs as
    root: it would overwrite what the link names). No boot."""
    def no_network(*a, **kw):
        raise AssertionError("the cluster went on to make its network")
    monkeypatch.setattr(netns, "private_network", no_network)
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    for name in ("node0.log", "node2.log", "node1.cmd"):
        logs = tmp_path / f"logs-{name}"
        logs.mkdir()
        (logs / name).symlink_to(target)
        with pytest.raises(UklError, match=rf"{logs / name} is a symbolic link \(to {target}\)") as e:
            cluster_mod.run(tmp_path / "image", 3, logs, [], [])
        assert e.value.hint == f"remove the link (rm {logs / name}), or name another directory with --log-dir"
        assert target.read_text() == "keep me\n" and (logs / name).is_symlink()
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    with pytest.raises(UklError, match="the log directory .*linked is a symbolic link"):
        cluster_mod.run(tmp_path / "image", 3, tmp_path / "linked", [], [])
    (tmp_path / "dirs").mkdir()
    (tmp_path / "dirs" / "node0.log").mkdir()
    with pytest.raises(UklError, match="node0.log exists and is not a regular file"):
        cluster_mod.run(tmp_path / "image", 3, tmp_path / "dirs", [], [])
    # `ukl run` writes a node's command file into the image's directory
    image = tmp_path / "image-with-link"
    image.mkdir()
    (image / "node1.cmd").symlink_to(target)
    with pytest.raises(UklError, match=rf"{image / 'node1.cmd'} is a symbolic link"):
        cluster_mod.run(image, 3, tmp_path / "logs-clean", [], [])
    assert target.read_text() == "keep me\n"
    # an ordinary earlier log is no reason to refuse: the run goes on to its network
    (tmp_path / "dirs" / "node0.log").rmdir()
    (tmp_path / "dirs" / "node0.log").write_text("an earlier run\n")
    with pytest.raises(AssertionError, match="went on to make its network"):
        cluster_mod.run(tmp_path / "image", 3, tmp_path / "dirs", [], [])


def test_a_node_log_that_is_a_link_is_refused_without_a_traceback(tmp_path):
    out = build(RING, "linux", tmp_path / "ring")
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "node1.log").symlink_to(target)
    before = namespaces()
    res = cluster(str(out), "--nodes", "2", "--log-dir", str(logs))
    assert res.returncode == 2 and "Traceback" not in res.stdout, res.stdout
    assert f"ukl: error: {logs / 'node1.log'} is a symbolic link (to {target})" in res.stdout, res.stdout
    assert f"hint: remove the link (rm {logs / 'node1.log'})" in res.stdout
    assert target.read_text() == "keep me\n" and not (logs / "node0.log").exists()
    assert namespaces() == before


def test_a_killed_clusters_network_is_removed_by_the_next_cluster(tmp_path):
    """SIGKILL leaves `ukl cluster` no chance to remove its namespace (its
    nodes stop: they get SIGTERM when it dies); the next cluster removes
    it, and says so."""
    out = build(RING, "linux", tmp_path / "ring")
    proc = subprocess.Popen([str(UKL), "cluster", str(out), "--nodes", "2", "--timeout", "600", "--", "hang"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    seen = set()
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        seen |= {i for i in range(2) if line.startswith(f"[{i}] node {i} of 2")}
        if len(seen) == 2 or time.monotonic() > deadline:
            break
    assert len(seen) == 2
    left = f"ukl-{proc.pid}-0"
    assert left in namespaces()
    proc.kill()
    proc.communicate(timeout=60)
    end = time.monotonic() + 120
    while qemus_of(out) and time.monotonic() < end:
        time.sleep(1)
    assert qemus_of(out) == 0 and left in namespaces()   # the guests stopped; the network stayed
    res = cluster(str(out), "--nodes", "2", "--timeout", "600")
    assert res.returncode == 0, res.stdout
    assert f"removed network namespace {left}, left by ukl process {proc.pid} that ended" in res.stdout
    assert left not in namespaces()


def make_namespace(name: str, owner: netns.Owner | None) -> None:
    """Namespace NAME as a cluster of two made it, with OWNER's marker (None: none)."""
    for cmd in netns.bridge_commands(name, 2):
        subprocess.run(cmd, check=True)
    if owner is not None:
        with netns.markers() as d:
            assert netns.mark(d, name, owner)


def remove_namespaces(names) -> None:
    with netns.markers() as d:
        for name in names:
            if name in namespaces():
                subprocess.run(["ip", "netns", "del", name], check=True)
            netns.unmark(d, name)


def owner_of(name: str) -> netns.Owner | None:
    with netns.markers() as d:
        return netns.owner_of(d, name)


def test_namespaces_left_by_a_killed_cluster_are_removed_by_the_next(capsys):
    """`ukl cluster` killed with SIGKILL cannot remove its namespace: the
    next private network removes it (its marker says it was made in this
    PID namespace by a process that has ended, whether its PID is free or
    another process's now), and keeps one whose process still runs, one
    made in another PID namespace and one without a marker."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    me = netns.this_process()
    stale = {f"ukl-{gone.pid}-0": netns.Owner(gone.pid, 1, me.pidns),
             f"ukl-{me.pid}-998": netns.Owner(me.pid, me.start + 1, me.pidns)}   # PID reused: this one's now
    kept = {f"ukl-{me.pid}-999": me,
            f"ukl-{gone.pid}-1": netns.Owner(gone.pid, 1, (me.pidns[0], me.pidns[1] + 1)),
            f"ukl-{gone.pid}-2": None}
    try:
        for name, owner in (stale | kept).items():
            make_namespace(name, owner)
        with netns.private_network(bridged=2) as ns:
            assert not set(stale) & namespaces() and {*kept, ns.name} <= namespaces()
            assert owner_of(ns.name) == me
        err = capsys.readouterr().err
        for name in stale:
            assert f"removed network namespace {name}, left by ukl process {name.split('-')[1]}" in err
            assert owner_of(name) is None
        assert set(kept) <= namespaces() and ns.name not in namespaces() and owner_of(ns.name) is None
        assert [owner_of(name) for name in kept] == list(kept.values())
    finally:
        remove_namespaces([*stale, *kept])


def test_a_ukl_in_another_pid_namespace_keeps_this_ones_namespaces():
    """A ukl in a container that shares the host's /run/netns (and here its
    /run/ukl) but not its PID namespace sees none of the host's processes:
    it removes neither a running ukl's namespace nor one a killed one left."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    me = netns.this_process()
    names = {f"ukl-{me.pid}-999": me, f"ukl-{gone.pid}-0": netns.Owner(gone.pid, 1, me.pidns)}
    try:
        for name, owner in names.items():
            make_namespace(name, owner)
        res = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                              "from ukltool.run import netns; print(netns.remove_stale())"],
                             capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(REPO / "tools")})
        assert (res.returncode, res.stdout) == (0, "[]\n"), res.stderr
        assert set(names) <= namespaces()
        assert [owner_of(name) for name in names] == list(names.values())
    finally:
        remove_namespaces(names)


def test_a_namespace_name_in_use_is_passed_over_unless_it_is_stale(monkeypatch):
    """This process's PID was a killed ukl's: ukl-PID-N exists already.
    Without a marker (another PID namespace's ukl, or an older one), the
    next N is taken; marked by a process of this PID namespace that has
    ended, it is removed and taken."""
    me = netns.this_process()
    n = 1000
    other, reused = f"ukl-{me.pid}-{n}", f"ukl-{me.pid}-{n + 1}"
    monkeypatch.setattr(netns, "_serial", itertools.count(n))
    monkeypatch.setattr(netns, "remove_stale", lambda: [])   # the claim's own judgement
    try:
        make_namespace(other, None)
        make_namespace(reused, netns.Owner(me.pid, me.start + 1, me.pidns))
        with netns.private_network() as ns:
            assert ns.name == reused and owner_of(reused) == me
            assert other in namespaces() and owner_of(other) is None
            tap = subprocess.run(ns.exec(["ip", "-o", "link", "show"]), capture_output=True, text=True).stdout
            assert netns.TAP in tap and netns.BRIDGE not in tap   # made afresh, not the killed cluster's
        assert reused not in namespaces() and other in namespaces()
    finally:
        remove_namespaces([other, reused])
