"""`ukl bench boot`'s logic without a VM: names, sizes, the plugin's points,
the boot timeline, the memory bisection and the reports."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ukltool import cli
from ukltool.apps.target import AppTarget
from ukltool.bench import bootbench
from ukltool.bench.bootbench import Hit
from ukltool.build import initramfs
from ukltool.plugin import insnclass
from ukltool.util.errors import UklError


def test_names_keep_order_drop_repeats_and_refuse_nothing():
    assert bootbench.names(" hello, redis,hello ,", "--apps") == ["hello", "redis"]
    with pytest.raises(UklError, match="names nothing"):
        bootbench.names(" , ", "--apps")


def test_apps_resolve_as_ukl_build_takes_them(tmp_path):
    src = tmp_path / "prog.c"
    src.write_text("int main(void) { return 0; }\n")
    assert bootbench.resolve_app(str(src)) == AppTarget(str(src), sources=[src])
    assert bootbench.resolve_app(str(tmp_path)).sources == [tmp_path]
    assert bootbench.image_dir("examples/hello/hello.c", "base").name == "examples_hello_hello.c-base"
    assert bootbench.image_dir("hello", "linux").name == "hello-linux"
    t = bootbench.resolve_app("redis")
    assert t.recipe is not None and t.label == "redis"
    with pytest.raises(UklError, match="neither a file, a directory nor a recipe"):
        bootbench.resolve_app("no-such-app")
    with pytest.raises(UklError, match="does not exist"):
        bootbench.resolve_app(str(tmp_path / "missing.c"))
    with pytest.raises(UklError, match="library recipe"):
        bootbench.resolve_app("libevent")


def test_unknown_configuration_is_an_error():
    with pytest.raises(UklError):
        bootbench.check_configs(["linux", "no-such-config"])


def test_servers_are_the_recipes_with_a_readiness_probe():
    redis = bootbench.resolve_app("redis").recipe
    assert bootbench.server_probe(redis) == (6379, b"PING\r\n")
    assert bootbench.server_probe(bootbench.resolve_app("sqlite3").recipe) is None
    assert bootbench.server_probe(None) is None


def test_elf_sizes_agree_with_binutils_size():
    size = shutil.which("size")
    if size is None:
        pytest.skip("binutils' size is not installed")
    exe = Path(sys.executable).resolve()
    out = subprocess.run([size, "-B", str(exe)], capture_output=True, text=True, check=True).stdout
    text, data, bss = (int(x) for x in out.splitlines()[1].split()[:3])
    assert bootbench.elf_sizes(exe) == (text, data, bss)


def test_cpio_member_reads_what_initramfs_writes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"first")
    b.write_bytes(b"second file, odd length")
    spec = initramfs.Spec().dir("/bin").file("/bin/a", a).file("/init", b)
    initramfs.write(spec, tmp_path / "x.cpio")
    archive = (tmp_path / "x.cpio").read_bytes()
    assert bootbench.cpio_member(archive, "/init") == b.read_bytes()
    assert bootbench.cpio_member(archive, "/bin/a") == b"first"
    with pytest.raises(UklError, match="no /bin/c"):
        bootbench.cpio_member(archive, "/bin/c")


def header(version: int, loadflags: int) -> bytes:
    img = bytearray(0x400)
    img[0x202:0x206] = b"HdrS"
    img[0x206:0x208] = version.to_bytes(2, "little")
    img[0x211] = loadflags
    return bytes(img)


def test_setup_entry_follows_qemus_kernel_loader():
    assert bootbench.setup_entry(header(0x20f, 1)) == (0x10200, 0x100000)
    assert bootbench.setup_entry(header(0x201, 1)) == (0x90200, 0x100000)
    assert bootbench.setup_entry(header(0x20f, 0)) == (0x90200, 0x10000)
    with pytest.raises(UklError, match="boot protocol header"):
        bootbench.setup_entry(bytes(0x400))


REPORT = {"plugin": "insnclass", "format": 1, "halts": 0, "points": [
    {"vaddr": 1, "insns": 1000, "halts": 0, "wall_ns": 10_000_000},
    {"vaddr": 2, "insns": 1100, "halts": 0, "wall_ns": 11_000_000},
    {"vaddr": 3, "insns": 5000, "halts": 0, "wall_ns": 20_000_000},
    {"vaddr": 4, "insns": 90_000, "halts": 3, "wall_ns": 900_000_000},
    {"vaddr": 5, "insns": 91_000, "halts": 3, "wall_ns": 910_000_000},
    {"vaddr": 6, "insns": 95_000, "halts": 4, "wall_ns": 950_000_000}]}


def read_points(report: dict) -> list[Hit | None]:
    """The boot points in REPORT, with the rest of a plugin's report."""
    rest = {"classes": [*insnclass.CLASSES, insnclass.OTHER], "total": {"insns": 0, "counts": {}}, "regions": []}
    return insnclass.parse_report(json.dumps({**rest, **report}), "r", points=True).points or []


