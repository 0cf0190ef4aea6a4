"""A private network between host programs and one guest.

A network namespace holds a tap device with the host's side of the guest
network QEMU's user networking gives (10.0.2.2/24; the guest's eth0 is
10.0.2.15 either way, see guest/init.c). QEMU (`ukl run --tap`) and the
host's clients run inside the namespace, so their packets go through the
guest's virtio-net device and the host kernel's tap driver instead of
QEMU's user-mode network stack, and nothing outside the namespace sees
them. Creating one needs root (CAP_NET_ADMIN) and /dev/net/tun; the
namespace, and the tap device in it, is removed on leaving.

A namespace is named ukl-PID-N after the process that made it. One whose
process was killed (SIGKILL leaves no chance to remove it) stays, with its
bridge and taps, until the next private network is made: that removes
every namespace of this naming whose process has ended (remove_stale)."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ukltool.util import ui
from ukltool.util.errors import UklError
from ukltool.util.proc import run

GUEST_IP = "10.0.2.15"
HOST_IP = "10.0.2.2"
TAP = "ukltap0"

_serial = itertools.count()
# private_network's names, ukl-PID-N, and nothing else
NAME = re.compile(r"ukl-([1-9][0-9]{0,9})-(0|[1-9][0-9]{0,9})")


@dataclass(frozen=True)
class Netns:
    name: str

    def exec(self, cmd: list[str]) -> list[str]:
        """CMD, to run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *cmd]


def unavailable() -> str | None:
    """Why no private network can be made here (None: it can)."""
    if os.geteuid() != 0:
        return "a private tap network needs root (CAP_NET_ADMIN) to create a network namespace"
    if not Path("/dev/net/tun").exists():
        return "/dev/net/tun is missing, so there are no tap devices on this host (modprobe tun)"
    if shutil.which("ip") is None:
        return "the ip tool is missing (apt-get install iproute2)"
    return None


def setup_commands(name: str) -> list[list[str]]:
    """The ip commands that make namespace NAME and its tap device."""
    return [["ip", "netns", "add", name],
            ["ip", "-n", name, "link", "set", "lo", "up"],
            ["ip", "-n", name, "tuntap", "add", "dev", TAP, "mode", "tap"],
            ["ip", "-n", name, "addr", "add", f"{HOST_IP}/24", "dev", TAP],
            ["ip", "-n", name, "link", "set", TAP, "up"]]


# `ukl cluster`: guests on a bridge, each with its own tap device
BRIDGE = "uklbr0"
BRIDGE_NET = "10.0.3"
BRIDGE_IP = f"{BRIDGE_NET}.1"


def node_address(i: int) -> str:
    return f"{BRIDGE_NET}.{11 + i}"


def node_tap(i: int) -> str:
    return f"ukltap{i}"


def bridge_commands(name: str, nodes: int) -> list[list[str]]:
    """The ip commands that make namespace NAME with a bridge (BRIDGE_IP/24,
    no spanning tree, so a port forwards at once) and NODES tap devices on it."""
    cmds = [["ip", "netns", "add", name],
            ["ip", "-n", name, "link", "set", "lo", "up"],
            ["ip", "-n", name, "link", "add", BRIDGE, "type", "bridge", "stp_state", "0"],
            ["ip", "-n", name, "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE],
            ["ip", "-n", name, "link", "set", BRIDGE, "up"]]
    for i in range(nodes):
        tap = node_tap(i)
        cmds += [["ip", "-n", name, "tuntap", "add", "dev", tap, "mode", "tap"],
                 ["ip", "-n", name, "link", "set", tap, "master", BRIDGE],
                 ["ip", "-n", name, "link", "set", tap, "up"]]
    return cmds


@contextmanager
def private_network(bridged: int = 0) -> Iterator[Netns]:
    """A fresh namespace with the tap device up, removed afterwards; with
    BRIDGED > 0, that many tap devices on a bridge instead."""
    why = unavailable()
    if why:
        raise UklError(why, "run as root on a host with /dev/net/tun")
    remove_stale()
    ns = Netns(f"ukl-{os.getpid()}-{next(_serial)}")
    cmds = bridge_commands(ns.name, bridged) if bridged else setup_commands(ns.name)
    run(cmds[0], what=f"creating network namespace {ns.name}")
    try:
        for cmd in cmds[1:]:
            run(cmd, what=" ".join(cmd))
        yield ns
    finally:
        try:
            run(["ip", "netns", "del", ns.name], what=f"removing network namespace {ns.name}")
        except UklError as e:  # never in place of the error that ended the block
            ui.warn(e.message)


def listed() -> list[str]:
    """The names of the host's network namespaces (ip netns list)."""
    out = run(["ip", "netns", "list"], what="listing the network namespaces")
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def alive(pid: int) -> bool:
    """Whether a process PID runs (a zombie counts: its PID is not free yet).
    A PID another process took since counts too: never removing a live
    process's namespace matters more than removing every stale one."""
    return Path(f"/proc/{pid}").exists()


def stale(names: list[str]) -> list[str]:
    """Those of NAMES that private_network made in a process that has
    ended: named exactly ukl-PID-N, PID not running."""
    return [n for n in names if (m := NAME.fullmatch(n)) and not alive(int(m.group(1)))]


def remove_stale() -> list[str]:
    """Remove the namespaces (with their taps and bridge) of private
    networks whose process was killed before it could remove them; the
    names removed. One a process still runs in (a guest left behind) is
    kept and named."""
    removed = []
    for name in stale(listed()):
        try:
            inside = run(["ip", "netns", "pids", name], what=f"listing the processes in {name}").split()
            if inside:
                ui.warn(f"network namespace {name} is left from an ended ukl, but processes {', '.join(inside)} "
                        f"still run in it: kept (remove it with `ip netns del {name}` once they end)")
                continue
            run(["ip", "netns", "del", name], what=f"removing the stale network namespace {name}")
        except UklError as e:   # never in the way of the new network
            if name in listed():   # not another ukl that removed it first
                ui.warn(e.message)
            continue
        ui.info(f"removed network namespace {name}, left by ukl process {name.split('-')[1]} that ended "
                "without removing it")
        removed.append(name)
    return removed


# Run inside a namespace: does the server at HOST:PORT answer PROBE?
_PROBE = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as s:
        s.settimeout(5)
        s.sendall(sys.argv[3].encode())
        sys.exit(0 if s.recv(64) else 1)
except OSError:
    sys.exit(1)
"""


def answers(ns: Netns | None, host: str, port: int, probe: str) -> bool:
    """Does the server at HOST:PORT answer PROBE (seen from NS, if given)?"""
    if ns is not None:
        cmd = ns.exec([sys.executable, "-c", _PROBE, host, str(port), probe])
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True).returncode == 0
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            s.settimeout(5)
            s.sendall(probe.encode())
            return bool(s.recv(64))
    except OSError:
        return False


def wait_for_server(ns: Netns | None, host: str, port: int, probe: str, vm_proc: subprocess.Popen[bytes],
                    timeout: float) -> None:
    """Until the server in the guest answers PROBE (QEMU's user network
    accepts a forwarded connection before the guest has a server)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if vm_proc.poll() is not None:
            raise UklError(f"the VM stopped before the server was ready (status {vm_proc.returncode})",
                           "see its console log")
        if answers(ns, host, port, probe):
            return
        time.sleep(1)
    raise UklError(f"the server did not answer on {host}:{port} within {timeout:.0f}s", "see the console log")
