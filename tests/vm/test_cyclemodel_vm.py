"""The QEMU plugin (tools/qemu-plugin/insnclass.c) in a real boot: a program
executes a known mix of classed instructions in a measured region and the
plugin must count exactly that, per class; and `ukl bench syscalls --model
cycles` end to end."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from conftest import REPO, assert_clean, build, ukl
from ukltool.build import initramfs
from ukltool.plugin import cyclemodel, insnclass
from ukltool.run import vm

SRC = REPO / "tests" / "apps" / "insnclass.c"
REGION, ROUNDS, MIGRATE_REGION = 7, 10, 8
# Per round (tests/apps/insnclass.c): in ring 3, and in the kernel's
# getppid() path (linux: SYSCALL in, SWAPGS, STI in the entry work, CLI
# before the exit, SWAPGS, SYSRET out).
GETPPID = {"syscall": 1, "sysret": 1, "swapgs": 2, "sti": 1, "cli": 1}
PER_ROUND = {"cpuid": 3, "rdtscp": 5, "rdtsc": 4, "lfence": 6, "mfence": 2, "sfence": 1, "verw": 2,
             "popf": 3, **GETPPID}


def boot_with_plugin(out: Path, report: Path) -> vm.RunResult:
    with tempfile.TemporaryDirectory(prefix="ukl-test-") as td:
        args = initramfs.args_archive([], Path(td))
        return vm.boot(vm.RunSpec(bzimage=out / "bzImage", initrds=[out / "initramfs.cpio", args],
                                  log=out / "console.log", timeout=300, icount=True, smp=1, show=False,
                                  plugins=[insnclass.option(insnclass.build(), report)]))


def run_insnclass(outdir: Path, config: str) -> tuple[str, insnclass.PluginReport]:
    """tests/apps/insnclass.c built for CONFIG and booted once under the
    plugin: the console and the plugin's counts, the boot clean."""
    out = build(SRC, config, outdir / f"insnclass-{config}", "--freestanding")
    report = out / "insnclass.json"
    res = boot_with_plugin(out, report)
    console = (out / "console.log").read_text(errors="replace")
    assert res.code == 0, console[-3000:]
    assert_clean(out / "console.log")
    return console, insnclass.parse_report(report.read_text(), str(report))


def test_the_plugin_counts_each_class_exactly(outdir):
    console, counts = run_insnclass(outdir, "linux")
    line = next(ln for ln in console.splitlines() if ln.startswith("INSNCLASS "))
    xsave = int(line.split()[-1])
    assert line.startswith(f"INSNCLASS region {REGION} rounds {ROUNDS} ")
    per_round = {**PER_ROUND, **({"xsave": 1, "xrstor": 1} if xsave else {})}

    assert counts.unbalanced == 0 and set(counts.regions) == {REGION}
    r = counts.regions[REGION]
    assert r.iterations == ROUNDS
    # the typical round is exactly the program's mix (an interrupt that
    # lands in a round adds its own entry and exit to that round only)
    assert r.typical == per_round, (r.typical, per_round)
    assert r.typical_iterations >= ROUNDS - 2
    for cls, n in per_round.items():
        assert r.counts.get(cls, 0) >= n * ROUNDS, cls
    # ring-3 instructions the kernel does not execute: exact in the sums too
    for cls in ("cpuid", "verw", "popf", "mfence", "sfence"):
        assert r.counts[cls] == per_round[cls] * ROUNDS, cls
    # the whole run: the boot executes many more, but never fewer
    for cls, n in per_round.items():
        assert counts.counts.get(cls, 0) >= n * ROUNDS, cls
    assert counts.insns > r.insns > 0


