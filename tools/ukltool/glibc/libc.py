"""glibc 2.36 built for the UKL image (docs/design/glibc-port.md).

The pristine glibc tree (sources.py) gets the small patch series in
libc/patches and is built out of tree with libc/ukl-gcc as the compiler,
which compiles every static object for the kernel's address space and turns
SYSCALL instructions into calls of the UKL entry. Only the libraries are
built (`make lib`, then libm.a); glibc's programs are ordinary user
programs and are not needed. The build directory is reused:
after an edit to the port, make rebuilds what changed. A change to the
compiler wrapper or the configure options starts a fresh build."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ukltool.source import series as series_mod
from ukltool.source import sources
from ukltool.util import lock, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, cache_dir
from ukltool.util.proc import run, stream

LIBC_DIR = REPO / "libc"
TREE_LOCK = "glibc"  # held by builds and by anything that rewrites the tree
WRAPPER = LIBC_DIR / "ukl-gcc"
SYSCALL_MACRO = LIBC_DIR / "syscall-as-call.s"
SERIES = series_mod.Series("glibc", LIBC_DIR / "patches", "./ukl libc")

CONFIGURE_ARGS = [
    "--prefix=/usr", "--host=x86_64-linux-gnu", "--build=x86_64-linux-gnu",
    "--disable-werror", "--enable-stack-protector=strong", "--disable-default-pie",
    "--disable-nscd", "--disable-profile", "--disable-timezone-tools", "--disable-crypt",
    "--without-selinux", "--disable-mathvec",
]
CFLAGS = "-O2 -g0"
SUPPORT = sorted((LIBC_DIR / "support").glob("*.c"))
# Start files (built by `make lib`).
START_FILES = ["csu/crt1.o", "csu/crti.o", "csu/crtn.o"]
# -lNAME -> archive in the build directory. Since 2.34 libpthread, librt,
# libdl and libutil are part of libc.a (their archives are empty).
ARCHIVES = {
    "c": "libc.a", "pthread": "libc.a", "rt": "libc.a", "dl": "libc.a", "util": "libc.a",
    "m": "math/libm.a",
}


@dataclass(frozen=True)
class Libc:
    objdir: Path
    version: str

    def start_files(self) -> tuple[list[Path], list[Path]]:
        """(files before the application's objects, files after)."""
        return [self.objdir / "csu/crt1.o", self.objdir / "csu/crti.o"], [self.objdir / "csu/crtn.o"]

    def support_objects(self) -> list[Path]:
        """Our replacements for libgcc members that use the red zone."""
        return [self.objdir / "ukl-support" / f"{src.stem}.o" for src in SUPPORT]

    def archive(self, name: str) -> Path | None:
        """-lNAME, if glibc provides it."""
        rel = ARCHIVES.get(name)
        return self.objdir / rel if rel else None

    def library(self, name: str) -> Path:
        """One of glibc's own archives (c, m)."""
        return self.objdir / ARCHIVES[name]


def _flags_key() -> str:
    h = hashlib.sha256()
    for part in (WRAPPER.read_bytes(), SYSCALL_MACRO.read_bytes(), " ".join(CONFIGURE_ARGS).encode(),
                 CFLAGS.encode()):
        h.update(part + b"\0")
    return h.hexdigest()[:16]


def _progress(st: ui.Step):
    def on_line(line: str) -> None:
        # make prints "make[2]: Entering directory '.../SUBDIR'" and compiler lines
        if "Entering directory" in line:
            st.update("in " + line.rstrip("'").rsplit("/", 1)[-1])
        elif " -o " in line and line.startswith(str(WRAPPER)):
            st.update(line.split(" -o ", 1)[1].split()[0].rsplit("/", 2)[-2:][-1])
    return on_line


def build() -> Libc:
    """Configure (once) and build glibc's libraries for UKL; incremental."""
    with lock.held(TREE_LOCK, "glibc"):
        return _build()


def _build() -> Libc:
    if not WRAPPER.is_file() or not os.access(WRAPPER, os.X_OK):
        raise UklError(f"{WRAPPER} is missing or not executable", "restore it from git")
    src, tree = sources.glibc_tree()
    tree_key = series_mod.sync(SERIES, tree)
    # Applications compile against the host's glibc headers (libc6-dev):
    # they must be those of the same glibc.
    dev = sources.installed_version("libc6-dev")
    if dev != src.version:
        ui.warn(f"the host's libc6-dev is {dev or 'not installed'}, the glibc built for UKL is {src.version}: "
                "applications are compiled against the host's headers")
    flags = _flags_key()
    objdir = cache_dir() / "build" / "glibc"
    stamp = objdir / ".ukl-flags-key"
    done = objdir / ".ukl-built-key"
    want_done = hashlib.sha256("".join([flags, tree_key, *(p.read_text() for p in SUPPORT)]).encode()).hexdigest()
    if done.is_file() and done.read_text().strip() == want_done:
        return Libc(objdir, src.version)
    if not stamp.is_file() or stamp.read_text().strip() != flags:
        shutil.rmtree(objdir, ignore_errors=True)
        objdir.mkdir(parents=True)
        with ui.step("configuring glibc for UKL"):
            run([tree / "configure", *CONFIGURE_ARGS, f"CC={WRAPPER}", "CXX=", f"CFLAGS={CFLAGS}"],
                cwd=objdir, what="glibc configure")
        stamp.write_text(flags + "\n")
    done.unlink(missing_ok=True)
    jobs = str(os.cpu_count() or 2)
    with ui.step("building glibc for UKL (a cold build takes about 3 minutes on 2 cores)") as st:
        # libc.a (and libc.so, which glibc's `lib` insists on) and the start files
        stream(["make", f"-j{jobs}", "lib"], objdir / "ukl-build.log", _progress(st), cwd=objdir,
               what="glibc build", hint=f"the build directory is {objdir}")
        # libm.a is one of math's "extra libs", which only `make others` would build
        stream(["make", f"-j{jobs}", "-C", tree / "math", f"objdir={objdir}", "subdir=math", "..=../",
                str(objdir / "math/libm.a")], objdir / "ukl-build-libm.log", _progress(st),
               what="glibc libm build", hint=f"the build directory is {objdir}")
        for sup in SUPPORT:
            out = objdir / "ukl-support" / f"{sup.stem}.o"
            out.parent.mkdir(exist_ok=True)
            # -o *.o: ukl-gcc compiles it for the image, against the tree's headers
            run([WRAPPER, "-O2", "-Wall", "-c", sup, "-o", out], what=f"compiling {sup.name}")
    missing = [f for f in [*START_FILES, *set(ARCHIVES.values())] if not (objdir / f).is_file()]
    if missing:
        raise UklError("the glibc build did not produce " + ", ".join(missing),
                       f"see {objdir / 'ukl-build.log'}")
    done.write_text(want_done + "\n")
    return Libc(objdir, src.version)


def tree() -> Path:
    _, t = sources.glibc_tree()
    series_mod.sync(SERIES, t)
    return t


