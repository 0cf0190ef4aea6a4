"""Latency against offered load: the open-loop loads of `ukl bench app NAME`
(guest/bench/appload.c `rate`, a recipe's [bench.latency]).

Requests arrive as a Poisson process at each offered rate, whether or not
earlier ones were answered, and a latency runs from a request's scheduled
arrival. Under `--icount` (shift=0, sleep=off) guest time is virtual:
a busy nanosecond is one guest instruction, and idle time passes at once
to the next timer; rates are per second of that time, latencies are in
it, and runs repeat exactly for one arrival sequence (`--repeat` draws
another per run: APPLOAD_SEED). Pure functions of the
console text and of the results, so that they are unit-tested."""

from __future__ import annotations

import re
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path

from ukltool.apps import recipes
from ukltool.util import columns, reporting
from ukltool.util.errors import UklError


@dataclass(frozen=True)
class RatePoint:
    """One open-loop load: latencies in ns of guest time."""
    op: str
    conns: int
    rate: int            # offered requests per second of guest time (the recipe's)
    requests: int
    offered: float       # the rate the drawn arrivals make (RATE, give or take chance)
    achieved: float      # requests answered per second over the load
    p50_ns: int
    p99_ns: int
    max_ns: int
    server_ns: int       # the server's CPU time over the load
    elapsed_ns: int

    @property
    def label(self) -> str:
        return f"{self.op.upper()} {self.rate:,}/s"

    @property
    def saturated(self) -> bool:
        """The server did not keep up: it answered under 95% of the arrivals' rate."""
        return self.achieved < 0.95 * self.offered


def script_lines(b: recipes.Bench, requests: int | None, seed: int = 0) -> list[str]:
    """The guest's commands for the recipe's open-loop loads, one per rate
    (after the closed-loop loads: they are not plugin regions), with the
    arrival sequence SEED (0: appload's own)."""
    lat = b.latency
    if lat is None:
        return []
    n = min(requests, lat.requests) if requests else lat.requests
    env = f"APPLOAD_SEED={seed} " if seed else ""
    return [f"{env}/bin/appload rate {b.protocol} {b.port} {lat.op} {shlex.quote(b.comm)} {n} {lat.conns} {rate} "
            "|| echo APPLOAD-FAILED" for rate in lat.rates]


_LINE = re.compile(r"^APPRATE \S+ (get|set) (\d+) (\d+) (\d+) ([\d.]+) ([\d.]+) (\d+) (\d+) (\d+) (\d+) (\d+)\s*$",
                   re.M)


def parse(text: str) -> list[RatePoint]:
    return [RatePoint(m[1], int(m[3]), int(m[4]), int(m[2]), float(m[5]), float(m[6]), int(m[7]), int(m[8]),
                      int(m[9]), int(m[10]), int(m[11])) for m in _LINE.finditer(text)]


def check(points: list[RatePoint], b: recipes.Bench, what: str, log: Path) -> None:
    """Every rate of the recipe measured once, in its order."""
    want = b.latency.rates if b.latency else []
    got = [p.rate for p in points]
    if got != want:
        raise UklError(f"{what} measured the offered rates {got or 'none'}, not the recipe's {want}", f"see {log}")


def _median(points: tuple[RatePoint, ...], name: str) -> int:
    return int(statistics.median_low(getattr(p, name) for p in points))


def combine(runs: list[list[RatePoint]]) -> list[RatePoint]:
    """Each field's median (the lower middle value) over the runs."""
    out = []
    for same in zip(*runs, strict=True):
        first = same[0]
        if any((p.op, p.rate, p.conns, p.requests) != (first.op, first.rate, first.conns, first.requests)
               for p in same):
            raise UklError("the runs measured different open-loop loads", "run the benchmark again")
        out.append(RatePoint(first.op, first.conns, first.rate, first.requests,
                             statistics.median_low(p.offered for p in same),
                             statistics.median_low(p.achieved for p in same), _median(same, "p50_ns"),
                             _median(same, "p99_ns"), _median(same, "max_ns"), _median(same, "server_ns"),
                             _median(same, "elapsed_ns")))
    return out


