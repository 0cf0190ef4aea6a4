"""The benchmark instrument, CI-sized: it runs end to end and --icount
results repeat: every median exactly, every 99th percentile to within 1%
(icount alone is not record/replay: a rare interruption, such as a timer
tick, can land in a different iteration of the 1,000)."""

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
        again = runs[1]["results"][config]
        assert [(p["op"], p["size"], p["median"]) for p in points] == \
            [(p["op"], p["size"], p["median"]) for p in again], config
        for p, q in zip(points, again, strict=True):
            assert abs(p["p99"] - q["p99"]) <= 0.01 * p["p99"], (config, p, q)
    ops = {p["op"] for p in runs[0]["results"]["base"]}
    assert {"getppid", "read", "write", "sendto", "recvfrom", "mmap+munmap", "page-fault",
            "stack-fault", "thread-create+join", "context-switch"} <= ops
    assert (tmp_path / "plot.png").stat().st_size > 10000
    assert "| getppid |" in (tmp_path / "results.md").read_text()
