"""The cycle model of `ukl bench syscalls --icount --model cycles`: guest
instructions (exact, from -icount) plus, for each class of costly
instruction (SYSCALL, SYSRET, IRET, SWAPGS, WRMSR, MOV to CR3, VERW, ...),
how often one iteration executes it (counted by our QEMU plugin,
tools/plugin/insnclass.c, in the regions bench/lebench.c marks) times what
it costs beyond one cycle on a named CPU (bench/costs/CPU.toml).

    modelled cycles = median instructions + sum over classes of
                      count per iteration x extra cycles of the class

A model, not a measurement: no caches, branch prediction, pipelines or
memory; see docs/cycle-model.md."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from ukltool.util.errors import UklError
from ukltool.util.paths import REPO

COSTS_DIR = REPO / "bench" / "costs"
DEFAULT_CPU = "skylake-sp"
# The plugin's classes (tools/plugin/insnclass.h); "other" costs 1 cycle,
# like every instruction, so it has no entry in a cost table.
CLASSES = ["syscall", "sysret", "iret", "swapgs", "wrmsr", "rdmsr", "mov_cr3", "mov_cr4", "mov_cr_other",
           "invlpg", "invpcid", "serializing", "lfence", "mfence", "sfence", "verw", "popf", "cli", "sti",
           "stac_clac", "rdtsc", "rdtscp", "cpuid", "xsave", "xrstor"]
OTHER = "other"
# What the timing itself executes in every region iteration of
# bench/lebench.c: the region begins before the first RDTSCP and ends after
# the second, which the guest-instruction median does not include either.
HARNESS = {"rdtscp": 2}


# ---- the cost table ----

# What kind of number a cost is (bench/costs/*.toml explains them)
BASES = ("measured", "documented", "derived", "estimate")


@dataclass(frozen=True)
class ClassCost:
    extra: float  # cycles beyond the one every instruction is counted as
    source: str
    basis: str    # one of BASES
    note: str = ""


@dataclass(frozen=True)
class CostTable:
    cpu: str        # the file's stem: what --cpu names
    name: str       # the processor, in words
    path: Path
    costs: dict[str, ClassCost]

    def extra(self) -> dict[str, float]:
        return {c: k.extra for c, k in self.costs.items()}


def cpus(directory: Path = COSTS_DIR) -> list[str]:
    """The CPUs with a cost table."""
    return sorted(p.stem for p in directory.glob("*.toml"))


def table_path(cpu: str, directory: Path = COSTS_DIR) -> Path:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", cpu):
        raise UklError(f"'{cpu}' is not a CPU name", "name one of: " + ", ".join(cpus(directory)))
    path = directory / f"{cpu}.toml"
    if not path.is_file():
        raise UklError(f"no cost table for CPU '{cpu}' ({path} does not exist)",
                       "choose one of: " + (", ".join(cpus(directory)) or "(none)"))
    return path


def load_table(cpu: str | Path, directory: Path = COSTS_DIR) -> CostTable:
    """A cost table by CPU name (bench/costs/NAME.toml) or path, checked:
    every class of the plugin has a non-negative `extra` and a `source`."""
    path = cpu if isinstance(cpu, Path) else table_path(cpu, directory)
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UklError(f"cannot read the cost table {path}: {e}", "fix the file (TOML)") from None

    def bad(key: str, why: str) -> UklError:
        return UklError(f"{path}: {key}: {why}", "fix the cost table (see docs/cycle-model.md)")

    cpu_section = data.get("cpu")
    if not isinstance(cpu_section, dict) or not isinstance(cpu_section.get("name"), str) \
            or not cpu_section["name"].strip():
        raise bad("cpu.name", "missing: name the processor the costs are for")
    classes = data.get("classes")
    if not isinstance(classes, dict):
        raise bad("classes", "missing: one [classes.NAME] table per instruction class")
    for name in classes:
        if name not in CLASSES:
            raise bad(f"classes.{name}", "unknown class" + (" ('other' costs one cycle by definition)"
                                                            if name == OTHER else "")
                      + f"; the classes are: {', '.join(CLASSES)}")
    costs: dict[str, ClassCost] = {}
    for name in CLASSES:
        entry = classes.get(name)
        if not isinstance(entry, dict):
            raise bad(f"classes.{name}", "missing: every class needs its extra cycles and their source")
        extra = entry.get("extra")
        if isinstance(extra, bool) or not isinstance(extra, int | float) or not math.isfinite(extra) \
                or extra < 0:
            raise bad(f"classes.{name}.extra", f"must be a number of cycles, 0 or more (not {extra!r})")
        source = entry.get("source")
        if not isinstance(source, str) or not source.strip():
            raise bad(f"classes.{name}.source", "missing: say where the number comes from")
        note = entry.get("note", "")
        if not isinstance(note, str):
            raise bad(f"classes.{name}.note", "must be a string")
        basis = entry.get("basis")
        if basis not in BASES:
            raise bad(f"classes.{name}.basis", f"must be one of {', '.join(BASES)} (not {basis!r})")
        for key in entry:
            if key not in ("extra", "basis", "source", "note"):
                raise bad(f"classes.{name}.{key}", "unknown key (extra, basis, source, note)")
        costs[name] = ClassCost(float(extra), source.strip(), basis, note.strip())
    return CostTable(path.stem, cpu_section["name"].strip(), path, costs)


# ---- the plugin's report ----

@dataclass(frozen=True)
class RegionCounts:
    id: int
    iterations: int
    insns: int                   # all instructions in all iterations
    counts: dict[str, int]       # per class, all iterations
    typical: dict[str, int]      # per class, the most frequent iteration (classed instructions only)
    typical_iterations: int      # how many iterations executed exactly `typical`


@dataclass
class Hit:
    """A boot point's first execution (the plugin run with at=...):
    instructions and idle instructions before it, and the host's clock then
    (ns since QEMU loaded the plugin). None in a report's points: never
    reached."""
    insns: int
    halts: int
    wall_ns: int


# One row of the report's "profile" (written with profile=on): a region, how
# often a translation block ran in it, and the addresses of the block's
# instructions (insnprofile names their functions).
ProfileEntry = tuple[int, int, tuple[int, ...]]


@dataclass(frozen=True)
class PluginReport:
    insns: int
    counts: dict[str, int]
    unbalanced: int
    regions: dict[int, RegionCounts]
    profile: list[ProfileEntry] | None = None  # read where asked for (profile=True)
    points: list[Hit | None] | None = None     # read where asked for (points=True)


def _counts(value: object, where: str) -> dict[str, int]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, int) and v >= 0
                                              for k, v in value.items()):
        raise ValueError(f"{where}: not a map of class names to counts")
    unknown = set(value) - set(CLASSES) - {OTHER}
    if unknown:
        raise ValueError(f"{where}: unknown classes {sorted(unknown)} (plugin and tool disagree)")
    return dict(value)


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: not a count")
    return value


def _profile(data: dict[str, Any], source: str) -> list[ProfileEntry]:
    """The "profile" list of a report written with profile=on."""
    try:
        rows = data["profile"]
        if not isinstance(rows, list):
            raise ValueError("'profile' is not a list")
        out: list[ProfileEntry] = []
        for row in rows:
            region, execs, pcs = row
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (region, execs, *pcs)):
                raise ValueError(f"bad entry {row!r}")
            out.append((region, execs, tuple(pcs)))
        return out
    except (ValueError, KeyError, TypeError) as e:
        raise UklError(f"cannot read the profile in {source}: {e}",
                       "the QEMU plugin writes it when loaded with profile=on; rebuild it if it is older") from None


def _points(data: dict[str, Any], source: str) -> list[Hit | None]:
    """The "points" list of a report written with at=... (ukl bench boot)."""
    try:
        return [None if p["insns"] is None else Hit(int(p["insns"]), int(p["halts"]), int(p["wall_ns"]))
                for p in data["points"]]
    except (ValueError, KeyError, TypeError) as e:
        raise UklError(f"cannot read the boot points in {source}: {e}",
                       "the QEMU plugin tools/plugin/insnclass.c writes them (at=...)") from None


def parse_report(text: str, source: str = "the plugin's report", profile: bool = False,
                 points: bool = False) -> PluginReport:
    """The JSON report tools/plugin/insnclass.c writes at QEMU's exit, with
    its "profile" list where PROFILE (the plugin ran with profile=on) and
    its boot points where POINTS (at=...)."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("plugin") != "insnclass" or data.get("format") != 1:
            raise ValueError("not an insnclass report of format 1")
        if data.get("classes") != [*CLASSES, OTHER]:
            raise ValueError(f"its classes {data.get('classes')} are not {[*CLASSES, OTHER]}: rebuild the plugin")
        total = data["total"]
        regions: dict[int, RegionCounts] = {}
        for r in data["regions"]:
            rid = _int(r["id"], "region id")
            mode = r.get("mode") or {"iterations": 0, "counts": {}}
            regions[rid] = RegionCounts(rid, _int(r["iterations"], f"region {rid} iterations"),
                                        _int(r["insns"], f"region {rid} insns"),
                                        _counts(r["counts"], f"region {rid} counts"),
                                        _counts(mode["counts"], f"region {rid} mode"),
                                        _int(mode["iterations"], f"region {rid} mode iterations"))
        report = PluginReport(_int(total["insns"], "total insns"), _counts(total["counts"], "total counts"),
                              _int(data.get("unbalanced", 0), "unbalanced"), regions)
    except (ValueError, KeyError, TypeError) as e:
        raise UklError(f"cannot read {source}: {e}", "the QEMU plugin tools/plugin/insnclass.c writes it") from None
    return dataclasses.replace(report, profile=_profile(data, source) if profile else None,
                               points=_points(data, source) if points else None)


