"""`ukl build --specialize` (issue 36, item 2): a kernel cut to one
application, from what it was seen to use on the general kernel. Two
kernel builds, cached by their configuration: hello's (the smallest) and
Redis's (a server: network, epoll, its own suite against it)."""

from __future__ import annotations

import json
import re

from conftest import REPO, assert_clean, ukl
from ukltool.apps import specialize
from ukltool.linux import kernel
from ukltool.util.paths import cache_dir

# System calls that are harmless with zero arguments, each with the table's
# options that build it (x86-64 numbers)
CALLS = {"socket": 41, "epoll_create1": 291, "eventfd2": 290, "timerfd_create": 283, "inotify_init1": 294,
         "signalfd4": 289, "io_uring_setup": 425, "msgget": 68, "mq_open": 240, "flock": 73, "perf_event_open": 298,
         "setuid": 105, "set_robust_list": 273}


def test_hello_specialized_boots_and_lacks_what_it_does_not_use(outdir):
    out = outdir / "hello-special"
    res = ukl("build", REPO / "examples/hello/hello.c", "--config", "base", "--specialize", "-o", out)
    assert res.returncode == 0, res.stdout[-3000:]
    report = json.loads((out / "specialize.json").read_text())
    name = report["config"]
    assert name.startswith(kernel.SPECIAL_PREFIX) and report["origin"] == "base" and report["verified"]
    assert json.loads((out / "manifest.json").read_text())["config"] == name
    assert "specialized kernel configuration" in (out / "specialize.md").read_text()
    # hello uses no network, no event loop, no block device: none of it is built
    wanted = kernel.parse_fragment((out / "specialize.config").read_text())
    for opt in ("CONFIG_NET", "CONFIG_EPOLL", "CONFIG_VIRTIO_PCI", "CONFIG_UKL_REMOTE", "CONFIG_BLOCK",
                "CONFIG_SYSFS"):
        assert opt not in wanted, opt
    assert wanted["CONFIG_UNIKERNEL_LINUX"] == "y"
    # what -M microvm's console needs (its serial ports' interrupts from the
    # DSDT), and what -M pc's DSDT reaches (kernel/specialize/pc.config)
    assert wanted["CONFIG_PCI"] == wanted["CONFIG_SERIAL_8250_PNP"] == "y"
    assert "set_robust_list" in report["syscalls"] and "CONFIG_FUTEX" in report["options"]

    res = ukl("run", out, "--", "from", "the", "host")
    assert res.returncode == 0, res.stdout[-3000:]
    assert "running in ring 0" in res.stdout and "argv[3] = host" in res.stdout
    assert_clean(out / "console.log")
    # -M microvm, booted direct: its serial ports' interrupts come from the
    # DSDT alone (no legacy PIC), which the specialized kernel must load
    res = ukl("run", out, "--machine", "microvm", "--direct", "--", "from", "the", "host")
    assert res.returncode == 0, res.stdout[-3000:]
    assert "running in ring 0" in res.stdout and "argv[3] = host" in res.stdout
    assert "ACPI Error" not in (out / "console.log").read_text()
    assert_clean(out / "console.log")

    # What the kernel lacks is ENOSYS, as on any Linux built without it; a
    # second application on the same configuration shares the kernel build.
    # (The final configuration: an option can be selected by another, as
    # x86 selects PERF_EVENTS.)
    table = specialize.load_table()
    final = kernel.parse_fragment((cache_dir() / "build" / name / ".config").read_text())
    absent = {c for c in CALLS if any(final.get(o, "n") == "n" for o in table.sections["syscalls"][c].options)}
    assert {"socket", "epoll_create1", "io_uring_setup", "msgget"} <= absent and "set_robust_list" not in absent
    probe = outdir / "enosys-special"
    res = ukl("build", REPO / "tests/apps/enosys.c", "--config", name, "-o", probe)
    assert res.returncode == 0, res.stdout[-3000:]
    res = ukl("run", probe, "--", *(f"{c}:{n}" for c, n in CALLS.items()))
    assert res.returncode == 0, res.stdout[-3000:]
    for c in CALLS:
        assert f"{c} {'ENOSYS' if c in absent else 'present'}" in res.stdout, (c, res.stdout[-2000:])
    assert_clean(probe / "console.log")


