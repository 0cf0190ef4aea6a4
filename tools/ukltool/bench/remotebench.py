"""`ukl bench remote`: what a remote system call costs (guest/bench/remote.c),
run on the host as an ordinary process, in a `linux` guest, and in a UKL
guest booted with `--remote` (a null call polling and asleep, file reads
and writes against a local tmpfs file, and OS jitter as sysjitter counts
it). Seed 002 section 6 measured the same on Xen: a polling null remote
call in 2.26 us, 17-30 us with interrupts, 1.92 us for a Linux system call."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.table import Table

from ukltool.bench.benchcommon import machine
from ukltool.build import image, initramfs
from ukltool.linux import kernel
from ukltool.run import vm
from ukltool.util import reporting, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, cache_dir
from ukltool.util.proc import cached_host_build, capture

SOURCE = REPO / "guest" / "bench" / "remote.c"
HEADER = REPO / "runtime" / "ukl.h"
HOST = "host"
GUESTS = ["linux", "base"]  # base boots with --remote
REMOTE_CONFIG = "base"
NOBODY = 65534
SEED = {"null-poll": 2.26, "null-irq": "17-30", "host-syscall": 1.92}  # us, seed 002 table 6.x


@dataclass(frozen=True)
class Row:
    op: str
    size: int
    median: int  # ns per call
    p99: int
    n: int


@dataclass(frozen=True)
class Jitter:
    load: str  # none, local-io, remote-io
    n: int  # interruptions longer than the threshold
    mean: float
    median: float
    max: float
    sum: float
    span: float
    threshold: int
    run: int = 1  # which boot of --repeat

    @property
    def lost(self) -> float:
        """Percent of the time the spinning thread did not run."""
        return self.sum * 100.0 / self.span if self.span else 0.0


@dataclass
class Report:
    accel: str
    quick: bool
    machine: str
    smp: int
    repeat: int = 1
    kernels: dict[str, str] = field(default_factory=dict)
    results: dict[str, list[Row]] = field(default_factory=dict)  # host, linux, base: the median run
    jitter: dict[str, list[Jitter]] = field(default_factory=dict)  # every run's
    runs: dict[str, list[list[Row]]] = field(default_factory=dict)  # each boot's rows


def merge(runs: list[list[Row]]) -> list[Row]:
    """One row per (op, size) out of several runs: the median of their
    medians and of their 99th percentiles (rows missing from a run are left
    out)."""
    keys = [(r.op, r.size) for r in runs[0]]
    by_run = [{(r.op, r.size): r for r in rows} for rows in runs]
    out = []
    for op, size in keys:
        rs = [b[op, size] for b in by_run if (op, size) in b]
        if len(rs) == len(runs):
            out.append(Row(op, size, int(statistics.median(r.median for r in rs)),
                           int(statistics.median(r.p99 for r in rs)), sum(r.n for r in rs)))
    return out


def spread(report: Report, where: str, op: str, size: int = 0) -> str:
    """The runs' medians of (op, size), lowest to highest, in us."""
    vals = sorted(r.median for rows in report.runs.get(where, []) for r in rows if (r.op, r.size) == (op, size))
    if len(vals) < 2:
        return "-"
    return f"{vals[0] / 1000:.2f}-{vals[-1] / 1000:.2f}"


def parse(text: str, where: str) -> tuple[list[Row], list[Jitter]]:
    """RBENCH and JITTER lines of one run; an unfinished run is an error."""
    if "RBENCH-DONE" not in text:
        raise UklError(f"the remote-call benchmark did not finish on {where}", "see its log for the reason")
    rows = [Row(m[1], int(m[2]), int(m[3]), int(m[4]), int(m[5]))
            for m in re.finditer(r"^RBENCH (\S+) (\d+) (\d+) (\d+) (\d+)\s*$", text, re.M)]
    jit = [Jitter(m[1], int(m[2]), float(m[3]), float(m[4]), float(m[5]), float(m[6]), float(m[7]), int(m[8]))
           for m in re.finditer(r"^JITTER (\S+) (\d+) ([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+) (\d+)\s*$",
                                text, re.M)]
    return rows, jit


def _host_binary() -> Path:
    return cached_host_build(cache_dir() / "bin", "remote-bench", "", [SOURCE, HEADER],
                             ["-std=gnu11", "-O2", "-I", str(REPO / "runtime"), "-pthread"],
                             "the remote-call benchmark", "guest/bench/ belongs to the ukl checkout",
                             "install the host's C compiler (`apt-get install gcc`)")


