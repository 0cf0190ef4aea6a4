"""`ukl bench secrecy`: Secrecy's GROUP-BY on three guests (issue 45), the
UKL paper's latency-bound application (its section 5.4.3).

Each point is `exp_group_by ROWS 1` (one row per round of 8-16 byte
messages between the three parties in a ring) under `ukl cluster` with
one configuration or profile, repeated; as the paper does, the worst runs
are dropped (2 of 20: REPEAT // 10) before the mean. Per run it records:

- the GROUP-BY's completion time as rank 0 measures it (gettimeofday
  around the operator: the guest's clock, which under TCG follows the
  host's), and the wall time of the whole cluster run on the host;
- per party, from the MPI subset's statistics (UKL_MPI_STATS=1): the
  number, mean and standard deviation of the send calls (MPI_Send,
  MPI_Isend) and of the receive calls (MPI_Recv, MPI_Wait, MPI_Waitall),
  and how often the party went to sleep (its voluntary context switches)
  and was preempted;
- the TCP segments and bytes the bridge forwarded between the guests;
- with --count-insns, per party, what its guest executed (every vCPU: the
  party, its kernel, interrupts and the idle loop) from MPI_Init's return
  to MPI_Finalize's call (the MPI subset marks that span as region
  UKL_MPI_REGION for our QEMU plugin, `ukl run --count-insns`): the
  instructions, the classed ones, and the cycles cyclemodel's cost table
  models for them. Every run of such a report has the plugin loaded, which
  slows TCG: its times are not comparable with a report's without it.

Per configuration, Secrecy's own GROUP-BY test (apps/secrecy-tests) is
run once and its opened results compared with linux's: exp_group_by's
own input comes from libsodium's random bytes and its result is never
opened, so it cannot be compared itself.

A report takes hours, so with --json it is saved after every cluster
run: a run that fails (a node, a timeout) or is killed keeps the runs
done, and the report says it is incomplete and why (Report.stopped)."""

from __future__ import annotations

import math
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ukltool.apps import recipes
from ukltool.bench import benchcommon
from ukltool.build import image
from ukltool.plugin import cyclemodel, insnclass
from ukltool.run import cluster, netns, vm
from ukltool.util import reporting, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import cache_dir
from ukltool.util.proc import need_tool

NODES = 3
BATCH = 1
DEFAULT_CONFIGS = ["linux", "base", "base+ret+byp", "base+ret+byp+shortcut"]
DEFAULT_ROWS = [128, 1024]
WAITS = ("block", "spin")
MPI_REGION = 1   # guest/mpi/ukl-mpi.c's UKL_MPI_REGION: MPI_Init's return .. MPI_Finalize's call
GROUP_BY = re.compile(r"(\d+)\tGROUP-BY\t(\d+\.\d+)")
STATS = re.compile(r"ukl-mpi: rank (\d+) stats send (\d+) (\d+) (\d+) recv (\d+) (\d+) (\d+) polls (\d+) "
                   r"sleeps (\d+) vcsw (\d+) ivcsw (\d+)")
OPENED = re.compile(r"\(-?\d+ -?\d+ -?\d+\) (-?\d+ )?|TEST .*: OK\.")


@dataclass
class Calls:
    n: int
    mean_ns: float
    sd_ns: float


@dataclass
class Party:
    rank: int
    send: Calls           # MPI_Send and MPI_Isend
    recv: Calls           # the calls that wait: MPI_Recv, MPI_Wait, MPI_Waitall (also for an MPI_Isend's end)
    polls: int
    sleeps: int           # its voluntary context switches (vcsw): the times it went to sleep
    preempted: int        # its involuntary ones (ivcsw)


@dataclass
class Counted:
    """What one party's guest executed in the MPI region (--count-insns)."""
    insns: int                 # every vCPU's instructions
    counts: dict[str, int]     # classed instructions per class (nonzero only)

    def cycles(self, extra: dict[str, float]) -> float:
        return cyclemodel.cycles(self.insns, self.counts, extra)


@dataclass
class Run:
    seconds: float        # rank 0's GROUP-BY, guest clock
    wall: float           # the cluster run on the host
    tcp_segments: int
    tcp_bytes: int
    parties: list[Party]
    counted: list[Counted] | None = None   # per rank, with --count-insns


