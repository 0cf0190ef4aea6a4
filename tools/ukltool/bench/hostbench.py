"""`ukl bench app [NAME...] --clients host`: real load generators
on the host against the server in the guest, in wall-clock time.

The guest's eth0 is a tap device in a private network namespace
(netns.py), and QEMU and the clients run in that namespace: the traffic
does not go through QEMU's user-mode network stack, and nothing outside
the namespace sees it. What each application's clients run is the
[netbench] section of its recipe; clients.py reads their output. Every
configuration is booted once per run, runs interleaved (linux, base,
linux, base, ...), and a value is the median of the runs; ratios compare
configurations measured in the same invocation only."""

from __future__ import annotations

import contextlib
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from ukltool.apps import clients, recipes
from ukltool.bench import appbench, benchcommon
from ukltool.bench.benchcommon import BASELINE
from ukltool.build import image
from ukltool.run import logscan, netns, vm
from ukltool.util import columns, lock, reporting, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, cache_dir
from ukltool.util.proc import need_tool

READY_TIMEOUT = 600.0

@dataclass(frozen=True)
class Result:
    label: str         # "GET c=30 P=16"
    rps: float
    p50_ms: float
    p99_ms: float
    offered: float = 0.0  # an open loop's arrival rate (req/s answered follows it); 0: a closed loop


@dataclass
class WallReport:
    app: str
    description: str
    machine: str
    configs: list[str]
    runs: int
    kernels: dict[str, str] = field(default_factory=dict)
    results: dict[str, list[Result]] = field(default_factory=dict)   # the median of the runs
    spread: dict[str, dict[str, float]] = field(default_factory=dict)  # (max - min) / median of rps


def names() -> list[str]:
    return [n for n in recipes.names() if recipes.load(n).netbench is not None]


def _expand(cmd: list[str], port: int) -> list[str]:
    """{host} and {port}: where the server listens; a command `appload` is
    guest/bench/appload.c, built on the host."""
    args = [a.replace("{host}", netns.GUEST_IP).replace("{port}", str(port)) for a in cmd]
    return [str(appbench.loader()), *args[1:]] if args and args[0] == "appload" else args


def _client(ns: netns.Netns, load: recipes.NetLoad, port: int, log: Path) -> list[Result]:
    tool = load.command[0]
    cmd = _expand(load.command, port)
    try:
        res = subprocess.run(ns.exec(cmd), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             errors="replace", timeout=load.timeout)
    except subprocess.TimeoutExpired as e:
        with open(log, "a") as fh:
            for part in (e.stdout, e.stderr):
                fh.write(part.decode(errors="replace") if isinstance(part, bytes) else part or "")
        raise UklError(f"{tool} ({load.name}) did not finish within {load.timeout:.0f}s", f"see {log}") from None
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n{res.stdout}{res.stderr}\n")
    if res.returncode != 0:
        raise UklError(f"{tool} ({load.name}) failed (exit {res.returncode})", f"see {log}")
    return [Result(f"{s.op} {load.name}", s.rps, s.p50_ms, s.p99_ms, s.offered)
            for s in clients.parse(tool, res.stdout)]


