"""`ukl bench syscalls`: the LEBench-style benchmark (guest/bench/lebench.c) built
and booted once per configuration, compared against the baseline (`linux`,
or the first configuration without UKL that --configs names)."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from ukltool.bench import benchcommon
from ukltool.bench.benchcommon import BASELINE
from ukltool.build import image, initramfs
from ukltool.linux import kernel
from ukltool.plugin import cyclemodel, insnclass, insnprofile
from ukltool.run import vm
from ukltool.util import reporting, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, cache_dir

SOURCE = REPO / "guest" / "bench" / "lebench.c"
SMALL_OPS = [("getppid", 0), ("read", 1), ("write", 1), ("sendto", 1), ("recvfrom", 1),
             ("mmap+munmap", 4096), ("page-fault", 4096), ("stack-fault", 4096),
             ("thread-create+join", 0), ("context-switch", 0)]
SIZED_OPS = ["read", "write", "sendto", "recvfrom"]


@dataclass(frozen=True)
class Point:
    op: str
    size: int
    median: int
    p99: int
    n: int


@dataclass
class Report:
    unit: str
    accel: str
    icount: bool
    quick: bool
    machine: str
    configs: list[str]
    baseline: str = BASELINE  # what the others are compared with: see benchcommon.baseline()
    cpus: dict[str, str] = field(default_factory=dict)  # QEMU's -cpu per configuration (TCG)
    kernels: dict[str, str] = field(default_factory=dict)
    results: dict[str, list[Point]] = field(default_factory=dict)
    model: cyclemodel.Model | None = None  # --model cycles: classed instructions per point
    # --by-function: the points profiled, and per configuration their instructions by function
    profiled: list[tuple[str, int]] = field(default_factory=list)
    profiles: dict[str, list[insnprofile.OpProfile]] = field(default_factory=dict)


def parse(text: str) -> list[Point]:
    """BENCH lines of one run; an unfinished run is an error."""
    if "BENCH-DONE" not in text:
        raise UklError("the benchmark did not finish", "see the console log")
    return [Point(m[1], int(m[2]), int(m[3]), int(m[4]), int(m[5]))
            for m in re.finditer(r"^BENCH (\S+) (\d+) (\d+) (\d+) (\d+)\s*$", text, re.M)]


def change(base: int, value: int) -> float:
    """Percent change of value against base (negative: faster)."""
    return (value - base) * 100.0 / base if base else 0.0


def rows(report: Report) -> list[tuple[str, int, dict[str, Point]]]:
    """(op, size, {config: point}) in the baseline's order."""
    by_cfg = {c: {(p.op, p.size): p for p in pts} for c, pts in report.results.items()}
    first = report.configs[0]
    order = [(p.op, p.size) for p in report.results[first]]
    return [(op, size, {c: by_cfg[c][(op, size)] for c in report.configs if (op, size) in by_cfg[c]})
            for op, size in order]


def profile_points(spec: str) -> list[tuple[str, int]]:
    """--by-function's points (OP or OP:BYTES), checked against lebench's."""
    ops = list(dict.fromkeys([op for op, _ in SMALL_OPS] + SIZED_OPS))
    return insnprofile.parse_points(spec, ops)


def profile_config(report: insnclass.PluginReport, console: str, vmlinux: Path, points: list[tuple[str, int]],
                   config: str) -> list[insnprofile.OpProfile]:
    """The profiled points of one configuration's run: its plugin report
    (read with its profile), its REGION lines and its kernel's symbols."""
    entries = report.profile or []
    symbols = insnprofile.load_symbols(vmlinux)
    regions = {(op, size): (rid, n) for rid, (op, size, n) in cyclemodel.parse_regions(console).items()}
    out = []
    for op, size in points:
        if (op, size) not in regions:
            have = sorted({f"{o}:{s}" if s else o for o, s in regions})
            raise UklError(f"'{config}' ran no point {op}{f':{size}' if size else ''} to profile",
                           "profile one of: " + ", ".join(have))
        rid, n = regions[(op, size)]
        seen = report.regions.get(rid)
        if seen is None or seen.iterations != n:
            raise UklError(f"{config}: the plugin saw {seen.iterations if seen else 0} iterations of {op} {size}, "
                           f"the benchmark ran {n}", "were the markers (guest/bench/region.h) executed?")
        out.append(insnprofile.OpProfile(op, size, n, insnprofile.per_function(entries, rid, n, symbols.name)))
    return out


