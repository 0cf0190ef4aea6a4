"""`ukl bench redis|memcached|nginx|sqlite3|leveldb|apps`: application
benchmarks, each configuration booted once per application.

Servers are driven from inside the guest, on loopback, by bench/appload.c
(the server and its client share the single vCPU), which reads the
server's CPU time through clock_getcpuclockid(): under `--icount` a
nanosecond of guest time is one guest instruction, so the result is the
server's guest instructions per request, repeatable from run to run.
Run-to-completion applications (sqlite3's speedtest1, LevelDB's db_bench)
are timed the same way as a whole. What each application runs is the
[bench] section of its recipe (apps/NAME/recipe.toml)."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.table import Table

from ukltool import bench, image, initramfs, kernel, recipes, ui, vm
from ukltool.errors import UklError
from ukltool.paths import REPO, cache_dir
from ukltool.proc import host_cc, run

LOADER = REPO / "bench" / "appload.c"
BASELINE = "linux"


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
    results: dict[str, list[Point]] = field(default_factory=dict)

    @property
    def unit(self) -> str:
        return "guest instructions" if self.icount else "ns (TCG wall clock: relative only)"


def names() -> list[str]:
    return [n for n in recipes.names() if recipes.load(n).bench is not None]


def loader() -> Path:
    """bench/appload.c, an ordinary static program, compiled once per content."""
    digest = hashlib.sha256(LOADER.read_bytes()).hexdigest()[:16]
    out = cache_dir() / "bench" / f"appload-{digest}"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".partial")
        run([host_cc(), "-O2", "-Wall", "-static", "-o", tmp, LOADER], what="compiling bench/appload.c")
        tmp.replace(out)
    return out


def script(r: recipes.Recipe, requests: int | None) -> str:
    """The guest's shell script: start the server, load it with each
    operation and load in turn, stop it; or time one run."""
    b = r.bench
    assert b is not None
    if b.protocol == "run":
        return f'/bin/appload run "$UKL_APP" {shlex.join(b.args)} || echo APPLOAD-FAILED\n'
    lines = [f'"$UKL_APP" {shlex.join(b.args)} > /tmp/server.log 2>&1 &', "pid=$!"]
    n = requests or b.requests
    for op in b.ops:
        for conns in b.conns:
            for pipeline in b.pipelines:
                lines.append(f"/bin/appload {b.protocol} {b.port} {op} {shlex.quote(b.comm)} {n} {conns} "
                             f"{pipeline} || echo APPLOAD-FAILED")
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


def run_app(name: str, configs: list[str], icount: bool, requests: int | None, timeout: float) -> AppReport:
    r = recipes.load(name)
    if r.bench is None:
        raise UklError(f"apps/{name}/recipe.toml has no [bench] section", "benchmarks: " + ", ".join(names()))
    if BASELINE not in configs:
        configs = [BASELINE, *configs]
    report = AppReport(name, r.description, icount, "", bench.machine(), configs)
    appload = loader()
    for config in configs:
        out = cache_dir() / "bench" / "apps" / f"{name}-{config}"
        target = "base" if kernel.is_ukl(config) else "linux"
        recipes.check_host_packages(r)
        tree = recipes.fetch(r)
        opts = recipes.options(r, target)
        man = image.build(image.BuildSpec([tree], config, out, opts.program, userspace=True,
                                          files=[*r.files, (appload, "/bin/appload")], project_opts=opts,
                                          args=r.args, recipe=name))
        report.kernels[config] = man.kernel_release
        with tempfile.TemporaryDirectory(prefix="ukl-bench-") as td:
            extra = initramfs.args_archive([], Path(td), script(r, requests))
            with ui.step(f"benchmarking {name} under '{config}'"):
                res = vm.boot(vm.RunSpec(bzimage=out / "bzImage", initrds=[out / "initramfs.cpio", extra],
                                         log=out / "console.log", timeout=timeout, icount=icount, smp=1,
                                         append=["norandmaps"], show=False))
        if res.code != 0 or res.failures:
            raise UklError(f"the {name} benchmark failed under '{config}' (status {res.code})",
                           f"see {out / 'console.log'}")
        report.accel = res.accel
        report.results[config] = parse((out / "console.log").read_text(errors="replace"))
    return report


def rows(report: AppReport) -> list[tuple[str, dict[str, Point]]]:
    by_cfg = {c: {p.label: p for p in pts} for c, pts in report.results.items()}
    return [(p.label, {c: by_cfg[c][p.label] for c in report.configs if p.label in by_cfg[c]})
            for p in report.results[report.configs[0]]]


def cells(report: AppReport, label: str, pts: dict[str, Point]) -> list[str]:
    out = [label]
    base = pts.get(BASELINE)
    for c in report.configs:
        p = pts.get(c)
        out.append(f"{p.per_request:,.0f}" if p else "-")
        if c != BASELINE:
            out.append(f"{p.per_request / base.per_request:.3f}" if p and base else "-")
    return out


def heading(report: AppReport) -> list[str]:
    what = "per request" if any(p.op != "run" for pts in report.results.values() for p in pts) else "per run"
    head = ["load"]
    for c in report.configs:
        head.append(f"{c} ({what})")
        if c != BASELINE:
            head.append(f"{c} / {BASELINE}")
    return head


def table(report: AppReport) -> Table:
    t = Table(title=f"{report.app}: the application's CPU time in {report.unit}")
    for h in heading(report):
        t.add_column(h, justify="left" if h == "load" else "right")
    for label, pts in rows(report):
        t.add_row(*cells(report, label, pts))
    return t


def markdown(reports: list[AppReport]) -> str:
    out = ["# Applications: " + " vs ".join(reports[0].configs if reports else []), "",
           "Generated by `./ukl bench apps --configs " + ",".join(reports[0].configs if reports else [])
           + (" --icount" if reports and reports[0].icount else "") + " --markdown docs/results-apps.md`;"
           " do not edit by hand.", ""]
    if reports:
        r0 = reports[0]
        out += [f"Machine: {r0.machine}. Accelerator: {r0.accel.upper()}, 1 vCPU"
                + (bench.ICOUNT_NOTE if r0.icount else "") + ".", "",
                "Each server runs from its recipe's image (Debian's unmodified source, built with ukl-cc or "
                "ukl-c++) and is loaded from inside the same guest over loopback by `bench/appload.c`, "
                "which checks every response and reads the server's CPU time (all its threads; for nginx "
                "all its processes) with `clock_getcpuclockid()`. A row gives that CPU time divided by the "
                "number of requests: the server's guest instructions per request under `--icount`, where "
                "runs repeat; the client's and the idle loop's work are not in it. Run-to-completion "
                "applications give the CPU time of the whole run. `c` is the number of connections, `P` "
                "the requests pipelined per connection.", ""]
    for rep in reports:
        kern = ", ".join(f"`{c}`: Linux {k}" for c, k in rep.kernels.items())
        out += [f"## {rep.app}", "", rep.description + ".", "", f"Kernels: {kern}. Unit: {rep.unit}.", "",
                "| " + " | ".join(heading(rep)) + " |", "|" + "---|" * len(heading(rep))]
        out += ["| " + " | ".join(cells(rep, label, pts)) + " |" for label, pts in rows(rep)]
        out.append("")
    out += [NOTES, ""]
    return "\n".join(out)


NOTES = """## Reading these numbers

* Instruction counts measure work, not time: SYSCALL, SYSRET, IRET, SWAPGS
  and the speculation mitigations' barriers are one instruction each here
  but cost tens to hundreds of cycles on real CPUs, which is where the base
  model's gains come from in the dissertation. The base model runs the same
  kernel entry and exit work as Linux (a call and a jump instead of SYSCALL
  and SYSRET), so counts within a few percent of `linux` are what it should
  show; the optimization profiles (issues 13 and 14) change the work itself.
* Wall-clock throughput under TCG is noise for this comparison (QEMU's
  user-mode networking and emulation dominate); host-driven wall-clock
  runs with real clients (redis-benchmark, memaslap, ab, wrk) over a tap
  device are not built yet (issue 12)."""


def save_json(reports: list[AppReport], path: Path) -> None:
    data = []
    for rep in reports:
        d = asdict(rep)
        for c, pts in rep.results.items():
            for p, dp in zip(pts, d["results"][c], strict=True):
                dp["instructions_per_request" if rep.icount else "ns_per_request"] = p.per_request
        data.append(d)
    path.write_text(json.dumps(data, indent=1) + "\n")
