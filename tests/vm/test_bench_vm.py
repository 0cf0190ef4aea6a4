"""The benchmark instrument, CI-sized: it runs end to end and --icount
results repeat exactly, 99th percentiles included: under --icount the
guest has neither host randomness nor the host's date (whose value alone
moved a 99th percentile by 28 instructions), so two boots execute the
same instructions and every timer tick lands in the same iteration."""

from __future__ import annotations

import json

from conftest import ukl


def test_quick_icount_runs_repeat(tmp_path):
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}.json"
        args = ["bench", "syscalls", "--configs", "linux,base", "--icount", "--quick", "--json", out]
        if i == 0:
            args += ["--plot", tmp_path / "plot.png", "--markdown", tmp_path / "results.md"]
        res = ukl(*args)
        assert res.returncode == 0, res.stdout
        assert "getppid" in res.stdout and "base vs linux" in res.stdout
        runs.append(json.loads(out.read_text()))
    for config, points in runs[0]["results"].items():
        assert points == runs[1]["results"][config], config
    ops = {p["op"] for p in runs[0]["results"]["base"]}
    assert {"getppid", "read", "write", "sendto", "recvfrom", "mmap+munmap", "page-fault",
            "stack-fault", "thread-create+join", "context-switch"} <= ops
    assert (tmp_path / "plot.png").stat().st_size > 10000
    assert "| getppid |" in (tmp_path / "results.md").read_text()
