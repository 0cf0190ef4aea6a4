"""Modelled cycles of application loads (no VM): matching the plugin's
regions with the loads, the arithmetic, the report and its JSON."""

from __future__ import annotations

import json

import pytest

from ukltool import cli
from ukltool.apps import recipes
from ukltool.bench import appbench, appcycles
from ukltool.plugin import cyclemodel, insnclass
from ukltool.util.errors import UklError

EXTRA = {c: 0.0 for c in insnclass.CLASSES} | {"syscall": 100.0, "swapgs": 50.0, "verw": 400.0}


def plugin_report(regions: dict[int, tuple[int, int, dict[str, int]]], unbalanced: int = 0) -> str:
    """An insnclass report: {id: (iterations, insns, counts)}."""
    return json.dumps({
        "plugin": "insnclass", "format": 1, "vcpus": 1, "inline": True,
        "classes": [*insnclass.CLASSES, "other"], "unbalanced": unbalanced,
        "total": {"insns": 10**9, "counts": {}}, "outside": {"insns": 0, "counts": {}},
        "regions": [{"id": i, "iterations": it, "insns": n, "insns_min": n, "insns_max": n,
                     "counts": c | {"other": n - sum(c.values())}, "mode": {"iterations": it, "counts": c},
                     "distinct": 1, "unmoded": 0} for i, (it, n, c) in regions.items()]})


LOADS = [appbench.Point("get", 1, 1, 1000, 14_000_000, 1), appbench.Point("set", 30, 16, 500, 2_000_000, 1)]


def counts_of(regions: dict[int, tuple[int, int, dict[str, int]]], unbalanced: int = 0) -> list[appcycles.LoadCounts]:
    return appcycles.load_counts(insnclass.parse_report(plugin_report(regions, unbalanced)), LOADS, "test")


def test_region_k_is_load_k_and_per_request_figures_follow():
    lcs = counts_of({0: (1, 30_000_000, {"syscall": 4000, "swapgs": 8000}), 1: (1, 5_000_000, {"verw": 1000})})
    assert [(lc.label, lc.requests, lc.insns) for lc in lcs] == [("GET c=1 P=1", 1000, 30_000_000),
                                                                 ("SET c=30 P=16", 500, 5_000_000)]
    assert lcs[0].counts == {"syscall": 4000, "swapgs": 8000}   # "other" is not a costly class
    assert lcs[0].insns_per_request() == 30_000
    assert lcs[0].per_request() == {"syscall": 4.0, "swapgs": 8.0}
    assert lcs[0].extra_per_request(EXTRA) == 4 * 100 + 8 * 50
    assert lcs[0].cycles_per_request(EXTRA) == 30_000 + 800
    assert lcs[1].cycles_per_request(EXTRA) == 10_000 + 2 * 400


@pytest.mark.parametrize("regions,unbalanced,message", [
    ({0: (1, 10, {})}, 0, "no region for load 1"),
    ({0: (1, 10, {}), 1: (8, 10, {})}, 0, "8 iterations for load 1"),
    ({0: (1, 10, {}), 1: (1, 10, {}), 2: (1, 10, {})}, 0, r"regions \[2\] beyond the 2 loads"),
    ({0: (1, 10, {}), 1: (1, 10, {})}, 3, "3 region ends without a begin"),
])
def test_regions_that_do_not_match_the_loads_are_errors(regions, unbalanced, message):
    with pytest.raises(UklError, match=message):
        counts_of(regions, unbalanced)


def test_the_guest_script_names_one_region_per_load():
    sh = appbench.script(recipes.load("redis"), 100).splitlines()
    loads = [line for line in sh if "/bin/appload " in line]
    assert [line.split()[0] for line in loads] == [f"APPLOAD_REGION={k}" for k in range(len(loads))]
    # a run to completion is region 0, appload's default
    assert "APPLOAD_REGION" not in appbench.script(recipes.load("sqlite3"), None)


def report_with_model() -> appbench.AppReport:
    model = appcycles.AppModel("test-cpu", "Test CPU", EXTRA)
    model.results = {
        "linux-mitigated": counts_of({0: (1, 30_000_000, {"syscall": 4000, "verw": 4000}),
                                      1: (1, 5_000_000, {"syscall": 500})}),
        "base-mitigated": counts_of({0: (1, 29_000_000, {"syscall": 2000, "verw": 4000}),
                                     1: (1, 5_000_000, {"syscall": 250})}),
    }
    slower = [appbench.Point(p.op, p.conns, p.pipeline, p.requests, p.server_ns - 1000, 1) for p in LOADS]
    return appbench.AppReport("redis", "Redis", True, "tcg", "m", ["linux-mitigated", "base-mitigated"],
                              {"linux-mitigated": "6.1", "base-mitigated": "6.1"},
                              {"linux-mitigated": LOADS, "base-mitigated": slower},
                              baseline="linux-mitigated", model=model)


