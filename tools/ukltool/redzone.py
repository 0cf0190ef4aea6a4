"""Refusing objects that use the x86-64 red zone.

In ring 0 an interrupt pushes its frame on the current stack, so data a
leaf function keeps below %rsp (the red zone) is silently overwritten.
Every object linked into a UKL application must be built with
-mno-red-zone. Two checks, either of which names the object:

* the DWARF producer string of GCC-compiled units (gcc records its options
  with -g; read by readelf, which applies every relocation type) must
  contain -mno-red-zone;
* the code must not address memory below %rsp, nor, in a leaf function
  that never moves %rsp after setting up %rbp, below %rbp.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ukltool.errors import UklError

BELOW_RSP = re.compile(r"-0x[0-9a-f]+\(%rsp\)")
BELOW_RBP = re.compile(r"-0x[0-9a-f]+\(%rbp\)")


def producer_offenders(readelf_info: str) -> list[str]:
    """Compilation units built by GCC without -mno-red-zone, from
    `readelf --debug-dump=info --dwarf-depth=1` output."""
    bad = []
    for unit in readelf_info.split("(DW_TAG_compile_unit)")[1:]:
        attrs = {}
        for line in unit.splitlines()[1:]:
            m = re.match(r"\s+<[0-9a-f]+>\s+(DW_AT_\w+)\s*:\s*(?:\([^)]*\):\s*)?(.*)$", line)
            if not m:
                break
            attrs[m.group(1)] = m.group(2).strip()
        prod = attrs.get("DW_AT_producer", "")
        if prod.startswith("GNU C") and "-mno-red-zone" not in prod:
            bad.append(f"{attrs.get('DW_AT_name', '?')} was compiled without -mno-red-zone")
    return bad


def code_offenders(disassembly: str) -> list[str]:
    """Functions whose code addresses the red zone (objdump -d output)."""
    bad = []
    for block in re.split(r"\n(?=[0-9a-f]+ <[^>]+>:\n)", disassembly):
        m = re.match(r"[0-9a-f]+ <([^>]+)>:", block)
        if not m:
            continue
        func, body = m.group(1), block
        insns = [l.split("\t", 1)[-1] for l in body.splitlines()[1:] if "\t" in l]
        # lea only computes an address (e.g. of a slot a later push fills)
        if any(BELOW_RSP.search(i) and not i.startswith("lea") for i in insns):
            bad.append(f"{func} accesses memory below %rsp")
            continue
        frame = any(re.search(r"mov\s+%rsp,%rbp", i) for i in insns)
        moves_sp = any(re.search(r"(sub|add|and|push|lea)\S*\s.*%rsp$", i) or i.startswith(("push", "call"))
                       for i in insns if not re.search(r"push\s+%rbp$", i))
        if frame and not moves_sp and any(BELOW_RBP.search(i) for i in insns):
            bad.append(f"{func} keeps data below %rsp (leaf function with a frame pointer)")
    return bad


def _tool(cmd: list[str], label: str) -> str:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    except FileNotFoundError:
        raise UklError(f"{cmd[0]} is missing, so the red-zone check of {label} cannot run",
                       "install binutils (`make demo` does)") from None
    if res.returncode != 0:
        raise UklError(f"{cmd[0]} cannot read {label}, so its red-zone check cannot run: "
                       f"{res.stderr.strip()[-300:]}", "link ELF objects and archives only")
    return res.stdout


def check_object(path: Path) -> list[str]:
    """All red-zone findings for one object file; a check that cannot run
    is an error, never an empty finding."""
    label = str(path)
    with open(path, "rb") as fh:
        if fh.read(4) != b"\x7fELF":
            raise UklError(f"{label} is not an ELF object", "link ELF objects and archives only")
    found = producer_offenders(_tool(["readelf", "--debug-dump=info", "--dwarf-depth=1", label], label))
    found += code_offenders(_tool(["objdump", "-d", "--no-show-raw-insn", "-M", "att", label], label))
    return [f"{label}: {f}" for f in found]