def test_points_and_console_stamps_are_read():
    hits = read_points(REPORT)
    assert hits[0] == Hit(1000, 0, 10_000_000) and len(hits) == 6
    none = {**REPORT, "points": [{"vaddr": 1, "insns": None, "halts": None, "wall_ns": None}]}
    assert read_points(none) == [None]
    with pytest.raises(UklError, match="cannot read the boot points"):
        read_points({**REPORT, "points": None})
    console = "[ 0.1] x\nukl-init: stamp tsc 123\r\nukl-init: reply tsc 456\n"
    assert bootbench.console_tsc(console, "stamp") == 123
    assert bootbench.console_tsc(console, "reply") == 456
    assert bootbench.console_tsc("nothing", "stamp") is None


def test_timeline_adds_the_idle_time_read_at_inits_stamp():
    hits = read_points(REPORT)
    # TSC at the stamp 150,000: 60,000 ns idled before it (3 halts)
    t = bootbench.timeline(hits, 150_000, 200_000, icount=True)
    assert t.instructions == 90_000
    assert t.clock_offset_ns == 60_000
    assert t.ns == 90_000 + 60_000
    assert t.wall_ms == pytest.approx(900.0)
    assert t.reply_instructions == 94_000 and t.reply_ns == 199_000
    assert t.phases == {"setup..decompressor": 100, "decompressor..kernel": 3900, "kernel..init": 85_000,
                        "init..main": 1000, "main..reply": 4000}
    assert t.exact and not t.notes


def test_timeline_marks_what_it_cannot_know():
    idled = json.loads(json.dumps(REPORT))
    idled["points"][0]["halts"] = 2        # the firmware idled
    idled["points"][4]["halts"] = 5        # the CPU idled between the stamp and main()
    t = bootbench.timeline(read_points(idled), 150_000, None, icount=True)
    assert not t.exact and len(t.notes) == 2
    plain = bootbench.timeline(read_points(REPORT), None, None, icount=False)
    assert plain.ns is None and plain.instructions == 90_000 and plain.reply_instructions == 94_000
    with pytest.raises(UklError, match="no time stamp"):
        bootbench.timeline(read_points(REPORT), None, None, icount=True)
    missing = json.loads(json.dumps(REPORT))
    missing["points"][4] = {"vaddr": 5, "insns": None, "halts": None, "wall_ns": None}
    with pytest.raises(UklError, match="never reached main"):
        bootbench.timeline(read_points(missing), 1, None, icount=True)


def fits(least: int):
    booted: list[int] = []

    def ok(mib: int) -> bool:
        booted.append(mib)
        return mib >= least
    return ok, booted


@pytest.mark.parametrize("least", [9, 20, 37, 500, 1024])
def test_bisection_finds_the_least_memory_with_enough_steps(least):
    ok, booted = fits(least)
    found, trials = bootbench.bisect_memory(ok, 8, 1024, 20)
    assert found == least
    assert trials[0] == (1024, True) and [m for m, _ in trials] == booted
    assert all(passed == (m >= least) for m, passed in trials)
    assert len(trials) <= 1 + 13      # about log2(1016) bisections, a few more in log space
    if least > 9:
        assert (least - 1, False) in trials


