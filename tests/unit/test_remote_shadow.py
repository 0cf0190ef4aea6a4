"""The remote-call shadow (tools/shadow/ukl-shadow.c) on the host, with no
VM: this test plays the guest. It maps the "guest RAM" and ring memfds of a
remote.Shadow, puts requests in slots through the ctypes mirror of the ABI
and checks the answers: file I/O in and out of RAM at guest-physical
addresses on both sides of the PCI hole, and a matrix of bad requests, each
answered with its errno, after which the shadow still answers. Also its
confinement (seccomp, no_new_privs, the uid of DIR's owner) and its end:
SIGTERM with statistics, and the death of its parent. As QEMU's ivshmem
server it hands over the ring and the eventfds; it sleeps until the
doorbell and rings ours for a request that asks for an interrupt. The directory calls
(getdents64, mkdirat, unlinkat, renameat2, statx) and fsync, fdatasync and
ftruncate, with the escapes each path operation refuses."""

from __future__ import annotations

import ctypes
import errno
import itertools
import mmap
import os
import random
import resource
import select
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from ukltool.run import remote
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO

MIB = 1 << 20
RAM = 16 * MIB
LOW = 12 * MIB      # RAM below the "PCI hole": GPA [0, 12M) -> offset = GPA
HIGH = 1 << 32      # GPA [4G, 4G + 4M) -> offset [12M, 16M)
NOBODY = 65534
AS_ROOT = os.geteuid() == 0

# x86-64 system call numbers
NR_READ, NR_WRITE, NR_CLOSE, NR_FSTAT, NR_LSEEK = 0, 1, 3, 5, 8
NR_PREAD64, NR_PWRITE64, NR_OPENAT, NR_NEWFSTATAT = 17, 18, 257, 262
NR_FSYNC, NR_FDATASYNC, NR_FTRUNCATE, NR_GETDENTS64 = 74, 75, 77, 217
NR_MKDIRAT, NR_UNLINKAT, NR_RENAMEAT2, NR_STATX = 258, 263, 316, 332
NR_READV, NR_WRITEV = 19, 20
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW, AT_REMOVEDIR, AT_EMPTY_PATH = 0x100, 0x200, 0x1000
AT_STATX_FORCE_SYNC, AT_STATX_DONT_SYNC = 0x2000, 0x4000
RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT = 1, 2, 4
STATX_BASIC_STATS = 0x7FF
# struct stat (x86-64): dev, ino, nlink, mode, uid, gid, pad, rdev, size, blksize, blocks, times, reserved
STAT = struct.Struct("<QQQIIIiQqqq6q3q")
assert STAT.size == 144
# struct statx: mask, blksize, attributes, nlink, uid, gid, mode, pad, ino, size, blocks, attributes_mask,
# then atime, btime, ctime, mtime (sec, nsec, pad), rdev and dev (major, minor); 256 bytes in all
STATX = struct.Struct("<IIQIIIHHQQQQ" + "qIi" * 4 + "IIII")
STATX_SIZE = 256
# struct linux_dirent64: ino, off, reclen, type, then the name
DIRENT64 = struct.Struct("<QqHB")


# The guest's request numbers: new for each request, whichever Guest sends it
SEQ = itertools.count(1)


def gpa_off(gpa: int) -> int:
    return gpa if gpa < LOW else gpa - HIGH + LOW


class Guest:
    """The guest's side of the ring: one request at a time, slots in turn."""

    def __init__(self, sh: remote.Shadow) -> None:
        self.ring = mmap.mmap(sh.ring_fd, remote.RING_SIZE)
        self.ram = mmap.mmap(sh.ram_fd, sh.ram_bytes)
        self.next_slot = 0
        self.host_efd: int | None = getattr(sh, "test_efds", {}).get(1)

    def close(self) -> None:
        self.ring.close()
        self.ram.close()

    def put(self, gpa: int, data: bytes) -> None:
        off = gpa_off(gpa)
        self.ram[off:off + len(data)] = data

    def get(self, gpa: int, n: int) -> bytes:
        off = gpa_off(gpa)
        return self.ram[off:off + n]

    def call(self, op: int, *args: int, segs: Sequence[tuple[int, int]] = (), path: str | bytes | None = None,
             nsegs: int | None = None, inline_len: int | None = None, flags: int = 0,
             slot: int | None = None) -> tuple[int, bytes]:
        """Send a request (in SLOT, or the next slot); (ret, the inline output)."""
        i = self.next_slot if slot is None else slot
        if slot is None:
            self.next_slot = (i + 1) % remote.RING_SLOTS
        s = remote.Slot.from_buffer(self.ring, remote.slot_offset(i))
        try:
            assert s.state != remote.SLOT_REQ
            s.op = op
            s.client = os.getpid()
            for k in range(6):
                s.args[k] = args[k] if k < len(args) else 0
            for k, (gpa, length) in enumerate(segs):
                s.seg[k].gpa, s.seg[k].len = gpa, length
            s.nsegs = len(segs) if nsegs is None else nsegs
            data = b""
            if path is not None:
                data = (path.encode() if isinstance(path, str) else path)
                data += b"\0" if isinstance(path, str) else b""
            ctypes_memmove(s, data)
            s.inline_len = len(data) if inline_len is None else inline_len
            s.ret = 0x5A5A
            s.flags = flags
            seq = next(SEQ)
            s.seq = seq
            s.state = remote.SLOT_REQ  # the last store (x86: stores are seen in order)
            # The doorbell, as the guest kernel rings it (without its barrier
            # a late wakeup is possible: the shadow looks again every 100 ms)
            if self.host_efd is not None and remote.RingHdr.from_buffer(self.ring, 0).host_asleep:
                os.eventfd_write(self.host_efd, 1)
            deadline = time.monotonic() + 5
            while s.state != remote.SLOT_DONE:
                assert time.monotonic() < deadline, f"no answer to op {op:#x} in slot {i}"
            assert s.ack == seq
            ret, out = s.ret, bytes(s.data[:s.inline_len])
            s.state = remote.SLOT_FREE
            return ret, out
        finally:
            del s

    # The calls, as the guest kernel would forward them
    def open(self, path: str | bytes, flags: int = os.O_RDONLY, mode: int = 0, dirfd: int = AT_FDCWD) -> int:
        return self.call(NR_OPENAT, dirfd, 0, flags, mode, path=path)[0]

    def read(self, fd: int, segs: list[tuple[int, int]], op: int = NR_READ, pos: int = 0) -> int:
        return self.call(op, fd, 0, sum(n for _, n in segs), pos, segs=segs)[0]

    def write(self, fd: int, segs: list[tuple[int, int]], op: int = NR_WRITE, pos: int = 0) -> int:
        return self.call(op, fd, 0, sum(n for _, n in segs), pos, segs=segs)[0]

    def stat(self, op: int, *args: int, path: str | None = None) -> os.stat_result | int:
        ret, out = self.call(op, *args, path=path)
        if ret < 0:
            return ret
        assert ret == 0 and len(out) == 144
        f = STAT.unpack(out)
        return os.stat_result((f[3], f[1], f[0], f[2], f[4], f[5], f[8], f[11], f[13], f[15]))

    def null(self) -> int:
        return self.call(remote.ROP_NULL)[0]

    def getdents(self, fd: int, count: int = remote.SLOT_INLINE) -> tuple[int, bytes]:
        return self.call(NR_GETDENTS64, fd, 0, count)

    def listdir(self, path: str, dirfd: int = AT_FDCWD) -> dict[str, tuple[int, int]] | int:
        """name -> (d_ino, d_type) of every entry, by getdents64 in small
        reads (so that d_off and the fd's position are used too)."""
        fd = self.open(path, os.O_RDONLY | os.O_DIRECTORY, dirfd=dirfd)
        if fd < 0:
            return fd
        names: dict[str, tuple[int, int]] = {}
        while True:
            ret, out = self.getdents(fd, 200)
            assert ret >= 0 and len(out) == ret, ret
            if ret == 0:
                break
            for name, ino, _, dtype in parse_dirents(out):
                assert name not in names
                names[name] = (ino, dtype)
        assert self.call(NR_CLOSE, fd)[0] == 0
        return names

    def mkdir(self, path: str, mode: int = 0o755, dirfd: int = AT_FDCWD) -> int:
        return self.call(NR_MKDIRAT, dirfd, 0, mode, path=path)[0]

    def unlink(self, path: str, flags: int = 0, dirfd: int = AT_FDCWD) -> int:
        return self.call(NR_UNLINKAT, dirfd, 0, flags, path=path)[0]

    def rmdir(self, path: str, dirfd: int = AT_FDCWD) -> int:
        return self.unlink(path, AT_REMOVEDIR, dirfd)

    def rename(self, old: str, new: str, flags: int = 0, olddirfd: int = AT_FDCWD, newdirfd: int = AT_FDCWD) -> int:
        data = old.encode() + b"\0" + new.encode() + b"\0"
        return self.call(NR_RENAMEAT2, olddirfd, len(old) + 1, newdirfd, 0, flags, path=data)[0]

    def statx(self, path: str, flags: int = 0, mask: int = STATX_BASIC_STATS,
              dirfd: int = AT_FDCWD) -> tuple[int, ...] | int:
        ret, out = self.call(NR_STATX, dirfd, 0, flags, mask, path=path)
        if ret < 0:
            assert out == b""
            return ret
        assert ret == 0 and len(out) == STATX_SIZE
        return STATX.unpack_from(out)


