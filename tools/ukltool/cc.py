"""ukl-cc: a drop-in C compiler driver for UKL applications (in the spirit
of musl-gcc): `CC=ukl-cc make`, `CC=ukl-cc ./configure && make`.

Target `base` (the default; UKL_TARGET=base):
* compiling (-c, -S, -E) is gcc with the flags of code that runs in the
  kernel image: kernel code model, no red zone, no PIE, the stack
  protector's guard at %fs:0x28, __UKL__ defined, and SYSCALL instructions
  turned into calls of the UKL entry (libc/syscall-as-call.s);
* linking writes OUTPUT as an ordinary static executable of the same
  objects (against the host's glibc 2.36, so that configure's test
  programs and `make check` run on the host) and embeds in it, as section
  .ukl_app, the application pre-linked with our glibc port for the kernel:
  the object `ukl build` links into vmlinux (see app.link_ukl).

Target `linux` (UKL_TARGET=linux): gcc, with -static at link time: the same
program as an ordinary process, the baseline.

With UKL_CC_LOG=FILE every program linked is appended to FILE (used by
`ukl build DIR` to find what a Makefile built)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ukltool import app, libc, ui
from ukltool.errors import UklError
from ukltool.proc import run

TARGETS = ("base", "linux")
SECTION = ".ukl_app"
HOST_ENTRY = libc.LIBC_DIR / "host-entry.s"
COMPILE_ONLY = {"-c", "-S", "-E", "-M", "-MM"}
SOURCE_SUFFIXES = (".c", ".s", ".S", ".i")
# Options that take the next argument as their value.
WITH_VALUE = {"-o", "-I", "-D", "-U", "-include", "-imacros", "-isystem", "-iquote", "-idirafter",
              "-MF", "-MT", "-MQ", "-x", "-L", "-l", "-Xlinker", "-Xassembler", "-Xpreprocessor",
              "-u", "-T", "-z", "-e", "--param", "-aux-info"}


def compile_flags(args: list[str]) -> list[str]:
    """The flags of code that runs in the kernel image (before the user's)."""
    pic = any(a in ("-fPIC", "-fpic", "-fPIE", "-fpie") for a in args)
    return [*([] if pic else ["-fno-pie", "-mcmodel=kernel"]), "-mno-red-zone",
            "-mstack-protector-guard-reg=fs", "-D__UKL__", f"-Wa,{libc.SYSCALL_MACRO}"]


@dataclass
class LinkLine:
    """A gcc link command split into what each of our two links needs."""
    output: str = "a.out"
    sources: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)      # objects and archives, in order
    libs: list[str] = field(default_factory=list)        # -lNAME, in order (NAME)
    libdirs: list[str] = field(default_factory=list)
    compile_opts: list[str] = field(default_factory=list)  # what compiling sources needs
    order: list[tuple[str, str]] = field(default_factory=list)  # ("src"|"in"|"lib", value)


def parse_link(args: list[str]) -> LinkLine:
    ln = LinkLine()
    i = 0
    while i < len(args):
        a = args[i]
        val = None
        if a in WITH_VALUE and i + 1 < len(args):
            val = args[i + 1]
            i += 1
        if a == "-o":
            ln.output = val or ln.output
        elif a == "-l" or (a.startswith("-l") and len(a) > 2):
            name = val if a == "-l" else a[2:]
            ln.libs.append(name)
            ln.order.append(("lib", name))
        elif a == "-L" or (a.startswith("-L") and len(a) > 2):
            ln.libdirs.append(val if a == "-L" else a[2:])
        elif a.startswith("-Wl,") or a in ("-Xlinker", "-static", "-pie", "-no-pie", "-rdynamic",
                                           "-s", "-nostartfiles", "-static-libgcc") or a.startswith("-B"):
            pass  # the host link gets them from the original command line
        elif not a.startswith("-") and a.endswith(SOURCE_SUFFIXES):
            ln.sources.append(a)
            ln.order.append(("src", a))
        elif not a.startswith("-") and val is None:
            ln.inputs.append(a)
            ln.order.append(("in", a))
        else:
            ln.compile_opts.append(a)
            if val is not None:
                ln.compile_opts.append(val)
        i += 1
    return ln


def _gcc() -> str:
    return os.environ.get("UKL_HOST_CC", "gcc")