def read_report(path: Path, profile: bool = False, points: bool = False) -> PluginReport:
    """The plugin's report in PATH, read once (parse_report)."""
    return parse_report(path.read_text(), str(path), profile, points)


def parse_regions(console: str) -> dict[int, tuple[str, int, int]]:
    """REGION lines of bench/lebench.c: {id: (op, size, iterations)}."""
    return {int(m[1]): (m[2], int(m[3]), int(m[4]))
            for m in re.finditer(r"^REGION (\d+) (\S+) (\d+) (\d+)\s*$", console, re.M)}


# ---- the model ----

@dataclass
class OpCounts:
    """One benchmark point's classed instructions per iteration, the
    timing's own (HARNESS) taken out."""
    op: str
    size: int
    iterations: int
    counts: dict[str, int]      # the typical (most frequent) iteration: what the model uses
    mean: dict[str, float]      # the mean over all iterations (timer interrupts included)
    typical_share: float        # fraction of iterations that executed exactly `counts`
    insns_mean: float           # all instructions per iteration in the region (timing glue included)


@dataclass
class Model:
    cpu: str                    # the cost table: bench/costs/CPU.toml
    cpu_name: str
    extra: dict[str, float]     # the table's extra cycles per class
    results: dict[str, list[OpCounts]] = field(default_factory=dict)  # per configuration

    def counts(self, config: str, op: str, size: int) -> OpCounts | None:
        for oc in self.results.get(config, []):
            if (oc.op, oc.size) == (op, size):
                return oc
        return None


