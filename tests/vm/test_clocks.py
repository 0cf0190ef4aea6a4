"""Reading a clock in ring 0 is a function call into the kernel
(ukl_vdso_clock_gettime), not a system call: measured with -icount, so the
comparison repeats exactly. And it gives the system call's answer for
every clock id, under every clock source the guest's kernel offers and in
a time namespace (tests/apps/clocksources.c)."""

from __future__ import annotations

import pytest

from conftest import DEBUG_CONFIGS, REPO, assert_clean, build, ukl


def parse(out: str) -> dict[str, float]:
    vals = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("clock_gettime", "gettimeofday", "time", "getppid-syscall"):
            vals[parts[0]] = float(parts[1])
    return vals


def test_clock_reads_cost_a_fraction_of_a_system_call(outdir):
    out = build(REPO / "guest" / "bench" / "clocks.c", "base", outdir / "clocks-base")
    res = ukl("run", out, "--icount", "--timeout", "300")
    assert res.returncode == 0, res.stdout
    v = parse(res.stdout)
    assert set(v) == {"clock_gettime", "gettimeofday", "time", "getppid-syscall"}, res.stdout
    for name in ("clock_gettime", "gettimeofday", "time"):
        assert v[name] < 0.6 * v["getppid-syscall"], v
    assert_clean(out / "console.log")


# Under TCG the guest's kernel offers these three (kvm-clock only under
# KVM, where `ukl run` and urunc give the guest -cpu host): the direct
# read serves only the TSC, the others must reach the system call.
TCG_SOURCES = {"tsc", "hpet", "acpi_pm"}
CLOCK_CONFIGS = ["linux", "base", "base+ret+byp", max(DEBUG_CONFIGS, key=lambda c: c.count("+"))]


@pytest.mark.parametrize("config", CLOCK_CONFIGS)
def test_every_clock_under_every_clock_source_and_in_a_time_namespace(outdir, config):
    """Issue 44: gettimeofday() returned {0, 0} (1970) under base when the
    clock source was not the TSC (kvm-clock on every KVM host) or the task
    was in a time namespace, and time() the epoch in a time namespace."""
    out = build(REPO / "tests" / "apps" / "clocksources.c", config, outdir / f"clocksources-{config}")
    res = ukl("run", out, "--timeout", "600")
    lines = res.stdout.splitlines()
    assert not [line for line in lines if line.startswith("FAIL")], res.stdout
    assert res.returncode == 0, res.stdout
    for ns in ("initial namespace", "time namespace"):
        # tsc-early until the TSC's refined calibration, a second after boot: the same vDSO clock mode
        checked = {line.split(": ")[2].split()[0].removesuffix("-early") for line in lines
                   if line.startswith(f"clocksources: {ns}: ") and line.endswith(" checked")}
        assert checked >= TCG_SOURCES, (ns, res.stdout)
    assert any(line.startswith("clocksources: entered a time namespace") for line in lines), res.stdout
    summary = [line for line in lines if line.startswith("clocksources: ") and " checks, " in line]
    assert summary and summary[-1].endswith(" 0 failures"), res.stdout
    assert_clean(out / "console.log")