def parse_dirents(buf: bytes) -> list[tuple[str, int, int, int]]:
    """(name, d_ino, d_off, d_type) of each struct linux_dirent64 in BUF."""
    out = []
    pos = 0
    while pos < len(buf):
        ino, off, reclen, dtype = DIRENT64.unpack_from(buf, pos)
        assert reclen >= DIRENT64.size + 1 and reclen % 8 == 0 and pos + reclen <= len(buf)
        name = buf[pos + DIRENT64.size:pos + reclen].split(b"\0", 1)[0]
        out.append((name.decode(), ino, off, dtype))
        pos += reclen
    return out


def ctypes_memmove(s: remote.Slot, data: bytes) -> None:
    data = data[:remote.SLOT_INLINE]
    ctypes.memmove(ctypes.addressof(s.data), data, len(data))


def same_file(st: os.stat_result | int, path: Path, follow: bool = True) -> bool:
    want = path.stat() if follow else path.lstat()
    assert not isinstance(st, int), f"stat failed: {st}"
    return (st.st_ino, st.st_dev, st.st_mode, st.st_size, st.st_uid) == \
        (want.st_ino, want.st_dev, want.st_mode, want.st_size, want.st_uid)


@pytest.fixture(scope="module")
def base():
    """A directory tree under /tmp that DIR's owner (nobody, when we are
    root) can reach: base/dir is DIR, base/outside.txt is beside it."""
    top = Path(tempfile.mkdtemp(prefix="ukl-shadow-test-", dir="/tmp"))
    top.chmod(0o755)
    d = top / "dir"
    d.mkdir()
    (top / "outside.txt").write_text("outside\n")
    (d / "in.txt").write_text("hello from the host\n")
    (d / "sub").mkdir()
    (d / "sub" / "deep.txt").write_text("deep\n")
    os.mkfifo(d / "fifo")
    (d / "inside-link").symlink_to("in.txt")
    (d / "escape-link").symlink_to("/etc")
    (d / "outside-link").symlink_to("../outside.txt")
    if AS_ROOT:
        for p in [d, *d.rglob("*")]:
            os.lchown(p, NOBODY, NOBODY)
    yield top
    shutil.rmtree(top)


def ivshmem_messages(sock: socket.socket, n: int) -> list[tuple[int, int | None]]:
    """N messages of QEMU's ivshmem server protocol: (value, fd or None)."""
    out: list[tuple[int, int | None]] = []
    while len(out) < n:
        data, fds, _, _ = socket.recv_fds(sock, 8, 1)
        assert len(data) == 8, "a short ivshmem message"
        assert len(fds) <= 1
        out.append((struct.unpack("<q", data)[0], fds[0] if fds else None))
    return out


@pytest.fixture(scope="module")
def shadow(base):
    with remote.Shadow(base / "dir", RAM, base / "shadow.log", below_4g_bytes=LOW) as sh:
        # QEMU's side of the handshake: what a test of it checks, and the eventfds
        assert sh.qemu_sock is not None
        sh.test_handshake = ivshmem_messages(sh.qemu_sock, 5)  # type: ignore[attr-defined]
        sh.test_efds = {v: fd for v, fd in sh.test_handshake[3:]}  # type: ignore[attr-defined]
        yield sh
        for _, fd in sh.test_handshake:  # type: ignore[attr-defined]
            if fd is not None:
                os.close(fd)


@pytest.fixture
def guest(shadow):
    g = Guest(shadow)
    assert g.call(remote.ROP_HELLO, os.getpid())[0] == 0
    yield g
    assert shadow.alive(), shadow.log.read_text()
    g.close()


def test_header_and_confinement(shadow, guest):
    hdr = remote.RingHdr.from_buffer_copy(guest.ring, 0)
    assert (hdr.magic, hdr.version, hdr.nslots, hdr.slot_size, hdr.slot_segs, hdr.notify, hdr.host_peer) == \
        (remote.RING_MAGIC, remote.RING_VERSION, remote.RING_SLOTS, remote.SLOT_SIZE, remote.SLOT_SEGS,
         remote.NOTIFY_POLL, 1)
    assert (hdr.host_pid, hdr.ram_size, hdr.below_4g) == (shadow.pid, RAM, LOW)
    status = Path(f"/proc/{shadow.pid}/status").read_text()
    assert "\nSeccomp:\t2\n" in status
    assert "\nNoNewPrivs:\t1\n" in status
    if AS_ROOT:
        assert f"\nUid:\t{NOBODY}\t{NOBODY}\t{NOBODY}\t{NOBODY}\n" in status
        assert f"\nGid:\t{NOBODY}\t{NOBODY}\t{NOBODY}\t{NOBODY}\n" in status
        assert "\nCapEff:\t0000000000000000\n" in status
    log = shadow.log.read_text()
    assert "landlock: abi " in log or "landlock: unavailable (" in log
    beat = hdr.heartbeat
    assert guest.call(remote.ROP_NULL)[0] == -errno.ENOSYS  # its loop turns (awake, or woken by the doorbell)
    assert remote.RingHdr.from_buffer_copy(guest.ring, 0).heartbeat > beat


def test_write_then_read_through_ram(base, guest):
    pattern = bytes((i * 7 + 3) & 0xFF for i in range(10000))
    guest.put(0x1000, pattern)
    fd = guest.open("w.bin", os.O_CREAT | os.O_TRUNC | os.O_RDWR, 0o640)
    assert fd >= 0
    assert guest.write(fd, [(0x1000, len(pattern))]) == len(pattern)
    f = base / "dir" / "w.bin"
    assert f.read_bytes() == pattern
    st = f.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640
    if AS_ROOT:
        assert (st.st_uid, st.st_gid) == (NOBODY, NOBODY)
    # Back at another place, above the hole
    assert guest.call(NR_LSEEK, fd, 0, os.SEEK_SET)[0] == 0
    assert guest.read(fd, [(HIGH + 0x2000, len(pattern))]) == len(pattern)
    assert guest.get(HIGH + 0x2000, len(pattern)) == pattern
    # In three pieces, on both sides of the hole
    assert guest.call(NR_LSEEK, fd, 0, os.SEEK_SET)[0] == 0
    segs = [(0x100000, 100), (HIGH + 0x50000, 4000), (LOW - 5900, 5900)]
    assert guest.read(fd, segs) == len(pattern)
    got = b"".join(guest.get(g, n) for g, n in segs)
    assert got == pattern
    # At the end of the file: 0
    assert guest.read(fd, [(0x1000, 10)]) == 0
    assert guest.call(NR_LSEEK, fd, 0, os.SEEK_END)[0] == len(pattern)
    assert guest.call(NR_LSEEK, fd, -100, os.SEEK_CUR)[0] == len(pattern) - 100
    assert guest.read(fd, []) == 0  # count 0, no segments
    assert guest.call(NR_CLOSE, fd)[0] == 0


def test_pread_pwrite(base, guest):
    fd = guest.open("p.bin", os.O_CREAT | os.O_RDWR, 0o644)
    guest.put(0x3000, b"ABCDEFGH")
    assert guest.write(fd, [(0x3000, 8)], op=NR_PWRITE64, pos=100) == 8
    assert guest.write(fd, [(0x3000, 4)], op=NR_PWRITE64, pos=2) == 4
    data = (base / "dir" / "p.bin").read_bytes()
    assert len(data) == 108 and data[2:6] == b"ABCD" and data[100:] == b"ABCDEFGH"
    assert guest.call(NR_LSEEK, fd, 0, os.SEEK_CUR)[0] == 0  # p-calls leave the offset
    assert guest.read(fd, [(HIGH, 6)], op=NR_PREAD64, pos=102) == 6
    assert guest.get(HIGH, 6) == b"CDEFGH"
    assert guest.read(fd, [(HIGH, 6)], op=NR_PREAD64, pos=-1) == -errno.EINVAL
    assert guest.call(NR_CLOSE, fd)[0] == 0


def test_append_and_nonblock(base, guest):
    (base / "dir" / "a.txt").write_text("12")
    if AS_ROOT:
        os.chown(base / "dir" / "a.txt", NOBODY, NOBODY)
    fd = guest.open("a.txt", os.O_WRONLY | os.O_APPEND)
    guest.put(0x5000, b"34")
    assert guest.write(fd, [(0x5000, 2)]) == 2
    assert (base / "dir" / "a.txt").read_text() == "1234"
    assert guest.call(NR_CLOSE, fd)[0] == 0


