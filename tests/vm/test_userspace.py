"""Images with a userspace (--userspace): the application is started from a
shell like any program, any number of times, beside ordinary processes,
and standard tools see and manage it (issue 5, first part)."""

from __future__ import annotations

import pytest

from conftest import ALL_CONFIGS, REPO, assert_clean, build, ukl
from ukltool.build import image as images
from ukltool.build import initramfs

SRC = REPO / "tests" / "apps" / "libc_suite.c"

SCRIPT = r"""
echo app=$UKL_APP
$UKL_APP stdio > /tmp/first; echo first=$?
$UKL_APP reexec 1; echo second=$?
$UKL_APP serve & pid=$!
sleep 60 & other=$!
sleep 2
$UKL_APP reexec 1 > /tmp/beside; echo beside=$? $(grep -c 'data 11 bss 1' /tmp/beside)
ps -o pid,comm | grep -w $pid
echo tasks=$(ls /proc/$pid/task | wc -l)
grep -E '^(Name|Threads):' /proc/$pid/status
echo cmdline=$(tr '\0' ' ' < /proc/$pid/cmdline)
grep -c . /proc/$pid/maps > /dev/null && echo maps=ok
grep '\[stack\]' /proc/$pid/maps | cut -d' ' -f2
cut -d' ' -f2,3 /proc/$pid/stat
kill -TERM $pid; wait $pid; echo term=$?
$UKL_APP serve & pid=$!
sleep 1
kill -KILL $pid; wait $pid; echo kill=$?
kill -0 $other && echo other=alive
kill $other
sleep 1  # console output queued at the moment the VM exits can be lost
exit 3
"""


@pytest.fixture(scope="module", params=ALL_CONFIGS)
def image(request, outdir):
    return request.param, build(SRC, request.param, outdir / f"userspace-{request.param}", "--userspace")


def test_app_started_from_a_shell_and_managed_by_standard_tools(image):
    config, out = image
    res = ukl("run", out, "--timeout", "240", "--sh", SCRIPT)
    lines = res.stdout.splitlines()
    assert res.returncode == 3, res.stdout
    app = "/bin/libc_suite" if config == "linux" else "/ukl/libc_suite"
    for want in (f"app={app}", "first=0", "run 1: data 11 bss 1", "run 3: data 11 bss 1", "second=0",
                 "serving", "beside=0 3", "tasks=3", "Name:\tlibc_suite", "Threads:\t3", f"cmdline={app} serve",
                 "maps=ok", "rw-p", "(libc_suite) S", "term=143", "kill=137", "other=alive"):
        assert any(l.strip().startswith(want) or l.strip() == want for l in lines), (want, res.stdout)
    assert any(l.split()[-1:] == ["libc_suite"] for l in lines if l.strip()[:1].isdigit()), res.stdout
    assert_clean(out / "console.log")


@pytest.mark.parametrize("config", ["linux", "base"])
def test_a_shell_without_userspace_comes_from_the_test_layer(outdir, config):
    """Issue 47, item 1: an image without --userspace carries no busybox;
    --sh loads the test layer for that boot alone."""
    out = build(REPO / "examples" / "hello" / "hello.c", config, outdir / f"no-userspace-{config}")
    archive = (out / "initramfs.cpio").read_bytes()
    assert initramfs.read_member(archive, "bin/busybox") is None
    assert initramfs.read_member(images.test_layer().read_bytes(), "bin/busybox") is not None
    res = ukl("run", out, "--sh", "echo from-the-layer; ls /bin/busybox; $UKL_APP x; echo rc=$?")
    assert res.returncode == 0, res.stdout
    for want in ("from-the-layer", "/bin/busybox", "argv[1] = x", "rc=0"):
        assert want in res.stdout, (want, res.stdout)
    assert_clean(out / "console.log")
    # the next boot without --sh has no shell: the layer came with that boot only
    res = ukl("run", out, "--", "y")
    assert res.returncode == 0 and "argv[1] = y" in res.stdout, res.stdout


def test_spawning_ordinary_programs_from_the_application(image):
    """system() and posix_spawn() (clone with CLONE_VM|CLONE_VFORK, then exec)
    start ordinary programs, which run as normal processes (ring 0 could
    not execute their user-half code under SMEP)."""
    config, out = image
    res = ukl("run", out, "--timeout", "120", "--sh", "$UKL_APP spawn; echo rc=$?")
    assert res.returncode == 0, res.stdout
    for want in ("hi from system", "system: 5", "spawned child", "posix_spawn: exited 0", "rc=0"):
        assert want in res.stdout, (want, res.stdout)
    assert "fork: child exited 9" in res.stdout, res.stdout
    assert_clean(out / "console.log")


def test_fork_gives_the_child_private_data_and_exec_makes_it_ordinary(image):
    """fork() of the application: parent and child run at the same time
    (they wait for each other through pipes), each sees its own .data, bss
    and C library heap, the child then execs /bin/echo, an ordinary ring-3
    program; 20 more children each see their own data; a forked child
    starts the application again while its parent still runs it."""
    config, out = image
    res = ukl("run", out, "--timeout", "180", "--sh", "$UKL_APP fork; echo rc=$?")
    assert res.returncode == 0, res.stdout
    for want in ("child: counter 1, child's heap", "child became echo", "parent: counter 100, parent's heap",
                 "parent: child exited 0, counter 2", "fork: 20 of 20 children saw their own data, counter 2",
                 "fork: the application started again in the child, exited 7", "rc=0"):
        assert want in res.stdout, (want, res.stdout)
    assert_clean(out / "console.log")


