"""ukl bench secrecy's parsing and report, from lines as the nodes print them."""

from __future__ import annotations

import json
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


def test_a_single_run_per_point_says_it_has_no_spread():
    rep = sb.Report("host", ["linux"], [(8192, "block")], 1, 0, {"linux": "6.1"},
                    {"linux": "5 checks passed; opened results the same as linux"})
    p = sb.Point("linux", 8192, "block")
    p.runs = [sb.parse_run([["TEST X: OK.", "8192\tGROUP-BY\t580.0", stats(0)], [stats(1)], [stats(2)]],
                           583.0, 100, 1000, 8192)]
    rep.points.append(p)
    md = sb.markdown(rep, None, "./ukl bench secrecy --rows 8192 --repeat 1")
    assert "1 run (no standard deviation between runs)" in md and "1 runs" not in md
    rep.repeat, rep.drop = 20, 2
    assert "20 runs, the slowest 2 dropped" in sb.markdown(rep, None, "./ukl bench secrecy")


def test_bad_cases_are_refused_before_any_work():
    with pytest.raises(UklError, match="power of two"):
        sb.run(["linux"], [(100, "block")], 1, 60)
    with pytest.raises(UklError, match="not one of block, spin"):
        sb.run(["linux"], [(128, "nap")], 1, 60)


class FakeCluster:
    """sb._cluster without a VM: Secrecy's test passes, each GROUP-BY run
    prints outputs(); run number FAIL (1-based, the tests not counted)
    raises what a failed node does, or INTERRUPT. Before each run it reads
    what --json holds then."""

    def __init__(self, json_path, fail: int | None = None, fail_test: bool = False,
                 interrupt: type[BaseException] | None = None) -> None:
        self.json_path, self.fail, self.fail_test, self.interrupt = json_path, fail, fail_test, interrupt
        self.runs = 0
        self.saved_before: list[int] = []   # runs in the JSON file before each run

    def __call__(self, out, profile, args, timeout, extra, count_insns=False):
        from ukltool.run import cluster
        if count_insns:   # rank K executes 1000 * (K + 1) instructions per row, 2 SYSCALLs per row
            logs = sb._logs(out, profile, args)
            logs.mkdir(parents=True, exist_ok=True)
            rows = int(args[0])
            for k in range(sb.NODES):
                cluster.node_insns(logs, k).write_text(plugin_report(1000 * (k + 1) * rows, {"syscall": 2 * rows}))
        if not args:
            if self.fail_test:
                raise UklError(f"{profile}: node 2 failed (status 1) running the test", "see node2.log")
            return cluster.ClusterResult([0, 0, 0], [], None, [["TEST X: OK.", "(1 2 3) "], [], []], 9.0, 10, 100)
        self.runs += 1
        self.saved_before.append(sb.load_json(self.json_path).runs_done() if self.json_path.exists() else -1)
        if self.runs == self.fail:
            if self.interrupt:
                raise self.interrupt()
            raise UklError(f"{profile}: node 1 failed (status 124) running 128 1", "see node1.log")
        return cluster.ClusterResult([0, 0, 0], [], None, outputs(f"{self.runs}.000"), 7.0, 33000, 2_000_000)


def plugin_report(insns: int, counts: dict[str, int], iterations: int = 1) -> str:
    """What the plugin writes with one MPI region of INSNS and COUNTS."""
    from ukltool.plugin import insnclass
    region = {"id": sb.MPI_REGION, "iterations": iterations, "insns": insns, "counts": counts,
              "mode": {"iterations": iterations, "counts": counts}}
    return json.dumps({"plugin": "insnclass", "format": 1, "classes": [*insnclass.CLASSES, insnclass.OTHER],
                       "total": {"insns": insns * 2, "counts": counts}, "unbalanced": 0, "regions": [region]})


@pytest.fixture
def no_vm(monkeypatch, tmp_path):
    """sb.run's images, kernels, tools and accelerator, without building or booting."""
    monkeypatch.setattr(sb, "_image", lambda name, config: tmp_path / f"{name}-{config}")
    monkeypatch.setattr(sb.image, "load", lambda out: type("Manifest", (), {"kernel_release": "6.1-ukl"})())
    monkeypatch.setattr(sb.netns, "unavailable", lambda: None)
    monkeypatch.setattr(sb, "need_tool", lambda *a: "qemu-system-x86_64")
    monkeypatch.setattr(sb.vm, "choose_accel", lambda *a: "tcg")
    monkeypatch.setattr(sb.benchcommon, "machine", lambda: "host")

    monkeypatch.setattr(sb, "_logs", lambda out, profile, args: tmp_path / "logs" / f"{profile}-{'-'.join(args)}")

    def bench(fake: FakeCluster, count_insns: bool = False) -> sb.Report:
        monkeypatch.setattr(sb, "_cluster", fake)
        return sb.run(["linux", "base"], [(128, "block")], 3, 60, json_path=fake.json_path, count_insns=count_insns)
    return bench