def test_the_report_compares_modelled_cycles_with_the_baseline(tmp_path):
    rep = report_with_model()
    md = appbench.markdown([rep], None, tmp_path / "x.md")
    assert "--icount --model cycles --cpu test-cpu --markdown " in md
    # linux-mitigated: 30,000 + 4 x 100 + 4 x 400 = 32,000; base-mitigated: 29,000 + 200 + 1,600 = 30,800
    assert "| GET c=1 P=1 | 32,000 (30,000) | 30,800 (29,000) | 0.963 |" in md
    assert "| syscall | 100 | 4.00 | 2.00 |" in md and "| verw | 400 | 4.00 | 4.00 |" in md
    assert "| extra cycles per request |  | 2,000 | 1,800 |" in md
    assert "base-mitigated / linux-mitigated" in md and "*Modelled cycles* are a model" in md
    assert appbench.model_table(rep) is not None


def test_counts_survive_json_and_take_another_cost_table(tmp_path):
    rep = report_with_model()
    path = tmp_path / "apps.json"
    appbench.save_json([rep], path)
    (back,) = appbench.load_json(path)
    assert back.model == rep.model and back.baseline == "linux-mitigated"
    again = cyclemodel.remodel(back.model, cyclemodel.DEFAULT_CPU)
    assert again.results == rep.model.results and again.cpu == cyclemodel.DEFAULT_CPU
    with pytest.raises(UklError, match="no counts of costly instructions"):
        cyclemodel.remodel(None, cyclemodel.DEFAULT_CPU)


def test_model_without_icount_is_refused(capsys):
    assert cli.main(["bench", "redis", "--model", "cycles"]) == 2
    assert "--model cycles needs --icount" in capsys.readouterr().err
    assert cli.main(["bench", "redis", "--cpu", "skylake-sp", "--icount"]) == 2
    assert "--cpu names the cost table of --model cycles" in capsys.readouterr().err


def test_reports_compare_with_their_own_baseline_in_host_mode_too():
    from ukltool.bench import hostbench
    wall = hostbench.WallReport("redis", "Redis", "m", ["linux-mitigated", "base-mitigated"], 1,
                                results={"linux-mitigated": [hostbench.Result("GET", 1000.0, 1.0, 2.0)],
                                         "base-mitigated": [hostbench.Result("GET", 1100.0, 0.9, 1.8)]})
    run = appbench.AppReport("sqlite3", "SQLite", False, "tcg", "m", ["linux-mitigated", "base-mitigated"],
                             results={"linux-mitigated": [appbench.Point("run", 1, 1, 1, 2 * 10**9, 1)],
                                      "base-mitigated": [appbench.Point("run", 1, 1, 1, 10**9, 1)]},
                             baseline="linux-mitigated")
    md = hostbench.markdown([wall], [run], None, None, "redis,sqlite3")
    assert "bench app redis sqlite3 --clients host --configs linux-mitigated,base-mitigated" in md
    assert "| GET | 1,000 | 1,100 | 1.10 | 1.00 / 2.00 | 0.90 / 1.80 |" in md
    assert "base-mitigated / linux-mitigated" in md and "| run | 2.00 | 1.00 | 0.50 |" in md
    # runs to completion alone: the header names their configurations
    assert "--configs linux-mitigated,base-mitigated --repeat 1" in hostbench.markdown([], [run])


def test_results_saved_before_the_model_load_with_linux_as_baseline(tmp_path):
    old = [{"app": "redis", "description": "Redis", "icount": True, "accel": "tcg", "machine": "m",
            "configs": ["linux", "base"], "kernels": {}, "runs": 1, "spread": {},
            "results": {c: [{"op": "get", "conns": 1, "pipeline": 1, "requests": 10, "server_ns": 100,
                             "elapsed_ns": 1, "instructions_per_request": 10.0}] for c in ("linux", "base")}}]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    (rep,) = appbench.load_json(path)
    assert rep.baseline == "linux" and rep.model is None and rep.results["base"][0].per_request == 10.0
