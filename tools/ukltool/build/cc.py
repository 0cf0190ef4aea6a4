"""ukl-cc and ukl-c++: drop-in C and C++ compiler drivers for UKL
applications (in the spirit of musl-gcc): `CC=ukl-cc CXX=ukl-c++ make`,
`./configure CC=ukl-cc CXX=ukl-c++ && make`. ukl-cc is gcc, ukl-c++ is g++
(which also links libstdc++: Debian's static, position-independent
libstdc++.a, whose code is checked like the rest, and whose dynamic TLS
accesses the kernel link relaxes to the static model).

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
program as an ordinary process, the baseline. <ukl.h> is on its include
path too: its calls fall back to ordinary system calls or do nothing.

The link writes OUTPUT as ld does (see write_output): a new file replaces
it atomically, a device or FIFO (/dev/null, a pipe) is written into, and a
link that fails removes the file ld would have replaced, as gcc does.

With UKL_CC_LOG=FILE every program linked is appended to FILE (used by
`ukl build DIR` to find what a Makefile built)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from ukltool.build import app, flags, gccargs
from ukltool.glibc import libc
from ukltool.util import ui
from ukltool.util.errors import UklError
from ukltool.util.proc import capture, host_cc, host_cxx, passthrough, run

TARGETS = ("base", "linux")
DRIVERS = ("cc", "c++")
SECTION = ".ukl_app"
HOST_ENTRY = libc.LIBC_DIR / "host-entry.s"
ELF_MAGIC = b"\x7fELF"
AR_MAGIC = b"!<arch>\n"


def compile_flags(args: list[str]) -> list[str]:
    """The flags of code that runs in the kernel image (before the user's):
    glibc's (libc/ukl-gcc adds the same) and where <ukl.h> is."""
    return [*flags.ring0(args), *flags.RUNTIME_INCLUDE]


def _log_program(output: str) -> None:
    log = os.environ.get("UKL_CC_LOG")
    if log and os.path.isfile(output):  # not /dev/null: a probe, not a program
        with open(log, "a") as fh:
            fh.write(str(Path(output).resolve()) + "\n")


def compiler(driver: str) -> str:
    return host_cxx() if driver == "c++" else host_cc()


def refusal(cmd: gccargs.Command) -> UklError | None:
    """Why CMD cannot be built for the kernel image, if it cannot."""
    for inp in cmd.inputs:
        if inp.kind == "source" and inp.lang not in (*gccargs.C_LANGS, *gccargs.CXX_LANGS):
            return UklError(f"{inp.value}: '{inp.lang}' is not supported for UKL applications",
                            "UKL applications are C, C++ and assembly")
    if cmd.mode == "shared":
        return UklError("shared libraries cannot be linked into the kernel image",
                        "build a static archive instead (ar rcs libX.a ...)")
    if cmd.mode == "link":
        for inp in cmd.inputs:
            if inp.kind == "shared":
                return UklError(f"{inp.value}: a shared library cannot be linked into the kernel image",
                                "link its static archive (libX.a) instead")
    return None


def find_archive(name: str, libdirs: list[str], lc: libc.Libc) -> Path:
    """-lNAME for the kernel image: our glibc's libraries first, then
    libNAME.a in the -L directories, then the system's static libraries."""
    ours = lc.archive(name)
    if ours is not None:
        return ours
    for d in libdirs:
        p = Path(d) / f"lib{name}.a"
        if p.is_file():
            return p
    system = capture([host_cc(), f"-print-file-name=lib{name}.a"])
    found = Path(system.stdout.strip())
    if system.returncode == 0 and found.is_absolute() and found.is_file():
        return found
    raise UklError(f"library -l{name} not found for UKL (no lib{name}.a in the -L directories or the system's)",
                   f"build lib{name}.a with CC=ukl-cc and pass its directory with -L; shared libraries "
                   "cannot be linked into the kernel image")


def _check_file(path: str, magic: bytes, what: str) -> Path:
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(magic))
    except OSError as e:
        raise UklError(f"{path}: {e.strerror}", "check the path") from None
    if head != magic:
        raise UklError(f"{path}: not {what}", "UKL links ELF objects and ar archives only")
    return p


