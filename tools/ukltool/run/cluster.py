"""Several guests as one application (`ukl cluster`).

N guests boot the same image, one node each, on a private network: a
bridge in a network namespace made for the run and always removed, with
one tap device per guest (netns.private_network). Each node is an
ordinary `ukl run` of the image inside the namespace, so every check,
configuration, profile and option of `ukl run` applies to it. Node I
gets eth0 = 10.0.3.(11+I)/24 (the kernel command line's ip=, which the
image's init applies) and its own MAC address, and the application gets
in its environment:

    UKL_RANK=I                 its node number, 0..N-1
    UKL_HOSTS=A0,A1,...        every node's address, in node order

(the MPI subset library, guest/mpi, takes its ranks and peers from
these). The host is 10.0.3.1 on the bridge. The run waits for every
node, prefixes each node's output with its number as it arrives, and
exits 0 when every node's application exited 0. When one fails, the
others are stopped at once (a rank waiting for a message from a dead
peer would otherwise wait until its timeout), and the exit status is
the first failed node's."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ukltool.run import netns, vm
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO

MAX_NODES = 16


@dataclass
class Node:
    index: int
    address: str
    proc: subprocess.Popen[bytes]
    log: Path
    code: int | None = None
    stopped: bool = False          # stopped because another node failed
    pending: bytes = b""
    output: list[str] = field(default_factory=list)


@dataclass
class ClusterResult:
    codes: list[int]               # each node's `ukl run` exit status
    stopped: list[int]             # the nodes stopped because another failed
    failed: int | None             # the first node that failed
    outputs: list[list[str]]       # each node's output lines
    seconds: float


def node_mac(i: int) -> str:
    """A locally administered unicast address per node (QEMU's own default
    is the same for every guest, which a bridge cannot tell apart)."""
    return f"52:54:00:55:4b:{0x10 + i:02x}"


def node_env(i: int, nodes: int) -> list[str]:
    """Node I's kernel command line words: eth0's address, and what the
    application finds in its environment."""
    hosts = ",".join(netns.node_address(j) for j in range(nodes))
    return [f"ip={netns.node_address(i)}::{netns.BRIDGE_IP}:255.255.255.0:node{i}:eth0:off",
            f"UKL_RANK={i}", f"UKL_HOSTS={hosts}"]


def run_command(outdir: Path, i: int, nodes: int, log: Path, run_args: list[str], app_args: list[str]) -> list[str]:
    return [str(REPO / "ukl"), "run", str(outdir), "--tap", netns.node_tap(i), "--mac", node_mac(i),
            "--log", str(log), *(f"--append={w}" for w in node_env(i, nodes)), *run_args, "--", *app_args]


def _show(node: Node, data: bytes, flush: bool, show: bool) -> None:
    lines = (node.pending + data).split(b"\n")
    node.pending = b"" if flush else lines.pop()
    for raw in lines:
        if flush and not raw:
            continue
        line = raw.decode(errors="replace").rstrip("\r")
        node.output.append(line)
        if show:
            sys.stdout.write(f"[{node.index}] {line}\n")
    if show:
        sys.stdout.flush()


def run(outdir: Path, nodes: int, log_dir: Path, run_args: list[str], app_args: list[str],
        show: bool = True) -> ClusterResult:
    """Boot NODES guests of OUTDIR (a build result) on a private bridge;
    RUN_ARGS: options for each `ukl run`; their console logs go to LOG_DIR."""
    if not 2 <= nodes <= MAX_NODES:
        raise UklError(f"--nodes {nodes}: a cluster has 2 to {MAX_NODES} nodes", "for example --nodes 3")
    log_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with netns.private_network(bridged=nodes) as ns:
        running: list[Node] = []
        try:
            for i in range(nodes):
                log = log_dir / f"node{i}.log"
                proc = subprocess.Popen(ns.exec(run_command(outdir, i, nodes, log, run_args, app_args)),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, start_new_session=True)
                running.append(Node(i, netns.node_address(i), proc, log))
            failed = _wait(running, show)
        finally:
            for n in running:
                vm.stop_run(n.proc)
                if n.code is None:
                    n.code = n.proc.returncode
    return ClusterResult([n.code if n.code is not None else -1 for n in running],
                         [n.index for n in running if n.stopped], failed,
                         [n.output for n in running], time.monotonic() - start)


def _wait(nodes: list[Node], show: bool) -> int | None:
    """Follow every node's output until all have ended; stop the others
    when one fails. The first failed node's index, or None."""
    assert all(n.proc.stdout is not None for n in nodes)
    by_fd = {n.proc.stdout.fileno(): n for n in nodes if n.proc.stdout is not None}
    failed = None
    while by_fd:
        ready, _, _ = select.select(list(by_fd), [], [], 0.5)
        for fd in ready:
            node = by_fd[fd]
            chunk = os.read(fd, 65536)
            if chunk:
                _show(node, chunk, False, show)
                continue
            _show(node, b"", True, show)
            del by_fd[fd]
            node.code = node.proc.wait()
            if node.code != 0 and failed is None:
                failed = node.index
                for other in nodes:
                    if other.code is None and other.proc.poll() is None:
                        other.stopped = True
                        os.killpg(other.proc.pid, signal.SIGTERM)
    return failed