def test_a_failed_run_keeps_the_runs_done_in_the_json_file(no_vm, tmp_path):
    path = tmp_path / "s.json"
    fake = FakeCluster(path, fail=5)   # linux, base, linux, base done; linux's third run fails
    with pytest.raises(UklError) as e:
        no_vm(fake)
    assert e.value.message == "linux: node 1 failed (status 124) running 128 1"
    assert e.value.hint == (f"see node1.log; what was done (2 of 2 tests, 4 of 6 runs) is saved in {path}: "
                            f"`ukl bench secrecy --from-json {path}` shows it")
    assert fake.saved_before == [0, 1, 2, 3, 4]   # saved after every run, not only at the end
    saved = sb.load_json(path)
    assert saved.stopped == e.value.message and not saved.complete()
    assert set(saved.results) == {"linux", "base"}
    assert [(p.config, [r.seconds for r in p.runs]) for p in saved.points] == [("linux", [1.0, 3.0]),
                                                                               ("base", [2.0, 4.0])]
    md = sb.markdown(saved, tmp_path / "s.png", "./ukl bench secrecy")
    assert (f"**Incomplete**: 2 of 2 tests and 4 of 6 runs were done (it stopped: {e.value.message})"
            in md), md
    assert "| base | 3.000 ± 1.414 (2 runs) | 1.50 |" in md, md
    sb.plot(saved, tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000
    assert list(tmp_path.glob(".s.json*")) == []   # no temporary file left


def test_a_report_saved_before_a_point_has_runs_shows_it_not_run(no_vm, tmp_path):
    path = tmp_path / "s.json"
    with pytest.raises(UklError, match="linux: node 1 failed"):
        no_vm(FakeCluster(path, fail=1))
    saved = sb.load_json(path)
    assert saved.points == [] and set(saved.results) == {"linux", "base"}
    md = sb.markdown(saved, None, "./ukl bench secrecy")
    assert "| linux | not run |" in md and "| base | not run |" in md
    assert "0 of 6 runs were done" in md


def test_nothing_is_written_when_nothing_was_done(no_vm, tmp_path):
    path = tmp_path / "s.json"
    path.write_text("an earlier report\n")
    with pytest.raises(UklError) as e:
        no_vm(FakeCluster(path, fail_test=True))
    assert e.value.hint == "see node2.log"
    assert path.read_text() == "an earlier report\n"


def test_an_interrupted_run_is_saved_as_interrupted(no_vm, tmp_path):
    path = tmp_path / "s.json"
    with pytest.raises(KeyboardInterrupt):
        no_vm(FakeCluster(path, fail=3, interrupt=KeyboardInterrupt))
    saved = sb.load_json(path)
    assert (saved.stopped, saved.runs_done()) == ("interrupted", 2)


def test_a_complete_run_is_saved_whole(no_vm, tmp_path):
    path = tmp_path / "s.json"
    report = no_vm(FakeCluster(path))
    assert report.complete() and report.stopped is None
    assert sb.load_json(path) == report
    assert "Incomplete" not in sb.markdown(report, None, "./ukl bench secrecy")


def test_counted_runs_report_instructions_and_modelled_cycles_per_row(no_vm, tmp_path):
    path = tmp_path / "s.json"
    report = no_vm(FakeCluster(path), count_insns=True)
    assert report.model is not None and report.accel == "tcg"
    run = report.points[0].runs[0]
    assert [c.insns for c in run.counted] == [128_000, 256_000, 384_000]
    assert sb.load_json(path) == report
    md = sb.markdown(report, None, "./ukl bench secrecy --count-insns")
    assert "Counted (`--count-insns`)" in md
    # per row: 1000, 2000, 3000 instructions; 6 SYSCALLs over the 3 parties, each 1 + extra cycles
    want = 6000 + 6 * report.model.extra["syscall"]
    row = next(line for line in md.splitlines() if line.startswith("| base | 1,000 ± 0; 2,000 ± 0; 3,000 ± 0 |"))
    assert row == f"| base | 1,000 ± 0; 2,000 ± 0; 3,000 ± 0 | {want:,.0f} | 1.00 | syscall 6.0 |", row


def test_a_node_without_one_mpi_region_is_an_error(tmp_path):
    from ukltool.run import cluster
    for k in range(sb.NODES):
        cluster.node_insns(tmp_path, k).write_text(plugin_report(10, {}))
    assert len(sb.read_counted(tmp_path)) == sb.NODES
    cluster.node_insns(tmp_path, 1).write_text(plugin_report(10, {}, iterations=2))
    with pytest.raises(UklError, match="node 1: the plugin saw 2 iterations of the MPI region"):
        sb.read_counted(tmp_path)
    cluster.node_insns(tmp_path, 1).write_text(plugin_report(10, {}))
    cluster.node_insns(tmp_path, 2).unlink()
    with pytest.raises(UklError, match="node 2 wrote no instruction counts"):
        sb.read_counted(tmp_path)


def test_counting_refuses_kvm():
    with pytest.raises(UklError, match="needs TCG"):
        sb.run(["linux"], [(128, "block")], 1, 60, accel="kvm", count_insns=True)
