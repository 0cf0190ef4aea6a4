"""The fault-and-abuse matrix (tests/apps/faults.c): every fault class, in
the main thread, a second thread, a signal handler and a forked child, must
end the process exactly as Linux ends an ordinary one (same exit status,
128+signal), and leave the kernel log clean; an unprivileged user must not
be able to start, trace or write a UKL process. One boot per configuration
runs the whole matrix; a few classes also run alone, to check the status
`ukl run` reports."""

from __future__ import annotations

import re

import pytest

from conftest import BASELINE, DEBUG_CONFIGS, REPO, UKL_CONFIGS, assert_clean, build, ukl

SRC = REPO / "tests" / "apps" / "faults.c"
CONTEXTS = ("main", "thread", "handler", "child")

# The status every context must end with, as on Linux (128 + signal).
EXPECTED = {
    "null-read": 139, "wild-read": 139, "kernel-read": 139,
    "null-call": 139, "heap-call": 139, "stack-call": 139, "kernel-call": 139, "noncanonical-call": 139,
    "df-syscall": 0, "nt-syscall": 0, "ac-cleared": 0,
    "tf-set": 133, "tf-stepped": 0,
    "sigreturn-noncanonical": 139, "sigreturn-no-strict-ss": 0, "ptrace-noncanonical": 139, "ptrace-stepped": 0,
    "ptrace-syscall-rcx": None,  # Linux goes on (0); UKL returns through %rcx: SIGSEGV
    "divide-error": 136, "ud2": 132, "int3": 133,
    "icebp": None,  # #DB (133) on hardware; QEMU's TCG raises #UD (132): as under linux
    "stack-overflow": 139, "abort": 134,
    "raw-syscall": None,  # exit_group(7) in ring 3; the UKL application must call the entry: SIGILL
    "sysenter": None,  # SIGILL on AMD (TCG's -cpu max), SIGSEGV on Intel (base-debug's Skylake under
                       # TCG, kernel.tcg_cpu): each boot is judged by its own CPU; see the test below
    "int80": 139,  # #GP without IA32_EMULATION (linux); the application has no 32-bit ABI
}


def config_has(config: str, option: str) -> bool:
    """Does CONFIG's own fragment set OPTION (e.g. CONFIG_IA32_EMULATION=y)?"""
    return option in (REPO / "kernel" / "configs" / f"{config.split('+')[0]}.config").read_text().splitlines()


def has_ia32_emulation(config: str) -> bool:
    return config_has(config, "CONFIG_IA32_EMULATION=y")


@pytest.fixture(scope="module")
def images(outdir):
    return {c: build(SRC, c, outdir / f"faults-{c}") for c in (BASELINE, *UKL_CONFIGS)}


def app_lines(stdout: str) -> list[str]:
    """The application's lines: not the tool's, nor the kernel's that reach the
    console (a "show_signal: N callbacks suppressed" when the matrix outlasts
    the ratelimit's interval)."""
    return [line for line in stdout.splitlines()
            if not line.startswith(("ukl:", "ukl-init:")) and not re.match(r"\[\s*\d+\.\d+\] ", line)]


@pytest.fixture(scope="module")
def matrices(images):
    """Per configuration, the CPU vendor its boot saw and the status of
    every class in every context."""
    out = {}
    for config, image in images.items():
        res = ukl("run", image, "--timeout", "600", "--", "matrix")
        assert res.returncode == 0, res.stdout
        vendor, table = "", {}
        for line in app_lines(res.stdout):
            if line.startswith("cpu-vendor "):
                vendor = line.split()[1]
                continue
            name, ctx, status = line.split()
            table[name, ctx] = int(status)
        assert vendor in ("AuthenticAMD", "GenuineIntel"), (config, vendor)
        out[config] = vendor, table
    return out


