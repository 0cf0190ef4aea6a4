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

import hashlib
import json
import os
import select
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ukltool.run import netns, vm
from ukltool.util import lock
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO
from ukltool.util.proc import need_tool
from ukltool.util.proc import run as run_tool

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
    tcp_segments: int | None = None  # TCP segments the bridge forwarded between the nodes (count_tcp)
    tcp_bytes: int | None = None     # their bytes, IP headers included


# nftables: a counter of the TCP segments the bridge forwards from one
# guest to another (not those to or from the host's side of the bridge)
TCP_COUNTER = """table bridge ukl {
 chain forward {
  type filter hook forward priority 0; policy accept;
  ip protocol tcp counter
 }
}
"""


def _count_tcp(ns: netns.Netns) -> None:
    run_tool(ns.exec(["nft", "-f", "-"]), input=TCP_COUNTER.encode(), what="adding the bridge's TCP counter (nft)")


def _tcp_counted(ns: netns.Netns) -> tuple[int, int]:
    out = run_tool(ns.exec(["nft", "-j", "list", "table", "bridge", "ukl"]), what="reading the bridge's TCP counter")
    try:
        for item in json.loads(out)["nftables"]:
            for expr in item.get("rule", {}).get("expr", []):
                if "counter" in expr:
                    return int(expr["counter"]["packets"]), int(expr["counter"]["bytes"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise UklError(f"nft's listing of the bridge's TCP counter cannot be read: {e}",
                       "check nft -j list table bridge ukl by hand") from None
    raise UklError("the bridge's TCP counter is missing", "report this: nft lists no counter in table bridge ukl")


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


def run_command(outdir: Path, i: int, nodes: int, log: Path, run_args: list[str], app_args: list[str],
                count_insns: bool = False) -> list[str]:
    """Node I's `ukl run`: it gets SIGTERM (and so stops its QEMU) if the
    cluster's process dies without stopping it. COUNT_INSNS: its
    instructions are counted into node_insns() beside LOG."""
    counted = ["--count-insns", str(node_insns(log.parent, i))] if count_insns else []
    return ["setpriv", "--pdeathsig", "TERM", str(REPO / "ukl"), "run", str(outdir), "--tap", netns.node_tap(i),
            "--mac", node_mac(i), "--log", str(log), *(f"--append={w}" for w in node_env(i, nodes)), *run_args,
            *counted, "--", *app_args]


def node_log(log_dir: Path, i: int) -> Path:
    """Node I's console log in LOG_DIR."""
    return log_dir / f"node{i}.log"


def node_insns(log_dir: Path, i: int) -> Path:
    """Node I's instruction counts in LOG_DIR (`ukl run --count-insns`)."""
    return log_dir / f"node{i}.insns.json"


def node_files(log_dir: Path, i: int, outdir: Path | None = None) -> list[Path]:
    """What node I's `ukl run` writes: its console log in LOG_DIR, and its
    QEMU command line (LOG's stem + .cmd, run.vm.boot) in the image's
    directory OUTDIR, where `ukl run` puts it (and in LOG_DIR, where
    an earlier ukl put it)."""
    log, insns = node_log(log_dir, i), node_insns(log_dir, i)
    return [log, log.with_suffix(".cmd"), insns, insns.with_name(insns.name + ".partial"),
            *([outdir / f"{log.stem}.cmd"] if outdir is not None else [])]


def _refuse_linked_dir(log_dir: Path) -> None:
    if log_dir.is_symlink():
        raise UklError(f"the log directory {log_dir} is a symbolic link: the nodes' logs are never written through "
                       "one (ukl cluster runs as root)", "name the directory itself with --log-dir")
    if log_dir.exists() and not log_dir.is_dir():
        raise UklError(f"the log directory {log_dir} exists and is not a directory", "name another with --log-dir")


def prepare_logs(log_dir: Path, nodes: int, outdir: Path | None = None) -> None:
    """Make LOG_DIR, and refuse, before any node starts, what would send a
    node's files elsewhere: ukl cluster runs as root, so a symbolic link
    (planted, or left from before) at the directory or at a file a node
    writes there would have it overwrite whatever file the link names."""
    _refuse_linked_dir(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    _refuse_linked_dir(log_dir)   # one made meanwhile
    for i in range(nodes):
        for f in node_files(log_dir, i, outdir):
            try:
                st = f.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                raise UklError(f"{f} is a symbolic link (to {os.readlink(f)}): node {i}'s file is never written "
                               "through one, since ukl cluster runs as root and would overwrite what it names",
                               f"remove the link (rm {f}), or name another directory with --log-dir")
            if not stat.S_ISREG(st.st_mode):
                raise UklError(f"{f} exists and is not a regular file, so node {i} cannot write it",
                               "remove it, or name another directory with --log-dir")


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
        show: bool = True, count_tcp: bool = False, count_insns: bool = False) -> ClusterResult:
    """Boot NODES guests of OUTDIR (a build result) on a private bridge;
    RUN_ARGS: options for each `ukl run`; their console logs go to LOG_DIR;
    COUNT_TCP: count the TCP segments between the guests; COUNT_INSNS:
    count each guest's instructions into node_insns(LOG_DIR, I)."""
    if not 2 <= nodes <= MAX_NODES:
        raise UklError(f"--nodes {nodes}: a cluster has 2 to {MAX_NODES} nodes", "for example --nodes 3")
    prepare_logs(log_dir, nodes, outdir)
    for i in range(nodes):   # a report left from an earlier run is never read as this one's
        node_insns(log_dir, i).unlink(missing_ok=True)
    if count_tcp:
        need_tool("nft", "nftables")
    need_tool("setpriv", "util-linux")
    # one cluster of an image at a time: each node's `ukl run` writes its
    # command file into the image's directory
    with lock.held(f"cluster-{hashlib.sha256(str(outdir.resolve()).encode()).hexdigest()[:12]}",
                   f"the image {outdir}"):
        return _run(outdir, nodes, log_dir, run_args, app_args, show, count_tcp, count_insns)


def _run(outdir: Path, nodes: int, log_dir: Path, run_args: list[str], app_args: list[str], show: bool,
         count_tcp: bool, count_insns: bool) -> ClusterResult:
    start = time.monotonic()
    counted: tuple[int, int] | None = None
    with netns.private_network(bridged=nodes) as ns:
        running: list[Node] = []
        if count_tcp:
            _count_tcp(ns)
        try:
            for i in range(nodes):
                log = node_log(log_dir, i)
                proc = subprocess.Popen(ns.exec(run_command(outdir, i, nodes, log, run_args, app_args, count_insns)),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, start_new_session=True)
                running.append(Node(i, netns.node_address(i), proc, log))
            failed = _wait(running, show)
        finally:
            _stop_all(running)
        if count_tcp:
            counted = _tcp_counted(ns)
    return ClusterResult([n.code if n.code is not None else -1 for n in running],
                         [n.index for n in running if n.stopped], failed,
                         [n.output for n in running], time.monotonic() - start,
                         *(counted or (None, None)))


def _stop_all(nodes: list[Node]) -> None:
    """Stop every node still running (SIGTERM to all first, so that they
    stop together), and take each one's status: 128+N for a signal."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C would leave nodes behind
    try:
        for n in nodes:
            if n.proc.poll() is None:
                try:
                    os.killpg(n.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for n in nodes:
            vm.stop_run(n.proc)
            if n.code is None:
                rc = n.proc.returncode
                n.code = 128 - rc if rc < 0 else rc
    finally:
        signal.signal(signal.SIGINT, old)


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
            rc = node.proc.wait()
            node.code = 128 - rc if rc < 0 else rc
            if node.code != 0 and failed is None:
                failed = node.index
                for other in nodes:
                    if other.code is None and other.proc.poll() is None:
                        other.stopped = True
                        os.killpg(other.proc.pid, signal.SIGTERM)
    return failed