def new_model(table: CostTable) -> Model:
    return Model(table.cpu, table.name, table.extra())


def without_harness(counts: dict[str, float]) -> dict[str, float]:
    out = {c: v - HARNESS.get(c, 0) for c, v in counts.items()}
    for c, n in HARNESS.items():
        out.setdefault(c, -n)
    return {c: v for c, v in out.items() if v}


def op_counts(report: PluginReport, regions: dict[int, tuple[str, int, int]],
              source: str = "the benchmark") -> list[OpCounts]:
    """Per benchmark point (REGION lines), its classed instructions per
    iteration; a point whose region the plugin did not see, or saw with
    another number of iterations, is an error."""
    out = []
    for rid, (op, size, n) in sorted(regions.items()):
        r = report.regions.get(rid)
        if r is None or r.iterations != n:
            seen = "no iteration" if r is None else f"{r.iterations} iterations"
            raise UklError(f"{source}: the plugin saw {seen} of region {rid} ({op} {size}), "
                           f"the benchmark ran {n}",
                           "were the markers (bench/region.h) executed, and the plugin loaded?")
        typical = without_harness({c: float(v) for c, v in r.typical.items()})
        mean = without_harness({c: v / n for c, v in r.counts.items() if c != OTHER})
        if any(v < 0 for v in typical.values()):
            raise UklError(f"{source}: region {rid} ({op} {size}) lacks the timing's own {HARNESS}",
                           "the markers must enclose both RDTSCPs of an iteration")
        out.append(OpCounts(op, size, n, {c: int(v) for c, v in typical.items()},
                            {c: round(v, 4) for c, v in mean.items()},
                            round(r.typical_iterations / n, 4) if n else 0.0, round(r.insns / n, 2) if n else 0.0))
    return out