def run(configs: list[str], icount: bool, quick: bool, timeout: float, model_cpu: str | None = None,
        profile: list[tuple[str, int]] | None = None) -> Report:
    """MODEL_CPU: also count classed instructions with our QEMU plugin and
    model cycles with measure/costs/MODEL_CPU.toml (needs --icount). PROFILE:
    these points' instructions by function (insnprofile; needs --icount)."""
    configs = benchcommon.baseline(configs)
    warning = benchcommon.cpu_mismatch(configs)
    if warning:
        ui.warn(warning)
    report = Report(unit="guest instructions" if icount else "ns (TCG wall clock: relative only)",
                    accel="", icount=icount, quick=quick, machine=benchcommon.machine(), configs=configs,
                    baseline=configs[0])
    cyclemodel.check_icount(icount, model_cpu, profile)
    if model_cpu is not None:
        report.model = cyclemodel.new_model(cyclemodel.load_table(model_cpu))
    if profile:
        report.profiled = profile
    so = insnclass.build() if report.model or profile else None
    for config in configs:
        out = cache_dir() / "bench" / config
        man = image.build(image.BuildSpec([SOURCE], config, out, "lebench", freestanding=True))
        report.kernels[config] = man.kernel_release
        with tempfile.TemporaryDirectory(prefix="ukl-bench-") as td:
            args = initramfs.args_archive(["quick"] if quick else [], Path(td))
            counts = out / "insnclass.json"
            counts.unlink(missing_ok=True)
            with ui.step(f"benchmarking '{config}'"):
                res = vm.boot(vm.RunSpec(bzimage=out / "bzImage", initrds=[out / "initramfs.cpio", args],
                                         log=out / "console.log", timeout=timeout, icount=icount, smp=1,
                                         append=["norandmaps"],
                                         show=False,
                                         plugins=[insnclass.option(so, counts, bool(profile))] if so else []))
        if res.code != 0:
            raise UklError(f"the benchmark failed under '{config}' (status {res.code})",
                           f"see {out / 'console.log'}")
        report.accel = res.accel
        report.cpus[config] = kernel.image_tcg_cpu(out) if res.accel == "tcg" else "host"
        report.results[config] = parse((out / "console.log").read_text(errors="replace"))
        if so and not counts.is_file():
            raise UklError(f"the QEMU plugin wrote no report under '{config}' ({counts})",
                           f"see {out / 'console.log'}")
        seen = insnclass.read_report(counts, bool(profile)) if so else None
        console = (out / "console.log").read_text(errors="replace")
        if profile and seen:
            report.profiles[config] = profile_config(seen, console, man.vmlinux_path(), profile, config)
        if report.model and seen:
            report.model.results[config] = cyclemodel.op_counts(seen, cyclemodel.parse_regions(console), config)
    return report


def cells(report: Report, op: str, size: int, pts: dict[str, Point]) -> list[str]:
    """One table row: the operation, then per configuration the median (p99)
    and, but for the baseline, its change against the baseline."""
    out = [op, str(size) if size else ""]
    base = pts.get(report.baseline)
    for c in report.configs:
        p = pts.get(c)
        out.append(f"{p.median} ({p.p99})" if p else "-")
        if c != report.baseline:
            out.append(f"{change(base.median, p.median):+.1f}%" if p and base else "-")
    if report.model:
        out += cyclemodel.cells(report.model, op, size, {c: p.median for c, p in pts.items()}, report.configs)
    return out


def table(report: Report) -> Table:
    t = Table(title=f"Latency, median (p99) in {report.unit}; change of the median against {report.baseline}")
    t.add_column("operation")
    t.add_column("bytes", justify="right")
    for c in report.configs:
        t.add_column(c, justify="right")
        if c != report.baseline:
            t.add_column(f"{c} vs {report.baseline}", justify="right")
    for h in cyclemodel.headers(report.model, report.configs) if report.model else []:
        t.add_column(h, justify="right")
    for row in rows(report):
        t.add_row(*cells(report, *row))
    return t


def profile_tables(report: Report) -> list[Table]:
    """--by-function: per point, guest instructions per iteration by function."""
    return [insnprofile.table(report.profiles, report.configs, (op, size),
                              f"{op}{f' {size} B' if size else ''}: guest instructions per iteration, by function")
            for op, size in report.profiled]