def _replaced(output: str) -> bool:
    """Whether ld makes a new file at OUTPUT (bfd_open_file unlinks it,
    then creates it): where nothing is, a regular file, or a symbolic link
    to a non-empty regular file. Anything else ld opens and writes into: a
    device, a FIFO, a socket or a directory (both refused by open), or a
    link to one of them, to an empty regular file (such as /dev/stdout
    redirected to a new file) or to nothing (its target is created)."""
    try:
        st = os.lstat(output)
    except OSError:
        return True
    if stat.S_ISREG(st.st_mode):
        return True
    if not stat.S_ISLNK(st.st_mode):
        return False
    try:
        target = os.stat(output)
    except OSError:
        return False
    return stat.S_ISREG(target.st_mode) and target.st_size > 0


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _replace_with(program: Path, output: str) -> None:
    """OUTPUT atomically replaced by a copy of PROGRAM, mode 0777 less the
    umask as ld creates it; nothing is left behind on failure."""
    out = Path(output)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".ukl-partial", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as dst, open(program, "rb") as src:
            shutil.copyfileobj(src, dst)
            os.fchmod(dst.fileno(), 0o777 & ~_umask())
        os.replace(tmp, output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_into(program: Path, output: str) -> None:
    """PROGRAM written into what OUTPUT names (a device, a FIFO, the file a
    link points to), which stays what it is."""
    with open(output, "wb") as dst, open(program, "rb") as src:
        shutil.copyfileobj(src, dst)
        st = os.fstat(dst.fileno())
        if stat.S_ISREG(st.st_mode):  # made executable, as bfd_close does
            os.fchmod(dst.fileno(), (st.st_mode | (0o111 & ~_umask())) & 0o777)


def write_output(program: Path, output: str) -> None:
    """Write the linked PROGRAM to OUTPUT where ld would write it (see
    _replaced): never replacing a device, a FIFO or a socket."""
    try:
        if _replaced(output):
            _replace_with(program, output)
        else:
            _write_into(program, output)
    except OSError as e:
        raise UklError(f"cannot write output file {output}: {e.strerror}",
                       "check the -o path: an existing file, device or FIFO, or a new file in a directory") from None


def remove_failed(output: str) -> None:
    """What a failed link leaves at OUTPUT, as gcc: ld had replaced (see
    _replaced) an existing output with the file it was writing and removes
    that; what it writes into (a device, a FIFO) stays as it was."""
    if _replaced(output):
        with contextlib.suppress(OSError):
            os.unlink(output)


def link_base(cmd: gccargs.Command, driver: str = "cc") -> int:
    if not cmd.inputs or not any(i.kind != "lib" for i in cmd.inputs):
        raise UklError("no input files", f"usage: ukl-{driver} [options] FILE... [-o OUTPUT]")
    output = cmd.output or "a.out"
    lc = libc.build()
    with tempfile.TemporaryDirectory(prefix="ukl-cc-") as td:
        work = Path(td)
        compiled: dict[int, str] = {}
        for n, src in enumerate(cmd.sources):
            obj = work / f"{n}-{Path(src.value).stem}.o"
            opts = flags.without_pipe(cmd.compile_options)
            rc = passthrough([compiler(driver), *compile_flags(opts), *opts,
                        "-x", src.lang, src.value, "-x", "none", "-c", "-o", str(obj)])
            if rc:
                return rc  # as gcc: a failed compile leaves the output as it was
            compiled[src.index] = str(obj)
        try:
            write_output(_link(cmd, driver, compiled, work, lc), output)
        except Exception:
            remove_failed(output)
            raise
    _log_program(output)
    return 0


def _link(cmd: gccargs.Command, driver: str, compiled: dict[int, str], work: Path, lc: libc.Libc) -> Path:
    """The linked program in WORK: the host-runnable executable with the
    UKL object embedded."""
    objects: list[Path] = []
    archives: list[Path] = []
    for inp in cmd.inputs:
        if inp.kind == "source":
            objects.append(Path(compiled[inp.index]))
        elif inp.kind == "object":
            objects.append(_check_file(inp.value, ELF_MAGIC, "an ELF object"))
        elif inp.kind == "archive":
            archives.append(_check_file(inp.value, AR_MAGIC, "an ar archive"))
        else:
            p = find_archive(inp.value, cmd.libdirs, lc)
            if p not in archives:
                archives.append(p)
    if driver == "c++" and "-nostdlib++" not in cmd.args and "-nostdlib" not in cmd.args:
        archives.append(app.cxx_runtime())
    obj = work / "app.ukl.o"
    app.link_ukl(objects, archives, obj, work, lc)
    # The host-runnable twin: the same command line, each source
    # replaced in place by its object, against the host's static glibc.
    host_out = work / "host.out"
    if passthrough([compiler(driver), "-static", "-no-pie", str(HOST_ENTRY), *cmd.link_args(compiled),
                    "-o", str(host_out)]):
        raise UklError("linking the host-runnable twin failed (see above)",
                       "the UKL object links, but the same objects do not link as a static program")
    run(["objcopy", f"--add-section={SECTION}={obj}", f"--set-section-flags={SECTION}=noload,readonly",
         host_out], what="embedding the UKL object")
    return host_out


def extract(program: Path, out: Path) -> None:
    """The UKL object embedded in a program linked by ukl-cc."""
    res = capture(["objcopy", "-O", "binary", f"--only-section={SECTION}",
                   f"--set-section-flags={SECTION}=alloc", program, out])
    if res.returncode or not out.is_file() or out.stat().st_size == 0 or out.read_bytes()[:4] != b"\x7fELF":
        out.unlink(missing_ok=True)
        raise UklError(f"{program} was not linked by ukl-cc for UKL (no {SECTION} section)",
                       "build it with CC=ukl-cc (UKL_TARGET=base)")


def main(argv: list[str]) -> int:
    target = os.environ.get("UKL_TARGET", "base")
    driver = "cc"
    if argv and argv[0].startswith("--ukl-driver="):
        driver = argv.pop(0).split("=", 1)[1]
        if driver not in DRIVERS:
            ui.err.print(f"ukl-cc: error: unknown driver '{driver}': choose cc or c++", markup=False)
            return 2
    if argv and argv[0].startswith("--ukl-target="):
        target = argv.pop(0).split("=", 1)[1]
    if target not in TARGETS:
        ui.err.print(f"ukl-cc: error: unknown target '{target}' (UKL_TARGET): choose base or linux", markup=False)
        return 2
    if not argv or argv in (["--help"], ["-h"]):
        print(__doc__)
        return 0 if argv else 2
    try:
        cmd = gccargs.parse(argv)
        cc = compiler(driver)
        if cmd.mode == "query":
            return passthrough([cc, *cmd.args])
        if target == "linux":
            if cmd.mode != "link":    # <ukl.h> compiles for linux too (its calls fall back)
                return passthrough([cc, *flags.RUNTIME_INCLUDE, *cmd.args])
            rc = passthrough([cc, "-static", *flags.RUNTIME_INCLUDE, *cmd.args])
            if rc == 0:
                _log_program(cmd.output or "a.out")
            return rc
        bad = refusal(cmd)
        if bad is not None:
            raise bad
        if cmd.mode != "link":
            args = flags.without_pipe(cmd.args)
            return passthrough([cc, *compile_flags(args), *args])
        return link_base(cmd, driver)
    except UklError as e:
        ui.err.print(f"ukl-{driver}: error: {e.message}", markup=False)
        if e.hint:
            ui.err.print(f"  hint: {e.hint}", markup=False)
        return e.code


def console_main() -> int:
    """The `ukl-cc` console script of an installed ukltool."""
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(console_main())