def test_fstat_and_newfstatat(base, guest):
    d = base / "dir"
    fd = guest.open("in.txt")
    assert same_file(guest.stat(NR_FSTAT, fd), d / "in.txt")
    assert same_file(guest.stat(NR_NEWFSTATAT, AT_FDCWD, 0, 0, 0, path="in.txt"), d / "in.txt")
    assert same_file(guest.stat(NR_NEWFSTATAT, fd, 0, 0, AT_EMPTY_PATH, path=""), d / "in.txt")
    assert same_file(guest.stat(NR_NEWFSTATAT, AT_FDCWD, 0, 0, AT_EMPTY_PATH, path=""), d)
    assert guest.stat(NR_NEWFSTATAT, AT_FDCWD, 0, 0, 0, path="") == -errno.ENOENT
    assert same_file(guest.stat(NR_NEWFSTATAT, AT_FDCWD, 0, 0, 0, path="inside-link"), d / "in.txt")
    assert same_file(guest.stat(NR_NEWFSTATAT, AT_FDCWD, 0, 0, AT_SYMLINK_NOFOLLOW, path="inside-link"),
                     d / "inside-link", follow=False)
    assert same_file(guest.stat(NR_NEWFSTATAT, AT_FDCWD, 0, 0, AT_SYMLINK_NOFOLLOW, path="escape-link"),
                     d / "escape-link", follow=False)
    assert guest.stat(NR_NEWFSTATAT, AT_FDCWD, 0, 0, 0, path="escape-link") == -errno.EXDEV
    assert guest.stat(NR_NEWFSTATAT, AT_FDCWD, 0, 0, 0, path="outside-link") == -errno.EXDEV
    assert guest.stat(NR_NEWFSTATAT, AT_FDCWD, 0, 0, 0, path="../outside.txt") == -errno.EXDEV
    assert guest.stat(NR_NEWFSTATAT, AT_FDCWD, 0, 0, 0, path="missing") == -errno.ENOENT
    assert guest.stat(NR_NEWFSTATAT, AT_FDCWD, 0, 0, 0x8000, path="in.txt") == -errno.EINVAL
    # A directory as dirfd: ".." reaches DIR (as on Linux), not beyond
    sub = guest.open("sub", os.O_RDONLY | os.O_DIRECTORY)
    assert sub >= 0
    assert same_file(guest.stat(NR_NEWFSTATAT, sub, 0, 0, 0, path="deep.txt"), d / "sub" / "deep.txt")
    assert same_file(guest.stat(NR_NEWFSTATAT, sub, 0, 0, 0, path="../in.txt"), d / "in.txt")
    assert same_file(guest.stat(NR_NEWFSTATAT, sub, 0, 0, 0, path="../sub/../in.txt"), d / "in.txt")
    assert guest.stat(NR_NEWFSTATAT, sub, 0, 0, 0, path="../../outside.txt") == -errno.EXDEV
    assert guest.stat(NR_NEWFSTATAT, sub, 0, 0, 0, path="../escape-link") == -errno.EXDEV
    # newfstatat takes the AT_STATX_SYNC_TYPE flags, as vfs_statx() does
    assert same_file(guest.stat(NR_NEWFSTATAT, sub, 0, 0, AT_STATX_FORCE_SYNC, path="deep.txt"),
                     d / "sub" / "deep.txt")
    deep = guest.open("deep.txt", dirfd=sub)
    assert deep >= 0 and guest.read(deep, [(0x7000, 5)]) == 5 and guest.get(0x7000, 5) == b"deep\n"
    assert guest.open("in.txt", dirfd=fd) == -errno.ENOTDIR
    for f in (fd, sub, deep):
        assert guest.call(NR_CLOSE, f)[0] == 0


def shadow_fds(shadow: remote.Shadow) -> int | None:
    """How many fds the shadow has open (None where we may not look)."""
    try:
        return len(os.listdir(f"/proc/{shadow.pid}/fd"))
    except PermissionError:
        return None


def host_file(base: Path, name: str, data: bytes) -> Path:
    f = base / "dir" / name
    f.write_bytes(data)
    if AS_ROOT:
        os.chown(f, NOBODY, NOBODY)
    return f


def test_a_call_keeps_its_file_across_round_trips(base, shadow, guest):
    """A read or write of several round trips holds its file: a close() of
    its index by another thread, and an open() that gets the same index,
    between two round trips leave the rest of the call on its file, as on
    Linux (issue 34). The host closes the file when the call ends."""
    a_data, b_data = bytes(range(256)) * 32, b"B" * 8192
    host_file(base, "hold-a", a_data)
    fb = host_file(base, "hold-b", b_data)
    slot, more, cont = 7, remote.SLOT_MORE, remote.SLOT_CONT | remote.SLOT_MORE
    fds = shadow_fds(shadow)
    a = guest.open("hold-a", os.O_RDWR)
    assert a >= 0
    assert guest.call(NR_READ, a, 0, 4096, 0, segs=[(0x10000, 4096)], flags=more, slot=slot)[0] == 4096
    assert guest.call(NR_CLOSE, a)[0] == 0
    b = guest.open("hold-b", os.O_RDWR)
    assert b == a  # the index is reused
    # The next round trip reads on in hold-a, not hold-b
    assert guest.call(NR_READ, a, 0, 2048, 0, segs=[(0x11000, 2048)], flags=cont, slot=slot)[0] == 2048
    assert guest.get(0x10000, 6144) == a_data[:6144]
    # The last one (short: the end of the file) ends the hold, and hold-a is closed
    assert guest.call(NR_READ, a, 0, 4096, 0, segs=[(0x11800, 4096)], flags=cont, slot=slot)[0] == 2048
    assert guest.get(0x11800, 2048) == a_data[6144:]
    assert guest.call(NR_READ, a, 0, 16, 0, segs=[(0x12800, 16)], flags=cont, slot=slot)[0] == -errno.EBADF
    if fds is not None:
        assert shadow_fds(shadow) == fds + 1  # hold-b only
    # hold-b was not touched: its offset is 0
    assert guest.call(NR_LSEEK, b, 0, os.SEEK_CUR)[0] == 0
    # A write: the tail goes into the file the call began on
    guest.put(0x20000, b"x" * 8192)
    assert guest.call(NR_WRITE, b, 0, 4096, 0, segs=[(0x20000, 4096)], flags=more, slot=slot)[0] == 4096
    assert guest.call(NR_CLOSE, b)[0] == 0
    c = host_file(base, "hold-c", b"")
    assert guest.open("hold-c", os.O_RDWR) == b
    assert guest.call(NR_WRITE, b, 0, 4096, 0, segs=[(0x21000, 4096)], flags=cont & ~more, slot=slot)[0] == 4096
    assert fb.read_bytes() == b"x" * 8192 and c.read_bytes() == b""
    # A pwrite: the same, at its offset
    assert guest.call(NR_PWRITE64, b, 0, 10, 3, segs=[(0x20000, 10)], flags=more, slot=slot)[0] == 10
    assert guest.call(NR_PWRITE64, b, 0, 10, 13, segs=[(0x20000, 10)], flags=cont & ~more, slot=slot)[0] == 10
    assert c.read_bytes() == b"\0" * 3 + b"x" * 20
    # A slot's next call (without SLOT_CONT) drops what its last one held
    assert guest.call(NR_READ, b, 0, 4, 0, segs=[(0x20000, 4)], flags=more, slot=slot)[0] == 4
    assert guest.call(NR_CLOSE, b, slot=slot + 1)[0] == 0
    assert guest.call(remote.ROP_NULL, slot=slot + 1)[0] == -errno.ENOSYS
    if fds is not None:
        assert shadow_fds(shadow) == fds + 1
    assert guest.call(remote.ROP_NULL, slot=slot)[0] == -errno.ENOSYS
    if fds is not None:
        assert shadow_fds(shadow) == fds


def test_a_round_trip_of_no_bytes_releases_the_hold(base, shadow, guest):
    """A call that ends on the guest's side after a round trip that asked
    for more (killed, a buffer that faults) sends SLOT_CONT without
    SLOT_MORE and no segments: a read of no bytes that releases the file
    the slot holds, which then closes once its index is closed too."""
    host_file(base, "release-a", bytes(range(256)) * 32)
    slot = 9
    fds = shadow_fds(shadow)
    for op in (NR_READ, NR_WRITE, NR_PREAD64, NR_PWRITE64):
        a = guest.open("release-a", os.O_RDWR)
        assert a >= 0
        assert guest.call(op, a, 0, 4096, 0, segs=[(0x10000, 4096)], flags=remote.SLOT_MORE, slot=slot)[0] == 4096
        assert guest.call(NR_CLOSE, a)[0] == 0
        if fds is not None:
            assert shadow_fds(shadow) == fds + 1  # held by the slot
        assert guest.call(op, a, 0, 0, 0, flags=remote.SLOT_CONT, slot=slot)[0] == 0
        if fds is not None:
            assert shadow_fds(shadow) == fds
        # Released: a further round trip of the call finds no file
        assert guest.call(op, a, 0, 0, 0, flags=remote.SLOT_CONT, slot=slot)[0] == -errno.EBADF


