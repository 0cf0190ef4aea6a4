"""`ukl bench remote`'s pure logic (tools/ukltool/bench/remotebench.py): parsing
guest/bench/remote.c's output, the ratios and tables, Markdown and JSON; and
guest/bench/remote.c itself, run on the host, where remote calls give ENOSYS."""

from __future__ import annotations

import pytest

from ukltool.bench import remotebench as rb
from ukltool.util.errors import UklError

GUEST = """\
ukl: starting
RBENCH getppid 0 2000 2500 400
RBENCH read-local 4096 5000 6000 400
RBENCH write-local 4096 5500 6100 400
RBENCH null-poll 0 4000 4400 400
RBENCH read-poll 4096 9000 9900 400
RBENCH write-poll 4096 9500 9800 400
RBENCH null-irq 0 30000 41000 400
RBENCH read-irq 4096 35000 36000 400
RBENCH write-irq 4096 36000 37000 400
JITTER none 10 3000 2000 9000 30000 300000000 1000
JITTER remote-io 20 4000 2500 19000 80000 300000000 1000
RBENCH-DONE
"""


def report() -> rb.Report:
    r = rb.Report(accel="tcg", quick=True, machine="test", smp=2, kernels={"base": "6.1"})
    r.results["base"], r.jitter["base"] = rb.parse(GUEST, "base")
    r.results[rb.HOST], _ = rb.parse("RBENCH getppid 0 100 120 40\nRBENCH-DONE\n", "host")
    return r


def test_parse():
    rows, jit = rb.parse(GUEST, "base")
    assert rows[0] == rb.Row("getppid", 0, 2000, 2500, 400)
    assert [r.op for r in rows].count("read-irq") == 1
    assert jit[1] == rb.Jitter("remote-io", 20, 4000.0, 2500.0, 19000.0, 80000.0, 300000000.0, 1000)
    assert jit[1].lost == pytest.approx(80000 * 100 / 3e8)


def test_an_unfinished_run_is_an_error():
    with pytest.raises(UklError, match="did not finish on 'base'"):
        rb.parse(GUEST.replace("RBENCH-DONE", ""), "'base'")


def test_null_rows_are_ratios_against_getppid():
    rows = {r[0]: r for r in rb.null_rows(report())}
    poll = rows["null remote call, both sides polling"]
    assert poll[1:] == ["4.00", "4.40", "-", "2.00x", "40.00x"]
    assert rows["null remote call, both sides asleep (interrupts)"][4] == "15.00x"
    assert rows["getppid in the linux guest"][1:] == ["-", "-", "-", "-", "-"]  # not measured here


def test_io_rows():
    (row,) = rb.io_rows(report(), "read")
    assert row == ["4096", "-", "-", "5.00", "9.00", "35.00", "1.80x", "7.00x"]


def test_markdown_and_json(tmp_path):
    r = report()
    md = rb.markdown(r, tmp_path / "remote.png")
    assert "polling 4.00 us, asleep 30.00 us: 2.00x and 15.00x a local getppid" in md
    assert "| base | 1 | remote-io | 20 | 67 |" in md
    assert "![remote and local file I/O against size](remote.png)" in md
    rb.save_json(r, tmp_path / "r.json")
    assert rb.load_json(tmp_path / "r.json") == r
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UklError, match="cannot read"):
        rb.load_json(tmp_path / "bad.json")


def test_repeated_runs_merge_to_the_median_run():
    runs = [[rb.Row("null-poll", 0, m, m + 10, 40), rb.Row("getppid", 0, 100, 200, 40)] for m in (3000, 1000, 2000)]
    runs[2].append(rb.Row("only-once", 0, 5, 5, 40))
    merged = rb.merge(runs)
    assert merged == [rb.Row("null-poll", 0, 2000, 2010, 120), rb.Row("getppid", 0, 100, 200, 120)]
    r = report()
    r.runs["base"] = runs
    r.repeat = 3
    assert rb.spread(r, "base", "null-poll") == "1.00-3.00"
    assert rb.spread(r, "base", "getppid") == "0.10-0.10"
    assert rb.spread(r, "linux", "getppid") == "-"
    assert "booted 3 times, interleaved" in rb.markdown(r, None)


def test_the_benchmark_on_the_host_leaves_remote_rows_out():
    from ukltool.util.proc import capture
    res = capture([str(rb._host_binary()), "quick", "nojitter"])
    assert res.returncode == 0, res.stderr
    rows, jit = rb.parse(res.stdout, "the host")
    ops = {r.op for r in rows}
    assert {"getppid", "read-local", "write-local"} <= ops and not ops & {"null-poll", "null-irq"}
    assert "remote calls: Function not implemented, their rows left out" in res.stdout and not jit
    assert all(r.median > 0 and r.p99 >= r.median for r in rows)
