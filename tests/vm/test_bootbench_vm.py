"""`ukl bench boot`, CI-sized: examples/hello/hello.c under linux and base,
under --icount, twice each, with a short memory bisection (16..256 MiB, two
boots after the upper bound's). The sizes are the files', the boot span is
inside the whole run, runs repeat exactly, and the least memory found
booted where the next smaller size tried did not."""

from __future__ import annotations

import json
import shutil
import subprocess

from conftest import ukl, ukl_bss_padding, vmlinux_symbols
from ukltool.bench import bootbench
from ukltool.util.paths import cache_dir


def bss_cleared(image, ukl: bool) -> int:
    """The bytes clear_bss() zeroes in IMAGE's kernel: .bss and .brk, but
    under UKL not the padding after the application's bss (kernel patch 0017)."""
    s = vmlinux_symbols(image, "__bss_start", "__bss_stop", "__brk_base", "__brk_limit")
    cleared = s["__bss_stop"] - s["__bss_start"] + s["__brk_limit"] - s["__brk_base"]
    return cleared - (ukl_bss_padding(image) if ukl else 0)


def test_boot_benchmark_of_hello(tmp_path):
    out = tmp_path / "boot.json"
    res = ukl("bench", "boot", "examples/hello/hello.c", "--configs", "linux,base", "--icount",
              "--repeat", "2", "--memory-range", "8:256", "--memory-steps", "3", "--json", out,
              "--markdown", tmp_path / "boot.md", "--plot", tmp_path / "boot.png", "--by-function")
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {r["config"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"linux", "base"}
    for config, r in rows.items():
        image = bootbench.image_dir("examples/hello/hello.c", config)
        manifest = json.loads((image / "manifest.json").read_text())
        assert r["app"] == "examples/hello/hello.c" and r["specialized"] is False
        # sizes are the files'; text/data/bss as binutils' size counts them
        assert r["kernel_bytes"] == (image / "bzImage").stat().st_size
        assert r["initramfs_bytes"] == (image / "initramfs.cpio").stat().st_size
        assert r["image_bytes"] == r["kernel_bytes"] + r["initramfs_bytes"]
        size = shutil.which("size")
        if size:
            berkeley = subprocess.run([size, "-B", str(cache_dir() / manifest["vmlinux"])], capture_output=True,
                                      text=True, check=True).stdout.splitlines()[1].split()
            assert [r["text_bytes"], r["data_bytes"], r["bss_bytes"]] == [int(x) for x in berkeley[:3]]
        # the span to main() is part of the run, and runs repeat exactly under --icount
        whole = json.loads((image / "bootbench-points.json").read_text())["total"]["insns"]
        assert 0 < r["boot_to_main_instructions"] < whole, (r, whole)
        assert r["runs_instructions"] == [r["boot_to_main_instructions"]] * 2, r
        # nothing idles on this path: guest time is the instructions, up to the plugin's overcount
        assert r["exact"], r["notes"]
        assert abs(r["boot_to_main_ns"] - r["boot_to_main_instructions"]) < 0.001 * r["boot_to_main_instructions"]
        assert sum(r["phases"].values()) == r["boot_to_main_instructions"]
        assert r["boot_to_main_wall_ms"] > 0 and r["first_reply_ns"] is None
        # clear_bss() clears the kernel's bss with one `rep stosb` (GCC
        # inlines its memset so in these non-KASAN kernels), which QEMU
        # runs (and counts) byte by byte: at least that many REP executions
        # before main(). Under UKL it skips the padding after the
        # application's bss (kernel patch 0017), up to the 2 MiB boundary.
        cleared = bss_cleared(image, config == "base")
        assert 0 < cleared and (cleared < r["bss_bytes"] / 2) == (config == "base"), (cleared, r["bss_bytes"])
        reps = r["boot_to_main_rep_executions"]
        assert 0.9 * cleared < reps < r["boot_to_main_instructions"], (reps, cleared)
        # --by-function: a second boot, the same instructions (under
        # --icount), told by function; a span's total is its phase's, up to
        # the blocks that hold the points
        spans = {span: dict(fns) for span, fns in r["functions"].items()}
        assert list(spans) == ["kernel..init", "init..main"], list(spans)
        for span, fns in spans.items():
            assert abs(sum(fns.values()) - r["phases"][span]) < 1000, (span, sum(fns.values()), r["phases"])
        kinit = spans["kernel..init"]
        if "clear_bss" in kinit:
            assert kinit["clear_bss"] >= 0.9 * cleared, kinit
        else:   # a small bss: below the span's own cut, its PROFILE_KEEP largest
            listed = sorted((n for fn, n in kinit.items() if not fn.startswith("(other")), reverse=True)
            assert listed[bootbench.PROFILE_KEEP - 1] >= 0.9 * cleared, (cleared, kinit)
        # the least memory booted and passed; the next smaller size tried did not
        trials = [(m, ok) for m, ok in r["memory_trials"]]
        least = r["min_memory_mib"]
        assert least is not None and (least, True) in trials, trials
        failed = [m for m, ok in trials if not ok]
        assert failed and max(failed) < least, trials
        assert all(ok == (m >= least) for m, ok in trials), trials
    # UKL's main() is the kernel's ukl_main; linux's the program's: both reached, after init's stamp
    assert rows["base"]["phases"]["init..main"] > 0 and rows["linux"]["phases"]["init..main"] > 0
    md = (tmp_path / "boot.md").read_text()
    assert "| examples/hello/hello.c | base | pc |" in md and "Lupine" in md and "Unikraft" in md
    assert "### examples/hello/hello.c, base, pc, -m 1024" in md and "| `memmap_init_range` |" in md
    assert (tmp_path / "boot.png").stat().st_size > 10000


def test_boot_methods_each_measured(tmp_path):
    """The savings and direct boot (docs/results/results-boot.md's boot methods) on
    one image: each boot reaches main() exactly, also with no initramfs; the savings only remove
    instructions; booted direct, nothing is decompressed, and the image's
    kernel bytes are the uncompressed kernel's."""
    out = tmp_path / "boots.json"
    methods = ["pc-plain", "pc-noapictimer", "pc-noapictimer-pmtmr", "pc", "pc-direct", "microvm-direct",
               "microvm-direct-pid1", "microvm-direct-bare"]
    res = ukl("bench", "boot", "examples/hello/hello.c", "--configs", "base", "--icount",
              "--boots", ",".join(methods), "--no-memory", "--json", out)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {r["boot"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == methods
    for r in rows.values():
        assert r["exact"], r["notes"]
        assert r["min_memory_mib"] is None and r["memory_trials"] == []
        assert sum(r["phases"].values()) == r["boot_to_main_instructions"]
    # the same kernel, with and without the savings
    plain, saved = rows["pc-plain"], rows["pc"]
    # (the decompressor's work differs by the command line's few words only)
    assert abs(saved["phases"]["decompressor..kernel"] - plain["phases"]["decompressor..kernel"]) < 10_000
    assert saved["phases"]["kernel..init"] < plain["phases"]["kernel..init"] - 50_000_000, (plain, saved)
    # pmtmr=0: no PM timer to check for 4.5 ms of busy waits
    apic, pmtmr = (rows[m]["phases"]["kernel..init"] for m in ("pc-noapictimer", "pc-noapictimer-pmtmr"))
    assert 4_000_000 < apic - pmtmr < 6_000_000, (apic, pmtmr)
    # without init, main() comes sooner
    pid1, direct = rows["microvm-direct-pid1"], rows["microvm-direct"]
    assert pid1["boot_to_main_instructions"] < direct["boot_to_main_instructions"], (pid1, direct)
    # with no initramfs, the VMM loads the kernel alone, and nothing is unpacked
    bare = rows["microvm-direct-bare"]
    assert bare["initramfs_bytes"] == 0 and bare["image_bytes"] == bare["kernel_bytes"] == pid1["kernel_bytes"]
    assert bare["boot_to_main_instructions"] < pid1["boot_to_main_instructions"], (bare, pid1)
    for name in ("pc-direct", "microvm-direct", "microvm-direct-pid1", "microvm-direct-bare"):
        r = rows[name]
        assert r["phases"]["setup..decompressor"] == 0 and r["phases"]["decompressor..kernel"] < 100_000, r
        assert r["kernel_bytes"] > 2 * plain["kernel_bytes"]
    # on the same machine, direct boot skips the decompression (microvm
    # calibrates its APIC timer, which -M pc's HPET spares: not compared)
    assert rows["pc-direct"]["boot_to_main_instructions"] < saved["boot_to_main_instructions"], (rows, saved)


def test_kernel_compressions_each_measured(tmp_path):
    """`--compressions`: one image per kernel compression, from one build
    directory. The decompressor's work and the image's size trade places
    (LZ4 the fastest, xz the smallest); after it, the kernel is the same;
    direct boot is skipped for a kernel it cannot take out."""
    out = tmp_path / "compressions.json"
    res = ukl("bench", "boot", "examples/hello/hello.c", "--configs", "base", "--icount",
              "--compressions", "lz4,gzip,xz", "--boots", "pc,pc-direct", "--no-memory", "--json", out)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["compression"], r["boot"]) for r in rows] == [("lz4", "pc"), ("lz4", "pc-direct"), ("gzip", "pc"),
                                                            ("gzip", "pc-direct"), ("xz", "pc")]
    assert "pc-direct skipped for the xz kernel" in res.stdout
    pc = {r["compression"]: r for r in rows if r["boot"] == "pc"}
    assert pc["xz"]["kernel_bytes"] < pc["gzip"]["kernel_bytes"] < pc["lz4"]["kernel_bytes"]
    work = {c: r["phases"]["decompressor..kernel"] for c, r in pc.items()}
    assert work["lz4"] < work["gzip"] < work["xz"], work
    after = [r["phases"]["kernel..init"] for r in pc.values()]
    assert max(after) - min(after) < 0.01 * max(after), after
    # booted direct, the compression does not matter
    lz4, gzip = (r["boot_to_main_instructions"] for r in rows if r["boot"] == "pc-direct")
    assert abs(lz4 - gzip) < 100_000, (lz4, gzip)


def test_a_server_as_pid_1_is_timed_to_main(tmp_path):
    """Issue 47: Redis booted as PID 1 with no initramfs (it reads no
    file) never ends by itself; the plugin ends the run at main()
    (stop=last). Its row has no first reply (no init to probe it) and
    says why it has no least memory; the init row beside it has both."""
    out = tmp_path / "redis.json"
    res = ukl("bench", "boot", "redis", "--configs", "base", "--icount",
              "--boots", "microvm-direct,microvm-direct-bare",
              "--memory-range", "32:256", "--memory-steps", "1", "--json", out)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {r["boot"]: r for r in json.loads(out.read_text())["rows"]}
    init, bare = rows["microvm-direct"], rows["microvm-direct-bare"]
    assert bare["initramfs_bytes"] == 0 and bare["exact"], bare
    assert bare["boot_to_main_instructions"] < init["boot_to_main_instructions"], (bare, init)
    assert bare["first_reply_instructions"] is None and init["first_reply_instructions"] is not None
    assert bare["min_memory_mib"] is None and any("no init to probe it" in n for n in bare["notes"]), bare
    assert init["min_memory_mib"] is not None, init
