"""The C library port: one unmodified C program (tests/apps/libc_suite.c)
built for --config linux (host static glibc, ring 3) and --config base (our
glibc linked into the kernel, ring 0) must print the same lines and exit
with the same statuses; the kernel log must stay clean."""

from __future__ import annotations

import pytest

from conftest import ALL_CONFIGS, DEBUG_CONFIGS, REPO, UKL_CONFIGS, assert_clean, build, ukl

SRC = REPO / "tests" / "apps" / "libc_suite.c"
SECTIONS = ["startup", "stdio", "malloc", "strings", "time", "files", "threads", "signals", "sockets", "errno",
            "unwind"]


@pytest.fixture(scope="module")
def images(outdir):
    return {c: build(SRC, c, outdir / f"libc-suite-{c}") for c in ALL_CONFIGS}


def run(out, *args, timeout="120"):
    res = ukl("run", out, "--timeout", timeout, "--", *args)
    # Only the application's lines: drop ukl's own notices.
    lines = [l for l in res.stdout.splitlines() if not l.startswith(("ukl:", "ukl-init:"))]
    return res.returncode, lines


@pytest.fixture(scope="module")
def full_runs(images):
    """Every section, in one boot per configuration."""
    return {c: run(images[c]) for c in images}


# The line each section prints when it passed (the same in both rings)
PASS_LINES = {
    "startup": "constructor ran", "stdio": "long double: 0.3333333333", "malloc": "malloc: small, large",
    "strings": "strings: qsort", "time": "time: monotonic advances", "files": "files: 1000 lines",
    "threads": "threads: counter 40000, __thread distinct yes", "signals": "signals: raise SIGUSR1 handled",
    "sockets": "tcp: 1048576 bytes over loopback, intact yes", "errno": "errno: open ENOENT (2)",
    "unwind": "unwind: pthread_exit value 42, cancelled yes, cleanup handlers 2",
}


@pytest.mark.parametrize("section", SECTIONS)
def test_same_output_in_ring_0_and_ring_3(full_runs, images, section):
    code_l, out_l = full_runs["linux"]
    assert code_l == 0, out_l
    for config in UKL_CONFIGS:
        code_b, out_b = full_runs[config]
        assert not any(l.startswith("FAIL") for l in out_b), (config, out_b)
        assert any(l.startswith(PASS_LINES[section]) for l in out_b), (config, out_b)
        assert (code_b, out_b) == (code_l, out_l), config
        assert out_b[-2:] == ["done", "atexit handler ran"]
        assert_clean(images[config] / "console.log")


@pytest.mark.parametrize("args,status", [
    (["exit", "7"], 7),        # exit() flushes stdio and runs atexit handlers
    (["return", "3"], 3),
    (["abort"], 134),          # SIGABRT: 128 + 6
    (["smash", "A" * 40], 134),  # the stack protector catches the overflow and aborts
])
def test_exit_status_and_stack_protector(images, args, status):
    # Ring 3, the base model, and every option's exit and signal paths
    # under the debug kernel (base-debug+ret+byp)
    configs = ["linux", "base", max(DEBUG_CONFIGS, key=lambda c: c.count("+"))]
    results = {c: run(images[c], *args) for c in configs}
    assert results["base"][0] == status, results["base"]
    for config in configs:
        assert results[config] == results["linux"], config
    if args[0] == "exit":
        assert "exiting with 7 (unflushed)atexit handler ran" in results["base"][1]
    if args[0] == "smash":
        assert any("stack smashing detected" in l for l in results["base"][1])
    for config in configs[1:]:
        assert_clean(images[config] / "console.log")


def test_the_linked_glibc_has_no_syscall_instruction_and_calls_the_clock_directly(images):
    import subprocess

    from ukltool.build import image
    vmlinux = image.load(images["base"]).vmlinux_path()
    smap = vmlinux.with_name("System.map").read_text()
    assert " ukl___libc_start_main" in smap and " ukl_printf" in smap
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-j", ".ukl.text", str(vmlinux)],
                         capture_output=True, text=True).stdout
    assert "call" in dis and "ukl_entry_SYSCALL_64" in dis
    from ukltool.build import app
    assert app.raw_syscalls(dis) == []
    assert "<ukl_vdso_clock_gettime>" in dis


def test_each_exec_starts_from_the_initial_data(images):
    """The program execs itself twice: data and bss start afresh each time."""
    results = {c: run(images[c], "reexec", "1") for c in images}
    assert results["base"] == results["linux"], results
    assert results["base"] == (0, ["run 1: data 11 bss 1", "run 2: data 11 bss 1", "run 3: data 11 bss 1"])
    assert_clean(images["base"] / "console.log")
