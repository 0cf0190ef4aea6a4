"""Where the instructions go (no VM): --by-function's points, the plugin's
profile entries, symbol lookup (on an ELF file the host compiler builds),
the per-function sums and their tables, and the profiles in `ukl bench
syscalls` reports."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ukltool.bench import syscalls
from ukltool.plugin import insnclass, insnprofile
from ukltool.util.errors import UklError

K = 0xFFFFFFFF81000000
OPS = ["getppid", "read", "write"]


def test_points_name_operations_and_sizes():
    assert insnprofile.parse_points("getppid, read:1,write:4096", OPS) == [("getppid", 0), ("read", 1),
                                                                             ("write", 4096)]
    assert syscalls.profile_points("getppid,page-fault:4096") == [("getppid", 0), ("page-fault", 4096)]


@pytest.mark.parametrize("spec, what", [("getpid", "'getpid' is not an operation"),
                                        ("read:x", "no size in bytes"), (" , ", "names no operation")])
def test_bad_points_are_named(spec, what):
    with pytest.raises(UklError) as e:
        insnprofile.parse_points(spec, OPS)
    assert what in e.value.message
    assert e.value.hint


def test_the_plugin_profile_is_read_and_checked():
    head = {"plugin": "insnclass", "format": 1, "classes": [*insnclass.CLASSES, "other"], "unbalanced": 0,
            "total": {"insns": 0, "counts": {}}, "regions": []}
    text = json.dumps({**head, "profile": [[3, 10, [K, K + 4]], [4, 1, [5]]]})
    assert insnclass.parse_report(text, profile=True).profile == [(3, 10, (K, K + 4)), (4, 1, (5,))]
    assert insnclass.parse_report(text).profile is None  # read only where asked for
    for bad in ({}, {"profile": {}}, {"profile": [[1, -1, [K]]]}, {"profile": [[1, 2]]},
                {"profile": [[1, True, [K]]]}):
        with pytest.raises(UklError, match="cannot read the profile"):
            insnclass.parse_report(json.dumps({**head, **bad}), "r.json", profile=True)


def test_symbols_name_the_nearest_symbol_below():
    syms = insnprofile.Symbols([(K, "entry"), (K + 0x10, "inner_label"), (K + 0x40, "do_it")])
    assert syms.name(K) == "entry"
    assert syms.name(K + 0xF) == "entry"
    assert syms.name(K + 0x10) == "inner_label"
    assert syms.name(K + 0x1000) == "do_it"
    assert syms.name(K - 1) == insnprofile.UNKNOWN
    assert syms.name(0x401000) == insnprofile.USER


def test_one_name_per_address_functions_before_markers():
    ranks = sorted([insnprofile._rank("__softirqentry_text_start", "STT_NOTYPE", "STB_GLOBAL"),
                    insnprofile._rank("local_label", "STT_NOTYPE", "STB_LOCAL"),
                    insnprofile._rank("__do_softirq", "STT_FUNC", "STB_GLOBAL")])
    assert [r[-1] for r in ranks] == ["__do_softirq", "local_label", "__softirqentry_text_start"]


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs the host C compiler")
def test_symbols_of_a_real_elf_file(tmp_path):
    src = tmp_path / "p.c"
    src.write_text("int helper(int x) { return x * 3; }\n"
                   "static int hidden(int x) { return x + helper(x); }\n"
                   "int main(int c, char **v) { (void)v; return hidden(c); }\n")
    exe = tmp_path / "p"
    subprocess.run(["gcc", "-O1", "-fno-inline", "-o", exe, src], check=True)
    nm = subprocess.run(["nm", exe], check=True, capture_output=True, text=True).stdout
    addr = {line.split()[2]: int(line.split()[0], 16) for line in nm.splitlines()
            if len(line.split()) == 3 and line.split()[1] in "Tt"}
    syms = insnprofile.load_symbols(exe, user_below=0)
    for fn in ("helper", "hidden", "main"):
        assert syms.name(addr[fn]) == fn
        assert syms.name(addr[fn] + 1) == fn
    # the kernel's default: a program's addresses are user space
    assert insnprofile.load_symbols(exe).name(addr["main"]) == insnprofile.USER


def test_an_unreadable_elf_file_is_an_error(tmp_path):
    bad = tmp_path / "vmlinux"
    bad.write_bytes(b"not an ELF file at all")
    with pytest.raises(UklError, match="cannot read symbols"):
        insnprofile.load_symbols(bad)


def test_instructions_per_iteration_by_function():
    names = {K: "entry", K + 4: "entry", K + 8: "sys_getppid", 0x1000: insnprofile.USER}
    entries = [(1, 100, (K, K + 4)), (1, 100, (K + 8,)), (1, 50, (0x1000,)), (2, 999, (K + 8,)),
               (1, 100, (K,))]  # a block translated twice
    per = insnprofile.per_function(entries, 1, 100, names.__getitem__)
    assert per == {"entry": 3.0, "sys_getppid": 1.0, insnprofile.USER: 0.5}
    assert list(per) == ["entry", "sys_getppid", insnprofile.USER]  # most first
    with pytest.raises(ValueError):
        insnprofile.per_function(entries, 1, 0, names.__getitem__)


def profile(op: str, size: int, **fns: float) -> insnprofile.OpProfile:
    return insnprofile.OpProfile(op, size, 1000, dict(fns))


def test_rows_keep_the_largest_then_the_rest_and_the_total():
    per = {"linux": profile("getppid", 0, entry=51, getppid=36, tiny=0.5),
           "base": profile("getppid", 0, ukl_entry=15, getppid=36, tiny2=0.25)}
    rows = insnprofile.rows(per, ["linux", "base"], keep=3)
    assert rows[0] == ("entry", [51, 0.0])
    assert rows[1] == ("getppid", [36, 36])
    assert rows[2] == ("ukl_entry", [0.0, 15])
    assert rows[3] == ("(other functions: 2)", [0.5, 0.25])
    assert rows[4] == ("total", [87.5, 51.25])
    assert [insnprofile.number(v) for v in (0, 36, 0.5, 36.004)] == ["-", "36", "0.50", "36"]


def test_markdown_has_a_table_per_point():
    per = {"linux": [profile("getppid", 0, entry=51), profile("read", 1, vfs_read=96)],
           "base+byp": [profile("getppid", 0, ukl_byp_syscall=49.67)]}
    md = insnprofile.markdown([("getppid", 0), ("read", 1)], per, ["linux", "base+byp"], "ukl bench ...")
    assert "### getppid\n" in md and "### read 1 B\n" in md
    assert "| function | linux | base+byp |" in md
    assert "| `ukl_byp_syscall` | - | 49.67 |" in md
    assert "| function | linux |\n" in md  # read: only linux profiled it
    assert "| **total** | 51 | 49.67 |" in md


def test_reports_keep_their_profiles_and_older_files_load(tmp_path):
    rep = syscalls.Report(unit="guest instructions", accel="tcg", icount=True, quick=True, machine="m",
                       configs=["linux"], results={"linux": [syscalls.Point("getppid", 0, 209, 209, 1000)]},
                       profiled=[("getppid", 0)], profiles={"linux": [profile("getppid", 0, entry=51)]})
    path = tmp_path / "r.json"
    syscalls.save_json(rep, path)
    back = syscalls.load_json(path)
    assert back.profiled == [("getppid", 0)]
    assert back.profiles["linux"][0].functions == {"entry": 51}
    assert "## Where the instructions go" in syscalls.markdown(back, None)
    assert [t.title for t in syscalls.profile_tables(back)] == [
        "getppid: guest instructions per iteration, by function"]
    old = json.loads(path.read_text())
    del old["profiled"], old["profiles"]
    path.write_text(json.dumps(old))
    back = syscalls.load_json(path)
    assert back.profiled == [] and back.profiles == {}
    assert "Where the instructions go" not in syscalls.markdown(back, None)


def test_profile_needs_icount():
    with pytest.raises(UklError, match="--by-function needs --icount"):
        syscalls.run(["linux"], icount=False, quick=True, timeout=10, profile=[("getppid", 0)])


def test_bench_profile_config_checks_the_regions(tmp_path: Path, monkeypatch):
    counts = tmp_path / "insnclass.json"
    counts.write_text(json.dumps({
        "plugin": "insnclass", "format": 1, "vcpus": 1, "inline": True,
        "classes": [*insnclass.CLASSES, "other"], "unbalanced": 0,
        "total": {"insns": 10, "counts": {}}, "outside": {"insns": 0, "counts": {}},
        "regions": [{"id": 0, "iterations": 2, "insns": 10, "insns_min": 5, "insns_max": 5, "counts": {}}],
        "profile": [[0, 2, [K, K + 1]], [0, 1, [0x400000]]]}))
    monkeypatch.setattr(insnprofile, "load_symbols", lambda path: insnprofile.Symbols([(K, "fn")]))
    console = "REGION 0 getppid 0 2\n"
    seen = insnclass.read_report(counts, profile=True)
    got = syscalls.profile_config(seen, console, tmp_path / "vmlinux", [("getppid", 0)], "linux")
    assert got == [insnprofile.OpProfile("getppid", 0, 2, {"fn": 2.0, insnprofile.USER: 0.5})]
    with pytest.raises(UklError, match="ran no point read:1"):
        syscalls.profile_config(seen, console, tmp_path / "vmlinux", [("read", 1)], "linux")
    with pytest.raises(UklError, match="saw 2 iterations"):
        syscalls.profile_config(seen, "REGION 0 getppid 0 3\n", tmp_path / "vmlinux", [("getppid", 0)], "linux")


def test_application_loads_are_profiled_per_request(tmp_path: Path, monkeypatch):
    from ukltool.bench import appbench

    counts = tmp_path / "insnclass.json"
    region = {"iterations": 1, "insns": 8000, "insns_min": 8000, "insns_max": 8000, "counts": {}}
    counts.write_text(json.dumps({
        "plugin": "insnclass", "format": 1, "vcpus": 1, "inline": True,
        "classes": [*insnclass.CLASSES, "other"], "unbalanced": 0,
        "total": {"insns": 9000, "counts": {}}, "outside": {"insns": 0, "counts": {}},
        "regions": [{"id": 0, **region}, {"id": 1, **region}],
        "profile": [[0, 4000, [K, K + 1]], [1, 100, [K]], [1, 300, [0x401000]]]}))
    monkeypatch.setattr(insnprofile, "load_symbols", lambda path: insnprofile.Symbols([(K, "tcp_sendmsg")]))
    loads = [appbench.Point("get", 30, 16, 1000, 5, 6), appbench.Point("set", 30, 16, 100, 5, 6)]
    got = appbench.load_profiles(insnclass.read_report(counts, profile=True), loads, tmp_path / "vmlinux")
    assert [(p.op, p.iterations, p.functions) for p in got] == [
        (loads[0].label, 1000, {"tcp_sendmsg": 8.0}),
        (loads[1].label, 100, {insnprofile.USER: 3.0, "tcp_sendmsg": 1.0})]
    rep = appbench.AppReport("redis", "Redis", True, "tcg", "m", ["linux"],
                             results={"linux": loads}, profiles={"linux": got})
    path = tmp_path / "apps.json"
    appbench.save_json([rep], path)
    back = appbench.load_json(path)[0]
    assert back.profiles == rep.profiles
    md = appbench.markdown([back])
    assert "### Where the instructions go" in md and f"#### {loads[1].label}\n" in md
    assert "divided by its requests" in md
    assert len(appbench.profile_tables(back)) == 2
