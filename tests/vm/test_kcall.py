"""Direct calls into the kernel (ukl_call() from runtime/ukl.h, system call
UKL_NR_CALL): a UKL application calls a clock, a function that sleeps and
one that copies from its stack, from two threads, with a clean log under
the debug kernel (lockdep, KASAN, DEBUG_ATOMIC_SLEEP, context tracking);
targets outside the kernel's text are refused; an ordinary process, on a
UKL kernel or on Linux, gets ENOSYS."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import BASELINE, REPO, UKL_CONFIGS, assert_clean, build, ukl

SRC = REPO / "tests" / "apps" / "kcall.c"

CALLS = [f"{who}: {what}" for who in ("main", "thread")
         for what in ("clock between", "slept 30 ms", "written by ksys_write", "write returned its length")]
REFUSED_TARGETS = ["NULL: Bad address", "heap: Bad address", "application: Bad address",
                   "kernel data: Bad address", "entry code: Bad address", "vsyscall page: Bad address"]


@pytest.fixture(scope="module")
def ordinary(tmp_path_factory):
    """kcall.c as an ordinary static program, for the ring-3 side."""
    out = tmp_path_factory.mktemp("kcall") / "kcall3"
    cc = shutil.which("gcc") or "cc"
    subprocess.run([cc, "-static", "-O2", "-isystem", REPO / "runtime", SRC, "-o", out, "-lpthread"],
                   check=True)
    return out


@pytest.mark.parametrize("config", UKL_CONFIGS)
def test_direct_calls_run_in_system_call_context(outdir, ordinary, config):
    image = build(SRC, config, outdir / f"kcall-{config}", "--userspace", "--file", f"{ordinary}:/bin/kcall3")
    res = ukl("run", image, "--timeout", "300", "--sh", "$UKL_APP calls; echo rc=$?; /bin/kcall3 refused")
    assert res.returncode == 0, res.stdout
    lines = res.stdout.splitlines()
    for want in [*CALLS, *REFUSED_TARGETS, "rc=0", "refused: Function not implemented"]:
        assert want in lines, (want, res.stdout)
    assert_clean(image / "console.log")


def test_an_ordinary_process_gets_enosys(outdir):
    image = build(SRC, BASELINE, outdir / "kcall-linux")
    res = ukl("run", image, "--", "refused")
    assert res.returncode == 0 and "refused: Function not implemented" in res.stdout, res.stdout
