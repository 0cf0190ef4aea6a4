"""A private network between host programs and one guest.

A network namespace holds a tap device with the host's side of the guest
network QEMU's user networking gives (10.0.2.2/24; the guest's eth0 is
10.0.2.15 either way, see guest/init.c). QEMU (`ukl run --tap`) and the
host's clients run inside the namespace, so their packets go through the
guest's virtio-net device and the host kernel's tap driver instead of
QEMU's user-mode network stack, and nothing outside the namespace sees
them. Creating one needs root (CAP_NET_ADMIN) and /dev/net/tun; the
namespace, and the tap device in it, is removed on leaving.

A namespace is named ukl-PID-N after the process that made it, which
records itself as its owner in a marker (MARKERS/NAME: PID, start time
and PID namespace). One whose process was killed (SIGKILL leaves no
chance to remove it) stays, with its bridge and taps, until the next
private network is made: that removes every namespace whose marker says
it was made in this PID namespace by a process that has ended
(remove_stale). A namespace without a marker, or made in another PID
namespace, is never removed; a name in use is passed over."""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import shutil
import socket
import stat
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
    with markers() as d:
        ns = claim(d)
    cmds = bridge_commands(ns.name, bridged) if bridged else setup_commands(ns.name)
    assert cmds[0] == ["ip", "netns", "add", ns.name]   # claim ran it
    try:
        for cmd in cmds[1:]:
            run(cmd, what=" ".join(cmd))
        yield ns
    finally:
        try:
            run(["ip", "netns", "del", ns.name], what=f"removing network namespace {ns.name}")
            with markers(lock=False) as d:   # its own marker: no other ukl takes it while it runs
                unmark(d, ns.name)
        except (UklError, OSError) as e:   # never in place of the error that ended the block
            ui.warn(e.message if isinstance(e, UklError) else f"removing the owner of {ns.name}: {e}")


def listed() -> list[str]:
    """The names of the host's network namespaces (ip netns list)."""
    out = run(["ip", "netns", "list"], what="listing the network namespaces")
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _listed_or(default: bool, name: str) -> bool:
    """Whether namespace NAME exists; DEFAULT when they cannot be listed."""
    try:
        return name in listed()
    except UklError:
        return default


# ---- who made a namespace ----
#
# The name ukl-PID-N alone proves nothing: the PID may be free, or another
# process's, in this PID namespace or in another one (a container that
# shares the host's /run/netns sees none of the host's processes), and a
# later process may be given it. So private_network records the owner of
# each namespace it makes in a marker, MARKERS/NAME, in a directory of
# root's that no one else can write; the namespace is this tool's to
# remove as stale only when its marker is there and says it was made in
# this PID namespace by a process that has ended: its PID free, or a
# process's with another start time.

MARKERS = Path("/run/ukl/netns")
_MARKER = re.compile(r"pid ([1-9][0-9]{0,9}) start ([0-9]{1,20}) pidns ([0-9]{1,20}):([0-9]{1,20})\n")


@dataclass(frozen=True)
class Owner:
    """A process: its PID, its start time (clock ticks after boot, the
    22nd field of /proc/PID/stat, which a later process with the same PID
    does not share) and its PID namespace (nsfs device and inode)."""
    pid: int
    start: int
    pidns: tuple[int, int]

    def text(self) -> str:
        return f"pid {self.pid} start {self.start} pidns {self.pidns[0]}:{self.pidns[1]}\n"

    @staticmethod
    def parse(text: str) -> Owner | None:
        m = _MARKER.fullmatch(text)
        if not m:
            return None
        return Owner(int(m.group(1)), int(m.group(2)), (int(m.group(3)), int(m.group(4))))


def start_time(pid: int | str) -> int | None:
    """The start time of process PID ("self": this one); None when no
    process has it (a zombie still does: its PID is not free yet)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()   # the name, in parentheses, may hold anything
    try:
        return int(fields[19])   # field 22; fields[0] is field 3
    except (IndexError, ValueError):
        return None


def pid_namespace() -> tuple[int, int]:
    st = os.stat("/proc/self/ns/pid")
    return st.st_dev, st.st_ino


def this_process() -> Owner:
    start = start_time("self")
    if start is None:
        raise UklError("cannot read /proc/self/stat", "mount /proc")
    return Owner(os.getpid(), start, pid_namespace())


def ended(owner: Owner) -> bool:
    """Whether OWNER is a process of this PID namespace that has ended.
    One of another PID namespace never has, as far as this one can know."""
    return owner.pidns == pid_namespace() and start_time(owner.pid) != owner.start


def _directory(parent: int, path: Path) -> int:
    """Directory PATH, in PARENT (a descriptor), made if missing: one of
    this user's that no one else can write, never through a link."""
    name = path.name
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        pass
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError as e:
        raise UklError(f"cannot open {path}, the directory of network namespace owners: {e.strerror} "
                       "(a link, or not a directory)", f"remove it (rm {path}); ukl makes it again") from None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise UklError(f"{path}, the directory of network namespace owners, is not this user's alone "
                       f"(owner {st.st_uid}, mode {st.st_mode & 0o7777:04o})",
                       f"remove it (rm -r {path}); ukl makes it again")
    return fd