def test_a_write_past_rlimit_fsize_is_efbig(base, monkeypatch):
    """The shadow ignores SIGXFSZ: a write past RLIMIT_FSIZE fails with
    EFBIG instead of killing it."""
    popen = subprocess.Popen

    def limited(*args, **kwargs):
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        kwargs["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
        return popen(*args, **kwargs)

    monkeypatch.setattr(remote.subprocess, "Popen", limited)
    with remote.Shadow(base / "dir", 2 * MIB, base / "fsize.log", idle_us=-1) as sh:
        monkeypatch.undo()
        g = Guest(sh)
        try:
            fd = g.open("fsize.bin", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o600)
            assert fd >= 0
            assert g.write(fd, [(0x1000, 4096)]) == 4096
            assert g.write(fd, [(0x1000, 4096)]) == -errno.EFBIG
            assert sh.alive(), sh.log.read_text()
        finally:
            g.close()


def test_errors_come_in_linux_order(base, shadow, guest):
    """What the guest could not pin faults in the host's copy
    (UKL_SEG_FAULT), and what it found wrong with its buffer (UKL_SLOT_ERR)
    comes after the checks Linux makes first; calls of no bytes are made as
    such (issue 34)."""
    host_file(base, "order.txt", b"0123456789")
    fault = [(remote.SEG_FAULT, 10)]
    ro = guest.open("order.txt")
    wo = guest.open("order.txt", os.O_WRONLY)
    d = guest.open("sub", os.O_RDONLY | os.O_DIRECTORY)
    closed = guest.open("order.txt")
    assert min(ro, wo, d, closed) >= 0 and guest.call(NR_CLOSE, closed)[0] == 0
    err = remote.SLOT_ERR
    m = {
        "read O_WRONLY into a fault": (guest.read(wo, fault), -errno.EBADF),
        "read data into a fault": (guest.read(ro, fault), -errno.EFAULT),
        "offset after the fault": (guest.call(NR_LSEEK, ro, 0, os.SEEK_CUR)[0], 0),
        "pread at the end into a fault": (guest.read(ro, fault, NR_PREAD64, 10), 0),
        "pread past the end into a fault": (guest.read(ro, fault, NR_PREAD64, 100), 0),
        "write O_RDONLY from a fault": (guest.write(ro, fault), -errno.EBADF),
        "write from a fault": (guest.write(wo, fault), -errno.EFAULT),
        "read a directory into a fault": (guest.read(d, fault), -errno.EISDIR),
        "read 0 of a directory": (guest.read(d, []), -errno.EISDIR),
        "pread 0 of a directory": (guest.read(d, [], NR_PREAD64), -errno.EISDIR),
        "readv 0 of a directory": (guest.read(d, [], NR_READV), 0),
        "read 0 of O_WRONLY": (guest.read(wo, []), -errno.EBADF),
        "readv 0 of O_WRONLY": (guest.read(wo, [], NR_READV), -errno.EBADF),
        "writev 0 of O_RDONLY": (guest.write(ro, [], NR_WRITEV), -errno.EBADF),
        "write 0": (guest.write(wo, []), 0),
        "guest EFAULT, O_WRONLY read": (guest.call(NR_READ, wo, 0, 0, 0, 0, -errno.EFAULT, flags=err)[0],
                                        -errno.EBADF),
        "guest EFAULT, read": (guest.call(NR_READ, ro, 0, 0, 0, 0, -errno.EFAULT, flags=err)[0], -errno.EFAULT),
        "guest EINVAL, pwrite": (guest.call(NR_PWRITE64, wo, 0, 0, 0, 0, -errno.EINVAL, flags=err)[0],
                                 -errno.EINVAL),
        "guest EFAULT, closed": (guest.call(NR_READ, closed, 0, 0, 0, 0, -errno.EFAULT, flags=err)[0],
                                 -errno.EBADF),
        "guest EINVAL, readv O_WRONLY": (guest.call(NR_READV, wo, 0, 0, 0, 0, -errno.EINVAL, flags=err)[0],
                                         -errno.EINVAL),
        "guest EINVAL, readv closed": (guest.call(NR_READV, closed, 0, 0, 0, 0, -errno.EINVAL, flags=err)[0],
                                       -errno.EBADF),
        "guest's error not an errno": (guest.call(NR_READ, ro, 0, 0, 0, 0, 5, flags=err)[0], -errno.EINVAL),
        "readv with segments": (guest.read(ro, [(0x1000, 4)], NR_READV), -errno.EINVAL),
        "a fault too large": (guest.read(ro, [(remote.SEG_FAULT, 1 << 31)]), -errno.EINVAL),
        "ftruncate a closed index to -1": (guest.call(NR_FTRUNCATE, closed, -1)[0], -errno.EINVAL),
    }
    assert {k: v[0] for k, v in m.items()} == {k: v[1] for k, v in m.items()}
    assert (base / "dir" / "order.txt").read_bytes() == b"0123456789"
    for f in (ro, wo, d):
        assert guest.call(NR_CLOSE, f)[0] == 0


def test_relative_symlink_inside_opens(guest):
    fd = guest.open("inside-link")
    assert guest.read(fd, [(0x9000, 5)]) == 5 and guest.get(0x9000, 5) == b"hello"
    assert guest.call(NR_CLOSE, fd)[0] == 0


def _bad_requests(g: Guest) -> dict[str, tuple[int, int]]:
    """name -> (answer, expected -errno)"""
    fd = g.open("in.txt")
    closed = g.open("in.txt")
    assert fd >= 0 and closed >= 0 and g.call(NR_CLOSE, closed)[0] == 0
    big = 1 << 64
    return {
        "gpa in the hole": (g.read(fd, [(LOW, 16)]), -errno.EFAULT),
        "gpa past RAM": (g.read(fd, [(HIGH + RAM - LOW, 16)]), -errno.EFAULT),
        "gpa far past RAM": (g.read(fd, [(1 << 50, 16)]), -errno.EFAULT),
        "run crossing below_4g": (g.read(fd, [(LOW - 8, 16)]), -errno.EFAULT),
        "run past the end of RAM": (g.read(fd, [(HIGH + RAM - LOW - 8, 16)]), -errno.EFAULT),
        "gpa+len wraps": (g.read(fd, [(big - 4096, 8192)]), -errno.EFAULT),
        "len wraps from a good gpa": (g.write(fd, [(0x1000, big - 0x800)]), -errno.EINVAL),
        "nsegs huge": (g.call(NR_READ, fd, 0, 16, segs=[(0x1000, 16)], nsegs=10**6)[0], -errno.EINVAL),
        "nsegs one too many": (g.call(NR_READ, fd, 0, 16, segs=[(0x1000, 16)], nsegs=remote.SLOT_SEGS + 1)[0],
                               -errno.EINVAL),
        "segment sum > count": (g.call(NR_READ, fd, 0, 10, segs=[(0x1000, 16)])[0], -errno.EINVAL),
        "segment sum < count": (g.call(NR_READ, fd, 0, 32, segs=[(0x1000, 16)])[0], -errno.EINVAL),
        "segment sums overflow": (g.call(NR_WRITE, fd, 0, 16, segs=[(0x1000, big - 8), (0x1000, 24)])[0],
                                  -errno.EINVAL),
        "empty segment": (g.call(NR_READ, fd, 0, 16, segs=[(0x1000, 16), (0x2000, 0)])[0], -errno.EINVAL),
        "unknown op": (g.call(0x7777, fd)[0], -errno.ENOSYS),
        "unforwarded syscall (unlink)": (g.call(87, path="in.txt")[0], -errno.ENOSYS),
        "null": (g.null(), -errno.ENOSYS),
        "path without NUL": (g.open(b"in.txt"), -errno.EFAULT),
        "path with an early NUL": (g.open(b"in.txt\0x\0"), -errno.EFAULT),
        "empty inline": (g.call(NR_OPENAT, AT_FDCWD, 0, 0, 0, path="in.txt", inline_len=0)[0], -errno.EFAULT),
        "inline_len too long": (g.call(NR_OPENAT, AT_FDCWD, 0, 0, 0, path="in.txt", inline_len=5000)[0],
                                -errno.ENAMETOOLONG),
        "../x": (g.open("../x"), -errno.EXDEV),
        "../outside.txt": (g.open("../outside.txt"), -errno.EXDEV),
        "/etc/passwd": (g.open("/etc/passwd"), -errno.EXDEV),
        "symlink to /etc": (g.open("escape-link"), -errno.EXDEV),
        "through a symlink to /etc": (g.open("escape-link/passwd"), -errno.EXDEV),
        "symlink to ../outside": (g.open("outside-link"), -errno.EXDEV),
        "magic link": (g.open("/proc/self/fd/0"), -errno.EXDEV),
        "FIFO": (g.open("fifo"), -errno.ENXIO),
        "FIFO for writing": (g.open("fifo", os.O_WRONLY), -errno.ENXIO),
        "O_NOFOLLOW on a symlink": (g.open("inside-link", os.O_NOFOLLOW), -errno.ELOOP),
        "index 9999": (g.read(9999, [(0x1000, 16)]), -errno.EBADF),
        "index -1": (g.read(-1, [(0x1000, 16)]), -errno.EBADF),
        "index 2^40": (g.call(NR_FSTAT, 1 << 40)[0], -errno.EBADF),
        "closed index read": (g.read(closed, [(0x1000, 16)]), -errno.EBADF),
        "closed index close": (g.call(NR_CLOSE, closed)[0], -errno.EBADF),
        "closed index fstat": (g.call(NR_FSTAT, closed)[0], -errno.EBADF),
        "closed index lseek": (g.call(NR_LSEEK, closed, 0, 0)[0], -errno.EBADF),
        "closed dirfd": (g.open("in.txt", dirfd=closed), -errno.EBADF),
        "bad dirfd": (g.open("in.txt", dirfd=-5), -errno.EBADF),
        "bad whence": (g.call(NR_LSEEK, fd, 0, 5)[0], -errno.EINVAL),
        "whence truncated to an unsigned int": (g.call(NR_LSEEK, fd, 3, (1 << 33) | os.SEEK_SET)[0], 3),
        "whence -1": (g.call(NR_LSEEK, fd, 0, -1)[0], -errno.EINVAL),
        "write to a read-only fd": (g.write(fd, [(0x1000, 16)]), -errno.EBADF),
        "create an existing file exclusively": (g.open("in.txt", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600),
                                                -errno.EEXIST),
    }


def test_bad_requests_get_their_errno_and_the_shadow_goes_on(shadow, guest):
    before = len(list((Path(shadow.directory)).iterdir()))
    for name, (got, want) in _bad_requests(guest).items():
        assert (name, got) == (name, want)
        assert guest.null() == -errno.ENOSYS, name
    assert shadow.alive()
    assert len(list(Path(shadow.directory).iterdir())) == before


def test_hello_closes_every_remote_fd(guest):
    a, b = guest.open("in.txt"), guest.open("sub", os.O_RDONLY | os.O_DIRECTORY)
    assert (a, b) == (0, 1)  # the fixture's HELLO emptied the table
    assert guest.call(remote.ROP_HELLO, 1234)[0] == 0
    assert guest.read(a, [(0x1000, 4)]) == -errno.EBADF
    assert guest.call(NR_FSTAT, b)[0] == -errno.EBADF
    assert guest.open("in.txt") == 0


def test_the_table_fills_with_emfile(guest):
    n = 0
    while (fd := guest.open("in.txt")) >= 0:
        assert fd == n
        n += 1
    assert fd == -errno.EMFILE
    assert n == remote.RFD_MAX or n > 900, n  # or the host's RLIMIT_NOFILE came first
    assert guest.call(remote.ROP_HELLO, 1)[0] == 0
    assert guest.open("in.txt") == 0


# ---- Directories and the calls on a path's last component ----

DT_FIFO, DT_DIR, DT_REG, DT_LNK = 1, 4, 8, 10


@pytest.fixture
def work(base):
    """A fresh directory in DIR for one test, owned as DIR is: (its name in
    DIR, its host path)."""
    w = Path(tempfile.mkdtemp(prefix="w-", dir=base / "dir"))
    w.chmod(0o755)
    if AS_ROOT:
        os.chown(w, NOBODY, NOBODY)
    yield w.name, w
    shutil.rmtree(w)


def _own(*paths: Path) -> None:
    if AS_ROOT:
        for p in paths:
            os.lchown(p, NOBODY, NOBODY)


def test_getdents64_lists_a_directory(base, guest, work):
    d = base / "dir"
    want = {p.name: p.lstat().st_ino for p in d.iterdir()}
    got = guest.listdir(".")
    assert not isinstance(got, int)
    assert {k: v[0] for k, v in got.items() if k not in (".", "..")} == want
    assert got["."] == (d.stat().st_ino, DT_DIR)
    types = {"in.txt": DT_REG, "sub": DT_DIR, "fifo": DT_FIFO, "inside-link": DT_LNK, "escape-link": DT_LNK}
    assert {k: got[k][1] for k in types} == types
    # Through a remote dirfd, and many entries: several calls, each resuming at the fd's position
    name, w = work
    for i in range(150):
        (w / f"entry-{i:03d}-{'x' * (i % 40)}").touch()
    sub = guest.open("sub", os.O_RDONLY | os.O_DIRECTORY)
    assert guest.listdir("deep.txt", dirfd=sub) == -errno.ENOTDIR
    in_sub = guest.listdir(".", dirfd=sub)
    assert not isinstance(in_sub, int) and set(in_sub) == {".", "..", "deep.txt"}
    assert guest.listdir(f"../../{name}", dirfd=sub) == -errno.EXDEV
    assert guest.listdir(f"../{name}", dirfd=sub) == guest.listdir(name)
    listed = guest.listdir(name)
    assert not isinstance(listed, int)
    assert set(listed) == {".", ".."} | {p.name for p in w.iterdir()}
    # One call: the entries come back inline, ret bytes of them
    fd = guest.open(name, os.O_RDONLY | os.O_DIRECTORY)
    ret, out = guest.getdents(fd)
    assert 0 < ret <= remote.SLOT_INLINE and len(out) == ret
    first = parse_dirents(out)
    assert len(first) < 152  # 4096 bytes do not hold them all
    # d_off is the position after each entry: lseek there and go on
    assert guest.call(NR_LSEEK, fd, first[1][2], os.SEEK_SET)[0] == first[1][2]
    ret, out = guest.getdents(fd, 100)
    assert ret > 0 and parse_dirents(out)[0][0] == first[2][0]
    # Bad requests
    assert guest.getdents(fd, remote.SLOT_INLINE + 1) == (-errno.EINVAL, b"")
    assert guest.getdents(fd, -1) == (-errno.EINVAL, b"")
    assert guest.getdents(fd, 0) == (-errno.EINVAL, b"")         # the kernel: no room for one entry
    assert guest.getdents(9999) == (-errno.EBADF, b"")
    f = guest.open("in.txt")
    assert guest.getdents(f) == (-errno.ENOTDIR, b"")
    for x in (fd, sub, f):
        assert guest.call(NR_CLOSE, x)[0] == 0


def test_mkdir_create_rename_unlink_rmdir(guest, work):
    name, w = work
    assert guest.mkdir(f"{name}/a", 0o750) == 0
    st = (w / "a").stat()
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o750
    if AS_ROOT:
        assert (st.st_uid, st.st_gid) == (NOBODY, NOBODY)
    assert guest.mkdir(f"{name}/a") == -errno.EEXIST
    assert guest.mkdir(f"{name}/b//") == 0 and (w / "b").is_dir()           # trailing slashes
    assert guest.mkdir(f"{name}//c", 0o1777 | 0o170000) == 0                 # only the mode bits
    assert stat.S_IMODE((w / "c").stat().st_mode) == 0o1777
    assert guest.mkdir(f"{name}/missing/x") == -errno.ENOENT
    assert guest.mkdir("in.txt/x") == -errno.ENOTDIR
    # A file made through a remote dirfd
    a = guest.open(f"{name}/a", os.O_RDONLY | os.O_DIRECTORY)
    b = guest.open(f"{name}/b", os.O_RDONLY | os.O_DIRECTORY)
    f = guest.open("f.txt", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600, dirfd=a)
    assert f >= 0
    guest.put(0x2000, b"file f\n")
    assert guest.write(f, [(0x2000, 7)]) == 7 and guest.call(NR_CLOSE, f)[0] == 0
    assert (w / "a" / "f.txt").read_text() == "file f\n"
    assert guest.mkdir("inner", dirfd=a) == 0 and (w / "a" / "inner").is_dir()
    assert guest.mkdir("x", dirfd=guest.open("in.txt")) == -errno.ENOTDIR
    # Renames: by path, and between remote dirfds
    assert guest.rename(f"{name}/a/f.txt", f"{name}/b/g.txt") == 0
    assert not (w / "a" / "f.txt").exists() and (w / "b" / "g.txt").read_text() == "file f\n"
    assert guest.rename("g.txt", "h.txt", olddirfd=b, newdirfd=a) == 0
    assert (w / "a" / "h.txt").read_text() == "file f\n"
    assert guest.rename("h.txt", "missing/h.txt", olddirfd=a) == -errno.ENOENT
    assert guest.rename("nothing", "x", olddirfd=a) == -errno.ENOENT
    (w / "b" / "other.txt").write_text("other\n")
    _own(w / "b" / "other.txt")
    assert guest.rename(f"{name}/a/h.txt", f"{name}/b/other.txt", RENAME_NOREPLACE) == -errno.EEXIST
    assert (w / "a" / "h.txt").read_text() == "file f\n"
    assert guest.rename(f"{name}/a/h.txt", f"{name}/b/other.txt", RENAME_EXCHANGE) == 0
    assert (w / "a" / "h.txt").read_text() == "other\n" and (w / "b" / "other.txt").read_text() == "file f\n"
    assert guest.rename(f"{name}/a/h.txt", f"{name}/b/none", RENAME_EXCHANGE) == -errno.ENOENT
    assert guest.rename(f"{name}/a/h.txt", f"{name}/b/h2.txt", RENAME_NOREPLACE) == 0
    assert guest.rename(f"{name}/b/h2.txt", f"{name}/b/other.txt") == 0  # replaces
    assert sorted(p.name for p in (w / "b").iterdir()) == ["other.txt"]
    # Trailing slashes name directories
    assert guest.rename(f"{name}/c/", f"{name}/d/") == 0 and (w / "d").is_dir()
    assert guest.rename(f"{name}/b/other.txt/", f"{name}/x") == -errno.ENOTDIR
    assert guest.rename(f"{name}/b/other.txt", f"{name}/x/") == -errno.ENOTDIR
    assert guest.rename(f"{name}/d", f"{name}/b/other.txt/", RENAME_EXCHANGE) == -errno.ENOTDIR
    assert guest.rename(f"{name}/d", f"{name}/b/other.txt") == -errno.ENOTDIR  # the kernel's answer
    # unlink and rmdir
    assert guest.unlink(f"{name}/b/other.txt/") == -errno.ENOTDIR
    assert guest.unlink(f"{name}/d/") == -errno.EISDIR
    assert guest.unlink(f"{name}/d") == -errno.EISDIR
    assert guest.unlink(f"{name}/b/nothing") == -errno.ENOENT
    assert guest.rmdir(f"{name}/b") == -errno.ENOTEMPTY
    assert guest.rmdir(f"{name}/b/other.txt") == -errno.ENOTDIR
    assert guest.unlink(f"{name}/b/other.txt", 0x100) == -errno.EINVAL
    assert guest.unlink(f"{name}/b/other.txt", 1 << 40) == -errno.EINVAL
    assert guest.unlink("other.txt", dirfd=b) == 0
    assert guest.rmdir(f"{name}/b/") == 0 and not (w / "b").exists()
    assert guest.rmdir("inner", dirfd=a) == 0
    assert guest.unlink(f"{name}/d", AT_REMOVEDIR) == 0
    # The fifo and a symlink to /etc as the last component: the entries themselves go
    os.mkfifo(w / "fifo")
    (w / "etc-link").symlink_to("/etc")
    _own(w / "fifo", w / "etc-link")
    assert guest.rmdir(f"{name}/etc-link") == -errno.ENOTDIR
    assert guest.unlink(f"{name}/etc-link/") == -errno.ENOTDIR
    assert guest.unlink(f"{name}/etc-link") == 0 and not (w / "etc-link").is_symlink()
    assert guest.unlink(f"{name}/fifo") == 0
    assert Path("/etc/passwd").exists()
    for x in (a, b):
        assert guest.call(NR_CLOSE, x)[0] == 0
    assert sorted(p.name for p in w.iterdir()) == ["a"]


def test_rename_a_symlink(shadow, guest, work):
    """A symlink is renamed itself (Landlock counts that as making one: the
    shadow has that right, while seccomp refuses symlinkat)."""
    name, w = work
    (w / "link").symlink_to("/etc")
    _own(w / "link")
    assert guest.rename(f"{name}/link", f"{name}/link2") == 0
    assert os.readlink(w / "link2") == "/etc"


def test_ftruncate_fsync_fdatasync(guest, work):
    name, w = work
    fd = guest.open(f"{name}/t.bin", os.O_CREAT | os.O_RDWR, 0o644)
    assert guest.call(NR_FTRUNCATE, fd, 12345)[0] == 0
    st = guest.stat(NR_FSTAT, fd)
    assert not isinstance(st, int) and st.st_size == 12345
    assert (w / "t.bin").stat().st_size == 12345
    guest.put(0x4000, b"xyz")
    assert guest.write(fd, [(0x4000, 3)], op=NR_PWRITE64, pos=10) == 3
    assert guest.call(NR_FTRUNCATE, fd, 11)[0] == 0
    assert (w / "t.bin").read_bytes() == bytes(10) + b"x"
    assert guest.call(NR_FTRUNCATE, fd, -1)[0] == -errno.EINVAL
    assert guest.call(NR_FTRUNCATE, fd, -(1 << 63))[0] == -errno.EINVAL
    assert guest.call(NR_FSYNC, fd)[0] == 0
    assert guest.call(NR_FDATASYNC, fd)[0] == 0
    ro = guest.open(f"{name}/t.bin")
    assert guest.call(NR_FTRUNCATE, ro, 0)[0] == -errno.EINVAL  # not open for writing
    dfd = guest.open(name, os.O_RDONLY | os.O_DIRECTORY)
    assert guest.call(NR_FTRUNCATE, dfd, 0)[0] == -errno.EINVAL
    assert guest.call(NR_FSYNC, dfd)[0] == 0
    for op in (NR_FSYNC, NR_FDATASYNC, NR_FTRUNCATE):
        assert guest.call(op, 9999, 0)[0] == -errno.EBADF
        assert guest.call(op, -1, 0)[0] == -errno.EBADF
    for x in (fd, ro, dfd):
        assert guest.call(NR_CLOSE, x)[0] == 0
    assert (w / "t.bin").stat().st_size == 11


def _same_statx(stx: tuple[int, ...] | int, path: Path, follow: bool = True) -> bool:
    assert not isinstance(stx, int), f"statx failed: {stx}"
    want = path.stat() if follow else path.lstat()
    mask, _, _, nlink, uid, gid, mode, _, ino, size = stx[:10]
    dev_major, dev_minor = stx[-2:]
    assert mask & STATX_BASIC_STATS == STATX_BASIC_STATS
    return (ino, mode, size, nlink, uid, gid, os.makedev(dev_major, dev_minor)) == \
        (want.st_ino, want.st_mode, want.st_size, want.st_nlink, want.st_uid, want.st_gid, want.st_dev)


def test_statx(base, guest):
    d = base / "dir"
    assert _same_statx(guest.statx("in.txt"), d / "in.txt")
    assert _same_statx(guest.statx("sub/deep.txt", AT_STATX_FORCE_SYNC), d / "sub" / "deep.txt")
    assert _same_statx(guest.statx("sub/", AT_STATX_DONT_SYNC), d / "sub")
    assert _same_statx(guest.statx("inside-link"), d / "in.txt")
    assert _same_statx(guest.statx("inside-link", AT_SYMLINK_NOFOLLOW), d / "inside-link", follow=False)
    assert _same_statx(guest.statx("escape-link", AT_SYMLINK_NOFOLLOW), d / "escape-link", follow=False)
    assert _same_statx(guest.statx("", AT_EMPTY_PATH), d)
    assert _same_statx(guest.statx("."), d)
    fd = guest.open("in.txt")
    sub = guest.open("sub", os.O_RDONLY | os.O_DIRECTORY)
    assert _same_statx(guest.statx("", AT_EMPTY_PATH, dirfd=fd), d / "in.txt")
    assert _same_statx(guest.statx("deep.txt", dirfd=sub), d / "sub" / "deep.txt")
    # A smaller mask: the kernel may give more, never less
    stx = guest.statx("in.txt", mask=0x200)  # STATX_SIZE
    assert not isinstance(stx, int) and stx[0] & 0x200 and stx[9] == (d / "in.txt").stat().st_size
    # Refused
    assert guest.statx("") == -errno.ENOENT
    assert guest.statx("missing") == -errno.ENOENT
    assert guest.statx("in.txt/") == -errno.ENOTDIR
    assert guest.statx("in.txt", 0x8000) == -errno.EINVAL
    assert guest.statx("in.txt", 1 << 40) == -errno.EINVAL
    assert guest.statx("in.txt", AT_STATX_FORCE_SYNC | AT_STATX_DONT_SYNC) == -errno.EINVAL
    assert guest.statx("in.txt", mask=0x80000000) == -errno.EINVAL  # STATX__RESERVED
    assert guest.statx("in.txt", dirfd=9999) == -errno.EBADF
    assert guest.statx("x", dirfd=fd) == -errno.ENOTDIR
    for x in (fd, sub):
        assert guest.call(NR_CLOSE, x)[0] == 0


def _escape_matrix(g: Guest, name: str) -> dict[str, tuple[int, int]]:
    """name -> (answer, expected -errno) for path operations that would
    leave DIR, or that name "." or ".." last."""
    w = f"{name}/file"
    sub = g.open("sub", os.O_RDONLY | os.O_DIRECTORY)
    assert sub >= 0
    escapes = ["../x", "../outside.txt", "/", "/tmp/ukl-shadow-escape", "/etc/passwd", "escape-link/x",
               "escape-link/passwd", "outside-link/x", "sub/../../x", "sub/../../dir/in.txt",
               "sub/./../../x", f"{name}/../../x"]
    m: dict[str, tuple[int, int]] = {}

    def statx(p: str) -> int:
        ret = g.statx(p)
        return 0 if isinstance(ret, tuple) else ret

    for p in escapes:
        m[f"mkdir {p}"] = (g.mkdir(p), -errno.EXDEV)
        m[f"unlink {p}"] = (g.unlink(p), -errno.EXDEV)
        m[f"rmdir {p}"] = (g.rmdir(p), -errno.EXDEV)
        m[f"statx {p}"] = (statx(p), -errno.EXDEV)
        m[f"rename {w} to {p}"] = (g.rename(w, p), -errno.EXDEV)
        m[f"rename {p} to {w}2"] = (g.rename(p, f"{w}2"), -errno.EXDEV)
        m[f"exchange {w} with {p}"] = (g.rename(w, p, RENAME_EXCHANGE), -errno.EXDEV)
    for p in ["../../x", "../../outside.txt", "../../dir", "/x", "../escape-link/x"]:
        m[f"mkdir {p} in sub"] = (g.mkdir(p, dirfd=sub), -errno.EXDEV)
        m[f"unlink {p} in sub"] = (g.unlink(p, dirfd=sub), -errno.EXDEV)
        m[f"rename {p} in sub"] = (g.rename("deep.txt", p, olddirfd=sub, newdirfd=sub), -errno.EXDEV)
    m["statx escape-link"] = (statx("escape-link"), -errno.EXDEV)
    m["statx .."] = (statx(".."), -errno.EXDEV)
    m["statx magic link"] = (statx("/proc/self/fd/0"), -errno.EXDEV)
    # "." and ".." as the last component, with what Linux answers
    for p, in_sub in [(".", "sub/."), ("..", "sub/.."), (f"{name}/..", f"{name}/./..")]:
        for q in (p, in_sub):
            last = q.rsplit("/", 1)[-1]
            m[f"mkdir {q}"] = (g.mkdir(q), -errno.EEXIST)
            m[f"rmdir {q}"] = (g.rmdir(q), -errno.EINVAL if last == "." else -errno.ENOTEMPTY)
            m[f"unlink {q}"] = (g.unlink(q), -errno.EISDIR)
            m[f"rename {q}"] = (g.rename(q, f"{name}/moved"), -errno.EBUSY)
            m[f"rename to {q}"] = (g.rename(w, q), -errno.EBUSY)
            m[f"rename to {q} noreplace"] = (g.rename(w, q, RENAME_NOREPLACE), -errno.EEXIST)
            m[f"exchange with {q}"] = (g.rename(w, q, RENAME_EXCHANGE), -errno.EBUSY)
    m["mkdir ."] = (g.mkdir("."), -errno.EEXIST)
    m["rmdir . in sub"] = (g.rmdir(".", dirfd=sub), -errno.EINVAL)
    m["rmdir .. in sub"] = (g.rmdir("..", dirfd=sub), -errno.ENOTEMPTY)
    for op in ("mkdir", "unlink", "rmdir"):
        m[f"{op} ''"] = (getattr(g, op)(""), -errno.ENOENT)
    m["rename ''"] = (g.rename("", w), -errno.ENOENT)
    m["rename to ''"] = (g.rename(w, ""), -errno.ENOENT)
    assert g.call(NR_CLOSE, sub)[0] == 0
    return m


def test_path_operations_stay_beneath_dir(base, shadow, guest, work):
    name, w = work
    (w / "file").write_text("mine\n")
    _own(w / "file")
    outside = sorted(p.name for p in base.iterdir())
    inside = sorted(p.name for p in (base / "dir").iterdir())
    for what, (got, want) in _escape_matrix(guest, name).items():
        assert (what, got) == (what, want)
    assert guest.null() == -errno.ENOSYS and shadow.alive()
    assert sorted(p.name for p in base.iterdir()) == outside
    assert sorted(p.name for p in (base / "dir").iterdir()) == inside
    assert sorted(p.name for p in w.iterdir()) == ["file"] and (w / "file").read_text() == "mine\n"
    assert (base / "outside.txt").read_text() == "outside\n"
    assert not Path("/tmp/ukl-shadow-escape").exists() and Path("/etc/passwd").is_file()
    # A symlink to a directory inside DIR may be a parent
    (w / "to-sub").symlink_to("../sub")
    _own(w / "to-sub")
    assert guest.mkdir(f"{name}/to-sub/new") == 0 and (base / "dir" / "sub" / "new").is_dir()
    assert guest.rename(f"{name}/to-sub/new", f"{name}/new") == 0 and (w / "new").is_dir()
    assert _same_statx(guest.statx(f"{name}/to-sub/deep.txt"), base / "dir" / "sub" / "deep.txt")
    assert guest.rmdir(f"{name}/new") == 0


def test_malformed_renameat2(base, guest, work):
    name, w = work
    (w / "a").write_text("a\n")
    _own(w / "a")
    old, new = f"{name}/a".encode(), f"{name}/b".encode()
    good = old + b"\0" + new + b"\0"
    n = len(good)

    def rename(data: bytes, off: int, flags: int = 0, inline_len: int | None = None,
               olddirfd: int = AT_FDCWD, newdirfd: int = AT_FDCWD) -> int:
        return guest.call(NR_RENAMEAT2, olddirfd, off, newdirfd, 0, flags, path=data, inline_len=inline_len)[0]

    bad = {
        "offset 0": (rename(good, 0), -errno.EFAULT),
        "offset -1": (rename(good, -1), -errno.EFAULT),
        "offset -2^63": (rename(good, -(1 << 63)), -errno.EFAULT),
        "offset = inline_len": (rename(good, n), -errno.EFAULT),
        "offset past inline_len": (rename(good, n + 1), -errno.EFAULT),
        "offset 2^40": (rename(good, 1 << 40), -errno.EFAULT),
        "offset into oldpath": (rename(good, 3), -errno.EFAULT),
        "offset one past the NUL": (rename(good, len(old) + 2), -errno.EFAULT),
        "a NUL inside oldpath": (rename(old + b"\0x\0" + new + b"\0", len(old) + 3), -errno.EFAULT),
        "a NUL inside newpath": (rename(old + b"\0" + new + b"\0x\0", len(old) + 1), -errno.EFAULT),
        "no NUL at the end": (rename(old + b"\0" + new, len(old) + 1), -errno.EFAULT),
        "offset at the last NUL": (rename(good, n - 1), -errno.EFAULT),
        "inline_len 0": (rename(good, len(old) + 1, inline_len=0), -errno.EFAULT),
        "inline_len too short": (rename(good, len(old) + 1, inline_len=n - 1), -errno.EFAULT),
        "inline_len too long": (rename(good, len(old) + 1, inline_len=remote.SLOT_INLINE + 1),
                                -errno.ENAMETOOLONG),
        "inline_len huge": (rename(good, len(old) + 1, inline_len=0xFFFFFFFF), -errno.ENAMETOOLONG),
        "RENAME_WHITEOUT": (rename(good, len(old) + 1, RENAME_WHITEOUT), -errno.EINVAL),
        "NOREPLACE|EXCHANGE": (rename(good, len(old) + 1, RENAME_NOREPLACE | RENAME_EXCHANGE), -errno.EINVAL),
        "flags 2^40": (rename(good, len(old) + 1, 1 << 40), -errno.EINVAL),
        "flags -1": (rename(good, len(old) + 1, -1), -errno.EINVAL),
        "bad olddirfd": (rename(good, len(old) + 1, olddirfd=9999), -errno.EBADF),
        "bad newdirfd": (rename(good, len(old) + 1, newdirfd=-5), -errno.EBADF),
        "empty oldpath": (rename(b"\0" + new + b"\0", 1), -errno.ENOENT),
        "empty newpath": (rename(old + b"\0\0", len(old) + 1), -errno.ENOENT),
    }
    for what, (got, want) in bad.items():
        assert (what, got) == (what, want)
        assert guest.null() == -errno.ENOSYS, what
    assert sorted(p.name for p in w.iterdir()) == ["a"]
    # And the same request, well formed, in the largest slot data there is
    pad = b"./" * ((remote.SLOT_INLINE - n) // 4)
    data = pad + old + b"\0" + pad + new + b"\0"
    assert rename(data, len(pad) + len(old) + 1) == 0
    assert sorted(p.name for p in w.iterdir()) == ["b"]


def test_bad_path_requests_of_the_new_calls(guest):
    for op, args in [(NR_MKDIRAT, (AT_FDCWD, 0, 0o755)), (NR_UNLINKAT, (AT_FDCWD, 0, 0)),
                     (NR_STATX, (AT_FDCWD, 0, 0, STATX_BASIC_STATS))]:
        assert guest.call(op, *args, path=b"x")[0] == -errno.EFAULT
        assert guest.call(op, *args, path=b"x\0y\0")[0] == -errno.EFAULT
        assert guest.call(op, *args, path="x", inline_len=0)[0] == -errno.EFAULT
        assert guest.call(op, *args, path="x", inline_len=remote.SLOT_INLINE + 1)[0] == -errno.ENAMETOOLONG
        assert guest.call(op, 9999, *args[1:], path="x")[0] == -errno.EBADF
    assert guest.mkdir("a" * 300) == -errno.ENAMETOOLONG
    long_path = "/".join(["sub"] * 1500)[:remote.SLOT_INLINE - 1]
    assert len(long_path.encode()) + 1 == remote.SLOT_INLINE
    assert guest.mkdir(long_path) in (-errno.ENAMETOOLONG, -errno.ENOENT)


def test_sigterm_reports_statistics(base, tmp_path):
    log = base / "stats.log"
    with remote.Shadow(base / "dir", 2 * MIB, log, idle_us=-1) as sh:
        g = Guest(sh)
        fd = g.open("s.bin", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o600)   # 6 inline bytes in
        assert g.write(fd, [(0x1000, 1000), (0x8000, 234)]) == 1234
        assert g.read(fd, [(0x1000, 1000)], op=NR_PREAD64, pos=0) == 1000
        assert g.stat(NR_FSTAT, fd).st_size == 1234                          # 144 out
        assert g.read(fd, [(0x1000, 16)], op=NR_PREAD64, pos=1 << 40) == 0  # EOF: no bytes
        assert g.read(9999, [(0x1000, 16)]) == -errno.EBADF
        g.close()
        pid = sh.pid
    assert not sh.alive() and sh.proc is not None and sh.proc.returncode == 0
    assert sh.exit_description() == "exit 0"
    assert not Path(f"/proc/{pid}").exists()
    text = log.read_text()
    assert "ukl-shadow: calls=6 zero-copy=2234 inline=150\n" in text
    stats = remote.parse_stats(text)
    assert stats["calls"] == 6 and stats["zero-copy"] == 2234 and stats["inline"] == 150
    assert 0 < stats["rss-anon-kb"] < 16 * 1024 and stats["vm-rss-kb"] > 0
    assert sh.stop() == stats  # again: nothing more


def _gone(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return any(line.split()[1] in ("Z", "X") for line in text.splitlines() if line.startswith("State:"))


def test_the_shadow_dies_with_its_parent(base):
    helper = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO / "tools")!r})
        from pathlib import Path
        from ukltool.run import remote
        sh = remote.Shadow(Path({str(base / "dir")!r}), 1 << 20, Path({str(base / "orphan.log")!r}))
        sh.start()
        print(sh.pid, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", helper], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        assert not _gone(pid)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while not _gone(pid):
        assert time.monotonic() < deadline, f"the shadow {pid} outlived its parent"
        time.sleep(0.01)


def test_the_shadow_refuses_a_parent_that_is_not_its_own(base, tmp_path):
    exe = remote.build_shadow()
    ram = os.memfd_create("ram")
    ring = os.memfd_create("ring")
    os.ftruncate(ram, MIB)
    os.ftruncate(ring, remote.RING_SIZE)
    try:
        res = subprocess.run([exe, "--ram-fd", str(ram), "--ram-size", str(MIB), "--below-4g", str(MIB),
                              "--ring-fd", str(ring), "--dir", str(base / "dir"), "--parent", "1"],
                             pass_fds=(ram, ring), capture_output=True, text=True, timeout=10)
        assert res.returncode == 1 and res.stdout == ""
        assert "the parent process 1 is gone" in res.stderr
        # A ring of the wrong size
        os.ftruncate(ring, 4096)
        res = subprocess.run([exe, "--ram-fd", str(ram), "--ram-size", str(MIB), "--below-4g", str(MIB),
                              "--ring-fd", str(ring), "--dir", str(base / "dir"), "--parent", str(os.getpid())],
                             pass_fds=(ram, ring), capture_output=True, text=True, timeout=10)
        assert res.returncode == 1 and "not 1048576" in res.stderr
    finally:
        os.close(ram)
        os.close(ring)


def test_startup_failures_are_uklerrors(base, tmp_path):
    with pytest.raises(UklError, match="does not exist"):
        remote.Shadow(base / "missing", MIB, tmp_path / "l.log").start()
    with pytest.raises(UklError, match="not a directory"):
        remote.Shadow(base / "dir" / "in.txt", MIB, tmp_path / "l.log").start()
    if AS_ROOT:
        root_owned = tmp_path / "root-owned"
        root_owned.mkdir()
        with pytest.raises(UklError, match="owned by root") as e:
            remote.Shadow(root_owned, MIB, tmp_path / "l.log").start()
        assert e.value.hint and "chown" in e.value.hint
    # The shadow itself refuses (below_4g > RAM): the error names its log
    log = tmp_path / "bad.log"
    sh = remote.Shadow(base / "dir", MIB, log, below_4g_bytes=2 * MIB)
    with pytest.raises(UklError, match="failed to start") as e:
        sh.start()
    assert str(log) in e.value.message and "bad RAM geometry" in e.value.message
    assert sh.ram_fd == -1 and not sh.alive()


def test_qemu_arguments(shadow):
    args = shadow.qemu_args()
    sock = shadow.qemu_sock.fileno()
    assert args == [
        "-object", f"memory-backend-file,id=ukl-ram,size={RAM},mem-path=/proc/self/fd/{shadow.ram_fd},share=on",
        "-chardev", f"socket,id=ukl-ring,fd={sock}",
        "-device", "ivshmem-doorbell,chardev=ukl-ring,vectors=1"]
    assert shadow.pass_fds() == (shadow.ram_fd, sock)
    assert remote.Shadow.machine_suffix == ",memory-backend=ukl-ram"
    # Sealed: nobody can shrink guest RAM under a mapping
    with pytest.raises(OSError):
        os.ftruncate(shadow.ram_fd, MIB)
    assert os.fstat(shadow.ram_fd).st_size == RAM


def test_random_requests_never_crash_it(base):
    """Requests made of random and boundary values, in a DIR of their own."""
    d = base / "fuzz"
    d.mkdir()
    (d / "f1").write_bytes(bytes(range(256)) * 64)
    if AS_ROOT:
        for p in (d, d / "f1"):
            os.chown(p, NOBODY, NOBODY)
    rng = random.Random(15)
    ops = [remote.ROP_NULL, remote.ROP_HELLO, NR_OPENAT, NR_CLOSE, NR_READ, NR_WRITE, NR_PREAD64, NR_PWRITE64,
           NR_LSEEK, NR_FSTAT, NR_NEWFSTATAT, NR_GETDENTS64, NR_MKDIRAT, NR_UNLINKAT, NR_RENAMEAT2, NR_FSYNC,
           NR_FDATASYNC, NR_FTRUNCATE, NR_STATX]

    def num() -> int:
        return rng.choice([0, 1, 2, 3, -1, AT_FDCWD, 9999, remote.RFD_MAX, 1 << 31, -(1 << 63), (1 << 63) - 1,
                           rng.randrange(-(1 << 63), 1 << 63), rng.randrange(0, 0x10000)])

    def addr() -> int:
        return rng.choice([rng.randrange(0, 2 * MIB), 2 * MIB - 8, 2 * MIB, HIGH, (1 << 64) - 4096,
                           rng.randrange(0, 1 << 64)])

    with remote.Shadow(d, 2 * MIB, base / "fuzz.log") as sh:
        g = Guest(sh)
        for _ in range(3000):
            op = rng.choice(ops) if rng.random() < 0.9 else rng.randrange(0, 1 << 32)
            segs = [(addr(), rng.choice([1, 16, 4096, rng.randrange(0, 1 << 64)])) for _ in range(rng.randrange(4))]
            count = sum(n for _, n in segs) % (1 << 64) if rng.random() < 0.7 else num()
            args = [num(), 0, count if op in (NR_READ, NR_WRITE, NR_PREAD64, NR_PWRITE64) else num(), num()]
            path = rng.choice([b"f1\0", b"\0", b"", b"new\0", b"../f1\0", b"f1", bytes(rng.randrange(256)
                               for _ in range(rng.randrange(1, 40)))])
            nsegs = rng.choice([None, None, None, remote.SLOT_SEGS, remote.SLOT_SEGS + 1, rng.randrange(1 << 32)])
            inline_len = rng.choice([None, None, 0, remote.SLOT_INLINE, remote.SLOT_INLINE + 1,
                                     rng.randrange(1 << 32)])
            ret, _ = g.call(op, *[a if -(1 << 63) <= a < 1 << 63 else a - (1 << 64) for a in args], segs=segs,
                            path=path, nsegs=nsegs, inline_len=inline_len)
            assert ret >= -4095
        assert g.null() == -errno.ENOSYS
        g.close()
        assert sh.alive(), sh.log.read_text()
    assert sh.proc is not None and sh.proc.returncode == 0, sh.log.read_text()
    assert sh.stats["calls"] == 3001


def test_ivshmem_handshake(shadow):
    """What QEMU's ivshmem-doorbell reads from its server: the protocol
    version, its own peer ID, the ring's memory, then one eventfd for the
    host (peer 1, which the guest's doorbell rings) and its own (peer 0,
    the guest's interrupt)."""
    msgs = shadow.test_handshake
    assert [v for v, _ in msgs] == [0, 0, -1, 1, 0]
    assert [fd is None for _, fd in msgs] == [True, True, False, False, False]
    ring = os.fstat(msgs[2][1])
    assert (ring.st_ino, ring.st_dev) == (os.fstat(shadow.ring_fd).st_ino, os.fstat(shadow.ring_fd).st_dev)
    for _, fd in msgs[3:]:
        assert os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]"


