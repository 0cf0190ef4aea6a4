"""The benchmark instrument, CI-sized: it runs end to end and --icount
results repeat exactly, 99th percentiles included: under --icount the
guest has neither host randomness nor the host's date (whose value alone
moved a 99th percentile by 28 instructions), so two boots execute the
same instructions and every timer tick lands in the same iteration.
Profiles (base+byp, base+ret) are measured beside their configuration."""

from __future__ import annotations

import json

from conftest import ukl


def test_quick_icount_runs_repeat(tmp_path):
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}.json"
        args = ["bench", "syscalls", "--configs", "linux,base,base+byp,base+ret", "--icount", "--quick", "--json", out]
        if i == 0:
            args += ["--plot", tmp_path / "plot.png", "--markdown", tmp_path / "results.md", "--model", "cycles"]
        res = ukl(*args)
        assert res.returncode == 0, res.stdout
        assert "getppid" in res.stdout
        runs.append(json.loads(out.read_text()))
    for config, points in runs[0]["results"].items():
        assert points == runs[1]["results"][config], config
    ops = {p["op"] for p in runs[0]["results"]["base"]}
    assert {"getppid", "read", "write", "sendto", "recvfrom", "mmap+munmap", "page-fault",
            "stack-fault", "thread-create+join", "context-switch"} <= ops
    assert (tmp_path / "plot.png").stat().st_size > 10000
    md = (tmp_path / "results.md").read_text()
    assert "| getppid |" in md and "base vs linux" in md and "base+ret vs linux" in md
    # byp is on in base+byp: the null system call skips the entry and exit work
    median = {c: {(p["op"], p["size"]): p["median"] for p in pts} for c, pts in runs[0]["results"].items()}
    assert median["base+byp"]["getppid", 0] < median["base"]["getppid", 0] - 20, median
    assert median["base+byp"]["read", 1] < median["base"]["read", 1] - 20, median
    # ret returns from the page fault by STI; JMP: a dozen more instructions instead of IRET
    assert 0 < median["base+ret"]["page-fault", 4096] - median["base"]["page-fault", 4096] < 40, median
    assert median["base+ret"]["getppid", 0] == median["base"]["getppid", 0], median
    # the instruction classes (TCG plugin): ret's page faults return without IRET, base's by IRET;
    # a UKL system call has no SYSCALL/SYSRET, Linux's has one of each
    model = runs[0]["model"]["results"]

    def per_op(config: str, op: str, size: int, cls: str) -> float:
        return next(p for p in model[config] if (p["op"], p["size"]) == (op, size))["mean"].get(cls, 0.0)
    assert per_op("base", "page-fault", 4096, "iret") > 0.9, model["base"]
    assert per_op("base+ret", "page-fault", 4096, "iret") < 0.1, model["base+ret"]
    assert per_op("linux", "getppid", 0, "syscall") == per_op("linux", "getppid", 0, "sysret") == 1.0
    assert per_op("base", "getppid", 0, "syscall") == per_op("base", "getppid", 0, "sysret") == 0.0
