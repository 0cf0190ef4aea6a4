"""Remote system calls (`ukl run --remote DIR`): the shadow process on the
host (tools/shadow/ukl-shadow.c), built with the host's C compiler into the
cache, the shared memory it and QEMU map (guest RAM and the ring, both
memfds created here), and a ctypes mirror of the ring's ABI
(tools/shadow/ukl_ring.h). See docs/plans/remote-syscalls.md."""

from __future__ import annotations

import ctypes
import fcntl
import math
import os
import re
import select
import signal
import socket
import subprocess
import time
from fractions import Fraction
from pathlib import Path
from types import TracebackType

from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, cache_dir
from ukltool.util.proc import cached_host_build

REMOTE_DIR = REPO / "tools" / "shadow"
SOURCES = [REMOTE_DIR / "ukl-shadow.c", REMOTE_DIR / "ukl_ring.h"]
CFLAGS = ["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-D_GNU_SOURCE"]

# ---- The ABI: tools/shadow/ukl_ring.h (tests/unit/test_remote_abi.py checks the mirror) ----

RING_MAGIC = 0x31474E49524C4B55  # "UKLRING1"
RING_VERSION = 3
RING_SIZE = 1 << 20
RING_SLOTS = 64
SLOT_SIZE = 8192
SLOT_SEGS = 248
SLOT_INLINE = 4096
HDR_SIZE = 4096  # slot i is at HDR_SIZE + i * SLOT_SIZE
RFD_BASE = 0x40000000
RFD_MAX = 4096
SLOT_FREE, SLOT_REQ, SLOT_DONE = 0, 1, 2
ROP_NULL = 0x1000
ROP_HELLO = 0x1001
SLOT_IRQ = 1
SLOT_CONT, SLOT_MORE, SLOT_ERR = 2, 4, 8
SEG_FAULT = (1 << 64) - 1
NOTIFY_POLL, NOTIFY_IRQ = 0, 1
NOTIFY_MODES = {"poll": NOTIFY_POLL, "irq": NOTIFY_IRQ}


class RingHdr(ctypes.Structure):
    _fields_ = [
        ("magic", ctypes.c_uint64),
        ("version", ctypes.c_uint32),
        ("nslots", ctypes.c_uint32),
        ("slot_size", ctypes.c_uint32),
        ("slot_segs", ctypes.c_uint32),
        ("notify", ctypes.c_uint32),
        ("host_pid", ctypes.c_uint32),
        ("ram_size", ctypes.c_uint64),
        ("below_4g", ctypes.c_uint64),
        ("heartbeat", ctypes.c_uint64),
        ("host_asleep", ctypes.c_uint32),
        ("host_peer", ctypes.c_uint32),
    ]


