"""Where a benchmark point's instructions go: `ukl bench syscalls --icount
--by-function getppid,read:1`.

With profile=on our QEMU plugin (tools/qemu-plugin/insnclass.c) reports, per
region, how often each translation block ran while the region was open and
the addresses of the block's instructions. This module names the function
each instruction belongs to (the kernel's symbol table, vmlinux, which also
holds a UKL application's symbols) and gives, per benchmark point, the
instructions per iteration by function: exact counts of what the guest
executed, averaged over the point's iterations (so the occasional timer
interrupt or full-path system call shows as a fraction).

Blocks are attributed whole: the benchmark's own timing code around the
markers is approximate (it is the application's, or user space's, row),
every kernel function's row is exact."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from rich.table import Table

from ukltool.plugin.insnclass import ProfileEntry
from ukltool.util.errors import UklError

USER = "(user space)"
UNKNOWN = "(kernel, no symbol)"
OTHERS = "(other functions)"
KERNEL_HALF = 1 << 63


@dataclass
class OpProfile:
    """One benchmark point: instructions per iteration, by function."""
    op: str
    size: int
    iterations: int
    functions: dict[str, float] = field(default_factory=dict)

    def total(self) -> float:
        return sum(self.functions.values())


# ---- which points ----

def parse_points(spec: str, ops: Sequence[str]) -> list[tuple[str, int]]:
    """'getppid,read:1' -> [('getppid', 0), ('read', 1)]; OPS are the
    benchmark's operation names."""
    out: list[tuple[str, int]] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        op, _, size = item.partition(":")
        if op not in ops:
            raise UklError(f"--by-function: '{op}' is not an operation of the benchmark",
                           "name some of: " + ", ".join(ops) + " (OP or OP:BYTES, comma-separated)")
        if size and not size.isdigit():
            raise UklError(f"--by-function: '{item}' has no size in bytes after the colon",
                           "write OP:BYTES, e.g. read:1")
        out.append((op, int(size or 0)))
    if not out:
        raise UklError("--by-function names no operation", "for example --by-function getppid,read:1")
    return out


# ---- symbols ----

class Symbols:
    """Function names by address, from an ELF file's symbol table: an
    address is named by the nearest symbol at or below it (a label inside
    an assembly routine names the code after it, as addr2line does)."""

    def __init__(self, entries: Iterable[tuple[int, str]], user_below: int = KERNEL_HALF):
        pairs = sorted(set(entries))
        self.user_below = user_below  # addresses below it are user space's
        self.starts = [a for a, _ in pairs]
        self.names = [n for _, n in pairs]
        self._cache: dict[int, str] = {}

    def name(self, addr: int) -> str:
        if addr < self.user_below:
            return USER
        hit = self._cache.get(addr)
        if hit is None:
            i = bisect.bisect_right(self.starts, addr) - 1
            hit = self.names[i] if i >= 0 else UNKNOWN
            self._cache[addr] = hit
        return hit


Rank = tuple[bool, bool, bool, str]


def _rank(name: str, kind: str, bind: str) -> Rank:
    """Which of several symbols at one address names it (the smallest):
    no section markers (…_start, __SCT__…), functions before labels,
    global before local."""
    marker = name.endswith(("_start", "_end")) or name.startswith(("__SCT__", "__pfx_", "__cfi_"))
    return marker, kind != "STT_FUNC", bind != "STB_GLOBAL", name


def load_symbols(path: Path, user_below: int = KERNEL_HALF) -> Symbols:
    """The kernel's code symbols (or a program's, with USER_BELOW 0)."""
    best: dict[int, tuple[Rank, str]] = {}
    try:
        with path.open("rb") as f:
            elf = ELFFile(f)
            tab = elf.get_section_by_name(".symtab")
            if not isinstance(tab, SymbolTableSection):
                raise UklError(f"{path} has no symbol table", "profiles need an unstripped vmlinux")
            for sym in tab.iter_symbols():
                kind, bind = sym["st_info"]["type"], sym["st_info"]["bind"]
                # code only: a real section index (not UNDEF, ABS, COMMON) whose section executes
                if kind not in ("STT_FUNC", "STT_NOTYPE") or not sym.name or not isinstance(sym["st_shndx"], int):
                    continue
                if not elf.get_section(sym["st_shndx"])["sh_flags"] & SH_FLAGS.SHF_EXECINSTR:
                    continue
                rank = _rank(sym.name, kind, bind)
                addr = sym["st_value"]
                if addr not in best or rank < best[addr][0]:
                    best[addr] = (rank, sym.name)
    except (OSError, ELFError) as e:
        raise UklError(f"cannot read symbols from {path}: {e}", "rebuild the kernel (`ukl kernel build`)") from None
    return Symbols(((a, n) for a, (_, n) in best.items()), user_below)


