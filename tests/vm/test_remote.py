"""Remote system calls (runtime/ukl.h ukl_remote_*, `ukl run --remote DIR`,
Documentation/x86/ukl-remote.rst): a UKL application creates, writes, reads and
stats files in a host directory through the shadow process, from buffers on
its stack, heap, data and constants, and the test checks the bytes on the
host; it cannot leave the directory (.., absolute paths, symlinks), a FIFO
is refused, local descriptors stay local; a 64 MiB read moves through
guest RAM, not the ring (the shadow's zero-copy count); a process killed in
the middle of its remote calls leaves a ring the next one can use; an
ordinary process in the same guest, and a program on Linux, get ENOSYS.
Threads wait for the host spinning or asleep until its interrupt: on base
the first runs poll and the second sleeps (ukl_remote_irq()); on base-debug
every run sleeps (--remote-notify irq), so lockdep sees the sleeping path.
One boot per configuration, under the normal and the debug kernel."""

from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, assert_clean, build, ukl

SRC = REPO / "tests" / "apps" / "remote.c"
SRC_LINUX = REPO / "tests" / "apps" / "remote_linux.c"
MIB = 1 << 20
BIG = 64 * MIB
NOBODY = 65534
IN_TXT = "first line\nsecond line\n"
RODATA = b"constant bytes from the image\n"


def pattern(n: int, seed: int) -> bytes:
    return bytes((seed + i * 7 + (i >> 12)) & 0xFF for i in range(n))


def expected_w_bin() -> bytes:
    data = pattern(MIB, 1) + pattern(MIB, 2) + pattern(4096, 3) + RODATA
    return b"HEAD" + data[4:]


FILES = [
    "on before enable: -1 Operation not permitted", "enable: 0", "enable again: 0", "on: 0",
    "printf while on reaches the console",
    "open w.bin: remote fd", f"write bss: {MIB}", f"write heap: {MIB}", "write stack: 4096",
    f"write rodata: {len(RODATA)}", "pwrite at 0: 4", "read a write-only fd: -1 Bad file descriptor",
    "write from a kernel address: -1 Bad address", "write from NULL: -1 Bad address",
    "close: 0", "close again: -1 Bad file descriptor",
    "open w.bin again: remote fd", "fstat: 0", f"size: {2 * MIB + 4096 + len(RODATA)} mode: 640",
    f"lseek end: {2 * MIB + 4096 + len(RODATA)}", "lseek 4: 4",
    f"read into bss: {MIB - 4}", f"read into heap: {MIB}", "pread into stack: 4096",
    "bss same: 1 heap same: 1 stack same: 1",
    f"lseek past the stack's bytes: {2 * MIB + 4096}", f"read the rest: {len(RODATA)}",
    "the rest is the constant: 1", "read at the end: 0", "read into rodata: -1 Bad address", "close: 0",
    "fopen in.txt: ok", "in.txt: first line", "in.txt: second line",
    "stat in.txt: 0", f"in.txt size: {len(IN_TXT)}",
    "lstat inside-link: 0", "inside-link is a symlink: 1", "open inside-link: remote fd",
    "open sub: remote fd", "openat sub deep.txt: remote fd", "read deep.txt: 5", "fstatat sub deep.txt: 0",
    "openat sub ../in.txt: remote fd",
    "openat sub ../../outside.txt: -1 Invalid cross-device link",
    "open ../outside.txt: -1 Invalid cross-device link", "open /etc/passwd: -1 Invalid cross-device link",
    "open escape-link/passwd: -1 Invalid cross-device link",
    "stat escape-link/passwd: -1 Invalid cross-device link",
    "open fifo: -1 No such device or address", "open missing: -1 No such file or directory",
    "off: 0", "open w.bin while off: -1 No such file or directory",
    "open /proc/self/stat while off: local fd", "read a remote fd while off: 5",
    "dup a remote fd: -1 Bad file descriptor", "disable: 0",
    "read a remote fd after disable: -1 Bad file descriptor", "enable again: 0",
    "read a remote fd after enable: 5", "close: 0", "byp while enabled: 0",
]

