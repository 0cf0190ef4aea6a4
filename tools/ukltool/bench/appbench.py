"""`ukl bench app [NAME...]` (redis, memcached, nginx, sqlite3, leveldb): application
benchmarks, each configuration booted once per application.

Servers are driven from inside the guest, on loopback, by guest/bench/appload.c
(the server and its client share the single vCPU), which reads the
server's CPU time through clock_getcpuclockid(): under `--icount` a
nanosecond of guest time is one guest instruction, so the result is the
server's guest instructions per request, repeatable from run to run.
Run-to-completion applications (sqlite3's speedtest1, LevelDB's db_bench)
are timed the same way as a whole. What each application runs is the
[bench] section of its recipe (apps/NAME/recipe.toml)."""

from __future__ import annotations

import hashlib
import re
import shlex
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.table import Table

from ukltool.apps import recipes
from ukltool.bench import appcycles, applatency, benchcommon
from ukltool.bench.benchcommon import BASELINE
from ukltool.build import image, initramfs
from ukltool.plugin import cyclemodel, insnclass, insnprofile
from ukltool.run import vm
from ukltool.util import columns, reporting, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, cache_dir
from ukltool.util.proc import host_cc, run

LOADER = REPO / "guest" / "bench" / "appload.c"
LOADER_SOURCES = [LOADER, REPO / "guest" / "bench" / "region.h"]


@dataclass(frozen=True)
class Point:
    """One measurement: a server operation at a load, or a whole run."""
    op: str              # get, set, or "run"
    conns: int
    pipeline: int
    requests: int        # 1 for a run-to-completion workload
    server_ns: int       # the application's CPU time (guest instructions under --icount)
    elapsed_ns: int      # guest time over the load, client and kernel included

    @property
    def per_request(self) -> float:
        return self.server_ns / self.requests

    @property
    def label(self) -> str:
        return "run" if self.op == "run" else f"{self.op.upper()} c={self.conns} P={self.pipeline}"


@dataclass
class AppReport:
    app: str
    description: str
    icount: bool
    accel: str
    machine: str
    configs: list[str]
    kernels: dict[str, str] = field(default_factory=dict)
    results: dict[str, list[Point]] = field(default_factory=dict)   # the median of the runs
    runs: int = 1
    spread: dict[str, dict[str, float]] = field(default_factory=dict)  # (max - min) / median per load
    baseline: str = BASELINE  # what the others are compared with (benchcommon.baseline())
    model: appcycles.AppModel | None = None  # --model cycles: classed instructions per load
    latency: dict[str, list[applatency.RatePoint]] = field(default_factory=dict)  # open-loop loads
    # --by-function: per configuration, each load's guest instructions per request by function
    profiles: dict[str, list[insnprofile.OpProfile]] = field(default_factory=dict)

    @property
    def unit(self) -> str:
        return "guest instructions" if self.icount else "ns (TCG wall clock: relative only)"


def names() -> list[str]:
    return [n for n in recipes.names() if recipes.load(n).bench is not None]


def loader() -> Path:
    """guest/bench/appload.c, an ordinary static program, compiled once per content."""
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in LOADER_SOURCES)).hexdigest()[:16]
    out = cache_dir() / "bench" / f"appload-{digest}"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".partial")
        run([host_cc(), "-O2", "-Wall", "-static", "-o", tmp, LOADER, "-lm"], what="compiling guest/bench/appload.c")
        tmp.replace(out)
    return out


def script(r: recipes.Recipe, requests: int | None, run: int = 0) -> str:
    """The guest's shell script: start the server, load it with each
    operation and load in turn, stop it; or time one run. RUN chooses the
    open-loop loads' arrival sequence."""
    b = r.bench
    assert b is not None
    if b.protocol == "run":
        return f'/bin/appload run "$UKL_APP" {shlex.join(b.args)} || echo APPLOAD-FAILED\n'
    lines = [f'"$UKL_APP" {shlex.join(b.args)} > /tmp/server.log 2>&1 &', "pid=$!"]
    n = requests or b.requests
    loads = [(op, conns, pipeline) for op in b.ops for conns in b.conns for pipeline in b.pipelines]
    for k, (op, conns, pipeline) in enumerate(loads):   # load K is the plugin's region K (appcycles)
        lines.append(f"APPLOAD_REGION={k} /bin/appload {b.protocol} {b.port} {op} {shlex.quote(b.comm)} {n} "
                     f"{conns} {pipeline} || echo APPLOAD-FAILED")
    lines += applatency.script_lines(b, requests, seed=run)
    lines += ["kill $pid; wait $pid", "echo APPLOAD-DONE"]
    return "\n".join(lines) + "\n"