def markdown(report: Report, plot: Path | None) -> str:
    head = ["operation", "bytes"]
    for c in report.configs:
        head.append(f"{c} median (p99)")
        if c != report.baseline:
            head.append(f"{c} vs {report.baseline}")
    head += cyclemodel.headers(report.model, report.configs) if report.model else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows(report):
        lines.append("| " + " | ".join(cells(report, *row)) + " |")
    cpus = set(report.cpus.values())
    if len(cpus) > 1:
        cpu = "; ".join(f"{c}: {v}" for c, v in report.cpus.items())
    else:
        cpu = cpus.pop() if cpus else ("host" if report.accel == "kvm" else "max")
    how = (f"Measured with `./ukl bench syscalls --configs {','.join(report.configs)}"
           f"{' --icount' if report.icount else ''}{' --quick' if report.quick else ''}`: "
           f"guest/bench/lebench.c, a freestanding program (no C library) built unchanged for every "
           f"configuration, booted under QEMU ({report.accel.upper()}, `-cpu {cpu}`, 1 vCPU)"
           f"{benchcommon.ICOUNT_NOTE if report.icount else ''}. "
           f"Each point: warm-up, then {'1,000' if report.quick else '10,000'} iterations timed with RDTSCP, "
           f"median and 99th percentile; buffers are mmap'ed and pre-faulted; output is held until the end "
           f"and address-space randomization is off (`norandmaps`) so that runs repeat. Unit: {report.unit}.")
    kern = ", ".join(f"`{c}`: Linux {k}" for c, k in report.kernels.items())
    summary = []
    for c in report.configs:
        if c == report.baseline:
            continue
        ch = [(change(pts[report.baseline].median, pts[c].median), op, size) for op, size, pts in rows(report)
              if c in pts and report.baseline in pts]
        if ch:
            lo, hi = min(ch), max(ch)
            summary.append(f"`{c}` against `{report.baseline}`: from {lo[0]:+.1f}% ({lo[1]} {lo[2] or ''}) "
                           f"to {hi[0]:+.1f}% ({hi[1]} {hi[2] or ''}) in the median.")
    out = ["# LEBench-style latencies: " + " vs ".join(report.configs), "", *summary, "",
           reporting.generated_by(f"./ukl bench syscalls --configs {','.join(report.configs)}"
                                  + (" --icount" if report.icount else "")
                                  + (" --model cycles" if report.model else ""), "`make results-syscalls`"), "",
           f"Machine: {report.machine}.", "", f"Kernels: {kern}. C library: none (freestanding benchmark).",
           "", how, "", *lines, "", NOTES, ""]
    if report.model:
        i = out.index(NOTES)
        out[i:i] = [cyclemodel.markdown_note(report.model), ""]
    if plot:
        out += [f"![latency against size and small calls]({plot.name})", ""]
    if report.profiled:
        spec = ",".join(f"{op}:{size}" if size else op for op, size in report.profiled)
        out += [insnprofile.markdown(report.profiled, report.profiles, report.configs,
                                     f"./ukl bench syscalls --configs {','.join(report.configs)} --icount "
                                     f"--by-function --points {spec}"), ""]
    return "\n".join(out)


NOTES = """## Reading these numbers

* Under `--icount` a unit is one guest instruction, so a comparison shows how
  much *work* each path does, exactly and repeatably. It does not show what
  an instruction costs: SYSCALL, SYSRET, IRET and SWAPGS are single
  instructions here although they cost tens to hundreds of cycles on real
  CPUs, which is where the dissertation's gains for the base model come from.
  Wall-clock runs under TCG do not show it either (QEMU emulates privileged
  instructions slowly and unevenly); cycle-level comparisons need KVM or
  bare metal, which `ukl` uses automatically where it works.
* `base` runs the same entry and exit work as `linux` (that is the base
  model), so the expectation is equal counts within a few instructions, and
  no operation slower than `linux`. Under mitigations (`base-mitigated`
  against `linux-mitigated`) UKL has no page-table isolation and returns
  to the application clear no CPU buffers: few instructions, costly ones
  (docs/cycle-model.md)."""


def metric_value(report: Report, config: str, point: Point, metric: str) -> float | None:
    """A point's median in guest instructions, or its modelled cycles
    (None where the report has no model for it)."""
    if metric == "instructions":
        return float(point.median)
    oc = report.model.counts(config, point.op, point.size) if report.model else None
    return cyclemodel.cycles(point.median, oc.counts, report.model.extra) if report.model and oc else None


def improvement(report: Report, op: str, config: str, metric: str = "instructions") -> tuple[list[int], list[float]]:
    """Per size of @op, the improvement of @config over the baseline in percent
    (positive: fewer instructions or modelled cycles), as the dissertation's
    figures show it; sizes without both values are left out."""
    base = {p.size: p for p in report.results[report.baseline] if p.op == op}
    sizes, pct = [], []
    for p in sorted((p for p in report.results[config] if p.op == op), key=lambda p: p.size):
        b = base.get(p.size)
        v = metric_value(report, config, p, metric)
        bv = metric_value(report, report.baseline, b, metric) if b else None
        if v is not None and bv:
            sizes.append(p.size)
            pct.append((bv - v) * 100.0 / bv)
    return sizes, pct