DIR_LIST = "big.bin escape-link fifo in.txt inside-link sub w.bin"
XDEV = "-1 Invalid cross-device link"
TREE = [
    "enable: 0", "on: 0", "local thread: open in.txt: -1 No such file or directory",
    "local thread: open /proc/self/status: local fd", "local thread: null: -1 Operation not permitted",
    "main thread: open in.txt: remote fd", f"list .: {DIR_LIST}",
    "mkdir made: 0", "mkdir made again: -1 File exists", "openat made v.txt: remote fd",
    "writev: 6", "lseek 0: 0", "readv: 6", "readv got: abc|def", "ftruncate 3: 0", "fsync: 0",
    "fdatasync: 0", "fstat: 0", "size after ftruncate: 3", "close: 0", "statx made/v.txt: 0",
    "statx size: 3 mode: 644", "statx through dirfd: 0", "mkdirat made/sub: 0", "list made: sub v.txt",
    "rename made/v.txt made/w.txt: 0", "renameat2 noreplace onto in.txt: -1 File exists",
    "renameat2 exchange: 0", "renameat2 exchange back: 0", f"rename to ../escaped: {XDEV}",
    f"rename to a local directory: {XDEV}", "list made: sub w.txt",
    "rmdir made (not empty): -1 Directory not empty", "unlink made/w.txt: 0", "unlinkat made/sub: 0",
    "close made: 0", "rmdir made: 0", f"unlink ../outside.txt: {XDEV}",
    f"unlink escape-link/passwd: {XDEV}", f"mkdir /tmp/x: {XDEV}", f"list .: {DIR_LIST}",
    "off: 0", "mkdir local-dir while off: 0", "rmdir local-dir while off: 0",
]


def app_lines(stdout: str, first: str) -> list[str]:
    """The application's lines from FIRST on, up to the next run's first"""
    lines = [line for line in stdout.splitlines() if not line.startswith(("ukl:", "ukl-init:", "["))]
    return lines[lines.index(first):] if first in lines else lines