def test_bisection_is_bounded_and_brackets_the_answer():
    ok, booted = fits(37)
    found, trials = bootbench.bisect_memory(ok, 8, 1024, 4)
    assert len(booted) == 5 and found is not None and found >= 37
    failed = [m for m, p in trials if not p]
    assert not failed or max(failed) < 37
    ok, booted = fits(2000)
    assert bootbench.bisect_memory(ok, 8, 1024, 6) == (None, [(1024, False)])
    ok, booted = fits(1)
    assert bootbench.bisect_memory(ok, 8, 1024, 0) == (1024, [(1024, True)])


def test_memory_range_is_checked():
    assert bootbench.parse_range("8:1024") == (8, 1024)
    for bad in ("8", "x:9", "9:8", "0:4"):
        with pytest.raises(UklError, match="--memory-range"):
            bootbench.parse_range(bad)


def row(app: str, config: str, **kw) -> bootbench.Row:
    base = dict(app=app, config=config, specialized=False, kernel_release="6.1.192-ukl", image_bytes=4_100_000,
                kernel_bytes=3_300_000, initramfs_bytes=800_000, text_bytes=20_000_000, data_bytes=5_000_000,
                bss_bytes=2_000_000, memory_mib=1024, boot_to_main_ns=309_000_000,
                boot_to_main_instructions=309_020_000, boot_to_main_wall_ms=5200.0, clock_offset_ns=-20_000,
                first_reply_ns=None, first_reply_instructions=None, first_reply_wall_ms=None, min_memory_mib=40,
                memory_trials=[(1024, True), (40, True), (39, False)], runs_instructions=[309_020_000],
                phases={"setup..decompressor": 13_000, "decompressor..kernel": 150_000_000}, exact=True, notes=[])
    base.update(kw)
    return bootbench.Row(**base)  # type: ignore[arg-type]


def sample() -> bootbench.Report:
    return bootbench.Report(True, "x86_64, test", "QEMU emulator version 7.2", (8, 1024), 6, [
        row("hello", "linux"), row("hello", "base", exact=False, notes=["the CPU idled"]),
        row("redis", "base", first_reply_ns=400_000_000, first_reply_instructions=390_000_000,
            first_reply_wall_ms=8000.0, min_memory_mib=None, memory_trials=[(1024, False)])])


def test_json_round_trip_has_the_issues_fields(tmp_path):
    path = tmp_path / "boot.json"
    bootbench.save_json(sample(), path)
    rows = json.loads(path.read_text())["rows"]
    for key in ("app", "config", "specialized", "image_bytes", "kernel_bytes", "initramfs_bytes", "boot_to_main_ns",
                "boot_to_main_instructions", "first_reply_ns", "min_memory_mib", "text_bytes", "data_bytes",
                "bss_bytes", "boot_to_main_wall_ms", "first_reply_wall_ms"):
        assert all(key in r for r in rows), key
    assert bootbench.load_json(path) == sample()
    path.write_text("{}")
    with pytest.raises(UklError, match="cannot read boot benchmark results"):
        bootbench.load_json(path)


def test_markdown_shows_ours_beside_the_peers_with_sources(tmp_path):
    md = bootbench.markdown(sample(), tmp_path / "boot.png", tmp_path / "boot.md")
    assert "| hello | linux | pc-plain | gzip | 4.10 (3.30 + 0.80) | - | 20.00 / 5.00 / 2.00 | 309.0 |" in md
    assert "309.0 *" in md and "the CPU idled" in md          # an inexact row is marked
    assert "| 400.0 |" in md and "wall, TCG" in md
    assert "40 (fails at 39)" in md
    assert "![boot figures](boot.png)" in md
    for peer in bootbench.load_peers():
        assert peer.name in md and peer.source in md
    assert "Lupine" in md and "Unikraft" in md and "hckuo2/Lupine-Linux" in md and "eurosys21-artifacts" in md


def test_specialized_rows_are_checked_against_the_targets():
    rep = sample()
    assert "issue 36's targets" not in bootbench.markdown(rep, None)   # no specialized row: no section
    rep.rows.append(row("redis", "special-0123456789ab", specialized=True, boot="pc", image_bytes=2_500_000,
                        boot_to_main_ns=100_000_000, first_reply_ns=110_000_000, min_memory_mib=32))
    md = bootbench.markdown(rep, None)
    assert "## Against issue 36's targets" in md and "Lupine's redis" in md
    kernel = "special-0123456789ab (from base)"
    assert f"| redis | {kernel} | pc | image MB | 2.50 | 2.6 | met |" in md
    assert f"| redis | {kernel} | pc | boot to main() ms | 100.00 | 20 | missed (5.0x) |" in md
    assert f"| redis | {kernel} | pc | first reply ms | 110.00 | 25 | missed (4.4x) |" in md
    assert f"| redis | {kernel} | pc | least memory MiB | 32.00 | 16 | missed (2.0x) |" in md
    goals = {g.app: g for g in bootbench.load_targets()}
    assert goals["redis"].image_mb == 2.6 and goals["examples/hello/hello.c"].boot_to_main_ms == 10