def sysenter_status(vendor: str) -> int:
    """SYSENTER in 64-bit code: #UD (SIGILL) on AMD; on Intel a #GP
    (SIGSEGV) in ring 3 without IA32 emulation, and the fault UKL makes
    of it in the application (test_sysenter_in_ring0_on_an_intel_cpu)."""
    return 132 if vendor == "AuthenticAMD" else 139


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_fault_class_ends_as_on_linux(matrices, images, name):
    linux_vendor, linux_table = matrices["linux"]
    for ctx in CONTEXTS:
        linux = linux_table[name, ctx]
        for config in UKL_CONFIGS:
            vendor, table = matrices[config]
            ukl_status = table[name, ctx]
            if name == "raw-syscall":
                assert (linux, ukl_status) == (7, 132), (ctx, config)
            elif name == "sysenter":
                assert linux == sysenter_status(linux_vendor), (ctx, "linux", linux_vendor, linux)
                assert ukl_status == sysenter_status(vendor), (ctx, config, vendor, ukl_status)
            elif name == "ptrace-syscall-rcx":
                assert (linux, ukl_status) == (0, 139), (ctx, config)
            elif EXPECTED[name] is None:
                assert linux in (132, 133) and ukl_status == linux, (ctx, config, linux, ukl_status)
            else:
                assert linux == EXPECTED[name], (ctx, "linux", linux)
                assert ukl_status == EXPECTED[name], (ctx, config, ukl_status)
    for config in UKL_CONFIGS:
        assert_clean(images[config] / "console.log")


@pytest.mark.parametrize("config", UKL_CONFIGS)
def test_sysenter_in_ring0_on_an_intel_cpu(userspace_images, config, monkeypatch):
    """On an Intel CPU SYSENTER is valid in long mode, and with
    IA32_EMULATION (base-debug) it entered entry_SYSENTER_compat, whose
    SWAPGS assumed ring 3. While a UKL task runs it must fault instead."""
    monkeypatch.setenv("UKL_QEMU_ARGS", "-cpu max,vendor=GenuineIntel")
    image = userspace_images[config]
    res = ukl("run", image, "--timeout", "300", "--sh",
              "grep -m1 vendor_id /proc/cpuinfo; $UKL_APP sysenter; echo status=$?")
    assert "GenuineIntel" in res.stdout, res.stdout
    assert res.returncode == 0 and "status=139" in res.stdout, res.stdout
    assert_clean(image / "console.log")


@pytest.mark.parametrize("name,status", [("null-call", 139), ("heap-call", 139), ("tf-set", 133),
                                         ("sigreturn-noncanonical", 139), ("df-syscall", 0)])
def test_ukl_run_reports_the_fault_status(images, name, status):
    res = ukl("run", images["base"], "--timeout", "120", "--", name)
    assert res.returncode == status, res.stdout
    assert_clean(images["base"] / "console.log")


def test_vfork_returns_to_the_parent_intact(images):
    for config, image in images.items():
        res = ukl("run", image, "--timeout", "120", "--", "vfork")
        assert res.returncode == 0, res.stdout
        assert app_lines(res.stdout) == ["vfork+_exit: status 3, local 17",
                                         "vfork+execve: status 42, local 17",
                                         "vfork+calls: status 4, local 17"], (config, res.stdout)
        assert_clean(image / "console.log")


def test_unprivileged_users_cannot_start_trace_or_write_the_application(images):
    got = {}
    for config, image in images.items():
        res = ukl("run", image, "--timeout", "120", "--", "abuse")
        assert res.returncode == 0, res.stdout
        got[config] = dict(line.split(": ", 1) for line in app_lines(res.stdout))
        assert_clean(image / "console.log")
    checks = ("exec as nobody", "ptrace attach as nobody", "process_vm_writev as nobody",
              "/proc/PID/mem write as nobody")
    # An ordinary program that dropped to nobody and asked to be dumpable is open to nobody...
    assert all(got["linux"][c] == "allowed" for c in checks), got["linux"]
    # ...a UKL process never is, and nobody may start one.
    for config in UKL_CONFIGS:
        assert got[config] == {"exec as nobody": "refused (EPERM)", "ptrace attach as nobody": "refused (EPERM)",
                               "process_vm_writev as nobody": "refused (EPERM)",
                               "/proc/PID/mem write as nobody": "refused (EACCES)"}, (config, got[config])