def _log_program(output: str) -> None:
    log = os.environ.get("UKL_CC_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(str(Path(output).resolve()) + "\n")


def _exec(cmd: list[str]) -> int:
    return subprocess.run(cmd).returncode


def _find_archive(name: str, ln: LinkLine, lc: libc.Libc) -> Path:
    for d in ln.libdirs:
        p = Path(d) / f"lib{name}.a"
        if p.is_file():
            return p
    p = lc.archive(name)
    if p is not None:
        return p
    raise UklError(f"library -l{name} not found for UKL",
                   f"build lib{name}.a with CC=ukl-cc and pass its directory with -L; shared libraries "
                   "cannot be linked into the kernel image")


def link_base(args: list[str]) -> int:
    ln = parse_link(args)
    if not ln.sources and not ln.inputs:
        raise UklError("ukl-cc: no input files", "usage: ukl-cc [options] FILE... [-o OUTPUT]")
    lc = libc.build()
    with tempfile.TemporaryDirectory(prefix="ukl-cc-") as td:
        work = Path(td)
        objs: dict[str, Path] = {}
        for n, src in enumerate(ln.sources):
            obj = work / f"{n}-{Path(src).stem}.o"
            rc = _exec([_gcc(), *compile_flags(ln.compile_opts), *ln.compile_opts, "-c", src, "-o", str(obj)])
            if rc:
                return rc
            objs[src] = obj
        ordered_inputs: list[Path] = []
        extra: list[Path] = []
        for kind, v in ln.order:
            if kind == "src":
                ordered_inputs.append(objs[v])
            elif kind == "in":
                ordered_inputs.append(Path(v))
            else:
                p = _find_archive(v, ln, lc)
                if p not in extra:
                    extra.append(p)
        obj = work / "app.ukl.o"
        app.link_ukl(ordered_inputs, extra, obj, work, lc)
        # The host-runnable twin: the same objects, the host's static glibc.
        host = [a for a in args if a not in ln.sources]
        host += [str(objs[s]) for s in ln.sources]
        host_out = work / "host.out"
        hidx = [i for i, a in enumerate(host) if a == "-o"]
        for i in reversed(hidx):
            del host[i:i + 2]
        res = subprocess.run([_gcc(), "-static", "-no-pie", *host, str(HOST_ENTRY), "-o", str(host_out)])
        if res.returncode:
            raise UklError("linking the host-runnable twin failed (see above)",
                           "the UKL object links, but the same objects do not link as a static program")
        run(["objcopy", f"--add-section={SECTION}={obj}", f"--set-section-flags={SECTION}=noload,readonly",
             host_out], what="embedding the UKL object")
        tmp = Path(ln.output + ".ukl-partial")
        shutil.move(host_out, tmp)
        tmp.chmod(0o755)
        os.replace(tmp, ln.output)
    _log_program(ln.output)
    return 0


def extract(program: Path, out: Path) -> None:
    """The UKL object embedded in a program linked by ukl-cc."""
    res = subprocess.run(["objcopy", "-O", "binary", f"--only-section={SECTION}",
                          f"--set-section-flags={SECTION}=alloc", str(program), str(out)],
                         capture_output=True, text=True)
    if res.returncode or not out.is_file() or out.stat().st_size == 0 or out.read_bytes()[:4] != b"\x7fELF":
        out.unlink(missing_ok=True)
        raise UklError(f"{program} was not linked by ukl-cc for UKL (no {SECTION} section)",
                       "build it with CC=ukl-cc (UKL_TARGET=base)")


def main(argv: list[str]) -> int:
    target = os.environ.get("UKL_TARGET", "base")
    if argv and argv[0].startswith("--ukl-target="):
        target = argv.pop(0).split("=", 1)[1]
    if target not in TARGETS:
        ui.err.print(f"ukl-cc: error: unknown target '{target}' (UKL_TARGET): choose base or linux", markup=False)
        return 2
    if not argv or argv in (["--help"], ["-h"]):
        print(__doc__)
        return 0 if argv else 2
    compile_only = any(a in COMPILE_ONLY for a in argv) or any(a in ("-v", "--version", "-dumpversion",
                                                                   "-dumpmachine") or a.startswith("-print-")
                                                               for a in argv)
    if target == "linux":
        rc = _exec([_gcc(), *argv] if compile_only or "-shared" in argv else [_gcc(), "-static", *argv])
        if rc == 0 and not compile_only and "-shared" not in argv:
            _log_program(parse_link(argv).output)
        return rc
    if compile_only:
        return _exec([_gcc(), *compile_flags(argv), *argv])
    if "-shared" in argv:
        ui.err.print("ukl-cc: error: shared libraries cannot be linked into the kernel image; "
                     "build a static archive (ar rcs libX.a ...)", markup=False)
        return 2
    try:
        return link_base(argv)
    except UklError as e:
        ui.err.print(f"ukl-cc: error: {e.message}", markup=False)
        if e.hint:
            ui.err.print(f"  hint: {e.hint}", markup=False)
        return e.code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
