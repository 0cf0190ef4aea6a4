"""Benchmark report logic (no VM)."""

from __future__ import annotations

import pytest

from ukltool.bench import benchcommon, syscalls
from ukltool.util.errors import UklError

RUN = """noise
BENCH-INFO iterations 1000 warmup 100 tsc_per_ms 1000000
BENCH getppid 0 200 210 1000
BENCH read 1 1000 1100 1000
BENCH-DONE
"""


def report(**results) -> syscalls.Report:
    r = syscalls.Report(unit="guest instructions", accel="tcg", icount=True, quick=True, machine="m",
                     configs=list(results))
    r.kernels = {c: "6.1.192-ukl" for c in results}
    r.results = {c: syscalls.parse(text) for c, text in results.items()}
    return r


def test_parse_and_unfinished_runs():
    pts = syscalls.parse(RUN)
    assert pts == [syscalls.Point("getppid", 0, 200, 210, 1000), syscalls.Point("read", 1, 1000, 1100, 1000)]
    with pytest.raises(UklError, match="did not finish"):
        syscalls.parse("BENCH getppid 0 1 1 1\n")


def test_change_is_relative_to_the_baseline():
    assert syscalls.change(200, 150) == -25.0
    assert syscalls.change(200, 250) == 25.0
    assert syscalls.change(0, 5) == 0.0


def test_rows_table_and_markdown():
    r = report(linux=RUN, base=RUN.replace("200 210", "150 160"))
    rows = syscalls.rows(r)
    assert rows[0][0] == "getppid" and rows[0][2]["base"].median == 150
    md = syscalls.markdown(r, None)
    assert "| getppid |  | 200 (210) | 150 (160) | -25.0% |" in md
    assert "one guest instruction" in md and "norandmaps" in md
    assert syscalls.table(r).row_count == 2


def test_improvement_in_instructions_and_modelled_cycles(tmp_path):
    r = report(linux=RUN, base=RUN.replace("200 210", "150 160").replace("1000 1100", "1100 1200"))
    assert syscalls.improvement(r, "getppid", "base") == ([0], [25.0])
    assert syscalls.improvement(r, "read", "base") == ([1], [-10.0])
    assert syscalls.improvement(r, "getppid", "base", "cycles") == ([], [])  # no model
    from ukltool.plugin import cyclemodel
    r.model = cyclemodel.Model("cpu", "A CPU", {"SYSCALL": 50.0, "IRET": 100.0})
    r.model.results = {
        "linux": [cyclemodel.OpCounts("getppid", 0, 1000, {"SYSCALL": 1}, {}, 1.0, 0.0)],
        "base": [cyclemodel.OpCounts("getppid", 0, 1000, {}, {}, 1.0, 0.0)]}
    # linux 200 + 50, base 150: 40% fewer modelled cycles; read has no counts
    assert syscalls.improvement(r, "getppid", "base", "cycles") == ([0], [40.0])
    assert syscalls.improvement(r, "read", "base", "cycles") == ([], [])
    syscalls.plot(r, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 10000


def test_the_baseline_is_the_first_configuration_without_ukl(tmp_path):
    assert benchcommon.baseline(["base", "base+byp"]) == ["linux", "base", "base+byp"]
    assert benchcommon.baseline(["base", "linux"]) == ["linux", "base"]
    assert benchcommon.baseline(["base", "base", "linux"]) == ["linux", "base"]
    # the baseline on another CPU than a configuration compared with it
    assert benchcommon.cpu_mismatch(["linux", "base", "base+byp"]) is None
    assert benchcommon.cpu_mismatch(["linux-mitigated", "base-mitigated+ret"]) is None
    assert "linux-mitigated" in (benchcommon.cpu_mismatch(["linux", "base-mitigated"]) or "")
    assert benchcommon.baseline(["base-mitigated", "linux-mitigated", "base-mitigated+ret"]) == \
        ["linux-mitigated", "base-mitigated", "base-mitigated+ret"]
    r = syscalls.Report(unit="guest instructions", accel="tcg", icount=True, quick=True, machine="m",
                     configs=["linux-mitigated", "base-mitigated"], baseline="linux-mitigated",
                     cpus={"linux-mitigated": "Skylake-Server,check=off", "base-mitigated": "Skylake-Server,check=off"})
    r.results = {"linux-mitigated": syscalls.parse(RUN),
                 "base-mitigated": syscalls.parse(RUN.replace("200 210", "100 110"))}
    md = syscalls.markdown(r, None)
    assert "| getppid |  | 200 (210) | 100 (110) | -50.0% |" in md
    assert "`base-mitigated` against `linux-mitigated`" in md and "`-cpu Skylake-Server,check=off`" in md
    assert syscalls.improvement(r, "getppid", "base-mitigated") == ([0], [50.0])
    # saved and read back (reports saved before `baseline` existed compare with linux)
    syscalls.save_json(r, tmp_path / "r.json")
    assert syscalls.load_json(tmp_path / "r.json").baseline == "linux-mitigated"
    assert report(linux=RUN).baseline == "linux"
    # a baseline without results is an error, not a KeyError later
    data = (tmp_path / "r.json").read_text().replace('"baseline": "linux-mitigated"', '"baseline": "nope"')
    (tmp_path / "bad.json").write_text(data)
    with pytest.raises(UklError, match="baseline 'nope' has no results"):
        syscalls.load_json(tmp_path / "bad.json")
