"""The system calls a static program can make, read from its machine code.

A recorded run shows only what the run happened to execute. The static
binary holds the rest of the evidence: glibc's wrapper for each call is
linked into it only if the program can call it, and each wrapper loads
the call's number into %eax right before its `syscall` instruction (or
into %edi before a call of glibc's syscall() function). So a `syscall`
with a constant number within a few instructions before it is a call the
program can make. The arguments that select a kernel option (a clock id,
a socket family, fcntl's command) are constants at the call sites of the C library's
functions in most programs; where they are not, specialize.py is
conservative.

Sites whose number is not a constant nearby (a number passed through a
register from further away) are counted as unresolved; specialize.md
reports them."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ukltool.source import sources
from ukltool.util.errors import UklError
from ukltool.util.proc import run

LOOKBACK = 12  # instructions before a `syscall` or a call searched for the number
INSN = re.compile(r"^\s*[0-9a-f]+:\s+(?P<op>[a-z][a-z0-9.]*)\s*(?P<args>.*?)\s*$")
FUNC = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")
CALL_TARGET = re.compile(r"^(?P<addr>[0-9a-f]+) <[^>]+>$")
LOAD = re.compile(r"^\$0x(?P<imm>[0-9a-f]+),%(?P<reg>[a-z0-9]+)$")
ZERO = re.compile(r"^%(?P<reg>[a-z0-9]+),%(?P=reg)$")
IMPLICIT_WRITERS = frozenset(("cltq", "cqto", "cltd", "cwtl", "rdtsc", "rdtscp", "cpuid", "mul", "div", "imul", "idiv",
                              "xchg", "cmpxchg", "lods", "in", "rdpid"))
PREFIXES = frozenset(("bnd", "notrack", "rep", "repz", "repnz", "repe", "repne", "lock", "data16", "cs", "ds"))
# registers each number may be loaded into: the syscall's (%eax), a
# function's first or second argument (%edi, %esi)
EAX, EDI, ESI = ("eax", "rax"), ("edi", "rdi"), ("esi", "rsi")
# the C library's functions whose argument that selects a kernel option is
# looked for at each call, and the register it is passed in, by any of
# their names (__socket, ___timer_create, __libc_fcntl64: the name without
# leading underscores, then without a "libc_" prefix)
ARG_FUNCTIONS = {"syscall": EDI, "socket": EDI, "socketpair": EDI, "clock_gettime": EDI, "clock_getres": EDI,
                 "clock_nanosleep": EDI, "timer_create": EDI,
                 "fcntl": ESI, "fcntl64": ESI}  # fcntl's command: record locks, leases, dnotify, seals
ALIASES = {"fcntl64": "fcntl"}
# the system call each of ARG_FUNCTIONS makes (x86-64), for a stripped
# program, whose calls of them cannot be found: where its code makes one of
# these calls, the argument counts as computed (every clock, family, command)
ARG_SYSCALLS = {"socket": 41, "socketpair": 53, "fcntl": 72, "timer_create": 222, "clock_gettime": 228,
                "clock_getres": 229, "clock_nanosleep": 230}


@dataclass
class BinaryUse:
    """What the program's code can ask of the kernel."""
    syscalls: Counter[int] = field(default_factory=Counter)        # number -> sites
    unresolved: int = 0                                             # `syscall` sites without a nearby number
    call_args: dict[str, Counter[int | None]] = field(default_factory=dict)  # function -> its selecting argument
    # (ARG_FUNCTIONS; None: a call where it is not a constant nearby)


def _loaded(window: list[tuple[str, str]], regs: tuple[str, ...]) -> int | None:
    """The constant last loaded into one of REGS in WINDOW (the
    instructions before a site, oldest first); None if it is not one."""
    for op, args in reversed(window):
        if op.startswith(("call", "jmp", "ret", "syscall")) or op.startswith("j"):
            return None  # another block: the number is not this site's
        m = LOAD.match(args)
        if m and m.group("reg") in regs and op.startswith("mov"):
            return int(m.group("imm"), 16)
        z = ZERO.match(args)
        if z and z.group("reg") in regs and op.startswith("xor"):
            return 0
        if re.search(r"(^|,)%(" + "|".join(regs) + r")$", args) or op in IMPLICIT_WRITERS:
            return None  # written some other way (pop %rax, cltq, ...)
    return None


