"""A bootable result: kernel, initramfs and a manifest in one directory."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ukltool import app, initramfs, kernel, sources
from ukltool.errors import UklError

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
          freestanding: bool = False) -> Manifest:
    srcs = app.check_sources(srcs)
    kernel.fragments(config)  # validates the name before any work
    if kernel.is_ukl(config) and not freestanding:
        raise UklError(f"configuration '{config}' links the application into the kernel, and the C library "
                       "port for that is not available yet",
                       "build a program without a C library (its own _start and system call shim) with "
                       "--freestanding, as tests/apps/ukl_base.c does")
    name = name or app.default_name(srcs)
    tmp = _prepare_outdir(outdir)
    try:
        src, tree = sources.linux_tree()
        spec = initramfs.runtime_skeleton()
        spec.file("/init", app.init_binary())
        if kernel.is_ukl(config):
            # The application is linked into the kernel; exec of a file
            # that starts with the UKL magic starts it.
            obj = tmp / f"{name}.ukl.o"
            with tempfile.TemporaryDirectory(prefix="ukl-cc-") as td:
                app.build_ukl_object(srcs, obj, Path(td))
            kimg = kernel.build(config, app=obj)
            starter = tmp / name
            starter.write_bytes(UKL_MAGIC + name.encode() + b"\n")
            spec.dir("/ukl")
            exec_path = f"/ukl/{name}"
        else:
            starter = tmp / name
            app.build_static(srcs, starter, freestanding)
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
                       linux_version=src.version, vmlinux=str(kimg.vmlinux))
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