@dataclass
class CostModel:
    """The cost table the modelled cycles were computed with."""
    cpu: str
    cpu_name: str
    extra: dict[str, float]


@dataclass
class Point:
    config: str
    rows: int
    wait: str
    runs: list[Run] = field(default_factory=list)

    def kept(self, drop: int) -> list[Run]:
        """The runs without the DROP slowest."""
        return sorted(self.runs, key=lambda r: r.seconds)[:max(1, len(self.runs) - drop)]


@dataclass
class Report:
    machine: str
    configs: list[str]
    cases: list[tuple[int, str]]  # (rows, how a party waits)
    repeat: int
    drop: int
    kernels: dict[str, str] = field(default_factory=dict)
    results: dict[str, str] = field(default_factory=dict)   # config -> its GROUP-BY test against linux's
    points: list[Point] = field(default_factory=list)
    accel: str | None = None   # the nodes' accelerator (tcg, kvm); None: not recorded
    stopped: str | None = None  # why the runs stopped before all were done (saved midway: None)
    model: CostModel | None = None  # with --count-insns: every run's instructions, and this table

    def runs_done(self) -> int:
        return sum(len(p.runs) for p in self.points)

    def complete(self) -> bool:
        """Every configuration's test and every point's runs are in."""
        return (len(self.results) == len(self.configs)
                and all(any(p.config == c and p.rows == r and p.wait == w and len(p.runs) >= self.repeat
                            for p in self.points) for r, w in self.cases for c in self.configs))


def calls(n: int, total: int, sumsq: int) -> Calls:
    if n == 0:
        return Calls(0, 0.0, 0.0)
    mean = total / n
    return Calls(n, mean, math.sqrt(max(0.0, sumsq / n - mean * mean)))


def parse_run(outputs: list[list[str]], wall: float, segments: int, nbytes: int, rows: int) -> Run:
    """A run from the nodes' output lines (ClusterResult.outputs)."""
    seconds = None
    for line in outputs[0]:
        m = GROUP_BY.fullmatch(line.strip())
        if m and int(m.group(1)) == rows:
            seconds = float(m.group(2))
    if seconds is None:
        raise UklError(f"node 0 printed no '{rows}\\tGROUP-BY\\tSECONDS' line", "see the nodes' console logs")
    parties = []
    for node, lines in enumerate(outputs):
        found = [STATS.search(line) for line in lines]
        m = next((f for f in found if f), None)
        if m is None:
            raise UklError(f"node {node} printed no ukl-mpi statistics line", "see its console log")
        v = [int(x) for x in m.groups()]
        parties.append(Party(v[0], calls(v[1], v[2], v[3]), calls(v[4], v[5], v[6]), v[7], v[9], v[10]))
    return Run(seconds, wall, segments, nbytes, sorted(parties, key=lambda p: p.rank))


def read_counted(log_dir: Path) -> list[Counted]:
    """Each node's MPI region from its plugin report in LOG_DIR: one
    iteration, or the run's counts are not what they claim."""
    out = []
    for i in range(NODES):
        path = cluster.node_insns(log_dir, i)
        try:
            report = insnclass.parse_report(path.read_text(), str(path))
        except FileNotFoundError:
            raise UklError(f"node {i} wrote no instruction counts ({path})",
                           "see its console log: did QEMU end normally?") from None
        r = report.regions.get(MPI_REGION)
        if r is None or r.iterations != 1 or report.unbalanced:
            seen = "no region" if r is None else f"{r.iterations} iterations"
            raise UklError(f"node {i}: the plugin saw {seen} of the MPI region ({report.unbalanced} unbalanced "
                           "ends); one was expected", "is the image built with the current guest/mpi?")
        out.append(Counted(r.insns, {c: n for c, n in r.counts.items() if c != insnclass.OTHER and n}))
    return out


def _image(name: str, config: str) -> Path:
    out = cache_dir() / "bench" / "secrecy" / f"{name}-{config}"
    image.build(recipes.image_spec(recipes.load(name), config, out))
    return out


def _opts(profile: str) -> list[str]:
    return [f"--opts={','.join(profile.split('+')[1:])}"] if "+" in profile else []


def _logs(out: Path, profile: str, args: list[str]) -> Path:
    return cache_dir() / "bench" / "secrecy" / "logs" / f"{out.name}-{profile}-{'-'.join(args) or 'test'}"


