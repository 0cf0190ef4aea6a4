"""Refusing code whose red zone is not safe in ring 0.

The x86-64 ABI lets a function keep data in the 128 bytes below %rsp
(the red zone) as long as it calls nothing: only calls and the kernel
write there in user space. In UKL nothing else does either: every
interrupt and exception arrives on an IST stack (the CPU never pushes on
the application's stack), and signal frames skip 128 bytes below the
interrupted %rsp as in user space. What changes is the system call: in
ring 0 it is a call of the UKL entry, which pushes its return address
below %rsp. So a function that keeps data below %rsp and calls anything
(the entry included) is refused; leaf functions that use the red zone,
such as glibc's hand-written x87 routines or code compiled without
-mno-red-zone, are safe, and are accepted. Code we compile still gets
-mno-red-zone (ukltool.build.flags).
"""

from __future__ import annotations

import re
from pathlib import Path

from ukltool.util.errors import UklError
from ukltool.util.proc import capture

BELOW_RSP = re.compile(r"-0x[0-9a-f]+\(%rsp\)")
BELOW_RBP = re.compile(r"-0x[0-9a-f]+\(%rbp\)")
MOVES_SP = re.compile(r"^(?:(?:sub|add|and|lea)\S*\s.*%rsp$|push(?!\S*\s+%rbp$))")


def code_offenders(disassembly: str) -> list[str]:
    """Functions that keep data below %rsp across a call (objdump -d output)."""
    bad = []
    for block in re.split(r"\n(?=[0-9a-f]+ <[^>]+>:\n)", disassembly):
        m = re.match(r"[0-9a-f]+ <([^>]+)>:", block)
        if not m:
            continue
        func = m.group(1)
        insns = [l.split("\t", 1)[-1].strip() for l in block.splitlines()[1:] if "\t" in l]
        if not any(i.startswith("call") for i in insns):
            continue  # a leaf: nothing writes below its %rsp in ring 0 either
        # lea only computes an address (e.g. of a slot a later push fills)
        if any(BELOW_RSP.search(i) and not i.startswith("lea") for i in insns):
            bad.append(f"{func} keeps data below %rsp and makes calls")
            continue
        frame = any(re.search(r"mov\s+%rsp,%rbp", i) for i in insns)
        if frame and not any(MOVES_SP.search(i) for i in insns) and any(BELOW_RBP.search(i) for i in insns):
            bad.append(f"{func} keeps data below %rsp (addressed through %rbp) and makes calls")
    return bad


def check_object(path: Path) -> list[str]:
    """All red-zone findings for one object file; a check that cannot run
    is an error, never an empty finding."""
    label = str(path)
    with open(path, "rb") as fh:
        if fh.read(4) != b"\x7fELF":
            raise UklError(f"{label} is not an ELF object", "link ELF objects and archives only")
    cmd = ["objdump", "-d", "--no-show-raw-insn", "-M", "att", label]
    res = capture(cmd)
    if res.returncode != 0:
        raise UklError(f"objdump cannot read {label}, so its red-zone check cannot run: "
                       f"{res.stderr.strip()[-300:]}", "link ELF objects and archives only")
    return [f"{label}: {f}" for f in code_offenders(res.stdout)]
