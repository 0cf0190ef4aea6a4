"""Booting an image in QEMU: accelerator choice, console capture, status,
timeouts and kernel-failure detection."""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import json
import os
import re
import select
import shlex
import signal
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ukltool.build import image, initramfs, protocol
from ukltool.linux import bzimage, kernel, profiles
from ukltool.run import cores, hosttsc, logscan, remote
from ukltool.util import ui
from ukltool.util.errors import UklError
from ukltool.util.paths import cache_dir
from ukltool.util.proc import capture, need_tool

EXIT_TIMEOUT = 124
EXIT_KERNEL_FAILURE = 125
EXIT_NO_STATUS = 123
EXIT_SHADOW_DIED = 122
DEBUG_EXIT = protocol.DEBUG_EXIT_DEVICE
INIT_MARKER = protocol.INIT_MARKER


@dataclass
class RunSpec:
    bzimage: Path
    initrds: list[Path]  # concatenated into the initramfs
    log: Path
    timeout: float = 120.0
    icount: bool = False
    append: list[str] = field(default_factory=list)
    forwards: list[tuple[int, int]] = field(default_factory=list)
    tap: str | None = None  # an existing tap device for eth0 instead of QEMU's user network
    smp: int = 2
    memory: str = "1G"
    verbose: bool = False
    interactive: bool = False
    show: bool = True  # stream the application's output to stdout
    accel: str | None = None  # None: detect
    plugins: list[str] = field(default_factory=list)  # TCG plugins: -plugin arguments (ukltool.plugin.insnclass)
    remote: Path | None = None  # remote system calls: the shadow's directory on the host (ukltool.run.remote)
    remote_idle_us: int = 1000  # the shadow polls this long after a request before it sleeps (-1: always)
    remote_notify: str = "poll"  # how a guest thread waits for the host unless it chooses (remote.NOTIFY_MODES)
    side_dir: Path | None = None  # where LOG.cmd and the shadow's log go (default: beside the log)
    machine: str | None = None  # QEMU's machine, MACHINES (None: the image's, image_machine())
    direct: bool = False  # boot the uncompressed kernel by its PVH entry (bzimage.py): no firmware, no decompression
    savings: tuple[str, ...] | None = None  # kernel arguments of BOOT_SAVINGS to pass (None: those that apply)
    pid1: str | None = None  # the application's path: the kernel starts it as PID 1, no init program
    pid1_args: list[str] = field(default_factory=list)  # its arguments (after "--" on the command line)
    initramfs: bool = True  # False: load none (PID1 only: the kernel makes the application's file, ukl.init=)
    core_disk: Path | None = None  # `ukl run --core`: the disk init writes the cores to (ukltool.run.cores)
    mac: str | None = None    # eth0's MAC address (default QEMU's; guests on one bridge need their own)
    # The image's profile (its manifest's config), from a caller that read the manifest;
    # None: read once from the manifest beside the bzImage
    config: str | None = None


@dataclass
class RunResult:
    code: int
    status: int | None
    timed_out: bool
    failures: list[str]
    accel: str
    seconds: float


def qemu_version(qemu: str) -> str:
    out = capture([qemu, "--version"]).stdout
    return out.splitlines()[0] if out else "unknown"


