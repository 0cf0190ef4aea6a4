"""Compiling the application for a configuration."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ukltool import redzone
from ukltool.errors import UklError
from ukltool.paths import GUEST_DIR, KERNEL_DIR, cache_dir
from ukltool.proc import need_tool, run

CFLAGS = ["-O2", "-g", "-Wall"]


def check_sources(sources: list[Path]) -> list[Path]:
    out = []
    for s in sources:
        if not s.exists():
            raise UklError(f"source file {s} does not exist", "name one or more C files")
        if s.is_dir():
            raise UklError(f"{s} is a directory; directories with a Makefile are not supported yet",
                           "name the C files instead")
        if s.suffix != ".c":
            raise UklError(f"{s} is not a C file (.c)", "name one or more C files")
        out.append(s.resolve())
    if not out:
        raise UklError("no source files given", "usage: ukl build SOURCE.c... [--config NAME]")
    return out


def default_name(sources: list[Path]) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", sources[0].stem)
    return name or "app"


FREESTANDING = ["-nostdlib", "-ffreestanding", "-fno-stack-protector", "-fno-builtin"]


def build_static(sources: list[Path], out: Path, freestanding: bool = False) -> None:
    """An ordinary static binary (the `linux` baseline): against the host's
    glibc, or without any C library."""
    cc = need_tool("gcc", "gcc")
    libs = [] if freestanding else ["-lpthread"]
    run([cc, *CFLAGS, "-static", *(FREESTANDING if freestanding else []), "-o", out, *sources, *libs],
        what=f"compiling {', '.join(s.name for s in sources)}")


def init_binary() -> Path:
    """guest/init.c, compiled once per content."""
    src = GUEST_DIR / "init.c"
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    out = cache_dir() / "bin" / f"ukl-init-{digest}"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".partial")
        build_static([src], tmp)
        tmp.rename(out)
    return out


# Code that runs in ring 0 inside the kernel image: the kernel's code model,
# no red zone, no PIE. Without a C library (yet) the application is
# freestanding and gets __UKL__ to choose its system call path.
UKL_CFLAGS = ["-mcmodel=kernel", "-mno-red-zone", "-fno-pie", "-fno-pic", "-ffreestanding",
              "-fno-stack-protector", "-fno-asynchronous-unwind-tables", "-fcf-protection=none",
              "-D__UKL__"]
UKL_PREFIX = "ukl_"
# Defined by the kernel's linker script for the application (vmlinux.lds.S)
LINKER_SYMBOLS = {"__rela_iplt_start", "__rela_iplt_end"}


def _symbols(obj: Path) -> tuple[set[str], set[str]]:
    """(defined global symbols, undefined symbols) of a relocatable object."""
    defined, undefined = set(), set()
    with open(obj, "rb") as fh:
        for sec in ELFFile(fh).iter_sections():
            if not isinstance(sec, SymbolTableSection):
                continue
            for sym in sec.iter_symbols():
                if not sym.name or sym["st_info"]["type"] in ("STT_SECTION", "STT_FILE"):
                    continue
                if sym["st_shndx"] == "SHN_UNDEF":
                    undefined.add(sym.name)
                elif sym["st_info"]["bind"] != "STB_LOCAL":
                    defined.add(sym.name)
    return defined, undefined


def build_ukl_object(sources: list[Path], out: Path, workdir: Path, extra: list[str] | None = None) -> None:
    """Compile and pre-link the application for linking into vmlinux.

    The result has only .ukl.* sections, every symbol prefixed with ukl_,
    and refers to nothing but the kernel's ukl_* entry points."""
    cc = need_tool("gcc", "gcc")
    objs = []
    for i, src in enumerate(sources):
        obj = workdir / f"{i}-{src.stem}.o"
        run([cc, *CFLAGS, *UKL_CFLAGS, "-fno-builtin", *(extra or []), "-c", "-o", obj, src],
            what=f"compiling {src.name} for UKL")
        objs.append(obj)
    bad = [f for o in objs for f in redzone.check_object(o)]
    if bad:
        raise UklError("objects that use the red zone cannot run in ring 0:\n  " + "\n  ".join(bad),
                       "compile them with -mno-red-zone")
    prelinked = workdir / "prelinked.o"
    run(["ld", "-r", "-d", "-T", KERNEL_DIR / "ukl-app.lds", "-o", prelinked, *objs],
        what="pre-linking the application")
    defined, undefined = _symbols(prelinked)
    if "_start" not in defined:
        raise UklError("the application defines no _start", "a UKL application needs an entry point _start")
    foreign = sorted(u for u in undefined if not u.startswith(UKL_PREFIX) and u not in LINKER_SYMBOLS)
    if foreign:
        raise UklError("the application refers to symbols it does not define: " + ", ".join(foreign),
                       "define them or link the library that does; only the kernel's ukl_* entry points "
                       "and " + ", ".join(sorted(LINKER_SYMBOLS)) + " are provided")
    prefixed = workdir / "prefixed.o"
    run(["objcopy", f"--prefix-symbols={UKL_PREFIX}", prelinked, prefixed],
        what="prefixing the application's symbols")
    # The kernel's entry points keep their names.
    run(["objcopy", *(f"--redefine-sym={UKL_PREFIX}{u}={u}" for u in sorted(undefined)), prefixed, out],
        what="resolving the application's kernel references")