def _cluster(out: Path, profile: str, args: list[str], timeout: float, extra: list[str],
             count_insns: bool = False) -> cluster.ClusterResult:
    """One cluster run; the nodes' logs (and with COUNT_INSNS their
    instruction counts) are kept, the last run's, in the cache (_logs)."""
    logs = _logs(out, profile, args)
    res = cluster.run(out, NODES, logs, ["--timeout", str(timeout), *_opts(profile), *extra], args,
                      show=False, count_tcp=True, count_insns=count_insns)
    if res.failed is not None:
        raise UklError(f"{profile}: node {res.failed} failed (status {res.codes[res.failed]}) running "
                       f"{' '.join(args) or 'the test'}", f"see {cluster.node_log(logs, res.failed)}")
    return res


def _save_midway(report: Report, points: dict[tuple[str, int, str], Point], path: Path) -> None:
    """REPORT with the points that have runs, to PATH in one step (a new
    file renamed over it): a kill while it is written leaves the last
    save whole."""
    report.points = [p for p in points.values() if p.runs]
    target = path.resolve()
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        save_json(report, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def run(configs: list[str], cases: list[tuple[int, str]], repeat: int, timeout: float,
        accel: str | None = None, json_path: Path | None = None, count_insns: bool = False) -> Report:
    """CASES: (rows, block or spin) pairs, each run under every configuration;
    ACCEL: kvm or tcg (None: as `ukl run` chooses); JSON_PATH: where the
    report is saved after every cluster run, so that a failure keeps the
    runs done (--json); COUNT_INSNS: every run under our QEMU plugin
    (TCG), each party's MPI region counted and its cycles modelled."""
    if count_insns and accel == "kvm":
        raise UklError("--count-insns counts with a QEMU plugin, which needs TCG, not --accel kvm",
                       "leave out --accel, or --count-insns")
    configs = benchcommon.baseline(configs)
    for rows, wait in cases:
        if wait not in WAITS:
            raise UklError(f"{wait}: not one of {', '.join(WAITS)}", "for example --rows 128,1024 --spin-rows 128")
        if rows < 2 or rows & (rows - 1):
            raise UklError(f"{rows} rows: Secrecy's GROUP-BY asserts a power of two rows",
                           "for example --rows 128,1024,8192")
    why = netns.unavailable()
    if why:
        raise UklError(why, "run as root on a host with /dev/net/tun")
    need_tool("nft", "nftables")
    report = Report(benchcommon.machine(), configs, list(dict.fromkeys(cases)), repeat, repeat // 10)
    if count_insns:
        accel = "tcg"
        table = cyclemodel.load_table(cyclemodel.DEFAULT_CPU)
        report.model = CostModel(table.cpu, table.name, table.extra())
    images, tests = {}, {}
    for profile in configs:
        config = profile.split("+")[0]
        if config not in images:
            images[config] = _image("secrecy", config)
            tests[config] = _image("secrecy-tests", config)
            report.kernels[config] = image.load(images[config]).kernel_release
    # one accelerator for every node of every run, named in the report
    report.accel = vm.choose_accel(need_tool("qemu-system-x86_64", "qemu-system-x86"),
                                   images[configs[0].split("+")[0]] / "bzImage", accel)
    extra = [f"--accel={report.accel}"]
    points = {(c, r, w): Point(c, r, w) for r, w in report.cases for c in configs}
    try:
        _measure(report, points, images, tests, timeout, extra, json_path)
    except BaseException as e:   # a failed run; Ctrl-C or SIGTERM (cli's Terminated)
        if json_path is None or not (report.results or any(p.runs for p in points.values())):
            raise
        report.stopped = e.message if isinstance(e, UklError) else "interrupted"
        _save_midway(report, points, json_path)
        if not isinstance(e, UklError):
            raise
        raise UklError(e.message, f"{e.hint + '; ' if e.hint else ''}what was done ({len(report.results)} of "
                       f"{len(configs)} tests, {report.runs_done()} of {repeat * len(points)} runs) is saved in "
                       f"{json_path}: `ukl bench secrecy --from-json {json_path}` shows it", e.code) from None
    report.points = list(points.values())
    return report


def _measure(report: Report, points: dict[tuple[str, int, str], Point], images: dict[str, Path],
             tests: dict[str, Path], timeout: float, extra: list[str], json_path: Path | None) -> None:
    """Secrecy's test under every configuration, then REPORT's runs into
    POINTS, saved to JSON_PATH (if given) after each."""
    configs = report.configs
    # the result: Secrecy's own GROUP-BY test, its opened results against linux's
    opened = {}
    for profile in configs:
        with ui.step(f"Secrecy's GROUP-BY test under {profile}"):
            res = _cluster(tests[profile.split("+")[0]], profile, [], timeout, extra)
        opened[profile] = [line for line in res.outputs[0] if OPENED.fullmatch(line)]
        oks = sum(1 for line in opened[profile] if line.startswith("TEST"))
        if oks == 0 or len(opened[profile]) == oks:
            raise UklError(f"{profile}: Secrecy's GROUP-BY test passed no check or opened no result",
                           "run it alone with `ukl cluster` to see what it printed")
        same = "the same as " + configs[0] if opened[profile] == opened[configs[0]] else "DIFFERENT from " + configs[0]
        report.results[profile] = f"{oks} checks passed; opened results {same}"
        if json_path:
            _save_midway(report, points, json_path)
    repeat = report.repeat
    for i in range(repeat):
        for r, w in report.cases:
            for profile in configs:   # interleaved: drift in the host's speed hits every profile alike
                out, args = images[profile.split("+")[0]], [str(r), str(BATCH)]
                with ui.step(f"run {i + 1}/{repeat}: GROUP-BY of {r} rows under {profile} ({w})"):
                    res = _cluster(out, profile, args, timeout,
                                   [*extra, "--append=UKL_MPI_STATS=1", f"--append=UKL_MPI_WAIT={w}"],
                                   count_insns=report.model is not None)
                one = parse_run(res.outputs, res.seconds, res.tcp_segments or 0, res.tcp_bytes or 0, r)
                if report.model is not None:
                    one.counted = read_counted(_logs(out, profile, args))
                points[profile, r, w].runs.append(one)
                if json_path:
                    _save_midway(report, points, json_path)


# ---- the report ----

def _mean_sd(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def pooled(parts: list[Calls]) -> tuple[float, float]:
    """The mean and sd of all the calls of PARTS (each a run's count, mean
    and sd), as if measured together: the sum of squares of each part is
    n * (sd^2 + mean^2)."""
    n = sum(c.n for c in parts)
    if n == 0:
        return 0.0, 0.0
    mean = sum(c.n * c.mean_ns for c in parts) / n
    sq = sum(c.n * (c.sd_ns ** 2 + c.mean_ns ** 2) for c in parts) / n
    return mean, math.sqrt(max(0.0, sq - mean * mean))


def summary(p: Point, drop: int) -> dict[str, Any]:
    kept = p.kept(drop)
    secs = _mean_sd([r.seconds for r in kept])
    out: dict[str, Any] = {"seconds": secs, "wall": _mean_sd([r.wall for r in kept]),
                           "segments": _mean_sd([float(r.tcp_segments) for r in kept])}
    for side in ("send", "recv"):
        # per party, the mean and sd of all its calls in the kept runs
        out[side] = [pooled([getattr(r.parties[k], side) for r in kept]) for k in range(NODES)]
    out["sleeps"] = [statistics.fmean(r.parties[k].sleeps / max(1, r.parties[k].recv.n) for r in kept)
                     for k in range(NODES)]
    return out


@dataclass
class CountSummary:
    """A point's counted runs (the kept ones), per row."""
    runs: int
    insns: list[float]          # per party: mean instructions per row
    insns_sd: list[float]       # per party: their sd between runs
    cycles: float               # all parties: mean modelled cycles per row
    counts: dict[str, float]    # all parties: mean classed instructions per row, per class


def count_summary(p: Point, drop: int, extra: dict[str, float]) -> CountSummary | None:
    """P's instructions and modelled cycles per row, over its kept runs
    that were counted; None: none was."""
    kept = [r.counted for r in p.kept(drop) if r.counted]
    if not kept:
        return None
    per_party = [[c[k].insns / p.rows for c in kept] for k in range(NODES)]
    counts: dict[str, float] = {}
    for c in kept:
        for party in c:
            for cls, n in party.counts.items():
                counts[cls] = counts.get(cls, 0.0) + n / p.rows / len(kept)
    return CountSummary(len(kept), [statistics.fmean(x) for x in per_party],
                        [statistics.stdev(x) if len(x) > 1 else 0.0 for x in per_party],
                        statistics.fmean(sum(party.cycles(extra) for party in c) / p.rows for c in kept), counts)


def _seconds(report: Report, config: str, rows: int, wait: str) -> float | None:
    """CONFIG's mean GROUP-BY seconds at (ROWS, WAIT); None: not run (a
    report saved midway)."""
    p = next((p for p in report.points if (p.config, p.rows, p.wait) == (config, rows, wait) and p.runs), None)
    return None if p is None else summary(p, report.drop)["seconds"][0]


def _incomplete(report: Report) -> list[str]:
    """A report saved midway says so first, and why it stopped."""
    if report.complete():
        return []
    total = report.repeat * len(report.cases) * len(report.configs)
    why = f"it stopped: {report.stopped}" if report.stopped else "it was still running, or was killed"
    return [f"**Incomplete**: {len(report.results)} of {len(report.configs)} tests and {report.runs_done()} of "
            f"{total} runs were done ({why}); a point with fewer runs says how many.", ""]


def markdown(report: Report, plot_path: Path | None, command: str) -> str:
    base = report.configs[0]
    lines = [f"# Secrecy's GROUP-BY on three guests ({', '.join(report.configs)})", "",
             reporting.generated_by(command), "",
             f"Host: {report.machine}. Kernels: " + ", ".join(f"{c} {k}" for c, k in report.kernels.items()) + ". "
             f"Accelerator: {report.accel or 'not recorded'}.",
             f"Each point: `exp_group_by ROWS {BATCH}` on three guests (`ukl cluster`), "
             + ("1 run (no standard deviation between runs); " if report.repeat == 1 else
                f"{report.repeat} runs, the slowest {report.drop} dropped (a tenth: none below 10 runs); ")
             + "the configurations interleaved. "
             "Waits: MPI_Recv, MPI_Wait and MPI_Waitall calls (those waiting for an MPI_Isend to end "
             "included); sends: MPI_Send and MPI_Isend; sleeps: the party's voluntary context switches.", ""]
    if report.model:
        lines += [f"Counted (`--count-insns`): every run under our QEMU plugin, which slows TCG, so these times "
                  "are not comparable with a report's without it. Per party, what its guest executed on every "
                  "vCPU (the party, its kernel, interrupts, the idle loop) from MPI_Init's return to "
                  "MPI_Finalize's call: Secrecy's input sharing, seed exchange and GROUP-BY, whose one round "
                  "of messages per row is nearly all of it. Modelled cycles: each instruction one cycle, plus "
                  f"each classed instruction's extra cycles from the cost table `{report.model.cpu}` "
                  f"({report.model.cpu_name}; measure/costs/, docs/cycle-model.md): a model, not a "
                  "measurement; what a real CPU would spend in cache misses, branch mispredictions and the "
                  "idle time between rounds is in neither figure.", ""]
    lines += _incomplete(report)
    lines += ["| configuration | Secrecy's GROUP-BY test (`secrecy-tests`) |", "|---|---|"]
    lines += [f"| {c} | {report.results.get(c, 'not run')} |" for c in report.configs]
    if plot_path:
        lines += ["", f"![GROUP-BY time against {base}]({plot_path.name})"]
    for rows, wait in report.cases:
        pts = {p.config: p for p in report.points if p.rows == rows and p.wait == wait and p.runs}
        ref = _seconds(report, base, rows, wait)
        lines += ["", f"## {rows} rows, waiting by {'sleeping in poll()' if wait == 'block' else 'spinning'}", "",
                  "| configuration | GROUP-BY s (mean ± sd) | vs " + base + " | wall s | TCP segments | "
                  "wait µs per party (mean, sd) | send µs per party (mean, sd) | sleeps per wait |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in report.configs:
            if c not in pts:
                lines.append(f"| {c} | not run | | | | | | |")
                continue
            s = summary(pts[c], report.drop)
            runs = len(pts[c].runs)
            fewer = f" ({runs} run{'s' if runs > 1 else ''})" if runs < report.repeat else ""
            recv = "; ".join(f"{m / 1e3:.1f}, {d / 1e3:.1f}" for m, d in s["recv"])
            send = "; ".join(f"{m / 1e3:.1f}, {d / 1e3:.1f}" for m, d in s["send"])
            sleeps = ", ".join(f"{x:.2f}" for x in s["sleeps"])
            vs = f"{s['seconds'][0] / ref:.2f}" if ref else "-"
            lines.append(f"| {c} | {s['seconds'][0]:.3f} ± {s['seconds'][1]:.3f}{fewer} | {vs} | "
                         f"{s['wall'][0]:.1f} | {s['segments'][0]:,.0f} | {recv} | {send} | {sleeps} |")
        if report.model:
            lines += _counted_table(report, pts)
    return "\n".join(lines) + "\n"


def _counted_table(report: Report, pts: dict[str, Point]) -> list[str]:
    """Per configuration: each party's instructions per row, all parties'
    modelled cycles per row against the baseline's, and the classed
    instructions behind them."""
    assert report.model is not None
    extra = report.model.extra
    sums = {c: count_summary(p, report.drop, extra) for c, p in pts.items()}
    ref = sums.get(report.configs[0])
    lines = ["", "| configuration | instructions per row per party (mean ± sd between runs) | modelled cycles per "
             f"row, 3 parties | vs {report.configs[0]} | classed instructions per row, 3 parties |",
             "|---|---|---|---|---|"]
    for c in report.configs:
        cs = sums.get(c)
        if cs is None:
            lines.append(f"| {c} | not counted | | | |")
            continue
        insns = "; ".join(f"{m:,.0f} ± {d:,.0f}" for m, d in zip(cs.insns, cs.insns_sd, strict=True))
        vs = f"{cs.cycles / ref.cycles:.2f}" if ref else "-"
        classed = ", ".join(f"{cls} {cs.counts[cls]:.1f}" for cls in insnclass.CLASSES
                            if cs.counts.get(cls, 0.0) >= 0.05) or "none"
        lines.append(f"| {c} | {insns} | {cs.cycles:,.0f} | {vs} | {classed} |")
    return lines


def plot(report: Report, path: Path) -> None:
    plt = reporting.pyplot()
    base = report.configs[0]
    groups = report.cases
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(report.configs)
    for i, c in enumerate(report.configs):
        ys = []
        for r, w in groups:   # a point not run (a report saved midway): no bar
            secs, ref = _seconds(report, c, r, w), _seconds(report, base, r, w)
            ys.append(secs / ref if secs is not None and ref else math.nan)
        ax.bar([g + i * width for g in range(len(groups))], ys, width, label=c)
    ax.set_xticks([g + width * (len(report.configs) - 1) / 2 for g in range(len(groups))],
                  [f"{r} rows\n{w}" for r, w in groups])
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_ylabel(f"GROUP-BY time / {base}")
    accel = f" {report.accel.upper()}" if report.accel else ""
    ax.set_title(f"Secrecy GROUP-BY on three guests (QEMU{accel}; lower is faster)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    reporting.save_plot(fig, path)


def save_json(report: Report, path: Path) -> None:
    reporting.save_json(report, path)


def load_json(path: Path) -> Report:
    def decode(d: dict[str, Any]) -> Report:
        def run_of(x: dict[str, Any]) -> Run:
            counted = x.get("counted")
            return Run(x["seconds"], x["wall"], x["tcp_segments"], x["tcp_bytes"],
                       [Party(p["rank"], Calls(**p["send"]), Calls(**p["recv"]), p["polls"], p["sleeps"],
                              p["preempted"]) for p in x["parties"]],
                       None if counted is None else [Counted(c["insns"], dict(c["counts"])) for c in counted])
        points = [Point(p["config"], p["rows"], p["wait"], [run_of(x) for x in p["runs"]]) for p in d["points"]]
        return Report(d["machine"], d["configs"], [(int(r), str(w)) for r, w in d["cases"]], d["repeat"], d["drop"],
                      d["kernels"], d["results"], points, d.get("accel"), d.get("stopped"),
                      CostModel(**d["model"]) if d.get("model") else None)
    return reporting.load_json(path, decode, "a Secrecy benchmark report", "write it with ukl bench secrecy --json")