@contextmanager
def markers(lock: bool = True) -> Iterator[int]:
    """The directory MARKERS (made if missing: it and its parent root's
    alone), with LOCK locked against other ukl processes (flock) for as
    long as the block takes; its descriptor."""
    try:
        top = os.open(MARKERS.parent.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise UklError(f"cannot open {MARKERS.parent.parent}: {e.strerror}") from None
    try:
        parent = _directory(top, MARKERS.parent)
        try:
            d = _directory(parent, MARKERS)
        finally:
            os.close(parent)
    finally:
        os.close(top)
    try:
        if lock:
            fcntl.flock(d, fcntl.LOCK_EX)
        yield d
    finally:
        os.close(d)


def mark(d: int, name: str, owner: Owner) -> bool:
    """Record OWNER as NAME's in directory D; False if NAME has a marker."""
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=d)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(owner.text())
    return True


def owner_of(d: int, name: str) -> Owner | None:
    """The owner NAME's marker in D records; None without one (or a
    marker that is not a regular file with one owner in it)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=d)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return Owner.parse(os.read(fd, 200).decode(errors="replace"))
    except OSError:
        return None
    finally:
        os.close(fd)


def unmark(d: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=d)
    except FileNotFoundError:
        pass


def stale(d: int, name: str) -> bool:
    """Whether NAME is a namespace private_network made (named ukl-PID-N,
    its marker in D recording process PID) in this PID namespace, in a
    process that has ended."""
    m = NAME.fullmatch(name)
    owner = owner_of(d, name) if m else None
    return owner is not None and m is not None and owner.pid == int(m.group(1)) and ended(owner)


def _remove(d: int, name: str) -> str:
    """Remove stale namespace NAME and its marker in D: "removed"; "gone"
    when it was not there (another ukl removed it first; its marker is
    removed all the same); "kept" when processes still run in it, or it
    cannot be removed (a warning says which)."""
    try:
        inside = run(["ip", "netns", "pids", name], what=f"listing the processes in {name}").split()
        if inside:
            ui.warn(f"network namespace {name} is left from an ended ukl, but processes {', '.join(inside)} "
                    f"still run in it: kept (remove it with `ip netns del {name}` once they end)")
            return "kept"
        run(["ip", "netns", "del", name], what=f"removing the stale network namespace {name}")
    except UklError as e:
        if _listed_or(True, name):
            ui.warn(e.message)
            return "kept"
        unmark(d, name)
        return "gone"
    unmark(d, name)
    ui.info(f"removed network namespace {name}, left by ukl process {name.split('-')[1]} that ended "
            "without removing it")
    return "removed"


def remove_stale() -> list[str]:
    """Remove the namespaces (with their taps and bridge) of private
    networks whose process was killed before it could remove them (stale),
    and markers left without their namespace; the names removed. One a
    process still runs in (a guest left behind) is kept and named. Nothing
    here is in the way of a new network: when the namespaces cannot be
    listed, none is removed."""
    with markers() as d:
        try:
            names = listed()
        except UklError as e:
            ui.warn(f"{e.message}\n  (namespaces left by ended ukl runs are not removed this time)")
            return []
        removed = [name for name in names if stale(d, name) and _remove(d, name) == "removed"]
        for name in os.listdir(d):
            if name not in names and stale(d, name):
                unmark(d, name)
    return removed


def claim(d: int) -> Netns:
    """A new namespace ukl-PID-N of this process, made (ip netns add) and
    its marker in D written. A name taken already is passed over for the
    next N, unless it is stale (its process ended, and PID is this
    process's now): then it is removed and taken."""
    me = this_process()
    for _ in range(100):
        ns = Netns(f"ukl-{me.pid}-{next(_serial)}")
        if not mark(d, ns.name, me):
            if not stale(d, ns.name) or _remove(d, ns.name) == "kept" or not mark(d, ns.name, me):
                continue
        try:
            run(["ip", "netns", "add", ns.name], what=f"creating network namespace {ns.name}")
        except UklError:
            unmark(d, ns.name)
            if _listed_or(False, ns.name):   # not this tool's (no marker), or made in another PID namespace
                continue
            raise
        return ns
    raise UklError(f"no free network namespace name ukl-{me.pid}-N after 100 tries",
                   f"see `ip netns list` and {MARKERS}")


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
