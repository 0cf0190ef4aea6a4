"""A bootable result: kernel, initramfs and a manifest in one directory."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from ukltool import app, initramfs, kernel, sources
from ukltool.errors import UklError

MANIFEST = "manifest.json"


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


def build(srcs: list[Path], config: str, outdir: Path, name: str | None = None) -> Manifest:
    srcs = app.check_sources(srcs)
    kernel.fragments(config)  # validates the name before any work
    name = name or app.default_name(srcs)
    tmp = _prepare_outdir(outdir)
    try:
        src, tree = sources.linux_tree()
        binary = tmp / name
        app.build_static(srcs, binary)
        kimg = kernel.build(config)
        spec = initramfs.runtime_skeleton()
        spec.file("/init", app.init_binary())
        spec.file(f"/bin/{name}", binary)
        app_path = tmp / "app-path"
        app_path.write_text(f"/bin/{name}\n")
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