def test_hello_specialized_for_microvm_alone_has_no_pci(outdir):
    """--machine microvm: no PCI, which patch 0034 lets ACPICA do without
    (it loaded no table at all before: the console lost its interrupts)."""
    out = outdir / "hello-microvm"
    res = ukl("build", REPO / "examples/hello/hello.c", "--config", "base", "--specialize", "--machine", "microvm",
              "-o", out)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "(-M microvm)" in res.stdout  # the re-verification boots where the kernel is for
    name = json.loads((out / "specialize.json").read_text())["config"]
    final = kernel.parse_fragment((cache_dir() / "build" / name / ".config").read_text())
    assert final.get("CONFIG_PCI", "n") == "n" and final["CONFIG_SERIAL_8250_PNP"] == "y"
    assert "# ukl-specialized-for: microvm" in (out / "specialize.config").read_text()
    for how in ((), ("--direct",), ("--direct", "--pid1", "--no-initramfs")):
        res = ukl("run", out, "-v", *how, "--", "from", "the", "host")
        assert res.returncode == 0, (how, res.stdout[-3000:])
        assert "booting under -M microvm" in res.stdout and "running in ring 0" in res.stdout, how
        log = (out / "console.log").read_text()
        # the DSDT loaded: PnP found the serial ports, which got their interrupts
        assert "ACPI Error" not in log and "pnp: PnP ACPI: found" in log, log[-3000:]
        assert re.search(r"ttyS0 at I/O 0x3f8 \(irq = \d+", log), log[-3000:]
        assert_clean(out / "console.log")
    res = ukl("run", out, "--machine", "pc")
    assert res.returncode == 2 and "specialized for -M microvm alone" in res.stdout, res.stdout[-2000:]
    assert "Traceback" not in res.stdout
    # urunc's qemu monitor boots -M pc: packaging for it is refused, for Firecracker not
    res = ukl("pkg", out, "--oci", outdir / "hello-microvm.tar")
    assert res.returncode == 2 and "--hypervisor firecracker" in res.stdout, res.stdout[-2000:]
    assert not (outdir / "hello-microvm.tar").exists()
    res = ukl("pkg", out, "--oci", outdir / "hello-microvm.tar", "--hypervisor", "firecracker")
    assert res.returncode == 0 and (outdir / "hello-microvm.tar").is_file(), res.stdout[-2000:]


def test_a_specialized_name_that_is_not_in_the_cache_is_a_clear_error(outdir):
    res = ukl("build", REPO / "examples/hello/hello.c", "--config", "special-000000000000", "-o", outdir / "none")
    assert res.returncode == 2 and "no specialized configuration" in res.stdout and "Traceback" not in res.stdout
    res = ukl("build", REPO / "examples/hello/hello.c", "--config", "nosuch", "--specialize", "-o", outdir / "none")
    assert res.returncode == 2 and "unknown configuration" in res.stdout and "Traceback" not in res.stdout


def test_redis_specialized_serves_and_passes_its_smoke_test(outdir):
    """Redis on its own kernel: the build re-runs the smoke test on it;
    the server answers from the host through the network device its
    forwarded port brought in; its own tests pass against it."""
    out = outdir / "redis-special"
    res = ukl("build", "redis", "--config", "base", "--specialize", "-o", out)
    assert res.returncode == 0, res.stdout[-3000:]
    report = json.loads((out / "specialize.json").read_text())
    assert report["verified"]
    for opt in ("CONFIG_NET", "CONFIG_INET", "CONFIG_EPOLL", "CONFIG_VIRTIO_NET"):
        assert opt in report["options"], opt
    assert "CONFIG_IP_PNP" in report["options"]  # eth0 configured by the kernel for PID 1
    # under init, and as PID 1 with the kernel configuring its network (issue 47)
    for pid1 in ([], ["--pid1"]):
        js = outdir / f"apptest-redis-special{'-pid1' if pid1 else ''}.json"
        res = ukl("apptest", "redis", "--configs", report["config"], "--units", "unit/type/incr", "--json", js, *pid1)
        assert res.returncode == 0, res.stdout[-3000:]
        (got,) = json.loads(js.read_text())
        assert got["finished"] and got["counts"]["err"] == 0 and got["counts"]["ok"] >= 20, got
        assert got["pid1"] == bool(pid1), got