def _readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_it_sleeps_until_the_doorbell_and_interrupts_a_sleeper(shadow, guest):
    """Idle, the shadow sets host_asleep and waits on its eventfd; a request
    that asks for an interrupt (SLOT_IRQ) is answered with one on the
    guest's eventfd, a polling request without."""
    guest_efd = shadow.test_efds[0]
    while _readable(guest_efd, 0):
        os.eventfd_read(guest_efd)
    deadline = time.monotonic() + 5
    while not remote.RingHdr.from_buffer_copy(guest.ring, 0).host_asleep:
        assert time.monotonic() < deadline, "the shadow never went to sleep"
        time.sleep(0.001)
    beat = remote.RingHdr.from_buffer_copy(guest.ring, 0).heartbeat
    time.sleep(0.03)  # asleep: its loop does not turn (it looks every 100 ms)
    assert remote.RingHdr.from_buffer_copy(guest.ring, 0).heartbeat - beat <= 1
    assert guest.call(remote.ROP_NULL, flags=remote.SLOT_IRQ)[0] == -errno.ENOSYS
    assert _readable(guest_efd, 5) and os.eventfd_read(guest_efd) == 1
    assert guest.call(remote.ROP_NULL)[0] == -errno.ENOSYS
    assert not _readable(guest_efd, 0.05)
    # Right after answering a sleeper it sleeps again at once; a polling
    # request keeps it awake (polling) for --idle-us
    assert guest.call(remote.ROP_NULL, flags=remote.SLOT_IRQ)[0] == -errno.ENOSYS
    os.eventfd_read(guest_efd)
    deadline = time.monotonic() + 0.5
    while not remote.RingHdr.from_buffer_copy(guest.ring, 0).host_asleep:
        assert time.monotonic() < deadline, "the shadow did not sleep after answering a sleeper"
        time.sleep(0.0005)


def test_notify_irq_is_in_the_header(base, tmp_path):
    with remote.Shadow(base / "dir", RAM, tmp_path / "s.log", below_4g_bytes=LOW, notify="irq") as sh:
        ring = mmap.mmap(sh.ring_fd, remote.RING_SIZE)
        assert remote.RingHdr.from_buffer_copy(ring, 0).notify == remote.NOTIFY_IRQ
        ring.close()
    with pytest.raises(UklError, match="remote-notify"):
        remote.Shadow(base / "dir", RAM, tmp_path / "s.log", notify="sometimes")