@pytest.mark.parametrize("value", ['"fast"', "0", "-1", "true"])
def test_a_target_that_is_no_positive_number_is_refused(tmp_path, value):
    f = tmp_path / "targets.toml"
    f.write_text(f'[[target]]\napp = "redis"\nwhy = "x"\nboot_to_main_ms = {value}\n')
    with pytest.raises(UklError, match="boot_to_main_ms .* not a number above 0"):
        bootbench.load_targets(f)


def test_peers_file_has_sources_and_the_issues_figures():
    peers = {p.name.split(" (")[0]: p for p in bootbench.load_peers()}
    assert peers["Lupine"].image_mb == {"hello": 1.72, "redis": 2.60, "nginx": 3.64}
    assert peers["Unikraft"].min_memory_mb == {"hello": 2, "redis": 7, "nginx": 5}
    assert all(p.source for p in peers.values())


def test_table_and_plot(tmp_path):
    t = bootbench.table(sample())
    assert t.row_count == 3 and any("wall, TCG" in str(c.header) for c in t.columns)
    bootbench.plot(sample(), tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_reports_bad_input_without_a_traceback(capsys, tmp_path):
    assert cli.main(["bench", "boot", "no-such-app", "--configs", "linux"]) == 2
    err = capsys.readouterr().err
    assert "neither a file, a directory nor a recipe" in err and "Traceback" not in err
    assert cli.main(["bench", "boot", "hello", "--configs", "no-such-config"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert cli.main(["bench", "boot", "--memory-range", "9:8"]) == 2
    assert "--memory-range" in capsys.readouterr().err
    path = tmp_path / "r.json"
    bootbench.save_json(sample(), path)
    assert cli.main(["bench", "boot", "--from-json", str(path), "--markdown", str(tmp_path / "r.md")]) == 0
    assert re.search(r"\| redis \| base \|", (tmp_path / "r.md").read_text())


def test_reports_merge_in_turn(tmp_path):
    merged = bootbench.merge([sample(), sample()])
    assert len(merged.rows) == 6 and merged.memory_range == (8, 1024)


def test_timeline_of_the_application_as_pid_1():
    """No init reads the clock: guest time is the instructions where nothing
    idled from the kernel's first instruction to main(), else unknown."""
    quiet = json.loads(json.dumps(REPORT))
    for p in quiet["points"]:
        p["halts"] = 0
    t = bootbench.timeline(read_points(quiet), None, None, icount=True, pid1=True)
    assert t.exact and t.ns == t.instructions == 90_000
    idled = bootbench.timeline(read_points(REPORT), None, None, icount=True, pid1=True)
    assert not idled.exact and idled.ns is None and "idled" in idled.notes[0]


def test_points_carry_the_rep_string_executions():
    # the plugin counts REP string executions before each point; older
    # reports lack them (None: unknown) (0)
    report = {"plugin": "insnclass", "format": 1, "points": [{"vaddr": 1, "insns": 10, "halts": 0, "reps": 0,
                                                              "wall_ns": 1},
                         {"vaddr": 2, "insns": 20, "halts": 0, "reps": 0, "wall_ns": 2},
                         {"vaddr": 3, "insns": 30, "halts": 0, "wall_ns": 3},
                         {"vaddr": 4, "insns": 900, "halts": 0, "reps": 500, "wall_ns": 4},
                         {"vaddr": 5, "insns": 1000, "halts": 0, "reps": 600, "wall_ns": 5}]}
    hits = read_points(report)
    assert [h.reps for h in hits if h] == [0, 0, None, 500, 600]
    t = bootbench.timeline(hits, 990, None, icount=True)
    assert t.instructions == 990 and t.rep_executions == 600
    # a report of a plugin that did not count them: unknown, not zero
    for point in report["points"]:
        point.pop("reps", None)
    assert bootbench.timeline(read_points(report), 990, None, icount=True).rep_executions is None


def fake_symbols(addr: int) -> str:
    if addr < 1 << 63:
        return "(user space)"
    return {0xffffffff81000000: "clear_bss", 0xffffffff81000010: "delay_tsc"}.get(addr & ~0xf, "other")


def test_span_functions_rank_each_span_from_the_kernels_entry():
    k = bootbench.PROFILED_FROM
    clear, delay, other = 0xffffffff81000000, 0xffffffff81000010, 0xffffffff81000100
    entries = [(k - 1, 99, (0x100000,)),                  # the decompressor: not profiled by function
               (k + 1, 1000, (clear, clear + 2)),            # kernel..init
               (k + 1, 10, (delay,) * 3),
               (k + 1, 5, (other,)),
               (k + 1, 7, (0x400000, 0x400002)),            # init, in user space
               (k + 2, 4, (delay,)),                        # init..main
               (k + 1, 1, (clear,))]                        # the same block, a second entry
    spans = bootbench.span_functions(entries, fake_symbols, len(bootbench.POINTS) - 1)
    assert list(spans) == ["kernel..init", "init..main"]
    assert spans["kernel..init"] == [("clear_bss", 2001), ("delay_tsc", 30), ("(user space)", 14), ("other", 5)]
    assert spans["init..main"] == [("delay_tsc", 4)]
    kept = bootbench.span_functions(entries, fake_symbols, len(bootbench.POINTS) - 1, keep=2)
    assert kept["kernel..init"] == [("clear_bss", 2001), ("delay_tsc", 30), ("(other functions: 2)", 19)]
    # a function in one span's first KEEP is counted exactly in every span
    entries += [(k + 2, 1, (clear,)), (k + 2, 3, (other,))]
    one = bootbench.span_functions(entries, fake_symbols, len(bootbench.POINTS) - 1, keep=1)
    assert one["kernel..init"] == [("clear_bss", 2001), ("delay_tsc", 30), ("(other functions: 2)", 19)]
    assert one["init..main"] == [("delay_tsc", 4), ("clear_bss", 1), ("(other functions: 1)", 3)]


def test_function_table_sums_what_it_does_not_list():
    r = row("hello", "base", functions={"kernel..init": [("clear_bss", 4_000_000), ("delay_tsc", 2_000_000),
                                                         ("(other functions: 9)", 1_000_000)],
                                        "init..main": [("delay_tsc", 500_000), ("exec", 250_000)]},
            boot_to_main_rep_executions=4_100_000)
    table = bootbench.function_table(r, keep=2)
    assert table[2:] == ["| `clear_bss` | 4.00 | - |", "| `delay_tsc` | 2.00 | 0.50 |",
                         "| (the other functions) | 1.00 | 0.25 |", "| total | 7.00 | 0.75 |"]
    assert bootbench.function_table(r, keep=3)[4] == "| `exec` | - | 0.25 |"
    md = bootbench.markdown(bootbench.Report(True, "m", "q", (8, 1024), 6, [r, row("hello", "linux")]), None)
    assert "## Where the boot goes, by function" in md and "### hello, base, pc-plain, -m 1024" in md
    assert "### hello, linux" not in md                     # a row without a profile has no table
    assert "REP string executions" in md and "| 4.1 M |" in md


def test_profile_and_rep_executions_round_trip(tmp_path):
    report = sample()
    report.rows[0].functions = {"kernel..init": [("clear_bss", 4), ("(other functions: 3)", 9)]}
    report.rows[0].boot_to_main_rep_executions = 12
    path = tmp_path / "boot.json"
    bootbench.save_json(report, path)
    assert bootbench.load_json(path) == report
    # rows saved before the profile and the REP count load as without them
    data = json.loads(path.read_text())
    for r in data["rows"]:
        r.pop("functions"), r.pop("boot_to_main_rep_executions")
    path.write_text(json.dumps(data))
    old = bootbench.load_json(path).rows[0]
    assert old.functions == {} and old.boot_to_main_rep_executions is None


def test_by_function_needs_a_run_under_icount(capsys, tmp_path):
    assert cli.main(["bench", "boot", "--by-function", "--no-memory"]) != 0
    assert "--by-function needs --icount" in capsys.readouterr().err
    path = tmp_path / "boot.json"
    bootbench.save_json(sample(), path)
    assert cli.main(["bench", "boot", "--by-function", "--from-json", str(path)]) != 0
    assert "does not apply to --from-json" in capsys.readouterr().err


def test_code_run_at_physical_addresses_is_named_by_its_kernel_symbol(tmp_path):
    # one PT_LOAD: physical 0x1000000 is virtual 0xffffffff81000000
    ehsize, phsize = 64, 56
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, 0x1000000, ehsize, 0, 0, ehsize, phsize, 1, 64, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0x1000, 0xffffffff81000000, 0x1000000, 0x100, 0x100, 0x1000)
    vmlinux = tmp_path / "vmlinux"
    vmlinux.write_bytes(header + phdr + bytes(0x1100 - ehsize - phsize))
    named = bootbench.physical_names(vmlinux, fake_symbols)
    assert named(0x1000004) == "clear_bss" and named(0xffffffff81000010) == "delay_tsc"
    assert named(0x400000) == "(user space)"                  # below the kernel: init


def test_a_profile_that_does_not_add_up_is_an_error():
    hits = [Hit(0, 0, 0, 0), Hit(0, 0, 0, 0), Hit(100, 0, 0, 0), Hit(50_100, 0, 0, 0), Hit(70_100, 0, 0, 0)]
    good = {"kernel..init": [("a", 49_000), ("(other functions: 2)", 1_000)], "init..main": [("b", 20_000)]}
    bootbench.check_profile(good, hits, "log")
    with pytest.raises(UklError, match="the profile of init..main counts 0 instructions, the points 20,000"):
        bootbench.check_profile({"kernel..init": good["kernel..init"]}, hits, "log")
    with pytest.raises(UklError, match="never reached main"):
        bootbench.check_profile(good, [*hits[:4], None], "log")


CONSOLE = ("[    0.010094] Memory: 16416K/37368K available (6619K kernel code, 723K rwdata, 1032K rodata, "
           "792K init, 2396K bss, 20696K reserved, 0K cma-reserved)\n") + """\
[    0.020326] Freeing unused kernel image (UKL bss padding) memory: 2004K
[    0.057970] Freeing initrd memory: 936K
ukl-init: meminfo MemTotal:          26444 kB
ukl-init: meminfo MemFree:           18568 kB
ukl-init: meminfo Buffers:               0 kB
ukl-init: meminfo Cached:              960 kB
ukl-init: meminfo Unevictable:           0 kB
ukl-init: meminfo Shmem:               960 kB
ukl-init: meminfo Slab:               2168 kB
ukl-init: meminfo KernelStack:         352 kB
ukl-init: meminfo PageTables:           36 kB
ukl-init: meminfo AnonPages:            72 kB
ukl-init: meminfo AppPeakRSS: 1200 kB
"""


def test_the_memory_breakdown_adds_up_to_the_memory_given():
    parts = bootbench.memory_breakdown(CONSOLE, 37)
    assert sum(v for k, v in parts.items() if k != "app peak RSS") == 37 * 1024
    assert parts["firmware, holes"] == 37 * 1024 - 37368
    assert parts["bss"] == 2396 - 2004 and parts["struct pages"] == 2048   # one 128 MiB section
    # reserved at the application's height: the present memory less MemTotal
    assert sum(parts[k] for k in ("kernel code", "rodata", "rwdata", "bss", "struct pages", "other reserved")) \
        == 37368 - 26444
    assert parts["root fs files"] == 960 and parts["page cache"] == 0 and parts["free"] == 18568
    assert parts["app peak RSS"] == 1200
    # ramfs (no TMPFS): the root's files are unevictable page cache, not Shmem
    ramfs = CONSOLE.replace("Shmem:               960", "Shmem:                 0").replace(
        "Unevictable:           0", "Unevictable:         960")
    assert bootbench.memory_breakdown(ramfs, 37)["root fs files"] == 960
    assert bootbench.memory_breakdown("no such lines", 37) == {}