def _remote_dir(out: Path) -> Path:
    """A fresh directory for the shadow, owned by nobody when we are root."""
    d = out / "remote-dir"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    if os.geteuid() == 0:
        os.chmod(out, 0o755)
        os.chown(d, NOBODY, NOBODY)
    return d


def run(quick: bool, timeout: float, repeat: int = 1, smp: int = 2) -> Report:
    """REPEAT: boot each guest that many times, interleaved."""
    report = Report(accel="", quick=quick, machine=machine(), smp=smp, repeat=repeat)
    args = ["quick"] if quick else []
    with ui.step("benchmarking the host"):
        res = capture([str(_host_binary()), *(args or ["full"]), "nojitter"])
    if res.returncode != 0:
        raise UklError(f"the remote-call benchmark failed on the host (exit {res.returncode})",
                       (res.stdout + res.stderr).strip()[-500:])
    report.results[HOST], _ = parse(res.stdout, "the host")
    for config in GUESTS:
        out = cache_dir() / "bench" / f"remote-{config}"
        report.kernels[config] = image.build(image.BuildSpec([SOURCE], config, out, "remote-bench")).kernel_release
    for k, config in ((k, c) for k in range(1, repeat + 1) for c in GUESTS):
        out = cache_dir() / "bench" / f"remote-{config}"
        remote = _remote_dir(out) if kernel.is_ukl(config) else None
        with tempfile.TemporaryDirectory(prefix="ukl-bench-") as td:
            archive = initramfs.args_archive(args, Path(td))
            what = f"'{config}'{' with --remote' if remote else ''}{f' (run {k} of {repeat})' if repeat > 1 else ''}"
            with ui.step(f"benchmarking {what}"):
                res_vm = vm.boot(vm.RunSpec(bzimage=out / "bzImage", initrds=[out / "initramfs.cpio", archive],
                                            log=out / "console.log", timeout=timeout, smp=smp, show=False,
                                            remote=remote))
        if res_vm.code != 0:
            raise UklError(f"the remote-call benchmark failed under '{config}' (status {res_vm.code})",
                           f"see {out / 'console.log'}")
        report.accel = res_vm.accel
        rows, jit = parse((out / "console.log").read_text(errors="replace"), f"'{config}'")
        report.runs.setdefault(config, []).append(rows)
        report.jitter.setdefault(config, []).extend(Jitter(**{**asdict(j), "run": k}) for j in jit)
    for config in GUESTS:
        report.results[config] = merge(report.runs[config])
    if not any(r.op == "null-poll" for r in report.results.get(REMOTE_CONFIG, [])):
        raise UklError(f"'{REMOTE_CONFIG}' made no remote calls", "see its console log for the reason")
    return report


# ---- Reading a report ----

def median(report: Report, where: str, op: str, size: int = 0) -> int | None:
    for r in report.results.get(where, []):
        if r.op == op and r.size == size:
            return r.median
    return None


