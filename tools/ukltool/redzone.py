"""Refusing objects that use the x86-64 red zone.

In ring 0 an interrupt pushes its frame on the current stack, so data a
leaf function keeps below %rsp (the red zone) is silently overwritten.
Every object linked into a UKL application must be built with
-mno-red-zone. Two checks, either of which names the object:

* the DWARF producer string of GCC-compiled units (gcc records its options
  with -g) must contain -mno-red-zone;
* the code must not address memory below %rsp, nor, in a leaf function
  that never moves %rsp after setting up %rbp, below %rbp.
"""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

BELOW_RSP = re.compile(r"-0x[0-9a-f]+\(%rsp\)")
BELOW_RBP = re.compile(r"-0x[0-9a-f]+\(%rbp\)")


def producer_offenders(data: bytes) -> list[str]:
    """Compilation units built by GCC without -mno-red-zone."""
    try:
        elf = ELFFile(io.BytesIO(data))
        if not elf.has_dwarf_info():
            return []
        dwarf = elf.get_dwarf_info()
        bad = []
        for cu in dwarf.iter_CUs():
            top = cu.get_top_DIE()
            prod = top.attributes.get("DW_AT_producer")
            name = top.attributes.get("DW_AT_name")
            if prod is None:
                continue
            text = prod.value.decode(errors="replace") if isinstance(prod.value, bytes) else str(prod.value)
            if text.startswith("GNU C") and "-mno-red-zone" not in text:
                cu_name = name.value.decode(errors="replace") if name and isinstance(name.value, bytes) else "?"
                bad.append(f"{cu_name} was compiled without -mno-red-zone")
        return bad
    except (ELFError, ValueError, KeyError):
        return []


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


def check_object(path: Path, member: str | None = None, data: bytes | None = None) -> list[str]:
    """All red-zone findings for one object file (or archive member)."""
    data = path.read_bytes() if data is None else data
    label = f"{path}({member})" if member else str(path)
    found = producer_offenders(data)
    if member is None:
        dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-M", "att", str(path)],
                             capture_output=True, text=True).stdout
        found += code_offenders(dis)
    return [f"{label}: {f}" for f in found]