def cycles(instructions: float, counts: dict[str, int] | dict[str, float], extra: dict[str, float]) -> float:
    """Modelled cycles: every instruction one cycle, plus each classed
    instruction's extra cycles. A class without a cost is an error."""
    missing = [c for c in counts if c not in extra]
    if missing:
        raise UklError(f"the cost table has no cost for {', '.join(sorted(missing))}",
                       "every class of the plugin needs one (bench/costs/*.toml)")
    return instructions + sum(n * extra[c] for c, n in counts.items())


def headers(model: Model, configs: list[str]) -> list[str]:
    return [f"{c} modelled cycles (model: {model.cpu})" for c in configs]


def cells(model: Model, op: str, size: int, medians: dict[str, int], configs: list[str]) -> list[str]:
    """Per configuration the modelled cycles of one point, '-' where unknown."""
    out = []
    for c in configs:
        oc = model.counts(c, op, size)
        out.append(f"{cycles(medians[c], oc.counts, model.extra):.0f}" if oc and c in medians else "-")
    return out


def markdown_note(model: Model) -> str:
    return (f"*Modelled cycles* are a model, not a measurement: the median guest instructions plus, for "
            f"each costly instruction a typical iteration executes (counted by the QEMU plugin "
            f"tools/plugin/insnclass.c), its extra cycles on {model.cpu_name} from "
            f"`bench/costs/{model.cpu}.toml`; caches, branch prediction and pipelines are not modelled "
            f"(docs/cycle-model.md).")


def model_from_dict(data: dict[str, Any]) -> Model:
    """The model as saved in a report's JSON."""
    return Model(data["cpu"], data["cpu_name"], dict(data["extra"]),
                 {c: [OpCounts(**oc) for oc in ocs] for c, ocs in data.get("results", {}).items()})


def cpu_choice(model: str | None, cpu: str | None) -> str | None:
    """The cost table `--model cycles [--cpu NAME]` asks for, or None."""
    if cpu is not None and model != "cycles":
        raise UklError("--cpu names the cost table of --model cycles", "add --model cycles")
    return (cpu or DEFAULT_CPU) if model == "cycles" else None


class Modelled(Protocol):
    """A model of saved counts: Model (system calls), appcycles.AppModel
    (application loads)."""
    __dataclass_fields__: ClassVar[dict[str, Any]]
    cpu: str
    cpu_name: str
    extra: dict[str, float]


M = TypeVar("M", bound=Modelled)


def remodel(model: M | None, cpu: str, command: str = "ukl bench syscalls") -> M:
    """Saved counts (`--from-json`) under another cost table; COMMAND names
    the benchmark that saves them."""
    if model is None:
        raise UklError("these results have no counts of costly instructions",
                       f"run `{command} --icount --model cycles --json FILE` first")
    table = load_table(cpu)
    return dataclasses.replace(model, cpu=table.cpu, cpu_name=table.name, extra=table.extra())


def check_icount(icount: bool, model_cpu: str | None, by_function: object = None) -> None:
    """Modelled cycles (--model cycles) and --by-function count guest
    instructions: both need --icount."""
    if model_cpu is not None and not icount:
        raise UklError("--model cycles needs --icount", "the model adds to guest instruction counts")
    if by_function and not icount:
        raise UklError("--by-function needs --icount", "the profile counts guest instructions")
