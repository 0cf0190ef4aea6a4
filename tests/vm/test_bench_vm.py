"""The benchmark instrument, CI-sized: it runs end to end and --icount
results repeat exactly, 99th percentiles included: under --icount the
guest has neither host randomness nor the host's date (whose value alone
moved a 99th percentile by 28 instructions), so two boots execute the
same instructions and every timer tick lands in the same iteration.
Profiles (base+byp, base+ret) are measured beside their configuration;
the first run also models cycles and profiles two points by function."""

from __future__ import annotations

import json

from conftest import ukl


def test_quick_icount_runs_repeat(tmp_path):
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}.json"
        args = ["bench", "syscalls", "--configs", "linux,base,base+byp,base+ret", "--icount", "--quick", "--json", out]
        if i == 0:
            args += ["--plot", tmp_path / "plot.png", "--markdown", tmp_path / "results.md", "--model", "cycles",
                     "--by-function", "getppid,read:1"]
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

    # --by-function: where getppid's and read's instructions go, by function
    assert "## Where the instructions go" in md and "### read 1 B" in md
    prof = {c: {(p["op"], p["size"]): p for p in ps} for c, ps in runs[0]["profiles"].items()}
    for point in (("getppid", 0), ("read", 1)):
        fns = {c: prof[c][point]["functions"] for c in prof}
        # the system call's own work is the same everywhere, and do_syscall_64()
        # carries no UKL hook for tasks without options (kernel patch 0029)
        body = "__task_pid_nr_ns" if point[0] == "getppid" else "shmem_file_read_iter"
        assert len({f[body] for f in fns.values()}) == 1, fns
        # (within one instruction: the plugin counts whole translation blocks,
        # and where base's do_syscall_64() has an instruction across a page
        # boundary it counts one more than icount retires; the hook was 10)
        assert fns["base"]["do_syscall_64"] == fns["base+ret"]["do_syscall_64"], fns
        assert abs(fns["base"]["do_syscall_64"] - fns["linux"]["do_syscall_64"]) <= 1, fns
        # Linux enters by SYSCALL, UKL by a call; byp skips the entry work
        assert fns["linux"].get("entry_SYSCALL_64", 0) >= 1 and "syscall_return_via_sysret" in fns["linux"]
        for c in ("base", "base+byp", "base+ret"):
            assert "entry_SYSCALL_64" not in fns[c] and fns[c]["ukl_entry_SYSCALL_64"] >= 1, (c, fns[c])
        assert fns["base+byp"]["ukl_byp_syscall"] > 20 and "ukl_byp_syscall" not in fns["base"], fns
        # byp's full path (every 64th call) is the UKL entry's own ukl_do_syscall_64()
        assert "do_syscall_64" not in fns["base+byp"] and 0 < fns["base+byp"]["ukl_do_syscall_64"] < 1, fns
        # the profile accounts for every instruction of the region, and a few
        # more: the block holding the end marker is the benchmark's timing
        # code, attributed whole
        for c in prof:
            insns = next(p for p in model[c] if (p["op"], p["size"]) == point)["insns_mean"]
            total = sum(fns[c].values())
            assert 0 <= total - insns <= 16, (c, point, total, insns)