def ratio(a: int | None, b: int | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def us(ns: int | None) -> str:
    return f"{ns / 1000:.2f}" if ns is not None else "-"


NULL_ROWS = [("getppid", HOST, "a host process's own system call"),
             ("getppid", "linux", "getppid in the linux guest"),
             ("getppid", REMOTE_CONFIG, f"getppid in the {REMOTE_CONFIG} guest"),
             ("null-poll", REMOTE_CONFIG, "null remote call, both sides polling"),
             ("null-irq", REMOTE_CONFIG, "null remote call, both sides asleep (interrupts)")]


def null_rows(report: Report) -> list[list[str]]:
    """The null call table: what, median and p99 (us), against the guest's
    getppid and the host's."""
    local = median(report, REMOTE_CONFIG, "getppid")
    host = median(report, HOST, "getppid")
    out = []
    for op, where, what in NULL_ROWS:
        m = median(report, where, op)
        p99 = next((r.p99 for r in report.results.get(where, []) if r.op == op and r.size == 0), None)
        out.append([what, us(m), us(p99), spread(report, where, op), ratio(m, local), ratio(m, host)])
    return out


def io_rows(report: Report, kind: str) -> list[list[str]]:
    """KIND (read or write) per size: local in linux and base, remote polling
    and asleep, the host's; and remote polling against local in base."""
    sizes = sorted({r.size for r in report.results.get(REMOTE_CONFIG, []) if r.op == f"{kind}-local"})
    out = []
    for s in sizes:
        local = median(report, REMOTE_CONFIG, f"{kind}-local", s)
        poll = median(report, REMOTE_CONFIG, f"{kind}-poll", s)
        irq = median(report, REMOTE_CONFIG, f"{kind}-irq", s)
        out.append([str(s), us(median(report, HOST, f"{kind}-local", s)),
                    us(median(report, "linux", f"{kind}-local", s)), us(local), us(poll), us(irq),
                    ratio(poll, local), ratio(irq, local)])
    return out


IO_HEAD = ["bytes", "host", "linux: tmpfs", "base: tmpfs", "base: remote, poll", "base: remote, irq",
           "poll vs tmpfs", "irq vs tmpfs"]
NULL_HEAD = ["call", "median (us)", "p99 (us)", "runs' medians (us)", "vs guest getppid", "vs host getppid"]
JITTER_HEAD = ["kernel", "run", "CPU 1 runs", "interruptions", "per second", "mean (us)", "median (us)", "max (us)",
               "time lost"]


def jitter_rows(report: Report) -> list[list[str]]:
    out = []
    for config, js in report.jitter.items():
        for j in js:
            rate = j.n / (j.span / 1e9) if j.span else 0.0
            out.append([config, str(j.run), j.load, str(j.n), f"{rate:.0f}", f"{j.mean / 1000:.2f}",
                        f"{j.median / 1000:.2f}", f"{j.max / 1000:.1f}", f"{j.lost:.2f}%"])
    return out


def tables(report: Report) -> list[Table]:
    out = []
    for title, head, body in [("Null calls (TCG wall clock: compare ratios)", NULL_HEAD, null_rows(report)),
                              ("pread, median us", IO_HEAD, io_rows(report, "read")),
                              ("pwrite, median us", IO_HEAD, io_rows(report, "write")),
                              ("OS jitter on CPU 0", JITTER_HEAD, jitter_rows(report))]:
        t = Table(title=title)
        for h in head:
            t.add_column(h, justify="left" if h in ("call", "kernel", "CPU 1 runs") else "right")
        for row in body:
            t.add_row(*row)
        out.append(t)
    return out


def _md_table(head: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in body)]


def markdown(report: Report, plot_path: Path | None) -> str:
    poll = median(report, REMOTE_CONFIG, "null-poll")
    irq = median(report, REMOTE_CONFIG, "null-irq")
    local = median(report, REMOTE_CONFIG, "getppid")
    host = median(report, HOST, "getppid")
    kern = ", ".join(f"`{c}`: Linux {k}" for c, k in report.kernels.items())
    head = [
        "# Remote system calls: null calls, file I/O and OS jitter",
        "",
        reporting.generated_by("./ukl bench remote" + (" --quick" if report.quick else "")
                               + (f" --repeat {report.repeat}" if report.repeat > 1 else ""), "`make results-remote`"),
        "",
        f"Machine: {report.machine}. Kernels: {kern}. Guests: QEMU {report.accel.upper()}, {report.smp} vCPUs; "
        f"the `{REMOTE_CONFIG}` guest runs with `--remote` (the shadow process polls 1 ms after a polling "
        "thread's request, then sleeps until the doorbell).",
        "",
        "guest/bench/remote.c, built unchanged for the host, `linux` and `base`, times batches of calls with "
        "CLOCK_MONOTONIC and reports the median and 99th percentile per call over the batches"
        + (f"; each guest was booted {report.repeat} times, interleaved, and a row is the median of the "
           "runs' medians (the null calls show their range). " if report.repeat > 1 else ". ")
        + ("Under TCG a guest nanosecond is host wall time spent emulating, so only ratios within one run "
           "mean anything; the host's own rows are native and are not comparable with the guests' except as "
           "an order of magnitude." if report.accel == "tcg" else "The guests ran under KVM: real time."),
        "",
        f"**Null remote call**: polling {us(poll)} us, asleep {us(irq)} us: {ratio(poll, local)} and "
        f"{ratio(irq, local)} a local getppid in the same guest. Seed 002 (OSv on Xen, bare metal): "
        f"polling {SEED['null-poll']} us, interrupts {SEED['null-irq']} us, a Linux system call in dom0 "
        f"{SEED['host-syscall']} us, i.e. 1.18x and 9-16x. A host process's own getppid here: {us(host)} us "
        "(native, not emulated).",
        "",
        "## Null calls", "", *_md_table(NULL_HEAD, null_rows(report)), "",
        "## pread and pwrite at offset 0 (median, us)", "",
        "### pread", "", *_md_table(IO_HEAD, io_rows(report, "read")), "",
        "### pwrite", "", *_md_table(IO_HEAD, io_rows(report, "write")), "",
        "## OS jitter", "",
        "As sysjitter (seed 002 section 6.3): a thread pinned to CPU 0 reads the TSC in a loop and counts "
        "gaps longer than the threshold "
        f"({next((j.threshold for js in report.jitter.values() for j in js), 0)} ns) as interruptions, "
        "while CPU 1 is idle, runs a thread reading 4 KiB of a local file every millisecond, or the same "
        "thread reading a host file through remote calls, asleep. Under TCG the vCPUs are host threads: "
        "what the host does to them (and to the shadow) shows up here too.",
        "", *_md_table(JITTER_HEAD, jitter_rows(report)), "",
        NOTES, "",
    ]
    if plot_path:
        head += [f"![remote and local file I/O against size]({plot_path.name})", ""]
    return "\n".join(head)


