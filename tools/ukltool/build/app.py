"""Compiling the application for a configuration."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ukltool.build import flags, redzone
from ukltool.glibc import libc
from ukltool.util.errors import UklError
from ukltool.util.paths import GUEST_DIR, KERNEL_DIR, cache_dir
from ukltool.util.proc import host_cc, host_cxx, run


def check_sources(sources: list[Path]) -> list[Path]:
    out = []
    for s in sources:
        if not s.exists():
            raise UklError(f"source file {s} does not exist", "name one or more C files")
        if s.is_dir():
            raise UklError(f"{s} is a directory; directories with a Makefile are not supported yet",
                           "name the C files instead")
        if s.suffix != ".c" and s.suffix not in CXX_SUFFIXES:
            raise UklError(f"{s} is neither a C file (.c) nor a C++ file ({', '.join(CXX_SUFFIXES)})",
                           "name C or C++ files, or a directory with a build system")
        out.append(s.resolve())
    if not out:
        raise UklError("no source files given", "usage: ukl build SOURCE.c... [--config NAME]")
    return out


CXX_SUFFIXES = (".cc", ".cpp", ".cxx", ".C")


def is_cxx(sources: list[Path]) -> bool:
    """A program with C++ sources is compiled and linked as g++ does."""
    return any(s.suffix in CXX_SUFFIXES for s in sources)


def default_name(sources: list[Path]) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", sources[0].stem)
    return name or "app"


def build_static(sources: list[Path], out: Path, freestanding: bool = False,
                 extra: list[str] | None = None) -> None:
    """An ordinary static binary (the `linux` baseline): against the host's
    glibc, or without any C library."""
    cc = host_cxx() if is_cxx(sources) else host_cc()
    cflags = [*flags.CFLAGS, *flags.FREESTANDING] if freestanding else flags.LIBC_CFLAGS
    run([cc, *cflags, *(extra or []), "-static", "-o", out, *sources, *([] if freestanding else flags.LIBS)],
        what=f"compiling {', '.join(s.name for s in sources)}")


# init's code lies far above an ordinary static program's (0x400000), so
# that no address of the application is also one of init's: `ukl bench boot`
# finds the application's main() by its address.
INIT_LINK_FLAGS = ["-Wl,-Ttext-segment=0x10000000"]


def init_binary() -> Path:
    """guest/init.c, compiled once per content (and link flags)."""
    src = GUEST_DIR / "init.c"
    digest = hashlib.sha256(src.read_bytes() + " ".join(INIT_LINK_FLAGS).encode()).hexdigest()[:12]
    out = cache_dir() / "bin" / f"ukl-init-{digest}"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".partial")
        build_static([src], tmp, extra=INIT_LINK_FLAGS)
        tmp.rename(out)
    return out


UKL_PREFIX = "ukl_"
# Defined by the kernel's linker script for the application (vmlinux.lds.S)
LINKER_SYMBOLS = {"__rela_iplt_start", "__rela_iplt_end"}
# Defined by the final (kernel) link itself: they keep their names.
KEEP_NAMES = {"_GLOBAL_OFFSET_TABLE_", "__tls_get_addr"}
# A reference to the kernel's symbol NAME, for a direct call (ukl_call() in
# runtime/ukl.h): the application declares it with the assembler name
# KERNEL_REF + NAME (UKL_KERNEL_SYMBOL), and it links to NAME itself.
KERNEL_REF = "ukl_kernel."


def _symbols(obj: Path) -> tuple[set[str], set[str], set[str]]:
    """(defined global symbols, undefined symbols, weak undefined symbols) of a relocatable object."""
    defined: set[str] = set()
    undefined: set[str] = set()
    weak: set[str] = set()
    with open(obj, "rb") as fh:
        for sec in ELFFile(fh).iter_sections():
            if not isinstance(sec, SymbolTableSection):
                continue
            for sym in sec.iter_symbols():
                if not sym.name or sym["st_info"]["type"] in ("STT_SECTION", "STT_FILE"):
                    continue
                if sym["st_shndx"] == "SHN_UNDEF":
                    (weak if sym["st_info"]["bind"] == "STB_WEAK" else undefined).add(sym.name)
                elif sym["st_info"]["bind"] != "STB_LOCAL":
                    defined.add(sym.name)
    return defined, undefined, weak - undefined


def raw_syscalls(disassembly: str) -> list[str]:
    """Functions that still execute SYSCALL, SYSENTER or INT 0x80 (objdump -d
    output): in ring 0 these would enter the kernel as if from user space."""
    bad, func = [], "?"
    for line in disassembly.splitlines():
        if line.endswith(">:"):
            func = line.split("<", 1)[-1][:-2]
        elif "\t" in line and line.split("\t")[-1].split(" ")[0] in ("syscall", "sysenter", "int"):
            insn = line.split("\t")[-1].strip()
            if insn.startswith("int") and "0x80" not in insn:
                continue
            bad.append(f"{func}: {insn}")
    return bad


def build_ukl_object(sources: list[Path], out: Path, workdir: Path, extra: list[str] | None = None) -> None:
    """Compile a freestanding application (no C library) and pre-link it
    for linking into vmlinux (see link_ukl)."""
    cc = host_cc()
    objs = []
    for i, src in enumerate(sources):
        obj = workdir / f"{i}-{src.stem}.o"
        run([cc, *flags.CFLAGS, *flags.FREESTANDING_RING0, "-fno-builtin", *(extra or []), "-c", "-o", obj, src],
            what=f"compiling {src.name} for UKL")
        objs.append(obj)
    link_ukl(objs, [], out, workdir, None)


def build_libc_object(sources: list[Path], out: Path, workdir: Path, extra: list[str] | None = None) -> None:
    """Compile C or C++ files against our glibc port (as ukl-cc and ukl-c++
    do) and pre-link them (with Debian's libstdc++ for C++)."""
    gcc = host_cxx() if is_cxx(sources) else host_cc()
    lc = libc.build()
    objs = []
    for i, src in enumerate(sources):
        obj = workdir / f"{i}-{src.stem}.o"
        run([gcc, *flags.ring0([]), *flags.LIBC_CFLAGS, *(extra or []), "-c", "-o", obj, src],
            what=f"compiling {src.name} for UKL")
        objs.append(obj)
    link_ukl(objs, [*([cxx_runtime()] if is_cxx(sources) else []), lc.library("m")], out, workdir, lc)


def link_ukl(objs: list[Path], archives: list[Path], out: Path, workdir: Path, lc: libc.Libc | None) -> None:
    """Pre-link the application (objects, then archives, then our glibc if
    LC is given) for linking into vmlinux.

    The result has only .ukl.* sections, every symbol prefixed with ukl_,
    and refers to nothing but the kernel's ukl_* entry points."""
    bad = [f for o in objs for f in redzone.check_object(o)]
    if bad:
        raise UklError("objects that keep data in the red zone across calls cannot run in ring 0, where the "
                       "system call is a call:\n  " + "\n  ".join(bad),
                       "compile them with -mno-red-zone (ukl-cc does)")
    prelinked = workdir / "prelinked.o"
    script = workdir / "ukl-app.lds"
    script.write_text(app_script(objs))
    if lc is None:
        cmd: list[str | Path] = [*objs, *archives]
    else:
        before, after = lc.start_files()
        cmd = [*before, *objs, *lc.support_objects(), "--start-group", *archives, lc.library("m"),
               lc.library("c"), libgcc(), libgcc("eh"), "--end-group", *after]
    combined = workdir / "combined.o"
    # --force-group-allocation: C++'s COMDAT groups (inline functions,
    # template instances, their guard variables) are merged as a final
    # link would, into the .ukl.* sections, not left for the kernel link
    run(["ld", "-r", "-d", "--force-group-allocation", "-T", script, "-o", combined, *cmd],
        what="pre-linking the application")
    run(["ld", "-r", "-T", KERNEL_DIR / "ukl-eh-frame.lds", "-o", prelinked, combined],
        what="placing the application's unwind tables")
    stray = outside_ukl_sections(prelinked)
    if stray:
        raise UklError("the pre-linked application has sections that kernel/ukl-app.lds does not place: "
                       + ", ".join(stray[:10]), "add them to kernel/ukl-app.lds")
    dis = run(["objdump", "-d", "--no-show-raw-insn", "-M", "att", prelinked], what="disassembling the application")
    bad = [f"{prelinked.name}: {f}" for f in redzone.code_offenders(dis)]
    if bad:
        raise UklError("code that keeps data in the red zone across calls cannot run in ring 0, where the "
                       "system call is a call:\n  " + "\n  ".join(bad),
                       "compile it with -mno-red-zone (ukl-cc does)")
    raw = raw_syscalls(dis)
    if raw:
        raise UklError("the application enters the kernel with system call instructions, which do not "
                       "work in ring 0:\n  " + "\n  ".join(raw[:20]),
                       "compile it with ukl-cc, which turns SYSCALL into a call of ukl_entry_SYSCALL_64")
    defined, undefined, weak = _symbols(prelinked)
    if "_start" not in defined:
        raise UklError("the application defines no _start", "a UKL application needs an entry point _start")
    foreign = sorted(u for u in undefined
                     if not u.startswith(UKL_PREFIX) and u not in LINKER_SYMBOLS and u not in KEEP_NAMES)
    if foreign:
        raise UklError("the application refers to symbols it does not define: " + ", ".join(foreign),
                       "define them or link the library that does; only the kernel's ukl_* entry points "
                       "and " + ", ".join(sorted(LINKER_SYMBOLS)) + " are provided")
    prefixed = workdir / "prefixed.o"
    run(["objcopy", f"--prefix-symbols={UKL_PREFIX}", prelinked, prefixed],
        what="prefixing the application's symbols")
    # The kernel's entry points and the final link's symbols keep their
    # names; other weak references stay prefixed and resolve to 0.
    kernel_refs = sorted(u for u in undefined | weak
                         if u in undefined or u.startswith(UKL_PREFIX) or u in LINKER_SYMBOLS | KEEP_NAMES)
    run(["objcopy", *(f"--redefine-sym={UKL_PREFIX}{u}={kernel_name(u)}" for u in kernel_refs), prefixed, out],
        what="resolving the application's kernel references")


def kernel_name(ref: str) -> str:
    """The kernel's name for the application's undefined symbol REF."""
    return ref[len(KERNEL_REF):] if ref.startswith(KERNEL_REF) and len(ref) > len(KERNEL_REF) else ref


def outside_ukl_sections(obj: Path) -> list[str]:
    """Allocated sections of the pre-linked OBJ outside the .ukl.* sections
    that vmlinux.lds.S places in the application's region."""
    with open(obj, "rb") as fh:
        return [sec.name for sec in ELFFile(fh).iter_sections()
                if sec["sh_flags"] & 2 and not sec.name.startswith(".ukl.")]  # SHF_ALLOC


def named_sections(objs: list[Path]) -> list[str]:
    """Sections of the application's objects whose names are C identifiers:
    programs find them through __start_NAME and __stop_NAME."""
    names: set[str] = set()
    for o in objs:
        with open(o, "rb") as fh:
            for sec in ELFFile(fh).iter_sections():
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", sec.name) and sec["sh_flags"] & 2:  # SHF_ALLOC
                    names.add(sec.name)
    return sorted(names)


def app_script(objs: list[Path]) -> str:
    """kernel/ukl-app.lds with __start_/__stop_ symbols for the objects' named sections."""
    text = (KERNEL_DIR / "ukl-app.lds").read_text()
    marker = "\t\t/* @NAMED_SECTIONS@ */\n"
    if marker not in text:
        raise UklError("kernel/ukl-app.lds lacks the @NAMED_SECTIONS@ marker", "restore it from git")
    block = "".join(f"\t\t__start_{n} = .;\n\t\tKEEP(*({n}))\n\t\t__stop_{n} = .;\n"
                    for n in named_sections(objs))
    return text.replace(marker, block)


def cxx_runtime() -> Path:
    """Debian's static libstdc++, which g++ links into every C++ program:
    position-independent (as all of Debian's code is), so it links at the
    kernel's addresses; its code is checked for red-zone use like the rest,
    and the kernel link relaxes its dynamic TLS accesses to the static
    model (__tls_get_addr keeps its name for that)."""
    return Path(run([host_cxx(), "-print-file-name=libstdc++.a"], what="g++ -print-file-name=libstdc++.a").strip())


def libgcc(part: str = "") -> Path:
    """The compiler's support library, or its unwinder (part "eh"); what the
    application uses of them is checked for red-zone code with the rest."""
    name = f"libgcc_{part}.a" if part else "libgcc.a"
    return Path(run([host_cc(), f"-print-file-name={name}"], what=f"gcc -print-file-name={name}").strip())