def plot(report: Report, path: Path) -> None:
    """In the dissertation's style (Figs. 6.1-6.3): latency against payload,
    and under it each configuration's improvement over the baseline, shaded; then
    the improvement for the fixed-size operations, in instructions and, with
    a model, modelled cycles."""
    plt = reporting.pyplot()

    metrics = ["instructions", "cycles"] if report.model else ["instructions"]
    others = [c for c in report.configs if c != report.baseline]
    colors = {c: f"C{i}" for i, c in enumerate(report.configs)}
    unit = report.unit.split(" (")[0]
    fig = plt.figure(figsize=(13, 10 + 3.2 * len(metrics)))
    grid = fig.add_gridspec(6 + len(metrics), 2, height_ratios=[2, 1, 0.25, 2, 1, 0.25] + [1.6] * len(metrics))
    for i, op in enumerate(SIZED_OPS):
        row, col = 3 * (i // 2), i % 2
        ax = fig.add_subplot(grid[row, col])
        for c in report.configs:
            pts = sorted((p for p in report.results[c] if p.op == op), key=lambda p: p.size)
            ax.plot([p.size for p in pts], [p.median for p in pts], color=colors[c], label=c,
                    linewidth=2.2 if c == report.baseline else 1.2)
        ax.set_title(f"{op}: latency against payload")
        ax.set_ylabel(f"median ({unit})")
        ax.legend(fontsize=7, loc="upper left")
        imp = fig.add_subplot(grid[row + 1, col], sharex=ax)
        for c in others:
            for metric in metrics:
                sizes, pct = improvement(report, op, c, metric)
                style = "-" if metric == "instructions" else "--"
                imp.plot(sizes, pct, style, color=colors[c], linewidth=1,
                         label=f"{c} ({'modelled cycles' if metric == 'cycles' else 'instructions'})")
                if metric == "instructions":
                    imp.fill_between(sizes, pct, 0, color=colors[c], alpha=0.15)
        imp.axhline(0, color="black", linewidth=0.6)
        imp.set_xlabel("bytes")
        imp.set_ylabel(f"% better than {report.baseline}")
        imp.legend(fontsize=6, loc="best", ncol=2)
    labels = [f"{op} {s}" if s else op for op, s in SMALL_OPS]
    width = 0.8 / max(1, len(others))
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot(grid[6 + k, :])
        for j, c in enumerate(others):
            vals = []
            for op, size in SMALL_OPS:
                sizes, pct = improvement(report, op, c, metric)
                vals.append(pct[sizes.index(size)] if size in sizes else 0.0)
            ax.bar([x + j * width for x in range(len(SMALL_OPS))], vals, width, label=c, color=colors[c])
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks([x + width * (len(others) - 1) / 2 for x in range(len(SMALL_OPS))])
        ax.set_xticklabels(labels, rotation=15, fontsize=8)
        what = f"modelled cycles ({report.model.cpu}, a model)" if metric == "cycles" and report.model else unit
        ax.set_ylabel(f"% better than {report.baseline}\n({what})", fontsize=8)
        ax.legend(fontsize=7, ncol=len(others))
    fig.suptitle(f"LEBench-style latency ({report.accel.upper()}{', icount' if report.icount else ''}); "
                 f"improvement over {report.baseline} shaded\n{', '.join(report.configs)}")
    fig.tight_layout()
    reporting.save_plot(fig, path)


def save_json(report: Report, path: Path) -> None:
    reporting.save_json(report, path)


def load_json(path: Path) -> Report:
    def decode(data: dict) -> Report:
        data["results"] = {c: [Point(**p) for p in pts] for c, pts in data["results"].items()}
        data["model"] = cyclemodel.model_from_dict(data["model"]) if data.get("model") else None
        data["profiled"] = [(str(op), int(size)) for op, size in data.get("profiled", [])]
        data["profiles"] = {c: [insnprofile.OpProfile(**p) for p in ps] for c, ps in data.get("profiles", {}).items()}
        report = Report(**data)
        if report.baseline not in report.results:
            raise ValueError(f"its baseline '{report.baseline}' has no results")
        return report

    return reporting.load_json(path, decode, "benchmark results", "give a file written by `ukl bench syscalls --json`")