def parse(text: str) -> list[Point]:
    if "APPLOAD-FAILED" in text or ("APPLOAD-DONE" not in text and "APPRUN " not in text):
        raise UklError("the load did not complete", "see the console log")
    pts = [Point(m[1], int(m[3]), int(m[4]), int(m[2]), int(m[5]), int(m[6]))
           for m in re.finditer(r"^APPLOAD \S+ (\S+) (\d+) (\d+) (\d+) (\d+) (\d+)\s*$", text, re.M)]
    pts += [Point("run", 1, 1, 1, int(m[1]), int(m[2]))
            for m in re.finditer(r"^APPRUN (\d+) (\d+)\s*$", text, re.M)]
    if not pts:
        raise UklError("the benchmark printed no results", "see the console log")
    return pts


def load_profiles(report: insnclass.PluginReport, loads: list[Point], vmlinux: Path,
                  source: str = "the plugin's report") -> list[insnprofile.OpProfile]:
    """Each load's region (load K is region K) in the plugin's REPORT (read
    with its profile): the whole guest's instructions per request, by
    function."""
    # every load entered its region exactly once (appcycles checks it)
    appcycles.load_counts(report, loads, source)
    entries = report.profile or []
    symbols = insnprofile.load_symbols(vmlinux)
    return [insnprofile.OpProfile(p.label, 0, p.requests, insnprofile.per_function(entries, k, p.requests,
                                                                                   symbols.name))
            for k, p in enumerate(loads)]


def run_app(name: str, configs: list[str], icount: bool, requests: int | None, timeout: float,
            repeat: int = 1, model_cpu: str | None = None, profile: bool = False) -> AppReport:
    """Build the recipe's image for each configuration, then boot them in
    turn REPEAT times (interleaved: linux, base, linux, base, ...). With
    MODEL_CPU, also count the guest's classed instructions during each load
    (our QEMU plugin, in the first run: under --icount runs repeat exactly) and model
    cycles with measure/costs/MODEL_CPU.toml. PROFILE: also each load's
    instructions by function (insnprofile), in the first run."""
    r = recipes.load(name)
    if r.bench is None:
        raise UklError(f"apps/{name}/recipe.toml has no [bench] section", "benchmarks: " + ", ".join(names()))
    configs = benchcommon.baseline(configs)
    mismatch = benchcommon.cpu_mismatch(configs)
    if mismatch:
        ui.warn(mismatch)
    report = AppReport(name, r.description, icount, "", benchcommon.machine(), configs, runs=repeat,
                       baseline=configs[0])
    cyclemodel.check_icount(icount, model_cpu, profile)
    if model_cpu is not None:
        report.model = appcycles.new_model(cyclemodel.load_table(model_cpu))
    so = insnclass.build() if report.model or profile else None
    appload = loader()
    outs = {}
    vmlinux = {}
    for config in configs:
        out = cache_dir() / "bench" / "apps" / f"{name}-{config}"
        man = image.build(recipes.image_spec(r, config, out, [(appload, "/bin/appload")]))
        report.kernels[config] = man.kernel_release
        outs[config] = out
        vmlinux[config] = man.vmlinux_path()
    runs: dict[str, list[list[Point]]] = {c: [] for c in configs}
    latency_runs: dict[str, list[list[applatency.RatePoint]]] = {c: [] for c in configs}
    for i in range(repeat):
        for config in configs:
            out = outs[config]
            counts = out / "insnclass.json"
            counts.unlink(missing_ok=True)
            with tempfile.TemporaryDirectory(prefix="ukl-bench-") as td:
                extra = initramfs.args_archive([], Path(td), script(r, requests, i))
                with ui.step(f"benchmarking {name} under '{config}' (run {i + 1} of {repeat})"):
                    initrds = image.boot_initrds(out, image.load(out), [extra], shell=True)
                    res = vm.boot(vm.RunSpec(bzimage=out / "bzImage", initrds=initrds,
                                             log=out / "console.log", timeout=timeout, icount=icount, smp=1,
                                             append=["norandmaps"], show=False,
                                             plugins=[insnclass.option(so, counts, profile)] if so and i == 0
                                             else []))
            if res.code != 0 or res.failures:
                raise UklError(f"the {name} benchmark failed under '{config}' (status {res.code})",
                               f"see {out / 'console.log'}")
            report.accel = res.accel
            text = (out / "console.log").read_text(errors="replace")
            runs[config].append(parse(text))
            latency_runs[config].append(applatency.parse(text))
            applatency.check(latency_runs[config][-1], r.bench, f"the {name} benchmark under '{config}'",
                             out / "console.log")
            if so and i == 0 and not counts.is_file():
                raise UklError(f"the QEMU plugin wrote no report under '{config}' ({counts})",
                               "see the console log; is the plugin loadable by this QEMU?")
            seen = insnclass.read_report(counts, profile) if so and i == 0 else None
            if profile and seen:
                report.profiles[config] = load_profiles(seen, runs[config][0], vmlinux[config], str(counts))
            if report.model and seen:
                report.model.results[config] = appcycles.load_counts(seen, runs[config][0],
                                                                     f"the {name} benchmark under '{config}'")
    for config, rs in runs.items():
        report.results[config], report.spread[config] = combine(rs)
        if r.bench.latency:
            report.latency[config] = applatency.combine(latency_runs[config])
    return report


