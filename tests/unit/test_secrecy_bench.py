"""ukl bench secrecy's parsing and report, from lines as the nodes print them."""

from __future__ import annotations

import math

import pytest

from ukltool.bench import secrecybench as sb
from ukltool.util.errors import UklError


def stats(rank: int, n: int = 4) -> str:
    # four receive calls of 1, 2, 3 and 4 us: mean 2.5 us, sd sqrt(1.25) us
    return (f"ukl-mpi: rank {rank} stats send 2 3000 5000000 recv {n} 10000 30000000 polls 9 sleeps 9 "
            f"vcsw 3 ivcsw 1")


def outputs(seconds: str = "5.190") -> list[list[str]]:
    return [["TEST X: OK.", f"128\tGROUP-BY\t{seconds}", stats(0)], [stats(1)], [stats(2)]]


def test_a_run_is_parsed_from_the_nodes_lines():
    run = sb.parse_run(outputs(), 7.5, 33484, 2_000_000, 128)
    assert run.seconds == 5.19 and run.wall == 7.5 and run.tcp_segments == 33484
    assert [p.rank for p in run.parties] == [0, 1, 2]
    recv = run.parties[1].recv
    assert recv.n == 4 and recv.mean_ns == 2500 and math.isclose(recv.sd_ns, math.sqrt(1.25e6))
    assert run.parties[0].sleeps == 3 and run.parties[0].preempted == 1
    with pytest.raises(UklError, match="no '1024.*GROUP-BY"):
        sb.parse_run(outputs(), 1, 0, 0, 1024)
    broken = outputs()
    broken[2] = ["nothing"]
    with pytest.raises(UklError, match="node 2 printed no ukl-mpi statistics"):
        sb.parse_run(broken, 1, 0, 0, 128)


def test_the_slowest_runs_are_dropped_and_the_report_compares_with_the_baseline(tmp_path):
    rep = sb.Report("host", ["linux", "base+ret+byp+shortcut"], [(128, "block")], 3, 1, {"linux": "6.1", "base": "6.1"},
                    {"linux": "5 checks passed; opened results the same as linux",
                     "base+ret+byp+shortcut": "5 checks passed; opened results the same as linux"})
    for config, secs in (("linux", ["2.0", "2.2", "9.0"]), ("base+ret+byp+shortcut", ["1.0", "1.1", "8.0"])):
        p = sb.Point(config, 128, "block")
        p.runs = [sb.parse_run(outputs(s), 3.0, 100, 1000, 128) for s in secs]
        rep.points.append(p)
    assert [r.seconds for r in rep.points[0].kept(rep.drop)] == [2.0, 2.2]
    md = sb.markdown(rep, tmp_path / "s.png", "./ukl bench secrecy")
    row = next(line for line in md.splitlines() if line.startswith("| base+ret+byp+shortcut | 1.050"))
    assert "| 0.50 |" in row and "2.5, 1.1" in row
    # pooled: two runs of calls at 1 and 3 us are calls of 2 us mean and 1 us sd
    assert sb.pooled([sb.Calls(1, 1000, 0), sb.Calls(1, 3000, 0)]) == (2000, 1000)
    sb.save_json(rep, tmp_path / "s.json")
    again = sb.load_json(tmp_path / "s.json")
    assert again == rep
    sb.plot(again, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_bad_cases_are_refused_before_any_work():
    with pytest.raises(UklError, match="power of two"):
        sb.run(["linux"], [(100, "block")], 1, 60)
    with pytest.raises(UklError, match="not one of block, spin"):
        sb.run(["linux"], [(128, "nap")], 1, 60)
