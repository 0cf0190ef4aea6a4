"""Booting an image in QEMU: accelerator choice, console capture, status,
timeouts and kernel-failure detection."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ukltool import logscan, ui
from ukltool.paths import cache_dir
from ukltool.proc import need_tool

EXIT_TIMEOUT = 124
EXIT_KERNEL_FAILURE = 125
EXIT_NO_STATUS = 123
DEBUG_EXIT = "isa-debug-exit,iobase=0xf4,iosize=0x04"
INIT_MARKER = "ukl-init: starting "


@dataclass
class RunSpec:
    bzimage: Path
    initrds: list[Path]
    log: Path
    timeout: float = 120.0
    icount: bool = False
    append: list[str] = field(default_factory=list)
    forwards: list[tuple[int, int]] = field(default_factory=list)
    smp: int = 2
    memory: str = "1G"
    verbose: bool = False
    interactive: bool = False
    show: bool = True  # stream the application's output to stdout
    accel: str | None = None  # None: detect


@dataclass
class RunResult:
    code: int
    status: int | None
    timed_out: bool
    failures: list[str]
    accel: str
    seconds: float


def qemu_version(qemu: str) -> str:
    out = subprocess.run([qemu, "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else "unknown"


def _kvm_usable_quick() -> tuple[bool | None, str]:
    """Fast answers that need no boot: None means 'probe'."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is not available"
    if Path("/sys/module/kvm_pvm").exists():
        return False, "/dev/kvm is kvm_pvm, which does not run standard guests"
    return None, ""


def choose_accel(qemu: str, probe_kernel: Path, probe_initrd: Path) -> str:
    """'kvm' only when KVM really boots a guest here; decided once per host and cached."""
    forced = os.environ.get("UKL_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    quick, why = _kvm_usable_quick()
    key = f"{qemu_version(qemu)}|{os.uname().release}"
    cache = cache_dir() / "accel.json"
    known = json.loads(cache.read_text()) if cache.is_file() else {}
    if quick is None and key in known:
        return known[key]
    if quick is False:
        accel = "tcg"
    else:
        # Boot our init with no application: it reports at once through
        # isa-debug-exit (status 127 -> QEMU exit (127 << 1) | 1 = 255).
        cmd = [qemu, "-accel", "kvm", "-cpu", "host", "-m", "256M", "-display", "none",
               "-no-reboot", "-nodefaults", "-device", DEBUG_EXIT, "-kernel", str(probe_kernel),
               "-initrd", str(probe_initrd), "-append", "console=none panic=-1"]
        try:
            res = subprocess.run(cmd, capture_output=True, timeout=15)
            accel = "kvm" if res.returncode == 255 else "tcg"
        except subprocess.TimeoutExpired:
            accel = "tcg"
        why = "a KVM test boot did not finish" if accel == "tcg" else ""
        known[key] = accel
        cache.write_text(json.dumps(known))
    if accel == "tcg":
        ui.info(f"using TCG (software emulation): {why}")
    return accel


def qemu_command(qemu: str, spec: RunSpec, accel: str, initrd: Path, status_file: Path) -> list[str]:
    loglevel = "8" if spec.verbose else "5"
    append = ["console=ttyS0", f"loglevel={loglevel}", "panic=-1", "oops=panic",
              "nokaslr", "tsc=reliable", *spec.append]
    if spec.icount and "norandmaps" not in append:
        append.append("norandmaps")  # random layouts change instruction counts
    cmd = [qemu, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
           "-M", "pc", "-m", spec.memory, "-smp", str(spec.smp),
           "-kernel", str(spec.bzimage), "-initrd", str(initrd), "-append", " ".join(append),
           "-serial", "stdio", "-serial", f"file:{status_file}",
           "-device", DEBUG_EXIT]
    if accel == "kvm":
        cmd += ["-accel", "kvm", "-cpu", "host"]
    else:
        # 'max' has SMEP and SMAP, which UKL must work with.
        cmd += ["-accel", "tcg", "-cpu", "max"]
    if spec.icount:
        cmd += ["-icount", "shift=0,sleep=off"]
    if spec.icount and not spec.forwards:
        # Packets from the host arrive at host-chosen moments: no network
        # device, so that deterministic runs stay deterministic.
        return cmd
    net = "user,id=n0"
    for host, guest in spec.forwards:
        net += f",hostfwd=tcp:127.0.0.1:{host}-:{guest}"
    cmd += ["-netdev", net, "-device", "virtio-net-pci,netdev=n0"]
    return cmd


def boot(spec: RunSpec) -> RunResult:
    qemu = need_tool("qemu-system-x86_64", "qemu-system-x86")
    accel = spec.accel or choose_accel(qemu, spec.bzimage, spec.initrds[0])
    if spec.icount and accel == "kvm":
        accel = "tcg"  # -icount needs TCG
    spec.log.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ukl-run-") as td:
        initrd = Path(td) / "initrd.cpio"
        with open(initrd, "wb") as out:
            for part in spec.initrds:
                out.write(part.read_bytes())
        status_file = Path(td) / "status"
        cmd = qemu_command(qemu, spec, accel, initrd, status_file)
        (spec.log.with_suffix(".cmd")).write_text(" ".join(cmd) + "\n")
        start = time.monotonic()
        timed_out = False
        with open(spec.log, "wb") as logf:
            proc = subprocess.Popen(cmd, stdin=None if spec.interactive else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=not spec.interactive)
            assert proc.stdout is not None
            fd = proc.stdout.fileno()
            showing = spec.verbose
            pending = b""
            while True:
                left = spec.timeout - (time.monotonic() - start)
                if left <= 0:
                    timed_out = True
                    proc.kill()
                    break
                ready, _, _ = select.select([fd], [], [], min(left, 0.5))
                if not ready:
                    if proc.poll() is not None:
                        break
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                logf.write(chunk)
                logf.flush()
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
            proc.wait()
        status = logscan.parse_status(status_file.read_text(errors="replace")) if status_file.exists() else None
    seconds = time.monotonic() - start
    text = spec.log.read_text(errors="replace")
    failures = logscan.failure_lines(text, context=12)
    if failures:
        code = EXIT_KERNEL_FAILURE
    elif status is not None:
        code = status
    elif timed_out:
        code = EXIT_TIMEOUT
    else:
        code = EXIT_NO_STATUS
    return RunResult(code, status, timed_out, failures, accel, seconds)