def combine(runs: list[list[Point]]) -> tuple[list[Point], dict[str, float]]:
    """The median of each load over the runs, and the runs' spread."""
    merged, spread = [], {}
    for i, first in enumerate(runs[0]):
        same = [rs[i] for rs in runs]
        if any(p.label != first.label for p in same):
            raise UklError("the runs measured different loads", "run the benchmark again")
        server = statistics.median_low(p.server_ns for p in same)
        merged.append(Point(first.op, first.conns, first.pipeline, first.requests, server,
                            statistics.median_low(p.elapsed_ns for p in same)))
        spread[first.label] = (max(p.server_ns for p in same) - min(p.server_ns for p in same)) / server \
            if server else 0.0
    return merged, spread


def rows(report: AppReport) -> list[tuple[str, dict[str, Point]]]:
    by_cfg = {c: {p.label: p for p in pts} for c, pts in report.results.items()}
    return [(p.label, {c: by_cfg[c][p.label] for c in report.configs if p.label in by_cfg[c]})
            for p in report.results[report.configs[0]]]


def cells(report: AppReport, label: str, pts: dict[str, Point]) -> list[str]:
    out = [label]
    base = pts.get(report.baseline)
    for c in report.configs:
        p = pts.get(c)
        spread = report.spread.get(c, {}).get(label)
        out.append((f"{p.per_request:,.0f}" + (f" (±{spread * 50:.1f}%)" if report.runs > 1 and spread is not None
                                                  else "")) if p else "-")
        if c != report.baseline:
            out.append(f"{p.per_request / base.per_request:.3f}" if p and base else "-")
    return out


def heading(report: AppReport) -> list[str]:
    what = "per request" if any(p.op != "run" for pts in report.results.values() for p in pts) else "per run"
    return columns.config_columns("load", report.configs, report.baseline, lambda c: f"{c} ({what})",
                                  lambda c: f"{c} / {report.baseline}")


def table(report: AppReport) -> Table:
    t = Table(title=f"{report.app}: the application's CPU time in {report.unit}")
    for h in heading(report):
        t.add_column(h, justify="left" if h == "load" else "right")
    for label, pts in rows(report):
        t.add_row(*cells(report, label, pts))
    return t


def profile_tables(report: AppReport) -> list[Table]:
    """--by-function: per load, the guest's instructions per request by function."""
    return [insnprofile.table(report.profiles, report.configs, (label, 0),
                              f"{report.app} {label}: guest instructions per request (client included), by function")
            for label, _ in rows(report) if report.profiles]


def latency_table(report: AppReport) -> Table | None:
    """p50 / p99 against offered load, if the recipe has open-loop loads."""
    if not any(report.latency.values()):
        return None
    t = Table(title=f"{report.app}: latency against offered load, p50 / p99 in µs of guest time "
              "(* the server fell behind)")
    for h in applatency.heading(report.configs, report.baseline):
        t.add_column(h, justify="left" if h == "offered load" else "right")
    for row in applatency.rows(report.latency, report.configs, report.baseline):
        t.add_row(*row)
    return t