def _us(ns: int) -> str:
    return f"{ns / 1000:,.1f}"


def heading(configs: list[str], baseline: str) -> list[str]:
    return columns.config_columns("offered load", configs, baseline, lambda c: f"{c} p50 / p99",
                                  lambda c: f"{c} p99 / {baseline}")


def rows(latency: dict[str, list[RatePoint]], configs: list[str], baseline: str) -> list[list[str]]:
    """One row per offered rate: each configuration's p50 / p99 (µs of guest
    time; `*`: the server fell behind the offered rate) and its p99 against
    the baseline's."""
    out = []
    first = latency.get(configs[0], [])
    for i, p0 in enumerate(first):
        row = [p0.label + f" ({p0.conns} conns)"]
        base = latency.get(baseline, [])[i] if len(latency.get(baseline, [])) > i else None
        for c in configs:
            pts = latency.get(c, [])
            p = pts[i] if len(pts) > i else None
            row.append(f"{_us(p.p50_ns)} / {_us(p.p99_ns)}" + (f" * ({p.achieved:,.0f}/s)" if p.saturated else "")
                       if p else "-")
            if c != baseline:
                row.append(f"{p.p99_ns / base.p99_ns:.3f}" if p and base and base.p99_ns else "-")
        out.append(row)
    return out


def markdown(latency: dict[str, list[RatePoint]], configs: list[str], baseline: str, icount: bool) -> list[str]:
    if not any(latency.values()):
        return []
    unit = "µs of guest time (`--icount`: a busy µs is a thousand guest instructions, idle time passes at " \
        "once)" if icount else "µs of guest time (TCG wall clock: relative only)"
    head = heading(configs, baseline)
    out = ["### Latency against offered load", "",
           "Open loop: requests arrive as a Poisson process at the offered rate (per second of guest time), "
           "round robin over the connections, answered or not; a latency runs from the request's "
           f"scheduled arrival, so a client that falls behind cannot hide it. Unit: {unit}. The client runs "
           "in the same guest on the same vCPU, so its own work is in the latencies and in the load the guest "
           "can take, as for every in-guest load. One arrival sequence per run (the median of the runs with "
           "`--repeat`, each its own sequence), so a p99 is one sample of the tail. `*`: the guest answered "
           "under 95% of the arrivals' rate (the achieved rate follows); rows without it can be past the knee "
           "too, with a queue that drains after the last arrival; past the knee latencies depend on the "
           "number of requests.", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows(latency, configs, baseline)]
    return out + [""]


def plot(series: dict[str, dict[str, list[RatePoint]]], path: Path, baseline: str) -> None:
    """p99 (solid) and p50 (dashed) against offered load, one panel per
    application, one line per configuration (Fig. 6.11's axes)."""
    plt = reporting.pyplot()

    apps = [a for a, lat in series.items() if any(lat.values())]
    fig, axes = plt.subplots(1, max(1, len(apps)), figsize=(6.5 * max(1, len(apps)), 4.5), squeeze=False)
    for ax, app in zip(axes[0], apps, strict=False):
        for j, (config, pts) in enumerate(series[app].items()):
            color = f"C{j}"
            xs = [p.rate / 1000 for p in pts]
            ax.plot(xs, [p.p99_ns / 1000 for p in pts], marker="o", color=color, label=f"{config} p99")
            ax.plot(xs, [p.p50_ns / 1000 for p in pts], linestyle="--", color=color, label=f"{config} p50")
        ax.set_yscale("log")
        ax.set_xlabel("offered load (thousands of requests per second of guest time)")
        ax.set_ylabel("latency (µs of guest time)")
        ax.set_title(f"{app}: latency against offered load (baseline {baseline})")
        ax.legend(fontsize=7)
    fig.tight_layout()
    reporting.save_plot(fig, path)