def test_a_machine_wide_region_counts_every_vcpu(outdir):
    """machine=on (`ukl run --count-insns`): a region that begins on one
    vCPU and ends on another is one iteration holding both halves; the
    per-vCPU regions see an end without a begin there."""
    out = build(SRC, "linux", outdir / "insnclass-migrate", "--freestanding")
    got = {}
    for machine in (False, True):
        report = out / f"insnclass-{machine}.json"
        with tempfile.TemporaryDirectory(prefix="ukl-test-") as td:
            args = initramfs.args_archive(["migrate"], Path(td))
            res = vm.boot(vm.RunSpec(bzimage=out / "bzImage", initrds=[out / "initramfs.cpio", args],
                                     log=out / "console.log", timeout=300, smp=2, accel="tcg", show=False,
                                     plugins=[insnclass.option(insnclass.build(), report, machine=machine)]))
        console = (out / "console.log").read_text(errors="replace")
        assert res.code == 0, console[-3000:]
        assert_clean(out / "console.log")
        line = next(ln for ln in console.splitlines() if ln.startswith("INSNCLASS migrate "))
        assert line.startswith("INSNCLASS migrate cpus 0 1 "), line
        got[machine] = insnclass.parse_report(report.read_text(), str(report))
    per_vcpu, machine_wide = got[False], got[True]
    assert MIGRATE_REGION not in per_vcpu.regions and per_vcpu.unbalanced >= 1
    assert machine_wide.unbalanced == 0
    r = machine_wide.regions[MIGRATE_REGION]
    assert r.iterations == 1
    # both rounds, and the migration's kernel work on both vCPUs
    for cls, n in PER_ROUND.items():
        assert r.counts.get(cls, 0) >= 2 * n, (cls, r.counts)
    assert r.counts["popf"] == 2 * PER_ROUND["popf"], r.counts   # ring 3's alone: Linux executes none
    assert machine_wide.insns > r.insns > 0


def test_returns_to_the_application_do_not_clear_cpu_buffers(outdir):
    """base-debug boots on an emulated Skylake (kernel.tcg_cpu), where Linux
    clears CPU buffers (VERW) on every return to ring 3, as the MDS
    mitigation does without microcode; the same boot's returns to the
    application, which runs with the kernel's privilege, must not. The
    region's VERWs are the program's own two per round; the kernel's
    returns to ukl-init (ring 3) before the exec add the rest."""
    from ukltool.linux import kernel
    assert kernel.tcg_cpu("base-debug").startswith("Skylake-Server")
    _, counts = run_insnclass(outdir, "base-debug")
    r = counts.regions[REGION]
    assert r.iterations == ROUNDS
    assert r.counts["verw"] == PER_ROUND["verw"] * ROUNDS, r.counts
    assert counts.counts["verw"] > r.counts["verw"], "the kernel cleared no buffers: is MDS mitigated?"
    # getppid() through the UKL entry: no SYSCALL, SYSRET or SWAPGS
    assert not {"syscall", "sysret", "swapgs"} & set(r.typical), r.typical


def test_bench_models_cycles_from_counts(tmp_path):
    out = tmp_path / "bench.json"
    res = ukl("bench", "syscalls", "--configs", "linux", "--icount", "--quick", "--model", "cycles",
              "--json", out, "--markdown", tmp_path / "bench.md")
    assert res.returncode == 0, res.stdout[-3000:]
    data = json.loads(out.read_text())
    model = data["model"]
    assert model["cpu"] == cyclemodel.DEFAULT_CPU
    by_op = {(oc["op"], oc["size"]): oc for oc in model["results"]["linux"]}
    points = {(p["op"], p["size"]): p for p in data["results"]["linux"]}
    assert set(by_op) == set(points)
    getppid = by_op[("getppid", 0)]
    # a null system call: one SYSCALL, one SYSRET, SWAPGS in and out; the
    # timing's RDTSCPs are not the operation's
    assert getppid["counts"] == GETPPID
    assert getppid["iterations"] == points[("getppid", 0)]["n"]
    md = (tmp_path / "bench.md").read_text()
    assert f"linux modelled cycles (model: {cyclemodel.DEFAULT_CPU})" in md
    extra = model["extra"]
    want = points[("getppid", 0)]["median"] + sum(n * extra[c] for c, n in GETPPID.items())
    row = next(line for line in md.splitlines() if line.startswith("| getppid |"))
    assert row.endswith(f"| {want:.0f} |"), (row, want)