def model_table(report: AppReport) -> Table | None:
    """The modelled cycles per request of every load, if counted."""
    if report.model is None:
        return None
    t = Table(title=f"{report.app}: modelled cycles per request of the whole guest (model: {report.model.cpu}), "
              "guest instructions in parentheses")
    for h in appcycles.heading(report.model, report.configs, report.baseline):
        t.add_column(h, justify="left" if h == "load" else "right")
    for label, _ in rows(report):
        t.add_row(*appcycles.cells(report.model, label, report.configs, report.baseline))
    return t


def markdown(reports: list[AppReport], plot_file: Path | None = None, md_file: Path | None = None,
             only: str | None = None) -> str:
    model = next((r.model for r in reports if r.model), None)
    out = ["# Applications: " + " vs ".join(reports[0].configs if reports else []), "",
           reporting.generated_by(
               f"./ukl bench app{' ' + ' '.join(only.split(',')) if only else ''} --configs "
               + ",".join(reports[0].configs if reports else [])
               + (" --icount" if reports and reports[0].icount else "")
               + (" --model cycles" + (f" --cpu {model.cpu}" if model.cpu != cyclemodel.DEFAULT_CPU else "")
                  if model else "")
               + (f" --repeat {reports[0].runs}" if reports and reports[0].runs > 1 else "")
               + (" --by-function" if any(r.profiles for r in reports) else "")
               + f" --markdown {shown(md_file) if md_file else 'docs/results/results-apps.md'}"), ""]
    if reports:
        r0 = reports[0]
        out += [f"Machine: {r0.machine}. Accelerator: {r0.accel.upper()}, 1 vCPU"
                + (benchcommon.ICOUNT_NOTE if r0.icount else "") + ".", "",
                "Each server runs from its recipe's image (Debian's unmodified source, built with ukl-cc or "
                "ukl-c++) and is loaded from inside the same guest over loopback by `guest/bench/appload.c`, "
                "which checks every response and reads the server's CPU time (all its threads; for nginx "
                "all its processes) with `clock_getcpuclockid()`. A row gives that CPU time divided by the "
                "number of requests: the server's guest instructions per request under `--icount`, where "
                "runs repeat; the client's and the idle loop's work are not in it. Run-to-completion "
                "applications give the CPU time of the whole run. `c` is the number of connections, `P` "
                "the requests pipelined per connection. With several runs (`--repeat`, configurations "
                "interleaved) a value is the median and ± half the runs' range.", ""]
    for rep in reports:
        kern = ", ".join(f"`{c}`: Linux {k}" for c, k in rep.kernels.items())
        out += [f"## {rep.app}", "", rep.description + ".", "", f"Kernels: {kern}. Unit: {rep.unit}.", "",
                "| " + " | ".join(heading(rep)) + " |", "|" + "---|" * len(heading(rep))]
        out += ["| " + " | ".join(cells(rep, label, pts)) + " |" for label, pts in rows(rep)]
        out.append("")
        if rep.model:
            out += appcycles.markdown(rep.model, rep.configs, rep.baseline, [label for label, _ in rows(rep)])
        out += applatency.markdown(rep.latency, rep.configs, rep.baseline, rep.icount)
        if rep.profiles:
            labels = [label for label, _ in rows(rep)]
            cmd = f"./ukl bench app {rep.app} --configs {','.join(rep.configs)} --icount --by-function"
            out += [insnprofile.markdown([(label, 0) for label in labels], rep.profiles, rep.configs, cmd,
                                         per="request", heading="###"), ""]
    out += [NOTES, ""]
    if model:
        out += [appcycles.note(model), ""]
    if plot_file:
        out += [f"![relative to {reports[0].baseline}]({plot_file.name})", ""]
        if any(any(rep.latency.values()) for rep in reports):
            out += [f"![latency against offered load]({latency_plot_file(plot_file).name})", ""]
    return "\n".join(out)


def latency_plot_file(plot_file: Path) -> Path:
    """Where --plot FILE puts the latency-against-load figure: FILE-latency.png."""
    return plot_file.with_name(plot_file.stem + "-latency" + plot_file.suffix)