def test_perf_attributes_samples_and_call_chains_to_application_and_kernel_functions(outdir):
    """perf record -g on the running UKL application (built with frame
    pointers), beside an ordinary process: perf report names the
    application's hot function (kallsyms: ukl_ prefix) and kernel
    functions, and perf script shows the hot function's caller in the
    application by name (the input of a flame graph)."""
    out = build(SRC, "base", outdir / "userspace-base-fp", "--perf", "--cflags=-fno-omit-frame-pointer")
    script = ("$UKL_APP burn 8 & pid=$!; sleep 30 & other=$!; sleep 1; "
              "perf record -q -g -e cpu-clock -F 499 -p $pid -o /tmp/perf.data -- sleep 4; echo record=$?; "
              "perf report -i /tmp/perf.data --stdio --no-children -g none --sort sym 2>/dev/null "
              "| grep -v '^#' | grep .; "
              "perf script -i /tmp/perf.data -F comm,ip,sym 2>/dev/null | grep -A1 ukl_burn_cpu | head -60; "
              "wait $pid; echo app=$?; kill $other")
    res = ukl("run", out, "--timeout", "300", "--sh", script)
    assert res.returncode == 0, res.stdout
    assert "record=0" in res.stdout and "app=0" in res.stdout, res.stdout
    lines = res.stdout.splitlines()
    rows = [l.split() for l in lines if "%" in l and "[k]" in l]
    syms = {r[-1]: float(r[0].rstrip("%")) for r in rows}
    hot = [s for s in syms if s.startswith("ukl_burn_cpu")]
    assert hot and syms[hot[0]] > 50, res.stdout
    assert any(not s.startswith("ukl_") for s in syms), res.stdout  # kernel functions too
    callers = [lines[i + 1].split()[-1] for i, l in enumerate(lines[:-1])
               if l.split()[-1:] and l.split()[-1].startswith("ukl_burn_cpu")]
    # A caller in the application, named through kallsyms (not [unknown])
    assert any(c.startswith("ukl_") and not c.startswith("ukl_burn_cpu") for c in callers), res.stdout
    assert_clean(out / "console.log")


def test_interactive_shell_on_the_serial_console(image):
    """`ukl run --shell` on a terminal: commands typed reach a shell in the
    guest, and the shell's exit status is ukl's."""
    import os
    import pty
    import select
    import subprocess
    import time

    from conftest import UKL
    config, out = image
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(UKL), "run", out, "--timeout", "180", "--shell"], stdin=slave, stdout=slave,
                            stderr=slave, close_fds=True)
    os.close(slave)
    seen, sent = b"", False
    deadline = time.monotonic() + 170
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 1)
            if r:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
            if not sent and b"# " in seen:
                time.sleep(1)
                os.write(master, b"echo marker-$((6*7)) $UKL_APP; exit 4\r")
                sent = True
            if proc.poll() is not None:
                break
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = seen.decode(errors="replace")
    assert sent, text
    assert "marker-42 /" in text, text
    assert proc.returncode == 4, text


def _children(pid: int) -> set[int]:
    from pathlib import Path
    kids: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids |= {int(k) for k in (task / "children").read_text().split()}
    return kids


def _gone(pid: int, seconds: float = 10) -> bool:
    import os
    import time
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
            # a zombie is gone too: it runs nothing and holds no port
            if open(f"/proc/{pid}/stat").read().split(") ")[1].startswith("Z"):
                return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("how,status", [("SIGTERM", 143), ("SIGINT", 130), ("SIGKILL", -9), ("closed pipe", 141)])
def test_qemu_never_outlives_ukl_run(outdir, how, status):
    """Stopping `ukl run` by its PID, or closing the pipe it writes to,
    stops QEMU too (issue 12 item 8, issue 16 item 3)."""
    import signal
    import subprocess
    out = outdir / "userspace-base"
    if not out.exists():
        build(SRC, "base", out, "--userspace")
    # As from a terminal: a test run started in the background by a shell
    # without job control inherits SIGINT ignored, and Python keeps it so
    proc = subprocess.Popen([str(REPO / "ukl"), "run", str(out), "--timeout", "600", "--sh",
                             "echo ready; while true; do echo tick; sleep 1; done"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "ready":
            break
    qemu = _children(proc.pid)
    assert qemu, "no QEMU process found under ukl"
    if how == "closed pipe":
        proc.stdout.close()
    else:
        proc.send_signal(getattr(signal, how))
    assert proc.wait(timeout=60) == status
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")
    assert all(_gone(pid) for pid in qemu), f"QEMU ({qemu}) still runs after {how}"


def test_init_applies_an_ip_the_kernel_took_but_did_not(outdir):
    """An IP_PNP kernel consumes ip= even where it cannot apply it (here:
    a device it does not have), so init never sees it in its
    environment; init reads it from /proc/cmdline, says so, and gives
    eth0 the address (as on a kernel without IP_PNP)."""
    out = build(REPO / "examples" / "hello" / "hello.c", "base", outdir / "ip-fallback")
    res = ukl("run", out, "--append", "ip=10.0.3.7::10.0.3.1:255.255.255.0::eth9:off",
              "--sh", "ip -4 addr show eth0; ip route")
    assert res.returncode == 0, res.stdout
    assert "inet 10.0.3.7/24" in res.stdout and "default via 10.0.3.1" in res.stdout, res.stdout
    console = (out / "console.log").read_text()
    assert "the kernel did not configure eth0 from ip=10.0.3.7::10.0.3.1" in console
    assert_clean(out / "console.log")
