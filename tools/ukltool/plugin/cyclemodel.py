"""The cycle model of `ukl bench syscalls --icount --model cycles`: guest
instructions (exact, from -icount) plus, for each class of costly
instruction (SYSCALL, SYSRET, IRET, SWAPGS, WRMSR, MOV to CR3, VERW, ...),
how often one iteration executes it (counted by our QEMU plugin,
tools/qemu-plugin/insnclass.c, in the regions guest/bench/lebench.c marks) times what
it costs beyond one cycle on a named CPU (measure/costs/CPU.toml).

    modelled cycles = median instructions + sum over classes of
                      count per iteration x extra cycles of the class

A model, not a measurement: no caches, branch prediction, pipelines or
memory; see docs/cycle-model.md."""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from ukltool.plugin.insnclass import CLASSES, OTHER, PluginReport
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO

COSTS_DIR = REPO / "measure" / "costs"
DEFAULT_CPU = "skylake-sp"
# What the timing itself executes in every region iteration of
# guest/bench/lebench.c: the region begins before the first RDTSCP and ends after
# the second, which the guest-instruction median does not include either.
HARNESS = {"rdtscp": 2}


# ---- the cost table ----

# What kind of number a cost is (measure/costs/*.toml explains them)
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
    """A cost table by CPU name (measure/costs/NAME.toml) or path, checked:
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


def parse_regions(console: str) -> dict[int, tuple[str, int, int]]:
    """REGION lines of guest/bench/lebench.c: {id: (op, size, iterations)}."""
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
    cpu: str                    # the cost table: measure/costs/CPU.toml
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
                           "were the markers (guest/bench/region.h) executed, and the plugin loaded?")
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
                       "every class of the plugin needs one (measure/costs/*.toml)")
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
            f"tools/qemu-plugin/insnclass.c), its extra cycles on {model.cpu_name} from "
            f"`measure/costs/{model.cpu}.toml`; caches, branch prediction and pipelines are not modelled "
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