NOTES = """## Reading these numbers

* Instruction counts measure work, not time: SYSCALL, SYSRET, IRET, SWAPGS
  and the speculation mitigations' barriers are one instruction each here
  but cost tens to hundreds of cycles on real CPUs, which is where the base
  model's gains come from in the dissertation. The base model runs the same
  kernel entry and exit work as Linux (a call and a jump instead of SYSCALL
  and SYSRET), so counts within a few percent of `linux` are what it should
  show; the optimization profiles (issues 13 and 14) change the work itself.
* `redis-explicit` is Redis with three changed lines: its connection layer
  calls `ukl_tcp_read()`/`ukl_tcp_write()` (`<ukl.h>`), the TCP shortcuts'
  explicit API. Its `+ret+byp` column is the explicit way and `redis`'s
  `+ret+byp+shortcut` column the transparent one. Built for Linux, its
  reads and writes are system calls without glibc's cancellation-point
  wrapper, a few instructions cheaper than `redis`'s.
* The same binaries measure to the instruction from run to run, but a
  change anywhere (a profile, the client, the kernel) moves where client,
  server and interrupts interleave: in the pipelined loads a few requests
  more or less arrive per read. Differences below about 1% at P=1 and 2%
  at P=16 are within that.
* Wall-clock figures with real clients on the host (redis-benchmark,
  memcaslap, ab, wrk over a tap device) are in
  [results-apps-wall.md](results-apps-wall.md). Under TCG they measure
  QEMU's emulation as much as the guest's work, so they are no substitute
  for the instruction counts above or for a real CPU."""


def shown(path: Path) -> str:
    """PATH as a README command would name it: relative to the checkout."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def to_dicts(reports: list[AppReport]) -> list[dict]:
    data = []
    for rep in reports:
        d = asdict(rep)
        for c, pts in rep.results.items():
            for p, dp in zip(pts, d["results"][c], strict=True):
                dp["instructions_per_request" if rep.icount else "ns_per_request"] = p.per_request
        data.append(d)
    return data


def from_dicts(data: list[dict]) -> list[AppReport]:
    """What to_dicts wrote (KeyError, TypeError or ValueError where it is not)."""
    point_fields = set(Point.__dataclass_fields__)
    reports = []
    for d in data:
        d["results"] = {c: [Point(**{k: v for k, v in p.items() if k in point_fields}) for p in pts]
                        for c, pts in d["results"].items()}
        d["latency"] = {c: [applatency.RatePoint(**p) for p in pts] for c, pts in d.get("latency", {}).items()}
        d["model"] = appcycles.from_dict(d.get("model"))
        d["profiles"] = {c: [insnprofile.OpProfile(**p) for p in ps] for c, ps in d.get("profiles", {}).items()}
        reports.append(AppReport(**d))
    return reports


def save_json(reports: list[AppReport], path: Path) -> None:
    reporting.save_json(to_dicts(reports), path)


def load_json(path: Path) -> list[AppReport]:
    return reporting.load_json(path, from_dicts, "application benchmark results",
                               "give a file written by `ukl bench app --json`")


def plot(reports: list[AppReport], path: Path) -> None:
    """One bar per load and configuration: its instructions (or time) per
    request relative to linux's."""
    labels: list[str] = []
    baseline = reports[0].baseline if reports else BASELINE
    ratios: dict[str, list[float]] = {c: [] for c in reports[0].configs if c != baseline} if reports else {}
    for rep in reports:
        for label, pts in rows(rep):
            base = pts.get(baseline)
            labels.append(f"{rep.app} {label}")
            for c in ratios:
                p = pts.get(c)
                ratios[c].append(p.per_request / base.per_request if p and base else 0.0)
    unit = reports[0].unit.split(" (")[0] if reports else ""
    plot_ratios(labels, ratios, path, f"application CPU time per request (or run) relative to {baseline}, in {unit}",
                (0.9, 1.1), baseline)
    if any(any(rep.latency.values()) for rep in reports):
        applatency.plot({rep.app: rep.latency for rep in reports}, latency_plot_file(path), baseline)


def plot_ratios(labels: list[str], ratios: dict[str, list[float]], path: Path, xlabel: str,
                xlim: tuple[float, float] | None = None, baseline: str = BASELINE) -> None:
    """Horizontal bars: per label, each configuration's ratio to linux."""
    plt = reporting.pyplot()

    fig, ax = plt.subplots(figsize=(12, 0.32 * len(labels) + 1.5))
    height = 0.8 / max(1, len(ratios))
    for j, (c, vals) in enumerate(ratios.items()):
        ax.barh([i + j * height for i in range(len(labels))], vals, height, label=f"{c} / {baseline}")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks([i + height * (len(ratios) - 1) / 2 for i in range(len(labels))])
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    if xlim:
        ax.set_xlim(*xlim)
    ax.set_xlabel(xlabel)
    ax.legend()
    fig.tight_layout()
    reporting.save_plot(fig, path)