def one_boot(ns: netns.Netns, nb: recipes.NetBench, out: Path, log: Path, timeout: float) -> list[Result]:
    """Boot OUT's server on the tap device, run every load once, stop it."""
    vm_cmd = ns.exec([str(REPO / "ukl"), "run", str(out), "--tap", netns.TAP, "--smp", "1",
                      "--timeout", str(timeout), "--", *nb.args])
    with open(out / "vm.log", "w") as vm_log:
        vm_proc = subprocess.Popen(vm_cmd, stdout=vm_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    results: list[Result] = []
    try:
        netns.wait_for_server(ns, netns.GUEST_IP, nb.port, nb.probe, vm_proc, READY_TIMEOUT)
        for load in nb.loads:
            results += _client(ns, load, nb.port, log)
    finally:
        vm.stop_run(vm_proc)
    bad = logscan.failure_lines((out / "console.log").read_text(errors="replace"))
    if bad:
        raise UklError(f"the kernel reported failures under load: {bad[:3]}", f"see {out / 'console.log'}")
    return results


def run_app(name: str, configs: list[str], repeat: int, timeout: float) -> WallReport:
    r = recipes.load(name)
    nb = r.netbench
    if nb is None:
        raise UklError(f"apps/{name}/recipe.toml has no [netbench] section",
                       "host-client benchmarks: " + ", ".join(names()))
    for tool in dict.fromkeys(load.command[0] for load in nb.loads):
        if tool in clients.PACKAGES:
            need_tool(tool, clients.PACKAGES[tool])
    configs = benchcommon.baseline(configs)   # the baseline first, as appbench's runs to completion
    mismatch = benchcommon.cpu_mismatch(configs)
    if mismatch:
        ui.warn(mismatch)
    report = WallReport(name, r.description, benchcommon.machine(), configs, repeat)
    with contextlib.ExitStack() as held:
        # one run at a time per image directory: its image, logs and console
        for config in sorted(set(configs)):  # one order for every run: no deadlock
            held.enter_context(lock.held(f"hostbench-{name}-{config}", f"the {name} benchmark under '{config}'"))
        _run_boots(r, nb, configs, repeat, timeout, report)
    return report


def _run_boots(r: recipes.Recipe, nb: recipes.NetBench, configs: list[str], repeat: int, timeout: float,
               report: WallReport) -> None:
    name = r.name
    outs = {}
    for config in configs:
        out = cache_dir() / "bench" / "host" / f"{name}-{config}"
        report.kernels[config] = image.build(recipes.image_spec(r, config, out)).kernel_release
        outs[config] = out
    runs: dict[str, list[list[Result]]] = {c: [] for c in configs}
    with netns.private_network() as ns:
        for i in range(repeat):
            for config in configs:
                log = outs[config] / f"clients-{i + 1}.log"
                log.unlink(missing_ok=True)
                with ui.step(f"{name} under '{config}', host clients (run {i + 1} of {repeat}); log: {log}"):
                    runs[config].append(one_boot(ns, nb, outs[config], log, timeout))
    for config, rs in runs.items():
        report.results[config], report.spread[config] = combine(rs)


def combine(runs: list[list[Result]]) -> tuple[list[Result], dict[str, float]]:
    """Per load, the median of each figure over the runs, and the spread
    of the throughput."""
    merged, spread = [], {}
    if any(len(rs) != len(runs[0]) for rs in runs):
        raise UklError("the runs measured different loads", "run the benchmark again")
    for i, first in enumerate(runs[0]):
        same = [rs[i] for rs in runs]
        if any(x.label != first.label for x in same):
            raise UklError("the runs measured different loads", "run the benchmark again")
        rps = statistics.median(x.rps for x in same)
        merged.append(Result(first.label, rps, statistics.median(x.p50_ms for x in same),
                             statistics.median(x.p99_ms for x in same), statistics.median(x.offered for x in same)))
        spread[first.label] = (max(x.rps for x in same) - min(x.rps for x in same)) / rps if rps else 0.0
    return merged, spread


def rows(report: WallReport) -> list[list[str]]:
    by = {c: {x.label: x for x in rs} for c, rs in report.results.items()}
    out = []
    baseline = report.configs[0]
    for first in report.results[baseline]:
        base = by[baseline].get(first.label)
        row = [first.label]
        for c in report.configs:
            x = by[c].get(first.label)
            sp = report.spread.get(c, {}).get(first.label)
            row.append(f"{x.rps:,.0f}" + (f" (±{sp * 50:.0f}%)" if report.runs > 1 and sp is not None else "")
                       if x else "-")
            if c != baseline:
                # an open loop answers what arrives: its p99 is what differs
                row.append("-" if not (x and base) else f"p99 {x.p99_ms / base.p99_ms:.2f}" if first.offered
                           else f"{x.rps / base.rps:.2f}")
        for c in report.configs:
            x = by[c].get(first.label)
            row.append(f"{x.p50_ms:.2f} / {x.p99_ms:.2f}" if x else "-")
        out.append(row)
    return out


def heading(report: WallReport) -> list[str]:
    baseline = report.configs[0]
    return columns.config_columns("load", report.configs, baseline, lambda c: f"{c} req/s",
                                  lambda c: f"{c} / {baseline}") + [f"{c} p50 / p99 ms" for c in report.configs]


def table(report: WallReport) -> Table:
    t = Table(title=f"{report.app}: host clients, wall-clock time (TCG: relative only)")
    for h in heading(report):
        t.add_column(h, justify="left" if h == "load" else "right")
    for row in rows(report):
        t.add_row(*row)
    return t


def run_to_completion() -> list[str]:
    """The recipes whose [bench] is a whole run (sqlite3's speedtest1,
    LevelDB's db_bench): in wall-clock time they are timed inside the guest,
    as a whole, without clients."""
    return [n for n in recipes.names() if (b := recipes.load(n).bench) is not None and b.protocol == "run"]


def run_rows(rep: appbench.AppReport) -> list[list[str]]:
    out = []
    for label, pts in appbench.rows(rep):
        base = pts.get(rep.baseline)
        row = [label]
        for c in rep.configs:
            p = pts.get(c)
            sp = rep.spread.get(c, {}).get(label)
            row.append(f"{p.server_ns / 1e9:.2f}" + (f" (±{sp * 50:.0f}%)" if rep.runs > 1 and sp is not None else "")
                       if p else "-")
            if c != rep.baseline:
                row.append(f"{p.server_ns / base.server_ns:.2f}" if p and base else "-")
        out.append(row)
    return out


def markdown(reports: list[WallReport], runs_done: list[appbench.AppReport] | None = None,
             plot_file: Path | None = None, md_file: Path | None = None, only: str | None = None) -> str:
    configs = reports[0].configs if reports else runs_done[0].configs if runs_done else []
    runs = reports[0].runs if reports else runs_done[0].runs if runs_done else 1
    baseline = configs[0] if configs else BASELINE
    md = appbench.shown(md_file) if md_file else "docs/results/results-apps-wall.md"
    out = ["# Applications in wall-clock time: " + " vs ".join(configs), "",
           reporting.generated_by(f"./ukl bench app{' ' + ' '.join(only.split(',')) if only else ''} --clients host "
                                  f"--configs {','.join(configs)} --repeat {runs} --markdown {md}",
                                  "with `--json` and `--plot` beside it; `make results-apps` regenerates it with "
                                  "results-apps.md"), ""]
    if reports:
        out += [f"Machine: {reports[0].machine}. The guest has 1 vCPU; its eth0 is a tap device in a private "
                "network namespace, where QEMU and the clients run (no QEMU user-mode networking). The "
                "clients are Debian's: redis-benchmark (redis-tools), memcaslap (libmemcached-tools' memaslap, "
                "its default 9:1 get/set mix), ab (apache2-utils, a new connection per request) and wrk "
                "(keep-alive), each on the recipe's [netbench] loads; and ours, appload (guest/bench/appload.c), "
                "for the `open R/s` loads: an open loop of Poisson arrivals at R requests per second, each "
                "latency from the request's scheduled arrival, where req/s is what was answered and the ratio "
                "column compares p99 instead (they are not in the plot). Throughput and latency are wall-clock "
                f"figures, the median of {runs} runs with configurations interleaved (± is half the runs' "
                "range of throughput); memcaslap's percentiles are interpolated in its log2 histogram. Applications "
                "that run to completion (no clients) are timed inside the guest as a whole.", "",
                "Under TCG, QEMU's emulation of the guest dominates these figures: they show that the "
                "servers work under real load and how far apart the configurations are within this run, "
                "not what a real CPU would show. The deterministic comparison is in "
                "[results-apps.md](results-apps.md) (guest instructions per request).", ""]
    for rep in reports:
        kern = ", ".join(f"`{c}`: Linux {k}" for c, k in rep.kernels.items())
        head = heading(rep)
        out += [f"## {rep.app}", "", rep.description + ".", "", f"Kernels: {kern}.", "",
                "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(row) + " |" for row in rows(rep)]
        out.append("")
    for run in runs_done or []:
        head = ["workload"]
        for c in run.configs:
            head.append(f"{c} s (CPU time of the run)")
            if c != run.baseline:
                head.append(f"{c} / {run.baseline}")
        out += [f"## {run.app}", "", run.description + ". A run to completion, timed inside the guest (the "
                "application's CPU time, all its threads) without `-icount`: wall-clock seconds of TCG.", "",
                "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(row) + " |" for row in run_rows(run)]
        out.append("")
    if plot_file:
        out += [f"![relative to {baseline}]({plot_file.name})", ""]
    return "\n".join(out)


def plot(reports: list[WallReport], runs_done: list[appbench.AppReport], path: Path) -> None:
    """Per load, each configuration's throughput relative to linux's (for
    runs to completion: linux's time over the configuration's)."""
    labels: list[str] = []
    every = reports[0].configs if reports else runs_done[0].configs
    baseline = every[0]
    configs = every[1:]
    ratios: dict[str, list[float]] = {c: [] for c in configs}
    for rep in reports:
        by = {c: {x.label: x for x in rs} for c, rs in rep.results.items()}
        for x in rep.results[baseline]:
            if x.offered:   # an open loop's throughput is its arrival rate
                continue
            labels.append(f"{rep.app} {x.label}")
            for c in configs:
                y = by.get(c, {}).get(x.label)
                ratios[c].append(y.rps / x.rps if y and x.rps else 0.0)
    for run in runs_done:
        for label, pts in appbench.rows(run):
            base = pts.get(baseline)
            labels.append(f"{run.app} {label}")
            for c in configs:
                p = pts.get(c)
                ratios[c].append(base.server_ns / p.server_ns if p and base and p.server_ns else 0.0)
    appbench.plot_ratios(labels, ratios, path, f"throughput relative to {baseline} (runs to completion: "
                         f"{baseline}'s time / the configuration's), wall clock under TCG", baseline=baseline)


RUN_TO_COMPLETION = "run-to-completion"   # the "kind" of a run to completion's entry in the JSON


def save_json(reports: list[WallReport], runs_done: list[appbench.AppReport], path: Path) -> None:
    """One file: the host-client reports, then the runs to completion timed
    in the guest, each marked "kind": "run-to-completion"."""
    runs = [{"kind": RUN_TO_COMPLETION, **d} for d in appbench.to_dicts(runs_done)]
    reporting.save_json([*reports, *runs], path)


def load_json(path: Path) -> tuple[list[WallReport], list[appbench.AppReport]]:
    """The reports save_json wrote to PATH and the runs to completion in it
    (or, as an earlier ukl wrote them, beside it in PATH's name with -runs)."""
    runs_file = path.with_name(path.stem + "-runs.json")

    def decode(data: list[dict]) -> tuple[list[WallReport], list[appbench.AppReport]]:
        reports, runs = [], []
        for d in data:
            if d.get("kind") == RUN_TO_COMPLETION:
                runs.append({k: v for k, v in d.items() if k != "kind"})
                continue
            d["results"] = {c: [Result(**x) for x in rs] for c, rs in d["results"].items()}
            reports.append(WallReport(**d))
        return reports, appbench.from_dicts(runs)

    reports, runs_done = reporting.load_json(path, decode, "host-client results",
                                             "give a file written by `ukl bench app --clients host --json`")
    if not runs_done and runs_file.is_file():
        runs_done = appbench.load_json(runs_file)
    return reports, runs_done