def prepare(tmp: Path) -> Path:
    """DIR and what sits around it, owned by nobody as the shadow will run"""
    top = tmp / "remote-top"
    top.mkdir(mode=0o755)
    os.chmod(tmp, 0o755)
    d = top / "dir"
    (d / "sub").mkdir(parents=True)
    (d / "in.txt").write_text(IN_TXT)
    (d / "sub" / "deep.txt").write_text("deep\n")
    with open(d / "big.bin", "wb") as f:
        for base in range(0, BIG // 8, 1 << 16):
            f.write(struct.pack(f"<{1 << 16}Q", *range(base, base + (1 << 16))))
    (d / "inside-link").symlink_to("in.txt")
    (d / "escape-link").symlink_to("/etc")
    os.mkfifo(d / "fifo")
    (top / "outside.txt").write_text("outside\n")
    if os.geteuid() == 0:
        for p in [d, *d.rglob("*")]:
            os.lchown(p, NOBODY, NOBODY)
    return d


@pytest.fixture(scope="module")
def ordinary(tmp_path_factory):
    """remote.c as an ordinary static program, for the ring-3 side"""
    out = tmp_path_factory.mktemp("remote") / "remote3"
    cc = shutil.which("gcc") or "cc"
    subprocess.run([cc, "-static", "-O2", "-isystem", REPO / "runtime", SRC, "-o", out], check=True)
    return out


def test_a_program_on_linux_gets_enosys(ordinary):
    res = subprocess.run([ordinary, "enosys"], capture_output=True, text=True, check=True)
    nosys = "-1 Function not implemented"
    assert res.stdout.splitlines() == [f"enable: {nosys}", f"on: {nosys}", f"null: {nosys}"], res.stdout


@pytest.mark.parametrize("config,notify", [("base", "poll"), ("base-debug", "irq")])
def test_remote_files(outdir, tmp_path, ordinary, config, notify):
    image = build(SRC, config, outdir / f"remote-{config}", "--userspace", "--file", f"{ordinary}:/bin/remote3")
    d = prepare(tmp_path)
    outside = (d.parent / "outside.txt").read_bytes()
    sh = ("/bin/remote3 enosys; $UKL_APP files && $UKL_APP tree && $UKL_APP big && $UKL_APP time && "
          "{ $UKL_APP spin & p=$!; sleep 3; kill -9 $p; wait $p; echo killed=$?; } && "
          "echo second run && REMOTE_IRQ=1 $UKL_APP files && grep ukl-ring /proc/interrupts")
    res = ukl("run", image, "--remote", str(d), "--remote-notify", notify, "--timeout", "900", "--sh", sh)
    assert res.returncode == 0, res.stdout
    out = res.stdout
    nosys = "-1 Function not implemented"
    # A ring-3 process on the same kernel cannot reach the host
    assert [f"enable: {nosys}", f"on: {nosys}", f"null: {nosys}"] == app_lines(out, f"enable: {nosys}")[:3], out
    first = app_lines(out, FILES[0])
    assert first[:len(FILES)] == FILES, out
    assert first[len(FILES):len(FILES) + len(TREE)] == TREE, out
    assert "open big.bin: remote fd" in out and f"read big.bin: {BIG}" in out, out
    assert "big.bin words wrong: 0" in out, out
    assert "spinning" in out and "killed=137" in out, out
    # After a client was killed in the middle of its calls, the next one works
    second = app_lines(out, "second run")
    assert second[1:1 + len(FILES)] == FILES, out
    timing = re.search(r"^TIME null remote call (\d+) cycles, asleep (\d+) cycles, getppid (\d+) cycles",
                       out, re.M)
    assert timing, out
    # The ring's MSI-X vector, and the interrupts of the threads that slept
    irq = re.search(r"^\s*\d+:((?:\s+\d+)+)\s.*\bukl-ring$", out, re.M)
    assert irq and sum(map(int, irq[1].split())) > 0, out
    # The host's side of it
    assert (d / "w.bin").read_bytes() == expected_w_bin()
    if os.geteuid() == 0:
        assert (d / "w.bin").stat().st_uid == NOBODY  # the shadow ran as DIR's owner
    assert (d.parent / "outside.txt").read_bytes() == outside
    log = (image / "shadow.log").read_text()
    stats = dict(re.findall(r"(\S+)=(\d+)", log.split("ukl-shadow: calls=")[-1].splitlines()[0]))
    assert int(stats["zero-copy"]) >= BIG and int(stats["inline"]) < MIB, log
    rss = re.search(r"rss-anon-kb=(\d+)", log)
    assert rss and int(rss[1]) < 16 * 1024, log  # no private copy of what it moved
    assert_clean(image / "console.log")


def remote_linux_lines(stdout: str) -> list[str]:
    lines = app_lines(stdout, "remote-linux begin")
    return lines[:lines.index("remote-linux end") + 1] if "remote-linux end" in lines else lines


def test_remote_calls_answer_as_linux(outdir, tmp_path):
    """Issue 34: tests/apps/remote_linux.c on local files under linux, and on
    remote files under base, prints the same lines: every error and its
    order (bad buffers, vectors, offsets, whence, modes, directories, ".."
    from a subdirectory), and a read or write of several round trips goes
    on with its file while another thread closes the descriptor and opens
    another file under the same number. One boot per configuration."""
    linux = build(SRC_LINUX, "linux", outdir / "remote-linux-linux", "--userspace")
    res = ukl("run", linux, "--timeout", "300", "--sh", "$UKL_APP local")
    assert res.returncode == 0, res.stdout
    want = remote_linux_lines(res.stdout)
    assert want[-1:] == ["remote-linux end"], res.stdout
    assert "read race: 0 rounds wrong, fd reused: 1" in want and \
        "write race: 0 rounds wrong, fd reused: 1" in want, res.stdout
    image = build(SRC_LINUX, "base", outdir / "remote-linux-base", "--userspace")
    d = tmp_path / "dir"
    d.mkdir()
    os.chmod(tmp_path, 0o755)
    if os.geteuid() == 0:
        os.chown(d, NOBODY, NOBODY)
    res = ukl("run", image, "--remote", str(d), "--timeout", "300", "--sh", "$UKL_APP remote")
    assert res.returncode == 0, res.stdout
    assert remote_linux_lines(res.stdout) == want, res.stdout
    assert_clean(image / "console.log")


def test_remote_needs_a_directory(basics_linux, tmp_path):
    for bad in (tmp_path / "missing", Path("/etc/hostname")):
        res = ukl("run", basics_linux, "--remote", str(bad))
        assert res.returncode != 0 and "--remote" in res.stdout and "Traceback" not in res.stdout, res.stdout


def _shadow_pid(directory: Path) -> int | None:
    """The running ukl-shadow serving DIRECTORY."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].split(b"/")[-1].startswith(b"ukl-shadow") and str(directory).encode() in argv:
            return int(proc.name)
    return None


def test_the_vm_stops_when_the_shadow_dies(outdir, tmp_path):
    """The shadow killed under a running guest: `ukl run` stops the VM and
    exits 122, naming the shadow's log."""
    image = build(SRC, "base", outdir / "remote-shadow-dies", "--userspace")
    d = tmp_path / "dir"
    d.mkdir()
    os.chmod(tmp_path, 0o755)
    if os.geteuid() == 0:
        os.chown(d, NOBODY, NOBODY)
    (image / "console.log").unlink(missing_ok=True)
    run = subprocess.Popen([str(REPO / "ukl"), "run", str(image), "--remote", str(d), "--timeout", "600",
                            "--sh", "echo guest-is-up; sleep 600"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        console = image / "console.log"
        while not (console.is_file() and "guest-is-up" in console.read_text(errors="replace")):
            assert run.poll() is None and time.monotonic() < deadline, "the guest did not come up"
            time.sleep(0.5)
        pid = _shadow_pid(d)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        out, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 122, out
    assert "the remote shadow process ended" in out and "shadow.log" in out, out
