"""The cycle model (no VM): cost tables, the plugin's report, REGION lines,
the arithmetic, and the model in `ukl bench syscalls` reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ukltool.bench import syscalls
from ukltool.plugin import cyclemodel, insnclass
from ukltool.util.errors import UklError


def report_json(regions: list[dict], classes: list[str] | None = None) -> str:
    return json.dumps({
        "plugin": "insnclass", "format": 1, "vcpus": 1, "inline": True,
        "classes": classes or [*insnclass.CLASSES, "other"], "unbalanced": 0,
        "total": {"insns": 1000000, "counts": {"syscall": 2100, "swapgs": 4200, "other": 990000}},
        "outside": {"insns": 900000, "counts": {}},
        "regions": regions})


GETPPID = {"id": 0, "iterations": 1000, "insns": 221000, "insns_min": 220, "insns_max": 900,
           "counts": {"syscall": 1000, "sysret": 999, "iret": 1, "swapgs": 2000, "rdtscp": 2000,
                      "other": 213000},
           "mode": {"iterations": 999, "counts": {"syscall": 1, "sysret": 1, "swapgs": 2, "rdtscp": 2}},
           "distinct": 2, "unmoded": 0}
CONSOLE = "BENCH-INFO x\nREGION 0 getppid 0 1000\nBENCH getppid 0 209 209 1000\nREGION 1 read 1 1000\n"


def table_text(**override: str) -> str:
    """A valid table (every class costs 10), with sections replaced."""
    parts = {"cpu": '[cpu]\nname = "Test CPU"\n'}
    for c in insnclass.CLASSES:
        parts[c] = f'[classes.{c}]\nextra = 10\nbasis = "estimate"\nsource = "test"\n'
    parts.update(override)
    return "\n".join(v for v in parts.values() if v)


def write_table(tmp_path: Path, text: str, name: str = "test-cpu") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


# ---- cost tables ----

def test_the_shipped_table_covers_every_class_with_a_source():
    assert cyclemodel.DEFAULT_CPU in cyclemodel.cpus()
    t = cyclemodel.load_table(cyclemodel.DEFAULT_CPU)
    assert set(t.costs) == set(insnclass.CLASSES)
    assert all(c.source and c.extra >= 0 for c in t.costs.values())
    assert "Skylake" in t.name and t.cpu == "skylake-sp"


def test_a_table_by_name_or_path(tmp_path):
    path = write_table(tmp_path, table_text())
    t = cyclemodel.load_table("test-cpu", tmp_path)
    assert t == cyclemodel.load_table(path)
    assert t.extra()["syscall"] == 10.0 and t.costs["swapgs"].basis == "estimate"
    assert cyclemodel.cpus(tmp_path) == ["test-cpu"]


@pytest.mark.parametrize("override,key", [
    ({"cpu": ""}, "cpu.name"),
    ({"cpu": '[cpu]\nname = ""\n'}, "cpu.name"),
    ({"swapgs": ""}, "classes.swapgs"),
    ({"wrmsr": '[classes.wrmsr]\nextra = -1\nbasis = "estimate"\nsource = "x"\n'}, "classes.wrmsr.extra"),
    ({"wrmsr": '[classes.wrmsr]\nextra = "many"\nbasis = "estimate"\nsource = "x"\n'}, "classes.wrmsr.extra"),
    ({"wrmsr": '[classes.wrmsr]\nextra = true\nbasis = "estimate"\nsource = "x"\n'}, "classes.wrmsr.extra"),
    ({"wrmsr": '[classes.wrmsr]\nextra = nan\nbasis = "estimate"\nsource = "x"\n'}, "classes.wrmsr.extra"),
    ({"verw": '[classes.verw]\nextra = 1\nbasis = "estimate"\n'}, "classes.verw.source"),
    ({"verw": '[classes.verw]\nextra = 1\nbasis = "guess"\nsource = "x"\n'}, "classes.verw.basis"),
    ({"verw": '[classes.verw]\nextra = 1\nbasis = "estimate"\nsource = "x"\ncost = 3\n'}, "classes.verw.cost"),
    ({"x": '[classes.hlt]\nextra = 1\nbasis = "estimate"\nsource = "x"\n'}, "classes.hlt"),
    ({"x": '[classes.other]\nextra = 1\nbasis = "estimate"\nsource = "x"\n'}, "classes.other"),
])
def test_a_bad_table_names_its_file_and_key(tmp_path, override, key):
    path = write_table(tmp_path, table_text(**override))
    with pytest.raises(UklError) as e:
        cyclemodel.load_table(path)
    assert str(path) in e.value.message and f": {key}:" in e.value.message, e.value.message


def test_unreadable_and_missing_tables(tmp_path):
    path = write_table(tmp_path, "[cpu\nname = 1")
    with pytest.raises(UklError, match=f"cannot read the cost table {path}"):
        cyclemodel.load_table(path)
    with pytest.raises(UklError, match="no cost table for CPU 'zen9'") as e:
        cyclemodel.load_table("zen9", tmp_path)
    assert "test-cpu" in (e.value.hint or "")
    with pytest.raises(UklError, match="not a CPU name"):
        cyclemodel.load_table("../etc/passwd", tmp_path)


# ---- the plugin's report and REGION lines ----

def test_parse_report_and_regions():
    r = insnclass.parse_report(report_json([GETPPID]))
    assert r.insns == 1000000 and r.counts["swapgs"] == 4200 and r.unbalanced == 0
    g = r.regions[0]
    assert (g.iterations, g.insns, g.typical_iterations) == (1000, 221000, 999)
    assert g.typical == {"syscall": 1, "sysret": 1, "swapgs": 2, "rdtscp": 2}
    assert cyclemodel.parse_regions(CONSOLE) == {0: ("getppid", 0, 1000), 1: ("read", 1, 1000)}


@pytest.mark.parametrize("text,why", [
    ("{", "Expecting"),
    ('{"plugin": "other"}', "not an insnclass report"),
    (report_json([], classes=["syscall", "other"]), "rebuild the plugin"),
    (report_json([{**GETPPID, "counts": {"hlt": 3}}]), "unknown classes"),
    (report_json([{**GETPPID, "iterations": -1}]), "region 0 iterations"),
    (report_json([{"id": 0}]), "iterations"),
])
def test_a_bad_report_is_an_error(text, why):
    with pytest.raises(UklError, match="cannot read r.json") as e:
        insnclass.parse_report(text, "r.json")
    assert why in e.value.message


# ---- the model ----

def test_op_counts_take_the_typical_iteration_without_the_timing():
    r = insnclass.parse_report(report_json([GETPPID]))
    [oc] = cyclemodel.op_counts(r, {0: ("getppid", 0, 1000)})
    assert (oc.op, oc.size, oc.iterations) == ("getppid", 0, 1000)
    assert oc.counts == {"syscall": 1, "sysret": 1, "swapgs": 2}       # no rdtscp: the harness's
    assert oc.mean == {"syscall": 1.0, "sysret": 0.999, "iret": 0.001, "swapgs": 2.0}
    assert oc.typical_share == 0.999 and oc.insns_mean == 221.0


def test_op_counts_check_the_regions():
    r = insnclass.parse_report(report_json([GETPPID]))
    with pytest.raises(UklError, match="saw no iteration of region 1 \\(read 1\\)"):
        cyclemodel.op_counts(r, {0: ("getppid", 0, 1000), 1: ("read", 1, 1000)}, "linux")
    with pytest.raises(UklError, match="saw 1000 iterations of region 0 .* ran 10"):
        cyclemodel.op_counts(r, {0: ("getppid", 0, 10)})
    no_timing = {**GETPPID, "mode": {"iterations": 1000, "counts": {"syscall": 1}}}
    with pytest.raises(UklError, match="lacks the timing's own"):
        cyclemodel.op_counts(insnclass.parse_report(report_json([no_timing])), {0: ("getppid", 0, 1000)})


def test_cycles_arithmetic():
    extra = {"syscall": 50.0, "sysret": 40.0, "swapgs": 15.0, "lfence": 4.0}
    assert cyclemodel.cycles(209, {"syscall": 1, "sysret": 1, "swapgs": 2}, extra) == 209 + 50 + 40 + 30
    assert cyclemodel.cycles(100, {}, extra) == 100
    assert cyclemodel.cycles(100, {"lfence": 0.5}, extra) == 102
    with pytest.raises(UklError, match="no cost for verw"):
        cyclemodel.cycles(100, {"verw": 1}, extra)


def test_cpu_choice_and_remodel(tmp_path):
    assert cyclemodel.cpu_choice(None, None) is None
    assert cyclemodel.cpu_choice("cycles", None) == cyclemodel.DEFAULT_CPU
    assert cyclemodel.cpu_choice("cycles", "zen4") == "zen4"
    with pytest.raises(UklError, match="--cpu names the cost table"):
        cyclemodel.cpu_choice(None, "zen4")
    with pytest.raises(UklError, match="no counts of costly instructions"):
        cyclemodel.remodel(None, cyclemodel.DEFAULT_CPU)
    m = cyclemodel.Model("a", "A", {"syscall": 1.0}, {"linux": []})
    m2 = cyclemodel.remodel(m, cyclemodel.DEFAULT_CPU)
    assert m2.cpu == cyclemodel.DEFAULT_CPU and m2.results is m.results and m2.extra["syscall"] == 50


# ---- in the benchmark's report ----

RUN = """REGION 0 getppid 0 1000
BENCH getppid 0 209 209 1000
BENCH-DONE
"""


def model_report() -> syscalls.Report:
    r = syscalls.Report(unit="guest instructions", accel="tcg", icount=True, quick=True, machine="m",
                     configs=["linux", "base"])
    r.kernels = {"linux": "6.1", "base": "6.1"}
    r.results = {"linux": syscalls.parse(RUN), "base": syscalls.parse(RUN.replace("209 209", "213 213"))}
    r.model = cyclemodel.new_model(cyclemodel.load_table(cyclemodel.DEFAULT_CPU))
    counts = insnclass.parse_report(report_json([GETPPID]))
    for c in r.configs:
        r.model.results[c] = cyclemodel.op_counts(counts, cyclemodel.parse_regions(RUN), c)
    return r


def test_reports_show_modelled_cycles_and_keep_the_counts(tmp_path):
    r = model_report()
    extra = r.model.extra
    want = 209 + extra["syscall"] + extra["sysret"] + 2 * extra["swapgs"]
    assert syscalls.cells(r, "getppid", 0, syscalls.rows(r)[0][2])[-2:] == [f"{want:.0f}", f"{want + 4:.0f}"]
    md = syscalls.markdown(r, None)
    assert "linux modelled cycles (model: skylake-sp)" in md and "a model, not a measurement" in md
    assert f"| getppid |  | 209 (209) | 213 (213) | +1.9% | {want:.0f} | {want + 4:.0f} |" in md
    assert syscalls.table(r).row_count == 1 and len(syscalls.table(r).columns) == 7
    path = tmp_path / "r.json"
    syscalls.save_json(r, path)
    data = json.loads(path.read_text())
    assert data["model"]["results"]["base"][0]["counts"] == {"syscall": 1, "sysret": 1, "swapgs": 2}
    back = syscalls.load_json(path)
    assert back.model == r.model and back.results == r.results


def test_reports_without_a_model_are_unchanged(tmp_path):
    r = model_report()
    r.model = None
    assert len(syscalls.cells(r, "getppid", 0, syscalls.rows(r)[0][2])) == 5
    assert "modelled" not in syscalls.markdown(r, None)
    path = tmp_path / "r.json"
    syscalls.save_json(r, path)
    assert syscalls.load_json(path).model is None