def arg_functions(exe: Path) -> dict[int, str] | None:
    """The addresses of ARG_FUNCTIONS in EXE, from its symbol table; None
    for a stripped program, which has none."""
    out: dict[int, str] = {}
    try:
        with open(exe, "rb") as fh:
            symtab = ELFFile(fh).get_section_by_name(".symtab")
            if not isinstance(symtab, SymbolTableSection):
                return None
            for sym in symtab.iter_symbols():
                name = sym.name.lstrip("_")
                name = name[len("libc_"):] if name.startswith("libc_") else name
                if name in ARG_FUNCTIONS and sym["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC"):
                    out[sym["st_value"]] = ALIASES.get(name, name)
    except (OSError, ELFError) as e:
        raise UklError(f"cannot read {exe}: {e}", "rebuild the application") from None
    return out


def analyze(disassembly: str, functions: dict[int, str] | None = None) -> BinaryUse:
    """The system calls in objdump -d's AT&T output; FUNCTIONS: the
    addresses of ARG_FUNCTIONS (arg_functions)."""
    functions = functions or {}
    use = BinaryUse()
    window: list[tuple[str, str]] = []
    for line in disassembly.splitlines():
        if FUNC.match(line):
            window = []
            continue
        m = INSN.match(line)
        if not m:
            continue
        op, args = m.group("op"), m.group("args").split("#", 1)[0].strip()
        while op in PREFIXES and args:  # repz ret, bnd jmp, notrack call, lock ...
            op, _, args = args.partition(" ")
            args = args.strip()
        if op == "syscall":
            n = _loaded(window, EAX)
            if n is None:
                use.unresolved += 1
            else:
                use.syscalls[n] += 1
        elif op.startswith(("call", "jmp")):
            t = CALL_TARGET.match(args)
            name = functions.get(int(t.group("addr"), 16)) if t else None
            if name is not None:
                arg = _loaded(window, ARG_FUNCTIONS[name])
                use.call_args.setdefault(name, Counter())[arg] += 1
                if name == "syscall" and arg is not None:
                    use.syscalls[arg] += 1
        window.append((op, args))
        del window[:-LOOKBACK]
    return use


def disassemble(exe: Path) -> str:
    return run(["objdump", "-d", "--no-show-raw-insn", "-M", "att", str(exe)], what=f"disassembling {exe.name}")


def of_program(exe: Path) -> BinaryUse:
    functions = arg_functions(exe)
    use = analyze(disassemble(exe), functions)
    if functions is None:
        computed_arguments(use)
    return use


def computed_arguments(use: BinaryUse) -> None:
    """For a stripped program: each of ARG_FUNCTIONS whose system call its
    code makes is taken to be called with a computed argument."""
    for name, number in ARG_SYSCALLS.items():
        if use.syscalls.get(number):
            use.call_args.setdefault(name, Counter())[None] += use.syscalls[number]


def syscall_names(table: Path | None = None) -> dict[int, str]:
    """x86-64's system call numbers and names (the 64-bit and common ABI
    of the kernel's syscall_64.tbl); UKL's own calls are syscall_0xN."""
    if table is None:
        _, tree = sources.linux_tree()
        table = tree / "arch" / "x86" / "entry" / "syscalls" / "syscall_64.tbl"
    try:
        text = table.read_text()
    except OSError as e:
        raise UklError(f"cannot read {table}: {e.strerror}", "unpack the kernel's source: ./ukl sources") from None
    names = {}
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[1] in ("common", "64"):
            names[int(parts[0])] = parts[2]
    return names


def name_of(n: int, names: dict[int, str]) -> str:
    return names.get(n, f"syscall_{n:#x}")
