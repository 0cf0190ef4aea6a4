"""Reading a clock in ring 0 is a function call into the kernel
(ukl_vdso_clock_gettime), not a system call: measured with -icount, so the
comparison repeats exactly."""

from __future__ import annotations

from conftest import REPO, assert_clean, build, ukl


def parse(out: str) -> dict[str, float]:
    vals = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("clock_gettime", "gettimeofday", "time", "getppid-syscall"):
            vals[parts[0]] = float(parts[1])
    return vals


def test_clock_reads_cost_a_fraction_of_a_system_call(outdir):
    out = build(REPO / "bench" / "clocks.c", "base", outdir / "clocks-base")
    res = ukl("run", out, "--icount", "--timeout", "300")
    assert res.returncode == 0, res.stdout
    v = parse(res.stdout)
    assert set(v) == {"clock_gettime", "gettimeofday", "time", "getppid-syscall"}, res.stdout
    for name in ("clock_gettime", "gettimeofday", "time"):
        assert v[name] < 0.6 * v["getppid-syscall"], v
    assert_clean(out / "console.log")