# Two application threads take page faults, signals and timer interrupts
# while the shell sends NMIs to every other CPU (sysrq 'l': a backtrace of
# each CPU, taken in NMI context) as fast as it can.
STORM = r"""
$UKL_APP storm {seconds} > /tmp/storm & app=$!
n=0
while kill -0 $app 2>/dev/null; do echo l > /proc/sysrq-trigger; n=$((n+1)); done
wait $app; st=$?
sleep 3  # let the console drain the backtraces first
cat /tmp/storm; echo app=$st sysrq=$n
sleep 1
"""


# A backtrace that sysrq 'l' asks for runs from its header to the end of
# its stack dump (or, for a CPU interrupted in user mode, to the next
# header); a failure's own first line ("WARNING:", "BUG:", ...) always ends
# it and is kept.
BACKTRACE_HEADER = re.compile(r"NMI backtrace for cpu|sysrq: Show backtrace")
BACKTRACE_END = re.compile(r"^\s*</(TASK|NMI|IRQ)>")


def first_stacks(log: str, rip: str) -> list[str]:
    """The first stack ("TASK", "IRQ", "UKL"...) each backtrace whose RIP
    starts with RIP walks, in order ("" where it walks none)."""
    from ukltool.run import logscan
    out, want = [], False
    for line in log.splitlines():
        body = logscan.STAMP.split(line)[-1].strip()
        if body.startswith("RIP: "):
            want = body.split(":", 2)[-1].startswith(rip)
        elif want and (m := re.fullmatch(r"<(\w+)>", body)):
            out.append(m.group(1))
            want = False
        elif want and body.startswith(("NMI backtrace", "sysrq:")):
            out.append("")
            want = False
    return out


def without_nmi_backtraces(log: str) -> str:
    """The console without the backtraces sysrq 'l' asks for (their
    "Call Trace:" lines are requested output, not failures)."""
    from ukltool.run import logscan
    out, inside = [], False
    for line in log.splitlines():
        body = logscan.STAMP.split(line)[-1]  # the line's (last) kernel message
        if BACKTRACE_HEADER.search(line):
            inside = True
        elif inside and BACKTRACE_END.search(body):
            inside = False
        elif inside and logscan.FAILURE.search(body) and not body.startswith("Call Trace:"):
            inside = False
            out.append(line)
        elif not inside:
            out.append(line)
    return "\n".join(out)


@pytest.fixture(scope="module")
def userspace_images(outdir):
    """The application beside a shell, and the same program as an ordinary
    ring-3 binary, /bin/faults-ring3."""
    from ukltool.build import app
    ring3 = outdir / "faults-ring3"
    app.build_static([SRC], ring3)  # as --config linux builds it
    return {c: build(SRC, c, outdir / f"faults-userspace-{c}", "--userspace",
                     "--file", f"{ring3}:/bin/faults-ring3") for c in UKL_CONFIGS}


@pytest.mark.parametrize("config", UKL_CONFIGS)
def test_int80_faults_in_the_application_only(userspace_images, config):
    """INT $0x80 is a 32-bit system call (here exit(7)) for a 64-bit process
    in ring 3 where IA32_EMULATION is on (base-debug), #GP (SIGSEGV) where
    it is off (base); the UKL application has no 32-bit ABI and gets
    SIGSEGV in every context, also where vector 0x80 would otherwise be a
    device vector that ring 0 may raise."""
    image = userspace_images[config]
    res = ukl("run", image, "--timeout", "300", "--sh",
              "/bin/faults-ring3 int80; echo ring3=$?; "
              "for c in main thread handler child; do $UKL_APP int80 $c; echo app-$c=$?; done")
    ring3 = 7 if has_ia32_emulation(config) else 139
    assert res.returncode == 0 and f"ring3={ring3}" in res.stdout, res.stdout
    for ctx in CONTEXTS:
        assert f"app-{ctx}=139" in res.stdout, res.stdout
    assert_clean(image / "console.log")