class Seg(ctypes.Structure):
    _fields_ = [("gpa", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class Slot(ctypes.Structure):
    _fields_ = [
        ("state", ctypes.c_uint32),
        ("seq", ctypes.c_uint32),
        ("ack", ctypes.c_uint32),
        ("op", ctypes.c_uint32),
        ("client", ctypes.c_uint32),
        ("nsegs", ctypes.c_uint32),
        ("inline_len", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("args", ctypes.c_int64 * 6),
        ("ret", ctypes.c_int64),
        ("pad", ctypes.c_uint8 * 40),
        ("seg", Seg * SLOT_SEGS),
        ("data", ctypes.c_uint8 * SLOT_INLINE),
    ]


def slot_offset(i: int) -> int:
    """Where slot I starts in the ring."""
    return HDR_SIZE + i * SLOT_SIZE


# ---- Guest memory ----

GIB = 1 << 30
_UNITS = {"": 1 << 20, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_memory(s: str) -> int:
    """Bytes in a QEMU `-m` size (vm.RunSpec.memory): "1G", "512M", "3.5G",
    or a number of MiB; rounded up to 8 KiB, as QEMU 7.2 does."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmgtBKMGT]?)\s*", s)
    if not m:
        raise UklError(f"cannot read the memory size '{s}'",
                       "write a number with a unit, e.g. 512M or 2G (a bare number is MiB)")
    num, unit = m.groups()
    size = math.ceil(Fraction(num) * _UNITS[unit.upper()])
    if size <= 0:
        raise UklError(f"the memory size '{s}' is zero", "give the guest some memory, e.g. 1G")
    return (size + 8191) // 8192 * 8192


def below_4g(ram_bytes: int) -> int:
    """How much of the guest's RAM QEMU 7.2's `-M pc` (pc-i440fx-7.2) maps
    below the PCI hole, at guest-physical 0; the rest is at 4 GiB. With
    3.5 GiB or more (max-ram-below-4g's default) the low part is cut to
    3 GiB (gigabyte_align); below that all RAM is low."""
    lowmem = 0xE0000000
    if ram_bytes >= lowmem:
        lowmem = 0xC0000000
    return min(ram_bytes, lowmem)


# ---- The shadow's binary ----

def build_shadow() -> Path:
    """The shadow's executable in the cache, bin/ukl-shadow-HASH (built when
    its sources or flags changed)."""
    return cached_host_build(cache_dir() / "bin", "ukl-shadow", "", SOURCES, CFLAGS, "the remote-call shadow",
                             "tools/shadow/ belongs to the ukl checkout",
                             "fix the source, or install the host compiler and headers "
                             "(`apt-get install gcc linux-libc-dev`)")


# ---- Running it ----

_STAT = re.compile(r"([a-z][a-z0-9-]*)=(-?\d+)")


def parse_stats(log_text: str) -> dict[str, int]:
    """The numbers the shadow's log reports on its `ukl-shadow: key=N ...`
    lines: calls, zero-copy, inline (at exit), rss-anon-kb and vm-rss-kb
    (recorded by Shadow.stop()); a later line wins."""
    stats: dict[str, int] = {}
    for line in log_text.splitlines():
        if line.startswith("ukl-shadow:"):
            stats.update((k, int(v)) for k, v in _STAT.findall(line))
    return stats


def _proc_status(pid: int) -> dict[str, int]:
    """The kB fields of /proc/PID/status (VmRSS, RssAnon, ...); {} if gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r"(\w+):\s+(\d+) kB", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def _check_dir(directory: Path) -> Path:
    if not directory.exists():
        raise UklError(f"the remote directory {directory} does not exist",
                       "create it, or name an existing directory with --remote")
    if not directory.is_dir():
        raise UklError(f"the remote directory {directory} is not a directory",
                       "--remote names the host directory the application's remote files live in")
    directory = directory.resolve()
    if os.geteuid() == 0 and directory.stat().st_uid == 0:
        raise UklError(f"the remote directory {directory} is owned by root; as root, the shadow process "
                       "runs as the directory's owner",
                       f"give it to an unprivileged user, e.g. `chown nobody: {directory}`")
    return directory


class Shadow:
    """The shadow process and the memory it shares with QEMU, for one run:

        with Shadow(DIR, remote.parse_memory(spec.memory), OUT / "shadow.log") as sh:
            cmd += sh.qemu_args()   # and "-M", "pc" + sh.machine_suffix
            subprocess.Popen(cmd, pass_fds=sh.pass_fds())

    Entering creates the memfds, starts the shadow (its stderr goes to LOG)
    and waits until it is ready; leaving (or stop()) ends it with SIGTERM,
    records its memory use and reads its statistics (self.stats)."""

    machine_suffix = ",memory-backend=ukl-ram"

    def __init__(self, directory: Path, ram_bytes: int, log: Path, idle_us: int = 1000, *,
                 notify: str = "poll", below_4g_bytes: int | None = None, ready_timeout: float = 10.0) -> None:
        if ram_bytes <= 0:
            raise UklError(f"bad guest memory size {ram_bytes}")
        if idle_us < -1:
            raise UklError(f"bad --remote-idle-us {idle_us}", "give microseconds, or -1 to spin always")
        if notify not in NOTIFY_MODES:
            raise UklError(f"bad --remote-notify '{notify}'", f"choose one of: {', '.join(NOTIFY_MODES)}")
        self.notify = notify
        self.directory = directory
        self.ram_bytes = ram_bytes
        self.below_4g = below_4g(ram_bytes) if below_4g_bytes is None else below_4g_bytes
        self.log = log
        self.idle_us = idle_us
        self.ready_timeout = ready_timeout
        self.ram_fd = -1
        self.ring_fd = -1
        # The ivshmem-doorbell chardev: QEMU's end and the shadow's (its server)
        self.qemu_sock: socket.socket | None = None
        self.shadow_sock: socket.socket | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.stats: dict[str, int] = {}
        self._stopped = False

    # -- lifetime --

    def __enter__(self) -> Shadow:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _memfd(self, name: str, size: int) -> int:
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            # Nobody can shrink it under a mapping (SIGBUS) or grow it
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        except OSError:
            os.close(fd)
            raise
        return fd

    def start(self) -> None:
        directory = _check_dir(self.directory)
        exe = build_shadow()
        try:
            self.ram_fd = self._memfd("ukl-ram", self.ram_bytes)
            self.ring_fd = self._memfd("ukl-ring", RING_SIZE)
            self.qemu_sock, self.shadow_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as e:
            self._close_fds()
            raise UklError(f"cannot create {self.ram_bytes} bytes of shared guest memory: {e.strerror}",
                           "give the guest less memory (--memory), or free some on the host") from None
        cmd = [str(exe), "--ram-fd", str(self.ram_fd), "--ram-size", str(self.ram_bytes),
               "--below-4g", str(self.below_4g), "--ring-fd", str(self.ring_fd),
               "--dir", str(directory), "--parent", str(os.getpid()), "--idle-us", str(self.idle_us),
               "--ivshmem-fd", str(self.shadow_sock.fileno()), "--notify", self.notify]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        # The shadow dies with us by itself: it sets PR_SET_PDEATHSIG and then
        # checks that its parent is still --parent (our pid), which covers the
        # time from fork on. Its own session keeps the terminal's ^C from it:
        # we stop it, so that it reports its statistics.
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=logf,
                                         pass_fds=(self.ram_fd, self.ring_fd, self.shadow_sock.fileno()),
                                         start_new_session=True)
        self.shadow_sock.close()
        self.shadow_sock = None
        try:
            self._wait_ready()
        except BaseException:
            self._kill()
            self._close_fds()
            raise

    def _log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "".join(f"\n  {line}" for line in lines[-10:])

    def _wait_ready(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + self.ready_timeout
        got = b""
        while b"\n" not in got:
            left = deadline - time.monotonic()
            if left <= 0:
                raise UklError(f"the remote-call shadow did not get ready in {self.ready_timeout:.0f} s "
                               f"(its log: {self.log}){self._log_tail()}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 64)
                if not chunk:
                    break
                got += chunk
        if got.split(b"\n")[0] != b"ready":
            code = self.proc.wait()
            raise UklError(f"the remote-call shadow failed to start ({self._describe(code)}; its log: "
                           f"{self.log}){self._log_tail()}",
                           "see the log's last lines for what it refused")

    @staticmethod
    def _describe(code: int | None) -> str:
        if code is None:
            return "running"
        if code >= 0:
            return f"exit {code}"
        sig = signal.Signals(-code)
        if sig == signal.SIGSYS:
            return "killed by SIGSYS: it made a system call its seccomp filter refuses"
        return f"killed by {sig.name}"

    def exit_description(self) -> str:
        """How the shadow ended ("exit 0", "killed by SIGSYS: ..."), or "running"."""
        return self._describe(None if self.proc is None else self.proc.poll())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def _close_fds(self) -> None:
        for fd in (self.ram_fd, self.ring_fd):
            if fd >= 0:
                os.close(fd)
        self.ram_fd = self.ring_fd = -1
        for sock in (self.qemu_sock, self.shadow_sock):
            if sock is not None:
                sock.close()
        self.qemu_sock = self.shadow_sock = None

    def stop(self, timeout: float = 10.0) -> dict[str, int]:
        """End the shadow (SIGTERM; SIGKILL after TIMEOUT s), append its
        memory use just before to the log, close the memfds; its statistics
        (parse_stats of the log). Calling it again only returns them."""
        if self._stopped or self.proc is None:
            return self.stats
        self._stopped = True
        mem = _proc_status(self.proc.pid) if self.proc.poll() is None else {}
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        self._close_fds()
        if mem:
            with open(self.log, "a") as logf:
                logf.write(f"ukl-shadow: rss-anon-kb={mem.get('RssAnon', 0)}\n"
                           f"ukl-shadow: vm-rss-kb={mem.get('VmRSS', 0)}\n")
        try:
            self.stats = parse_stats(self.log.read_text(errors="replace"))
        except OSError:
            self.stats = {}
        return self.stats

    # -- what QEMU needs --

    def qemu_args(self) -> list[str]:
        """QEMU's options for the shared RAM and the ring (the caller adds
        machine_suffix to `-M pc`; `-m` must stay the same size). The ring
        is an ivshmem-doorbell whose server, the shadow, hands QEMU the
        ring's memfd and the eventfds over a socketpair."""
        assert self.qemu_sock is not None
        return ["-object", f"memory-backend-file,id=ukl-ram,size={self.ram_bytes},"
                           f"mem-path=/proc/self/fd/{self.ram_fd},share=on",
                "-chardev", f"socket,id=ukl-ring,fd={self.qemu_sock.fileno()}",
                "-device", "ivshmem-doorbell,chardev=ukl-ring,vectors=1"]

    def pass_fds(self) -> tuple[int, ...]:
        """The fds QEMU must inherit (subprocess.Popen(pass_fds=...))."""
        assert self.qemu_sock is not None
        return (self.ram_fd, self.qemu_sock.fileno())
