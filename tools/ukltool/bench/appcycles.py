"""Modelled cycles of application loads: `ukl bench app redis|memcached|nginx|
... --icount --model cycles`.

guest/bench/appload.c marks each load (or run) as one region for our QEMU
plugin (tools/qemu-plugin/insnclass.c), numbered in the order of the guest's
script (APPLOAD_REGION). A region holds everything the single vCPU
executes during the load: the server, the in-guest client, the kernel and
the idle loop. So, per request,

    guest modelled cycles = (region instructions + sum over classes of
                             count in the region x extra cycles) / requests

with the cost table of cyclemodel (measure/costs/CPU.toml). The client is
the same ordinary process under every configuration, so differences
between configurations are the server's (and its kernel's); ratios are
diluted by the client's share, which no configuration changes. A model, not
a measurement: docs/cycle-model.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ukltool.plugin import cyclemodel, insnclass
from ukltool.util import columns
from ukltool.util.errors import UklError


class Load(Protocol):
    """What a load needs to be matched with its region (appbench.Point)."""
    @property
    def label(self) -> str: ...
    @property
    def requests(self) -> int: ...


@dataclass(frozen=True)
class LoadCounts:
    """One load's region: every guest instruction and the classed ones."""
    label: str
    requests: int
    insns: int                 # all instructions the guest executed during the load
    counts: dict[str, int]     # classed instructions during the load, per class (nonzero only)

    def insns_per_request(self) -> float:
        return self.insns / self.requests

    def per_request(self) -> dict[str, float]:
        return {c: n / self.requests for c, n in self.counts.items()}

    def extra_per_request(self, extra: dict[str, float]) -> float:
        return cyclemodel.cycles(0, self.counts, extra) / self.requests

    def cycles_per_request(self, extra: dict[str, float]) -> float:
        return cyclemodel.cycles(self.insns, self.counts, extra) / self.requests


@dataclass
class AppModel:
    cpu: str                   # the cost table: measure/costs/CPU.toml
    cpu_name: str
    extra: dict[str, float]    # the table's extra cycles per class
    results: dict[str, list[LoadCounts]] = field(default_factory=dict)  # per configuration, in load order

    def load(self, config: str, label: str) -> LoadCounts | None:
        return next((lc for lc in self.results.get(config, []) if lc.label == label), None)


def new_model(table: cyclemodel.CostTable) -> AppModel:
    return AppModel(table.cpu, table.name, table.extra())


def load_counts(report: insnclass.PluginReport, loads: Sequence[Load], source: str) -> list[LoadCounts]:
    """Region K of the plugin's report is the K-th load; each must have
    been entered exactly once."""
    if report.unbalanced:
        raise UklError(f"{source}: the plugin saw {report.unbalanced} region ends without a begin",
                       "guest/bench/appload.c must mark each load's begin and end once")
    out = []
    for k, load in enumerate(loads):
        r = report.regions.get(k)
        if r is None or r.iterations != 1:
            seen = "no region" if r is None else f"{r.iterations} iterations"
            raise UklError(f"{source}: the plugin saw {seen} for load {k} ({load.label}); one was expected",
                           "were the markers of guest/bench/appload.c executed, and the plugin loaded?")
        out.append(LoadCounts(load.label, load.requests, r.insns,
                              {c: n for c, n in r.counts.items() if c != insnclass.OTHER and n}))
    extra = sorted(set(report.regions) - set(range(len(loads))))
    if extra:
        raise UklError(f"{source}: the plugin saw regions {extra} beyond the {len(loads)} loads",
                       "every region must be a load the benchmark reported")
    return out


def from_dict(data: dict[str, Any] | None) -> AppModel | None:
    """The model as saved in a report's JSON (dataclasses.asdict)."""
    if data is None:
        return None
    return AppModel(data["cpu"], data["cpu_name"], dict(data["extra"]),
                    {c: [LoadCounts(**lc) for lc in lcs] for c, lcs in data.get("results", {}).items()})


# ---- reports ----

def heading(model: AppModel, configs: list[str], baseline: str) -> list[str]:
    return columns.config_columns("load", configs, baseline, lambda c: f"{c} modelled cycles (instructions)",
                                  lambda c: f"{c} / {baseline}")


def cells(model: AppModel, label: str, configs: list[str], baseline: str) -> list[str]:
    """Per configuration: modelled cycles per request with the guest's
    instructions per request beside them, and the ratio of modelled cycles
    to the baseline's."""
    out = [label]
    base = model.load(baseline, label)
    for c in configs:
        lc = model.load(c, label)
        out.append(f"{lc.cycles_per_request(model.extra):,.0f} ({lc.insns_per_request():,.0f})" if lc else "-")
        if c != baseline:
            out.append(f"{lc.cycles_per_request(model.extra) / base.cycles_per_request(model.extra):.3f}"
                       if lc and base else "-")
    return out


def breakdown(model: AppModel, label: str, configs: list[str]) -> list[list[str]]:
    """Rows: each class any configuration executed in load LABEL, its count
    per request per configuration; last, the extra cycles per request."""
    loads = {c: model.load(c, label) for c in configs}
    classes = [c for c in insnclass.CLASSES if any(lc and lc.counts.get(c) for lc in loads.values())]
    rows = []
    for cls in classes:
        rows.append([cls, f"{model.extra.get(cls, 0):g}",
                     *(f"{lc.per_request().get(cls, 0.0):.2f}" if lc else "-" for lc in loads.values())])
    rows.append(["extra cycles per request", "",
                 *(f"{lc.extra_per_request(model.extra):,.0f}" if lc else "-" for lc in loads.values())])
    return rows


def markdown(model: AppModel, configs: list[str], baseline: str, labels: list[str]) -> list[str]:
    """An application's section on modelled cycles: every load, then the
    costly instructions per request of its first load."""
    head = heading(model, configs, baseline)
    out = [f"Modelled cycles per request (a run to completion: per run) of the whole guest (model: "
           f"`{model.cpu}`, a model: see below), with the guest's instructions in parentheses:", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(cells(model, label, configs, baseline)) + " |" for label in labels]
    if labels:
        bhead = ["class", "extra cycles each", *configs]
        out += ["", f"The costly instructions per request behind them, {labels[0]}:", "",
                "| " + " | ".join(bhead) + " |", "|" + "---|" * len(bhead)]
        out += ["| " + " | ".join(row) + " |" for row in breakdown(model, labels[0], configs)]
    return out + [""]


def note(model: AppModel) -> str:
    return (f"*Modelled cycles* are a model, not a measurement. Each load is one region of our QEMU plugin "
            f"(tools/qemu-plugin/insnclass.c), marked by `guest/bench/appload.c`: everything the guest executes during "
            f"the load — the server, the in-guest client, the kernel and the idle loop. Per request: the "
            f"region's instructions plus, for every costly instruction in it, its extra cycles on "
            f"{model.cpu_name} from `measure/costs/{model.cpu}.toml`. The client is the same ordinary process "
            f"under every configuration, so the differences between configurations are the server's and "
            f"its kernel's, while the ratios are diluted by the client's share. Caches, branch prediction "
            f"and pipelines are not modelled (docs/cycle-model.md).")
