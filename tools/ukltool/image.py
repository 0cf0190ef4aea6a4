"""A bootable result: kernel, initramfs and a manifest in one directory."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ukltool import app, cc, initramfs, kernel, project, sources
from ukltool.errors import UklError
from ukltool.proc import run

MANIFEST = "manifest.json"
UKL_MAGIC = b"\x7fUKL"  # asm/ukl.h


@dataclass
class Manifest:
    config: str
    app: str
    kernel_release: str
    kernel_key: str
    linux_version: str
    vmlinux: str
    userspace: bool = False


BUSYBOX = Path("/bin/busybox")
PERF = Path("/usr/bin/perf")  # Debian's linux-perf, built for 6.1


def _shared_libraries(binary: Path) -> list[Path]:
    """The shared libraries BINARY loads (ldd), including the dynamic loader."""
    libs = []
    for line in run(["ldd", binary], what=f"ldd {binary}").splitlines():
        m = re.search(r"(/\S+) \(0x", line)
        if m:
            libs.append(Path(m.group(1)))
    return libs


def add_userspace(spec: initramfs.Spec) -> None:
    """Debian's busybox-static with every applet linked, for shells and tools."""
    if not BUSYBOX.is_file():
        raise UklError(f"{BUSYBOX} is missing", "install busybox-static (`make demo` does)")
    for d in ("/usr", "/usr/bin", "/sbin", "/usr/sbin"):
        spec.dir(d)
    spec.file("/bin/busybox", BUSYBOX)
    for applet in run([BUSYBOX, "--list-full"], what="busybox --list-full").split():
        path = "/" + applet.lstrip("/")
        if path != "/bin/busybox" and re.fullmatch(r"/[\w/.\[\]+-]+", path):
            spec.slink(path, "/bin/busybox")
    # perf, with the shared libraries it needs (an ordinary dynamic program)
    if not PERF.is_file():
        raise UklError(f"{PERF} is missing", "install linux-perf (`make demo` does)")
    dirs = {"/usr/bin"}
    spec.file("/usr/bin/perf", PERF)
    for lib in _shared_libraries(PERF):
        real = lib.resolve()
        for d in [*reversed(lib.parents)][1:]:
            if str(d) not in dirs and str(d) not in ("/bin", "/usr", "/sbin", "/usr/sbin"):
                spec.dir(str(d))
                dirs.add(str(d))
        spec.file(str(lib), real, "0755")


def _prepare_outdir(outdir: Path) -> Path:
    if outdir.exists() and not outdir.is_dir():
        raise UklError(f"output {outdir} exists and is not a directory", "choose another -o OUTDIR")
    if outdir.is_dir() and any(outdir.iterdir()) and not (outdir / MANIFEST).is_file():
        raise UklError(f"output directory {outdir} is not empty and was not written by ukl",
                       "choose another -o OUTDIR or empty it")
    tmp = outdir.with_name(outdir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def build(srcs: list[Path], config: str, outdir: Path, name: str | None = None,
          freestanding: bool = False, userspace: bool = False, cflags: list[str] | None = None) -> Manifest:
    """SRCS: C files, or one directory with a Makefile or configure script.
    CFLAGS: extra compiler flags for C files (any configuration)."""
    cflags = cflags or []
    project_dir = srcs[0].resolve() if len(srcs) == 1 and srcs[0].is_dir() else None
    if project_dir is None:
        srcs = app.check_sources(srcs)
    elif freestanding or cflags:
        raise UklError("--freestanding and --cflags apply to C files, not to a directory",
                       "name the C files, or pass CFLAGS to the project's own build")
    kernel.fragments(config)  # validates the name before any work
    ukl = kernel.is_ukl(config)
    name = name or (project_dir.name if project_dir else app.default_name(srcs))
    tmp = _prepare_outdir(outdir)
    try:
        src, tree = sources.linux_tree()
        spec = initramfs.runtime_skeleton()
        spec.file("/init", app.init_binary())
        if userspace:
            add_userspace(spec)
        starter = tmp / name
        with tempfile.TemporaryDirectory(prefix="ukl-build-") as td:
            work = Path(td)
            if project_dir is not None:
                prog = project.build(project_dir, "base" if ukl else "linux", work,
                                     name if name != project_dir.name else None)
                name = prog.name
                starter = tmp / name
                if ukl:
                    obj = tmp / f"{name}.ukl.o"
                    cc.extract(prog, obj)
                else:
                    shutil.copy(prog, starter)
            elif ukl and freestanding:
                obj = tmp / f"{name}.ukl.o"
                app.build_ukl_object(srcs, obj, work, cflags)
            elif ukl:
                obj = tmp / f"{name}.ukl.o"
                app.build_libc_object(srcs, obj, work, cflags)
            else:
                app.build_static(srcs, starter, freestanding, cflags)
        if ukl:
            # The application is linked into the kernel; exec of a file
            # that starts with the UKL magic starts it.
            kimg = kernel.build(config, app=obj)
            starter.write_bytes(UKL_MAGIC + name.encode() + b"\n")
            spec.dir("/ukl")
            exec_path = f"/ukl/{name}"
        else:
            kimg = kernel.build(config)
            exec_path = f"/bin/{name}"
        spec.file(exec_path, starter)
        app_path = tmp / "app-path"
        app_path.write_text(exec_path + "\n")
        spec.file("/etc/ukl/app", app_path, "0644")
        initramfs.write(initramfs.gen_init_cpio(tree), spec, tmp / "initramfs.cpio")
        app_path.unlink()
        shutil.copy(kimg.bzimage, tmp / "bzImage")
        man = Manifest(config=config, app=name, kernel_release=kimg.release, kernel_key=kimg.key,
                       linux_version=src.version, vmlinux=str(kimg.vmlinux), userspace=userspace)
        (tmp / MANIFEST).write_text(json.dumps(asdict(man), indent=2) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(outdir, ignore_errors=True)
    tmp.rename(outdir)
    return man


def load(outdir: Path) -> Manifest:
    mf = outdir / MANIFEST
    if not mf.is_file():
        raise UklError(f"{outdir} is not a ukl build output (no {MANIFEST})",
                       "build one with `./ukl build SOURCE.c -o OUTDIR`")
    try:
        return Manifest(**json.loads(mf.read_text()))
    except (TypeError, ValueError) as e:
        raise UklError(f"{mf} is damaged: {e}", "rebuild with `./ukl build`") from None