NOTES = """## Reading these numbers

* A remote call crosses from the guest to a host process and back: under
  KVM that is a VM exit each way for the doorbell and the interrupt, or
  none while both sides poll (shared memory only). Under TCG the guest's
  time is emulation time, so the ratios against the guest's own getppid
  are the figures to compare with the seed's, and they overstate what the
  host side costs relative to the guest.
* Polling costs a host CPU and a guest CPU while a call is in flight.
  Sleeping costs a wakeup on each side: under TCG the doorbell, the
  shadow's wakeup, QEMU's MSI-X delivery from its main loop and the
  guest's wakeup are four host thread switches, which is why the asleep
  call costs tens of microseconds here.
* Jitter under TCG is mostly the host's: the vCPUs are host threads, and
  the remote-io load wakes the shadow on one of the same host cores
  (2 here), so CPU 0's extra interruptions beside it are host scheduling,
  not guest kernel work. Seed 002 gave dom0 cores of its own.
* Data is zero-copy: a 64 KiB remote read is one readv by the shadow into
  the guest's pinned pages, so what it adds to a local read is the fixed
  round trip, not the bytes. Under TCG a remote read or write of more than
  a few hundred bytes even beats tmpfs in the guest: the host's kernel
  copies the bytes natively, while the guest's own copy_to_user() is
  emulated, instruction by instruction. That is an artifact of emulation;
  under KVM both copies run at native speed and tmpfs wins by the round
  trip."""


def plot(report: Report, path: Path) -> None:
    """pread and pwrite latency against size: tmpfs, remote polling, remote asleep."""
    plt = reporting.pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, kind in zip(axes, ("read", "write"), strict=True):
        for suffix, label in (("local", "tmpfs in the guest"), ("poll", "remote, polling"),
                              ("irq", "remote, interrupts")):
            pts = sorted((r for r in report.results.get(REMOTE_CONFIG, []) if r.op == f"{kind}-{suffix}"),
                         key=lambda r: r.size)
            ax.plot([r.size for r in pts], [r.median / 1000 for r in pts], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes")
        ax.set_ylabel("median us per call (TCG wall clock)" if report.accel == "tcg" else "median us per call")
        ax.set_title(f"p{kind} in the {REMOTE_CONFIG} guest")
        ax.legend(fontsize=8)
    fig.suptitle("Remote system calls against local tmpfs (`ukl bench remote`)")
    fig.tight_layout()
    reporting.save_plot(fig, path)


def save_json(report: Report, path: Path) -> None:
    reporting.save_json(report, path)


def load_json(path: Path) -> Report:
    def decode(data: dict) -> Report:
        data["results"] = {c: [Row(**r) for r in rows] for c, rows in data["results"].items()}
        data["jitter"] = {c: [Jitter(**j) for j in js] for c, js in data["jitter"].items()}
        data["runs"] = {c: [[Row(**r) for r in rows] for rows in runs] for c, runs in data.get("runs", {}).items()}
        return Report(**data)

    return reporting.load_json(path, decode, "the remote-call benchmark's results",
                               "give a file written by `ukl bench remote --json`")