def _kvm_usable_quick() -> tuple[bool | None, str]:
    """Fast answers that need no boot: None means 'probe'."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is not available"
    if Path("/sys/module/kvm_pvm").exists():
        return False, "/dev/kvm is kvm_pvm, which does not run standard guests"
    return None, ""


def probe_initrd() -> Path:
    """An image with nothing but our init, which reports "status 127" (no
    application) at once: cached per init binary."""
    from ukltool.build import app
    init = app.init_binary()
    out = cache_dir() / "bin" / f"probe-{init.name}.cpio"
    if not out.is_file():
        initramfs.write(initramfs.runtime_skeleton().file("/init", init), out)
    return out


def probe_kvm(qemu: str, kernel: Path, initrd: Path, timeout: float = 30) -> tuple[bool, str]:
    """Does KVM boot a guest here? Yes if the guest's init reported a status,
    whatever it was; else why not."""
    with tempfile.TemporaryDirectory(prefix="ukl-kvm-probe-") as td:
        status_file = Path(td) / "status"
        cmd = [qemu, "-accel", "kvm", "-cpu", "host", "-m", "256M", "-display", "none", "-no-reboot",
               "-nodefaults", "-device", DEBUG_EXIT, "-kernel", str(kernel), "-initrd", str(initrd),
               "-append", "console=ttyS0 panic=-1", "-serial", "null", "-serial", f"file:{status_file}"]
        try:
            res = capture(cmd, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False, f"a KVM test boot did not finish in {timeout:.0f} s"
        text = status_file.read_text(errors="replace") if status_file.is_file() else ""
        if protocol.parse_status(text) is not None:
            return True, ""
        last = (res.stderr.strip().splitlines() or [f"exit {res.returncode}, no status"])[-1]
        return False, f"a KVM test boot failed ({last})"


_said_tcg: set[str] = set()


def choose_accel(qemu: str, probe_kernel: Path, forced: str | None = None) -> str:
    """'kvm' only when KVM really boots a guest here: FORCED (`--accel`),
    else $UKL_ACCEL, else a test boot, decided once per QEMU and host
    kernel and cached."""
    forced = forced or os.environ.get("UKL_ACCEL") or None
    if forced is not None:
        if forced not in ("kvm", "tcg"):
            raise UklError(f"unknown accelerator '{forced}'", "choose kvm or tcg (UKL_ACCEL, --accel)")
        return forced
    quick, why = _kvm_usable_quick()
    key = f"{qemu_version(qemu)}|{os.uname().release}"
    cache = cache_dir() / "accel.json"
    try:
        known = json.loads(cache.read_text()) if cache.is_file() else {}
    except ValueError:
        known = {}  # a damaged cache is asked again
    if quick is None and isinstance(known.get(key), dict):
        accel, why = known[key]["accel"], known[key]["why"]
    elif quick is False:
        accel = "tcg"
    else:
        works, why = probe_kvm(qemu, probe_kernel, probe_initrd())
        accel = "kvm" if works else "tcg"
        known[key] = {"accel": accel, "why": why}
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.partial")
        tmp.write_text(json.dumps(known, indent=1) + "\n")
        tmp.replace(cache)
    if accel == "tcg" and why not in _said_tcg:
        _said_tcg.add(why)   # once per process, not for each of a suite's boots
        ui.info(f"using TCG (software emulation): {why}")
    return accel


MACHINES = ("pc", "microvm")

# What the guest can be told instead of measuring or checking at boot
# (docs/results/results-boot-methods.md measures each): the words, and when they apply.
#   no_timer_check: the IO-APIC timer check waits for timer ticks to see
#     that the timer interrupt is routed; QEMU's routing is known good.
#   noapictimer: the local APIC timer is calibrated against another clock
#     for 100 ms of ticks (apic.c, calibrate_APIC_clock()) unless the CPU
#     has the TSC deadline timer, which KVM's -cpu host has and TCG lacks.
#     A one-CPU TCG guest on -M pc takes its ticks from the HPET instead.
#     microvm has no HPET, and its PIT gave the guest no timer interrupt
#     (a sleep never ended): there the calibration stays.
#   random.trust_cpu=on: the kernel seeds its random number generator from
#     the CPU's RDRAND/RDSEED at boot, as Debian's kernels do by default
#     (CONFIG_RANDOM_TRUST_CPU), instead of waiting for entropy: a server
#     that reads random bytes at start (Redis) answered ~960 ms of guest
#     time later without it. Under --icount RDRAND's values come from
#     QEMU's -seed, so runs still repeat.
#   pmtmr=0: no ACPI PM timer (its I/O port overridden to none), so the
#     kernel skips the timer's monotonicity check, ten reads around busy
#     waits of 0..900 us (drivers/clocksource/acpi_pm.c): 4.5 ms on every
#     CPU, real or emulated. The TSC (tsc=reliable) is the clocksource
#     either way; TSC calibration takes the PIT or the HPET instead. Only
#     with noapictimer: the local APIC timer's calibration checks itself
#     against the PM timer, and without one runs 100 ms more to check
#     itself against the jiffies (apic.c) -- 104 ms of guest time more
#     with pmtmr=0 alone, 4.5 ms less with both (docs/results/results-boot-methods.md).
#     So not under microvm, which keeps the calibration.
BOOT_SAVINGS = ("no_timer_check", "noapictimer", "random.trust_cpu=on", "pmtmr=0")


def boot_savings(spec: RunSpec, accel: str) -> list[str]:
    """The BOOT_SAVINGS words for this boot."""
    if spec.savings is not None:
        unknown = [w for w in spec.savings if w not in BOOT_SAVINGS]
        if unknown:
            raise UklError(f"unknown boot saving(s): {', '.join(unknown)}", f"choose from {', '.join(BOOT_SAVINGS)}")
        return list(spec.savings)
    words = ["no_timer_check", "random.trust_cpu=on"]
    if accel == "tcg" and spec.smp == 1 and spec.machine == "pc":
        words += ["noapictimer", "pmtmr=0"]
    return words


# What the kernel's command-line parser takes for a space: its ctype table
# is Latin-1's, where 0xa0 (a byte of many UTF-8 characters) is one
KERNEL_SPACES = b" \t\n\v\f\r\xa0"
COMMAND_LINE_SIZE = 2048  # x86: longer command lines are cut, silently


def init_arg_word(arg: str, hint: str) -> str:
    """ARG as one word after "--" on the kernel command line, which the
    kernel passes to init: it splits at spaces outside double quotes and
    removes the quotes; a second "--" would end init's arguments there.
    HINT: what to do instead when ARG cannot be passed."""
    if '"' in arg or "\n" in arg or arg == "--":
        raise UklError(f"argument {arg!r}: the kernel command line cannot carry a double quote, a newline or "
                       "a second '--' to init", hint)
    raw = arg.encode()
    return f'"{arg}"' if not raw or any(b in KERNEL_SPACES for b in raw) else arg


def pid1_word(arg: str) -> str:
    return init_arg_word(arg, "run without --pid1 (init passes any argument)")


def check_pid1(spec: RunSpec) -> None:
    if not spec.initramfs and not spec.pid1:
        raise UklError("--no-initramfs needs --pid1: a boot without an initramfs has no init program to start "
                       "the application", "run the application as PID 1 (--pid1, UKL configurations), or boot "
                       "with the image's initramfs")
    if not spec.pid1:
        return
    if len(spec.pid1_args) + 1 > protocol.MAX_INIT_ARGS:
        raise UklError(f"--pid1: the kernel passes init at most {protocol.MAX_INIT_ARGS - 1} arguments, "
                       f"not {len(spec.pid1_args)}", "run without --pid1 (init passes any number)")
    hiding = [w for w in spec.append if w == "quiet" or re.fullmatch(r"loglevel=[0-4]", w)]
    if hiding:
        raise UklError(f"--pid1: {' '.join(hiding)} would hide the kernel's status line (a warning)",
                       "leave the console's log level at 5 or more")
    # The kernel takes the first earlyprintk= only: ours, the status channel
    early = [w for w in spec.append if w.startswith("earlyprintk=")]
    if early:
        raise UklError(f"--pid1: {early[0]} cannot be used: under --pid1 the early console is the status "
                       f"channel ({protocol.KERNEL_STATUS_CONSOLE}), and the kernel takes one",
                       "run without --pid1 to choose the early console, or use -v for the kernel's messages")


def microvm_tcg_args(spec: RunSpec, accel: str) -> list[str]:
    """Under TCG without -icount, the guest's TSC is the host's. microvm's
    guest calibrates it against the PIT, which fails when the host is busy;
    it then waits for timer ticks that microvm's PIT never delivers, and
    the boot hangs (2 boots in 3 on a loaded host). Telling it the
    frequency skips that calibration: the host's TSC rate, measured
    (hosttsc; not cpuinfo's "cpu MHz", the current core speed where the
    frequency scales). Where it cannot be measured the guest calibrates.
    Under -icount the TSC runs at 1 GHz and the calibration is exact;
    under KVM kvmclock gives it."""
    if spec.machine != "microvm" or accel != "tcg" or spec.icount:
        return []
    khz = hosttsc.host_tsc_khz()
    return [f"tsc_early_khz={khz}"] if khz else []


def image_machine(bzimage: Path) -> str:
    """The machine an image boots on unless told: the one its kernel was
    specialized for (`--specialize --machine microvm`: no PCI, which -M
    pc's ACPI tables and network device need), else pc. From the manifest
    beside the bzImage (image.machine_of())."""
    try:
        man = image.load(bzimage.parent)
    except UklError:
        return "pc"  # a kernel without ukl's manifest beside it
    machine = image.machine_of(man)
    return machine if machine in MACHINES else "pc"


def with_machine(spec: RunSpec) -> RunSpec:
    return spec if spec.machine is not None else dataclasses.replace(spec, machine=image_machine(spec.bzimage))


def check_machine(spec: RunSpec) -> None:
    spec = with_machine(spec)
    if spec.machine not in MACHINES:
        raise UklError(f"unknown machine '{spec.machine}'", f"choose from {', '.join(MACHINES)}")
    if spec.machine == "microvm" and spec.remote is not None:
        raise UklError("remote system calls need -M pc: their ring is a PCI device (ivshmem-doorbell)",
                       "run without --machine microvm")


# eth0 as init configures it (guest/init.c), for the kernel to apply
# (ip=ADDR:SERVER:GATEWAY:NETMASK:HOST:DEVICE:AUTOCONF, IP_PNP) when the
# application is PID 1: QEMU's user network, and `--tap` networks, which
# give the host the same 10.0.2.2 (run/netns.py)
PID1_IP = "ip=10.0.2.15::10.0.2.2:255.255.255.0::eth0:off"

# Under --icount: QEMU's seed for guest randomness, and the guest's date
ICOUNT_SEED = "1"
ICOUNT_DATE = "2026-01-01T00:00:00"


def qemu_command(qemu: str, spec: RunSpec, accel: str, initrd: Path | None, status_file: Path,
                 shadow: remote.Shadow | None = None, kernel_file: Path | None = None) -> list[str]:
    """QEMU's command line; KERNEL_FILE: what -kernel loads (default the bzImage)."""
    spec = with_machine(spec)
    check_machine(spec)
    check_pid1(spec)
    loglevel = "8" if spec.verbose else "5"
    # printk.time=1: the kernel's messages carry a stamp, which tells them
    # from the application's output on the same console (logscan)
    append = ["console=ttyS0", f"loglevel={loglevel}", "printk.time=1", "panic=-1", "oops=panic",
              "nokaslr", "tsc=reliable", *boot_savings(spec, accel), *microvm_tcg_args(spec, accel), *spec.append]
    if spec.core_disk:
        append += cores.kernel_args()
    config = spec.config if spec.config is not None else profiles.image_config(spec.bzimage.parent)
    if not any(w.startswith(profiles.KERNEL_PARAM + "=") for w in append):
        append += profiles.profile_kernel_args(config)  # the image's profile
    if spec.icount and "norandmaps" not in append:
        append.append("norandmaps")  # random layouts change instruction counts
    if spec.pid1:
        # The kernel's messages also go to the status port, through the
        # early console kept after boot (the 8250 driver's console takes
        # one port only): the application's /dev/console is ttyS0, so the
        # status line comes from where it does not write
        # (protocol.INIT_EXIT_LINE). At log level 5 only warnings and
        # worse reach a console.
        append.insert(1, f"earlyprintk=serial,{protocol.KERNEL_STATUS_CONSOLE},115200,keep")
        # The kernel runs the application as init; the words after "--" are
        # its arguments. rdinit= stays the last word before "--": it drops
        # the unknown words before it (nokaslr) from init's arguments.
        # With no initramfs the kernel makes the application's file itself
        # (patch "x86/ukl: start the application as init without an initramfs").
        if (spec.forwards or spec.tap) and not any(w.startswith("ip=") for w in append):
            append.append(PID1_IP)  # no init: the kernel configures eth0 (IP_PNP)
        append += [*([] if spec.initramfs else [f"ukl.init={spec.pid1}"]),
                   f"rdinit={spec.pid1}", "--", *(pid1_word(a) for a in spec.pid1_args)]
        if len(" ".join(append).encode()) >= COMMAND_LINE_SIZE:
            raise UklError(f"--pid1: the kernel command line would be longer than {COMMAND_LINE_SIZE - 1} bytes "
                           "with the application's arguments", "run without --pid1 (init passes them in a file)")
    base_machine = spec.machine or "pc"  # with_machine() chose it
    machine = base_machine + (shadow.machine_suffix if shadow else "")
    cmd = [qemu, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
           "-M", machine, "-m", spec.memory, "-smp", str(spec.smp),
           "-kernel", str(kernel_file or spec.bzimage),
           *(["-initrd", str(initrd)] if spec.initramfs and initrd else []),
           "-append", " ".join(append), "-serial", "stdio"]
    if spec.machine == "microvm":
        # microvm makes one ISA serial port (ttyS0): the status channel,
        # ttyS1, is added at the second port's address
        cmd += ["-chardev", f"file,id=ukl-status,path={status_file}",
                "-device", "isa-serial,chardev=ukl-status,iobase=0x2f8,irq=3"]
    else:
        cmd += ["-serial", f"file:{status_file}"]
    cmd += ["-device", DEBUG_EXIT]
    if spec.core_disk:
        cmd += cores.qemu_args(spec.core_disk, base_machine)
    if accel == "kvm":
        cmd += ["-accel", "kvm", "-cpu", "host"]
    else:
        cmd += ["-accel", "tcg", "-cpu", kernel.profile_tcg_cpu(config)]
    if spec.icount:
        # The guest sees only guest instructions: no host randomness
        # (RDRAND, the boot RNG seed) and no host date (the RTC, whose date
        # alone changes instruction counts), so that a run repeats exactly.
        cmd += ["-icount", "shift=0,sleep=off", "-seed", ICOUNT_SEED,
                "-rtc", f"base={ICOUNT_DATE},clock=vm"]
    for p in spec.plugins:
        if accel != "tcg":
            raise UklError("QEMU plugins need TCG", "run with --accel tcg (or --icount)")
        cmd += ["-plugin", p]
    if shadow:
        cmd += shadow.qemu_args()
    # Extra QEMU arguments for debugging (UKL_QEMU_ARGS="-s -S": gdb stub)
    cmd += shlex.split(os.environ.get("UKL_QEMU_ARGS", ""))
    nic = "virtio-net-device" if spec.machine == "microvm" else "virtio-net-pci"  # virtio-mmio without PCI
    mac = f",mac={spec.mac}" if spec.mac else ""
    if spec.tap:
        cmd += ["-netdev", f"tap,id=n0,ifname={spec.tap},script=no,downscript=no",
                "-device", f"{nic},netdev=n0{mac}"]
        return cmd
    if spec.icount and not spec.forwards:
        # Packets from the host arrive at host-chosen moments: no network
        # device, so that deterministic runs stay deterministic.
        return cmd
    net = "user,id=n0"
    for host, guest in spec.forwards:
        net += f",hostfwd=tcp:127.0.0.1:{host}-:{guest}"
    cmd += ["-netdev", net, "-device", f"{nic},netdev=n0{mac}"]
    return cmd


PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """In QEMU's process before exec: die when ukl dies, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # ukl died before prctl()
        os._exit(1)


def write_own_file(path: Path, text: str) -> None:
    """Write PATH, a file ukl names itself (LOG.cmd beside an image), never
    through a symbolic link or into a special file: ukl runs as root, and a
    link planted there would have it overwrite what the link names."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) and not path.is_symlink():
            raise UklError(f"{path} is not a regular file: ukl writes its own files only as such",
                           f"remove it (rm {path})")
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UklError(f"{path} is a symbolic link: ukl does not write its own files through one",
                           f"remove it (rm {path})") from None
        raise UklError(f"cannot write {path}: {e.strerror}", "check the directory") from None
    with os.fdopen(fd, "w") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise UklError(f"{path} is not a regular file: ukl writes its own files only as such",
                           f"remove it (rm {path})")
        f.write(text)


def stop(proc: subprocess.Popen[bytes], own_group: bool) -> None:
    """Kill QEMU (and its process group, when it has its own) and reap it."""
    if proc.poll() is None:
        try:
            if own_group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:
            pass
    proc.wait()


def stop_run(proc: subprocess.Popen[bytes]) -> None:
    """Stop a `ukl run` started in a session of its own: SIGTERM to its
    group, so that it stops QEMU itself, SIGKILL after a minute."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# A kernel message on the console (printk.time=1)
KERNEL_LINE = re.compile(rb"^\r?\[\s*\d+\.\d+\] ")


def _show_app_lines(data: bytes, flush: bool) -> bytes:
    """With the application as PID 1 there is no init marker: show the
    console's complete lines that are not kernel messages; return the rest."""
    lines = data.split(b"\n")
    rest = b"" if flush else lines.pop()
    out = b"".join(line.rstrip(b"\r") + b"\n" for line in lines if not KERNEL_LINE.match(line))
    if flush and out.endswith(b"\n") and not data.endswith(b"\n"):
        out = out[:-1]
    if out:
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
    return rest


def _follow(proc: subprocess.Popen[bytes], spec: RunSpec, logf: BinaryIO, start: float,
            shadow: remote.Shadow | None = None) -> bool:
    """Copy QEMU's console to the log and, after init's marker, to stdout,
    until QEMU exits (or the remote shadow does); True if the timeout
    ended it."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    showing = spec.verbose
    pending = b""
    by_line = spec.pid1 is not None and not spec.verbose and spec.show
    while True:
        left = spec.timeout - (time.monotonic() - start)
        if left <= 0:
            return True
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if shadow and not shadow.alive():
            return False
        if not ready:
            if proc.poll() is not None:
                if by_line:
                    _show_app_lines(pending, flush=True)
                return False
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            if by_line:
                _show_app_lines(pending, flush=True)
            return False
        logf.write(chunk)
        logf.flush()
        if by_line:
            pending = _show_app_lines(pending + chunk, flush=False)
            continue
        pending += chunk
        marker = pending.find(INIT_MARKER.encode())
        if not showing and marker >= 0 and pending.find(b"\n", marker) >= 0:
            # Show what follows the marker line.
            showing = True
            pending = pending[pending.find(b"\n", marker) + 1:]
        if showing and pending and spec.show:
            sys.stdout.buffer.write(pending.replace(b"\r\n", b"\n"))
            sys.stdout.flush()
        pending = b"" if showing else pending[-4096:]


def boot(spec: RunSpec) -> RunResult:
    qemu = need_tool("qemu-system-x86_64", "qemu-system-x86")
    spec = with_machine(spec)
    # -icount needs TCG
    accel = "tcg" if spec.icount else choose_accel(qemu, spec.bzimage, spec.accel)
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    # The files beside the console log: never made beside a device such as
    # --log /dev/null (that would write into /dev)
    side = spec.side_dir or spec.log.parent
    with tempfile.TemporaryDirectory(prefix="ukl-run-") as td:
        initrd: Path | None = None
        if spec.initramfs:
            initrd = Path(td) / "initrd.cpio"
            with open(initrd, "wb") as out:
                for part in spec.initrds:
                    out.write(part.read_bytes())
        status_file = Path(td) / "status"
        kernel_file = None
        if spec.direct:
            check_machine(spec)
            kernel_file = Path(td) / "vmlinux"
            kernel_file.write_bytes(bzimage.direct_kernel(spec.bzimage.read_bytes(), str(spec.bzimage))[0])
        with ExitStack() as stack:
            shadow = None
            if spec.remote is not None:
                # Before QEMU: the shadow writes the ring's header QEMU's guest checks
                shadow = stack.enter_context(remote.Shadow(spec.remote, remote.parse_memory(spec.memory),
                                                           side / "shadow.log", spec.remote_idle_us,
                                                           notify=spec.remote_notify))
            cmd = qemu_command(qemu, spec, accel, initrd, status_file, shadow, kernel_file)
            write_own_file(side / f"{spec.log.stem}.cmd", " ".join(cmd) + "\n")
            start = time.monotonic()
            timed_out = False
            with open(spec.log, "wb") as logf:
                parent = os.getpid()
                proc = subprocess.Popen(cmd, stdin=None if spec.interactive else subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        start_new_session=not spec.interactive,
                                        pass_fds=shadow.pass_fds() if shadow else (),
                                        preexec_fn=lambda: _die_with_parent(parent))
                # QEMU never outlives this function: not on a timeout, an
                # exception, SIGINT/SIGTERM (see cli) or a closed output pipe.
                try:
                    timed_out = _follow(proc, spec, logf, start, shadow)
                finally:
                    stop(proc, own_group=not spec.interactive)
            shadow_died = shadow is not None and not shadow.alive()
        status_text = status_file.read_text(errors="replace") if status_file.exists() else ""
        status = protocol.parse_init_exit(status_text) if spec.pid1 else protocol.parse_status(status_text)
    seconds = time.monotonic() - start
    text = spec.log.read_text(errors="replace")
    failures = logscan.failure_lines(text, context=12)
    if failures:
        code = EXIT_KERNEL_FAILURE
    elif shadow_died:
        code = EXIT_SHADOW_DIED
    elif status is not None:
        code = status
    elif timed_out:
        code = EXIT_TIMEOUT
    else:
        code = EXIT_NO_STATUS
    return RunResult(code, status, timed_out, failures, accel, seconds)