# ---- per function ----

def per_function(entries: Sequence[ProfileEntry], region: int, iterations: int,
                 name: Callable[[int], str]) -> dict[str, float]:
    """Instructions per iteration of REGION, by the function NAME gives
    each instruction address."""
    if iterations <= 0:
        raise ValueError("a region without iterations")
    sums: dict[str, int] = {}
    for rid, execs, pcs in entries:
        if rid != region:
            continue
        for pc in pcs:
            fn = name(pc)
            sums[fn] = sums.get(fn, 0) + execs
    return {fn: round(n / iterations, 2) for fn, n in sorted(sums.items(), key=lambda kv: -kv[1])}


def rows(profiles: dict[str, OpProfile], configs: Sequence[str], keep: int = 24) -> list[tuple[str, list[float]]]:
    """The table of one point: the KEEP functions with the most
    instructions in any configuration, then the rest together, then the
    total; a value per configuration (0 where a function did not run)."""
    present = [c for c in configs if c in profiles]
    names = {fn for c in present for fn in profiles[c].functions}
    order = sorted(names, key=lambda fn: (-max(profiles[c].functions.get(fn, 0.0) for c in present), fn))
    out = [(fn, [profiles[c].functions.get(fn, 0.0) for c in present]) for fn in order[:keep]]
    rest = order[keep:]
    if rest:
        out.append((f"{OTHERS[:-1]}: {len(rest)})",
                    [round(sum(profiles[c].functions.get(fn, 0.0) for fn in rest), 2) for c in present]))
    out.append(("total", [round(profiles[c].total(), 2) for c in present]))
    return out


def number(v: float) -> str:
    if v == 0:
        return "-"
    return f"{v:.0f}" if abs(v - round(v)) < 0.005 else f"{v:.2f}"


def point_profiles(profiles: dict[str, list[OpProfile]], configs: Sequence[str],
                   point: tuple[str, int]) -> dict[str, OpProfile]:
    """One point's profile in each configuration that has it."""
    return {c: p for c in configs for p in profiles.get(c, []) if (p.op, p.size) == point}


def table(profiles: dict[str, list[OpProfile]], configs: Sequence[str], point: tuple[str, int],
          title: str) -> Table:
    """One point's functions against the configurations, for the terminal."""
    per = point_profiles(profiles, configs, point)
    present = [c for c in configs if c in per]
    t = Table(title=title)
    t.add_column("function")
    for c in present:
        t.add_column(c, justify="right")
    for fn, vals in rows(per, present):
        t.add_row(fn, *(number(v) for v in vals))
    return t


def markdown(points: Sequence[tuple[str, int]], profiles: dict[str, list[OpProfile]], configs: Sequence[str],
             command: str, per: str = "iteration", heading: str = "##") -> str:
    """A section per point (PER: what a value is divided by):
    functions against configurations."""
    what = ("Values are guest instructions per iteration, the mean over all iterations: a fraction is work "
            "that only some iterations do (a timer interrupt, `byp`'s full path every 64th call). Kernel rows "
            "are exact; the benchmark's timing code is attributed by whole blocks, so the user-space or "
            "application row is approximate." if per == "iteration" else
            "Values are the guest's instructions during the load divided by its requests: the server, the "
            "in-guest client (in user space) and the idle loop. Under `linux` the server is in user space "
            "too; under UKL profiles its functions are named.")
    out = [f"{heading} Where the instructions go", "",
           f"Measured with `{command}`: our QEMU plugin counts the instructions of each translated block "
           "the guest executed in the measured region, and vmlinux's symbol table names the function each "
           f"instruction is in (a label inside an assembly routine names the code after it). {what} "
           "`-` means the function did not run.", ""]
    for op, size in points:
        pts = point_profiles(profiles, configs, (op, size))
        present = [c for c in configs if c in pts]
        if not present:
            continue
        out += [f"{heading}# {op}{f' {size} B' if size else ''}", "",
                "| function | " + " | ".join(present) + " |", "|---|" + "---:|" * len(present)]
        for fn, vals in rows(pts, present):
            label = f"**{fn}**" if fn == "total" else f"`{fn}`" if not fn.startswith("(") else fn
            out.append(f"| {label} | " + " | ".join(number(v) for v in vals) + " |")
        out.append("")
    return "\n".join(out)