@pytest.mark.parametrize("config,seconds", [(c, 120 if c in DEBUG_CONFIGS else 40) for c in UKL_CONFIGS])
def test_nmi_storm_during_faults_and_signals(userspace_images, config, seconds):
    from ukltool.run import logscan
    image = userspace_images[config]
    res = ukl("run", image, "--smp", "2", "--timeout", str(seconds + 300), "--sh", STORM.format(seconds=seconds))
    m = re.search(r"app=(\d+) sysrq=(\d+)", res.stdout)
    assert m and m.group(1) == "0" and int(m.group(2)) > 10, res.stdout[-3000:]
    log = (image / "console.log").read_text(errors="replace")
    assert log.count("NMI backtrace for cpu 1") > 10, "no NMIs reached the second CPU"
    # Every vector arrives on the UKL IST stack: an NMI at a page fault's
    # first instruction finds the frame there, and the unwinder must say so
    # instead of walking whatever the next page holds.
    at_entry = first_stacks(log, "asm_exc_page_fault+0x0/")
    assert at_entry and set(at_entry) == {"UKL"}, at_entry
    bad = logscan.failure_lines(without_nmi_backtraces(log))
    assert not bad, bad


def test_kernel_stack_overflow_is_still_reported(userspace_images):
    """Every vector arrives on the UKL IST stack, so an overflow of a kernel
    stack raises a page fault there instead of a double fault: the report
    must be the same (lkdtm's EXHAUST_STACK recurses until it overflows)."""
    image = userspace_images[DEBUG_CONFIGS[0]]  # lkdtm is in the debug kernel
    log_file = image / "exhaust-stack.log"  # the storm's console.log stays for a post-mortem
    res = ukl("run", image, "--timeout", "300", "--log", log_file, "--sh",
              "mount -t debugfs none /sys/kernel/debug; "
              "echo EXHAUST_STACK > /sys/kernel/debug/provoke-crash/DIRECT; echo survived")
    log = log_file.read_text(errors="replace")
    assert res.returncode == 125 and "survived" not in res.stdout, res.stdout[-3000:]
    assert re.search(r"BUG: task stack guard page was hit at", log, re.I), log[-3000:]


@pytest.mark.parametrize("config", [c for c in UKL_CONFIGS if config_has(c, "CONFIG_GCC_PLUGIN_STACKLEAK=y")])
def test_stackleak_erases_the_stack_before_returning_to_the_application(userspace_images, config):
    """With STACKLEAK every return to the application erases the kernel
    stack it used, as every return to ring 3 does. lkdtm's STACKLEAK_ERASING
    reports the lowest stack pointer since the last erase: after a deep
    poll() and an open(), the write that runs it must find the same as the
    same program in ring 3 (where the poll's and the open's returns
    erased), not the poll's depth."""
    image = userspace_images[config]
    log_file = image / "stackleak.log"
    res = ukl("run", image, "--timeout", "300", "--log", log_file, "--sh",
              "mount -t debugfs none /sys/kernel/debug; "
              "/bin/faults-ring3 lkdtm STACKLEAK_ERASING; echo ring3=$?; "
              "$UKL_APP lkdtm STACKLEAK_ERASING; echo app=$?; "
              "dmesg | grep -E 'lowest:|properly erased'")  # lkdtm's pr_info lines
    out = res.stdout
    assert "ring3=0" in out and "app=0" in out, out[-3000:]
    assert out.count("OK: the rest of the thread stack is properly erased") == 2, out[-3000:]
    ring3, app = (int(n) for n in re.findall(r"\blowest:\s+(\d+) bytes", out))
    assert app <= ring3 + 128, f"lowest stack use since the last erase: ring 3 {ring3} B, application {app} B"
    assert_clean(log_file)
