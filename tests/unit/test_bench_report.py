"""Benchmark report logic (no VM)."""

from __future__ import annotations

import pytest

from ukltool import bench
from ukltool.errors import UklError

RUN = """noise
BENCH-INFO iterations 1000 warmup 100 tsc_per_ms 1000000
BENCH getppid 0 200 210 1000
BENCH read 1 1000 1100 1000
BENCH-DONE
"""


def report(**results) -> bench.Report:
    r = bench.Report(unit="guest instructions", accel="tcg", icount=True, quick=True, machine="m",
                     configs=list(results))
    r.kernels = {c: "6.1.192-ukl" for c in results}
    r.results = {c: bench.parse(text) for c, text in results.items()}
    return r


def test_parse_and_unfinished_runs():
    pts = bench.parse(RUN)
    assert pts == [bench.Point("getppid", 0, 200, 210, 1000), bench.Point("read", 1, 1000, 1100, 1000)]
    with pytest.raises(UklError, match="did not finish"):
        bench.parse("BENCH getppid 0 1 1 1\n")


def test_change_is_relative_to_the_baseline():
    assert bench.change(200, 150) == -25.0
    assert bench.change(200, 250) == 25.0
    assert bench.change(0, 5) == 0.0


def test_rows_table_and_markdown():
    r = report(linux=RUN, base=RUN.replace("200 210", "150 160"))
    rows = bench.rows(r)
    assert rows[0][0] == "getppid" and rows[0][2]["base"].median == 150
    md = bench.markdown(r, None)
    assert "| getppid |  | 200 (210) | 150 (160) | -25.0% |" in md
    assert "one guest instruction" in md and "norandmaps" in md
    assert bench.table(r).row_count == 2
