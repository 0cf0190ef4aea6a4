"""The compiler flags of code that runs in ring 0 inside the kernel image.

The one place ukl-cc, `ukl build` and the glibc build take them from.
libc/ukl-gcc, a shell script, spells the same flags; tests/unit/test_flags.py
runs it and checks that it agrees with this module."""

from __future__ import annotations

import re

from ukltool.util.paths import REPO

SYSCALL_MACRO = REPO / "libc" / "syscall-as-call.s"

# Position-independent code runs at any address: it keeps its model.
PIC_OPTIONS = ("-fPIC", "-fpic", "-fPIE", "-fpie")
# Otherwise: the kernel's code model (the image is in the top 2 GiB).
NON_PIC = ["-fno-pie", "-mcmodel=kernel"]
# Always: an interrupt in ring 0 pushes its frame below %rsp (no red
# zone); the stack protector's guard is in the thread's TCB at %fs:0x28
# as in user space (the kernel code model would pick %gs); __UKL__ lets
# code choose its system call path; SYSCALL becomes a call of the entry.
RING0 = ["-mno-red-zone", "-mstack-protector-guard-reg=fs", "-D__UKL__"]
# <ukl.h> (ukl_call(): a direct call into the kernel), in both rings
RUNTIME_INCLUDE = ["-isystem", str(REPO / "runtime")]

# Ordinary programs and the applications built by `ukl build FILE.c`
CFLAGS = ["-O2", "-g", "-Wall", *RUNTIME_INCLUDE]
# Programs with a C library are built hardened, as distributions build them.
LIBC_CFLAGS = [*CFLAGS, "-fstack-protector-strong"]
LIBS = ["-lm", "-lpthread"]
# Freestanding programs (no C library), in both rings
FREESTANDING = ["-nostdlib", "-ffreestanding", "-fno-stack-protector", "-fno-builtin"]
# ... and in ring 0, where nothing provides unwind tables or CET
FREESTANDING_RING0 = [*NON_PIC, "-fno-pic", "-mno-red-zone", "-ffreestanding", "-fno-stack-protector",
                      "-fno-asynchronous-unwind-tables", "-fcf-protection=none", "-D__UKL__"]


def is_pic(args: list[str]) -> bool:
    """Do ARGS ask for position-independent code anywhere?"""
    return any(a in PIC_OPTIONS for a in args)


def without_pipe(args: list[str]) -> list[str]:
    """ARGS without -pipe: the SYSCALL macros go to the assembler as a file
    of its own (-Wa,FILE), and an assembler given a file does not read
    the compiler's pipe."""
    return [a for a in args if a != "-pipe"]


def ring0(args: list[str]) -> list[str]:
    """The flags that go before ARGS to compile them for the kernel image."""
    return [*([] if is_pic(args) else NON_PIC), *RING0, f"-Wa,{SYSCALL_MACRO}"]


# What `ukl build --cflags` refuses: flags that would undo the above, or
# choose outputs that ukl chooses itself
REFUSED = re.compile(r"^(-mcmodel=.*|-mred-zone|-f(pic|PIC|pie|PIE)|-shared|-c|-o.*|-S|-E)$")


def refused(user_flags: list[str]) -> list[str]:
    return [f for f in user_flags if REFUSED.match(f)]
