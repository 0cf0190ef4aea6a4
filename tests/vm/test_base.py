"""Boot tests of the UKL base model (--config base, and base-debug: the same
on a debug kernel), with the same freestanding program built for
--config linux as the reference."""

from __future__ import annotations

import pytest

from conftest import ALL_CONFIGS, REPO, assert_clean, build, ukl, vmlinux_symbols

SRC = REPO / "tests" / "apps" / "ukl_base.c"
CONFIGS = ALL_CONFIGS


@pytest.fixture(scope="module", params=CONFIGS)
def image(request, outdir):
    # --userspace: a shell runs many cases in one boot (see `batch`)
    return request.param, build(SRC, request.param, outdir / f"ukl-base-{request.param}", "--freestanding",
                                "--userspace")


def run(image, *args, smp="1"):
    config, out = image
    res = ukl("run", out, "--smp", smp, "--timeout", "90", "--", *args)
    return config, res, out


# Cases that need no boot of their own: one boot per configuration runs
# them all from a shell, each as its own process with its exit status.
FAULTS = {"null": 139, "wild": 139, "kernel-hole": 139, "const": 139, "divide": 136, "ud2": 132,
          "int3": 133, "overflow": 139}
BATCHED = ["memory", "ifunc", "stack", "thread", "preempt", "signals", "fork", *FAULTS]


@pytest.fixture(scope="module")
def batch(image):
    """{case: (status, output)} from one boot (1 vCPU) running every BATCHED case."""
    config, out = image
    script = "".join(f'echo "=== {c}"; $UKL_APP {c}; echo "=== {c} status=$?"\n' for c in BATCHED)
    res = ukl("run", out, "--smp", "1", "--timeout", "600", "--sh", script + "sleep 1\n")
    assert res.returncode == 0, res.stdout[-3000:]
    results = {}
    for c in BATCHED:
        begin, end = f"=== {c}\n", f"=== {c} status="
        assert begin in res.stdout and end in res.stdout, (c, res.stdout[-3000:])
        body = res.stdout.split(begin, 1)[1].split(end, 1)[0]
        status = int(res.stdout.split(end, 1)[1].split("\n", 1)[0])
        results[c] = (status, body)
    assert_clean(out / "console.log")
    return config, results


def passed(batch, case: str) -> str:
    """The output of CASE in the batch boot, which must have exited 0."""
    status, stdout = batch[1][case]
    assert status == 0, stdout
    return stdout


def test_runs_in_the_right_ring_with_args_and_auxv(image):
    config, res, out = run(image, "info", "x y")
    assert res.returncode == 0, res.stdout
    assert f"ring {3 if config == 'linux' else 0}" in res.stdout
    assert "argv[1] = info" in res.stdout and "argv[2] = x y" in res.stdout
    assert "AT_PAGESZ 4096" in res.stdout and "AT_RANDOM yes" in res.stdout
    assert "ppid 1" in res.stdout
    assert_clean(out / "console.log")


def test_memory_and_pointers_into_the_image(batch):
    stdout = passed(batch, "memory")
    for line in ("mmap 64 MiB touched, munmap 0", "brk grew 1024 KiB", "write from rodata ok",
                 "read into bss: 9 bytes: ukl_base", "write(NULL) = -14", "write(kernel text) = -14",
                 "write(kernel hole) = -14", "write(rodata, 128 TiB) = -14",
                 "write(past the user top) = -14", "read(kernel data) = -14",
                 "getsockopt(SO_TYPE) into bss = 0, type 1, len 4",
                 "getsockopt(len in kernel text) = -14", "ioctl(FIONBIO, rodata) = 0",
                 "ioctl(FIONBIO, kernel text) = -14", "time into bss: same",
                 "time(kernel data) = -14", "time(rodata) = -14", "io_setup into bss = 0",
                 "io_destroy = 0", "open(missing) = -2",
                 "close(-1) = -9"):
        assert line in stdout, (line, stdout)
    # UKL admits the application's constants and data as two ranges: not
    # the freed padding between them (the one place it differs here)
    config = batch[0]
    want = "1048576" if config == "linux" else "-14"
    assert f"write(rodata and 1 MiB on) = {want}" in stdout, stdout


@pytest.mark.parametrize("image", [c for c in CONFIGS if c != "linux"], indirect=True)
def test_the_padding_after_the_constants_faults(image):
    """The kernel frees the image's padding between the application's
    constants and its data, and unmaps it (kernel patch 0017): reading its
    first page is SIGSEGV, as reading past the end of an ordinary
    process's segment, not a read of the page allocator's memory."""
    config, out = image
    s = vmlinux_symbols(out, "__ukl_rodata_end", "__ukl_data_start")
    pad = -(-s["__ukl_rodata_end"] // 4096) * 4096
    assert pad < s["__ukl_data_start"], s   # the constants do not end on a 2 MiB boundary
    for addr, status in ((s["__ukl_rodata_end"] - 1, 0), (pad, 139)):
        res = ukl("run", out, "--smp", "1", "--timeout", "90", "--", "read", f"{addr:x}")
        assert res.returncode == status, (hex(addr), res.stdout[-2000:])
    assert_clean(out / "console.log")


def test_ifunc_relocations_are_linked_and_applied(batch):
    stdout = passed(batch, "ifunc")
    assert "ifunc: 1 relocations, answer 42" in stdout


def test_stack_grows_on_page_faults(batch):
    stdout = passed(batch, "stack")
    assert "large frame ok" in stdout and "recursion 20000 deep" in stdout


def check_thread(stdout: str) -> None:
    assert "thread created, ran 2" in stdout
    assert "futex wake on static data: 0" in stdout


def test_thread_on_its_own_growing_stack(batch):
    stdout = passed(batch, "thread")
    check_thread(stdout)


def test_thread_on_its_own_growing_stack_on_two_cpus(image):
    config, res, out = run(image, "thread", smp="2")
    assert res.returncode == 0, res.stdout
    check_thread(res.stdout)
    assert_clean(out / "console.log")


def test_busy_threads_are_preempted(batch):
    stdout = passed(batch, "preempt")
    assert "preempt: both threads ran" in stdout


def test_signals_restart_and_caught_faults(batch):
    stdout = passed(batch, "signals")
    for line in ("SIGUSR1 handled: 10", "read interrupted: -4", "read restarted: 1 x",
                 "caught SIGSEGV 11", "caught SIGFPE 8", "caught SIGILL 4", "caught SIGTRAP 5"):
        assert line in stdout, (line, stdout)


@pytest.mark.parametrize("case,status", FAULTS.items())
def test_app_faults_are_signals_not_oopses(batch, case, status):
    got, stdout = batch[1][case]
    assert got == status, stdout


def test_raw_fork_of_the_application(batch):
    """clone(SIGCHLD) straight from the application, no C library: the
    child runs on its own copy of the data and its exit status arrives."""
    stdout = passed(batch, "fork")
    assert "fork: child exited 7" in stdout


def test_app_symbols_are_prefixed_in_the_kernel_symbol_table(image):
    from ukltool.build import image as image_mod

    config, out = image
    smap = image_mod.load(out).vmlinux_path().with_name("System.map")
    names = {line.split()[2] for line in smap.read_text().splitlines()}
    assert "main" not in names
    if config != "linux":
        assert {"ukl_main", "ukl__start", "ukl_entry_SYSCALL_64"} <= names
    else:  # stock Linux: nothing of UKL
        assert not {n for n in names if n.startswith("ukl_")}
