"""Our QEMU TCG plugin (tools/qemu-plugin/insnclass.c), built with the host's C
compiler into the cache, once per version of its source; the QEMU option
that loads it; and the one reader of the JSON report it writes at QEMU's
exit (the counts per instruction class and region, and where asked for the
profile by translation block and the boot points)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, cache_dir
from ukltool.util.proc import cached_host_build

PLUGIN_DIR = REPO / "tools" / "qemu-plugin"
SOURCES = [PLUGIN_DIR / "insnclass.c", PLUGIN_DIR / "insnclass.h", PLUGIN_DIR / "qemu-plugin-api.h"]
# -fvisibility=hidden: only qemu_plugin_install and qemu_plugin_version are
# exported; QEMU's API functions are resolved when QEMU loads the plugin.
CFLAGS = ["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread"]
# A decoder alone (no QEMU symbols), loadable with ctypes by the unit tests
DECODER_FLAGS = ["-DINSNCLASS_DECODER_ONLY", "-fvisibility=default"]


def build(decoder_only: bool = False) -> Path:
    """The plugin's shared object in the cache (built if its sources or
    flags changed): plugins/insnclass-HASH.so, or the decoder alone."""
    flags = CFLAGS + (DECODER_FLAGS if decoder_only else [])
    return cached_host_build(cache_dir() / "plugins", "insnclass-decoder" if decoder_only else "insnclass", ".so",
                             SOURCES, flags, "the QEMU plugin", "tools/qemu-plugin/ belongs to the ukl checkout",
                             "fix the source, or install the host compiler (`apt-get install gcc`)")


def option(so: Path, report: Path, profile: bool = False, machine: bool = False) -> str:
    """The -plugin argument for QEMU (vm.RunSpec.plugins): insnclass writing
    its report to REPORT (a comma in a QEMU option value is written twice);
    PROFILE: with each region's executed blocks (insnprofile); MACHINE: a
    region counts what every vCPU executes between its begin and its end,
    wherever each marker runs (not with PROFILE)."""
    def esc(p: Path) -> str:
        return str(p).replace(",", ",,")
    return (f"file={esc(so)},out={esc(report)}" + (",profile=on" if profile else "")
            + (",machine=on" if machine else ""))


# The plugin's classes (tools/qemu-plugin/insnclass.h); "other" costs 1 cycle,
# like every instruction, so it has no entry in a cost table.
CLASSES = ["syscall", "sysret", "iret", "swapgs", "wrmsr", "rdmsr", "mov_cr3", "mov_cr4", "mov_cr_other",
           "invlpg", "invpcid", "serializing", "lfence", "mfence", "sfence", "verw", "popf", "cli", "sti",
           "stac_clac", "rdtsc", "rdtscp", "cpuid", "xsave", "xrstor"]
OTHER = "other"


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
    instructions, idle instructions and REP string instructions'
    executions (QEMU 7.2 executes such an instruction once per iteration and
    once more to find the count spent) before it, and the host's clock then
    (ns since QEMU loaded the plugin). None in a report's points: never
    reached."""
    insns: int
    halts: int
    wall_ns: int
    reps: int | None = None   # REP string instructions' executions before it (None: an older plugin's report)


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
        return [None if p["insns"] is None else Hit(int(p["insns"]), int(p["halts"]), int(p["wall_ns"]),
                                                    None if p.get("reps") is None else int(p["reps"]))
                for p in data["points"]]
    except (ValueError, KeyError, TypeError) as e:
        raise UklError(f"cannot read the boot points in {source}: {e}",
                       "the QEMU plugin tools/qemu-plugin/insnclass.c writes them (at=...)") from None


def parse_report(text: str, source: str = "the plugin's report", profile: bool = False,
                 points: bool = False) -> PluginReport:
    """The JSON report tools/qemu-plugin/insnclass.c writes at QEMU's exit, with
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
        raise UklError(f"cannot read {source}: {e}",
                       "the QEMU plugin tools/qemu-plugin/insnclass.c writes it") from None
    return dataclasses.replace(report, profile=_profile(data, source) if profile else None,
                               points=_points(data, source) if points else None)


def read_report(path: Path, profile: bool = False, points: bool = False) -> PluginReport:
    """The plugin's report in PATH, read once (parse_report)."""
    return parse_report(path.read_text(), str(path), profile, points)