def test_redis_specialized_for_microvm_serves_without_pci(outdir):
    """--machine microvm for a server: its network device on virtio-mmio
    alone, no PCI in the kernel; Redis's own tests pass against it as
    PID 1, booted under microvm because its kernel is for it."""
    out = outdir / "redis-microvm"
    res = ukl("build", "redis", "--config", "base", "--specialize", "--machine", "microvm", "-o", out)
    assert res.returncode == 0, res.stdout[-3000:]
    report = json.loads((out / "specialize.json").read_text())
    assert report["verified"]
    final = kernel.parse_fragment((cache_dir() / "build" / report["config"] / ".config").read_text())
    assert final["CONFIG_VIRTIO_MMIO"] == final["CONFIG_VIRTIO_NET"] == final["CONFIG_IP_PNP"] == "y"
    assert final.get("CONFIG_PCI", "n") == "n" and final.get("CONFIG_VIRTIO_PCI", "n") == "n"
    js = outdir / "apptest-redis-microvm.json"
    res = ukl("apptest", "redis", "--configs", report["config"], "--units", "unit/type/incr", "--json", js, "--pid1")
    assert res.returncode == 0, res.stdout[-3000:]
    (got,) = json.loads(js.read_text())
    assert got["finished"] and got["counts"]["err"] == 0 and got["counts"]["ok"] >= 20, got


def test_what_the_recorded_run_did_not_use_still_works(outdir):
    """Issue 44: the kernel kept only what the recorded run executed, and the
    recording saw no clock the vDSO answered. tests/apps/sometimes.c's
    recorded run (--record-args quiet, ending with status 3) uses nothing;
    its later run uses eventfd, epoll, timerfd, signalfd, flock,
    timer_create, an AF_UNIX socketpair and the clocks UKL's C library reads
    by system call, and passes on the specialized kernel, because the
    program's code can make those calls."""
    out = outdir / "sometimes-special"
    res = ukl("build", REPO / "tests/apps/sometimes.c", "--config", "base", "--specialize",
              "--record-args", "quiet", "--record-status", "3",
              "--kconfig", "CONFIG_INOTIFY_USER:watches its configuration file", "-o", out)
    assert res.returncode == 0, res.stdout[-3000:]
    report = json.loads((out / "specialize.json").read_text())
    assert report["verified"] and "eventfd2" in report["code_syscalls"] and "eventfd2" not in report["syscalls"]
    for opt in ("CONFIG_EVENTFD", "CONFIG_EPOLL", "CONFIG_TIMERFD", "CONFIG_SIGNALFD", "CONFIG_FILE_LOCKING",
                "CONFIG_POSIX_TIMERS", "CONFIG_UNIX"):
        assert opt in report["from_code"], (opt, report["from_code"])
    assert report["options"]["CONFIG_INOTIFY_USER"] == ["asked for: watches its configuration file"]
    md = (out / "specialize.md").read_text()
    assert "the code: eventfd2(): fs/eventfd.c" in md and "come from the code alone" in md
    # no listen(): no network device, and ukl run says so instead of forwarding nowhere
    assert "CONFIG_VIRTIO_NET" not in report["options"]
    res = ukl("run", out, "--forward", "18080:8080", "--", "all")
    assert res.returncode == 2 and "has no network device" in res.stdout, res.stdout
    res = ukl("run", out, "--", "all")
    assert res.returncode == 0, res.stdout[-3000:]
    assert "sometimes: 16 calls, 0 failed" in res.stdout
    assert_clean(out / "console.log")
    res = ukl("run", out, "--", "quiet")
    assert res.returncode == 3 and "sometimes: nothing this time" in res.stdout
