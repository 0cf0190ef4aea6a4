"""A bootable result: kernel, initramfs and a manifest in one directory."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ukltool.build import app, cc, initramfs, project, protocol
from ukltool.linux import bzimage, kernel
from ukltool.source import sources
from ukltool.util.errors import UklError
from ukltool.util.paths import GUEST_DIR, cache_dir
from ukltool.util.proc import run

MANIFEST = "manifest.json"
SCHEMA = 2  # of manifest.json; 1 had an absolute vmlinux path and no "schema"
ETC_DIR = GUEST_DIR / "etc"
UKL_MAGIC = b"\x7fUKL"  # asm/ukl.h


@dataclass
class Manifest:
    config: str
    app: str
    kernel_release: str
    kernel_key: str
    linux_version: str
    vmlinux: str               # relative to the cache (~/.cache/ukl), see vmlinux_path()
    userspace: bool = False
    schema: int = SCHEMA
    args: list[str] = field(default_factory=list)             # default arguments of `ukl run`
    forwards: list[list[int]] = field(default_factory=list)   # default --forward HOST:GUEST pairs
    recipe: str | None = None                                 # apps/NAME it was built from
    user_files: bool = True   # carries --file or --overlay files (unknown before it was recorded: assume so)
    machine: str | None = None  # the one QEMU machine its kernel is for (--specialize --machine); None: any

    def vmlinux_path(self) -> Path:
        return cache_dir() / self.vmlinux


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


def add_userspace(spec: initramfs.Spec, perf: bool = False) -> None:
    """Debian's busybox-static with every applet linked, for shells and
    tools; with PERF, Debian's perf too (with its shared libraries, about
    33 MB: only images that ask for it)."""
    if not BUSYBOX.is_file():
        raise UklError(f"{BUSYBOX} is missing", "install busybox-static (`make demo` does)")
    for d in ("/usr", "/usr/bin", "/sbin", "/usr/sbin"):
        spec.dir(d)
    spec.file("/bin/busybox", BUSYBOX)
    for applet in run([BUSYBOX, "--list-full"], what="busybox --list-full").split():
        path = "/" + applet.lstrip("/")
        if path != "/bin/busybox" and re.fullmatch(r"/[\w/.\[\]+-]+", path):
            spec.slink(path, "/bin/busybox")
    if not perf:
        return
    # perf, with the shared libraries it needs (an ordinary dynamic program)
    if not PERF.is_file():
        raise UklError(f"{PERF} is missing", "install linux-perf (`make demo` does)")
    dirs = {"/usr/bin"}
    spec.file("/usr/bin/perf", PERF)
    for lib in _shared_libraries(PERF):
        real = lib.resolve()
        for parent in [*reversed(lib.parents)][1:]:
            d = str(parent)
            if d not in dirs and d not in ("/bin", "/usr", "/sbin", "/usr/sbin"):
                spec.dir(d)
                dirs.add(d)
        spec.file(str(lib), real, "0755")


TEST_LAYER_FORMAT = 1   # the layer's name changes with what add_userspace() puts in it


def test_layer() -> Path:
    """The test layer: busybox and its applets in an archive of their own,
    made once per busybox (in the cache). `ukl run --sh`, smoke tests and
    benchmark scripts load it before an image's initramfs; images never
    carry it, so what `ukl pkg` ships is the application's own files."""
    if not BUSYBOX.is_file():
        raise UklError(f"{BUSYBOX} is missing: the test layer (a shell and tools for checks) is made from it",
                       "install busybox-static (`make demo` does)")
    digest = hashlib.sha256(BUSYBOX.read_bytes()).hexdigest()[:16]
    out = cache_dir() / "layers" / f"test-busybox-v{TEST_LAYER_FORMAT}-{digest}.cpio"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = initramfs.Spec().dir("/bin")  # loaded first: before the image's /bin
    add_userspace(spec)
    # a name of its own per writer: two runs may make it at once
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".partial", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            initramfs.write_to(spec, fh)
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return out


def boot_initrds(outdir: Path, man: Manifest, extra: list[Path], shell: bool) -> list[Path]:
    """What a boot of OUTDIR loads, in order: with SHELL (a shell script
    runs: `--sh`, a smoke test) the test layer unless the image has its own
    userspace, then the image's initramfs, then EXTRA (its arguments,
    scripts). The layer comes first so that the image's files win over
    busybox's names where both have one."""
    layer = [test_layer()] if shell and not man.userspace else []
    return [*layer, outdir / "initramfs.cpio", *extra]


PARTIAL_MARK = ".ukl-partial"  # in OUTDIR.partial while ukl build writes it


def _prepare_outdir(outdir: Path) -> Path:
    """OUTDIR.partial, empty, where the build writes before it replaces
    OUTDIR; refuses an OUTDIR (or OUTDIR.partial) that is not a directory
    of its own, which it would not replace or delete."""
    if outdir.is_symlink():
        raise UklError(f"output {outdir} is a symbolic link (ukl replaces OUTDIR as a whole)",
                       "name the directory it points to, or choose another -o OUTDIR")
    if outdir.exists() and not outdir.is_dir():
        raise UklError(f"output {outdir} exists and is not a directory", "choose another -o OUTDIR")
    if outdir.is_dir() and any(outdir.iterdir()) and not (outdir / MANIFEST).is_file():
        raise UklError(f"output directory {outdir} is not empty and was not written by ukl",
                       "choose another -o OUTDIR or empty it")
    tmp = outdir.with_name(outdir.name + ".partial")
    if tmp.is_symlink() or (tmp.exists() and not tmp.is_dir()):
        raise UklError(f"{tmp}, where ukl builds OUTDIR, exists and is not a directory",
                       "remove it or choose another -o OUTDIR")
    # Only what an interrupted build of ukl's left there is removed
    if tmp.is_dir() and any(tmp.iterdir()) and not (tmp / PARTIAL_MARK).is_file():
        raise UklError(f"{tmp}, where ukl builds OUTDIR, is not empty and was not made by ukl",
                       "move it away or choose another -o OUTDIR")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / PARTIAL_MARK).write_text("ukl build writes OUTDIR here, then renames it\n")
    return tmp


@dataclass
class BuildSpec:
    """What `ukl build` is asked for."""
    sources: list[Path]        # C files, or one directory with a Makefile or configure script
    config: str
    outdir: Path
    name: str | None = None
    freestanding: bool = False
    userspace: bool = False
    cflags: list[str] = field(default_factory=list)  # extra flags for C files (any configuration)
    files: list[tuple[Path, str]] = field(default_factory=list)  # --file SRC:DEST
    overlays: list[Path] = field(default_factory=list)           # --overlay DIR
    project_opts: project.Options = field(default_factory=project.Options)  # for a directory
    args: list[str] = field(default_factory=list)        # recorded for `ukl run`
    forwards: list[tuple[int, int]] = field(default_factory=list)
    recipe: str | None = None
    perf: bool = False          # perf in the userspace (implies userspace)
    compression: str | None = None  # the kernel's (kernel/configs/compression); None: the configuration's
    optimize: str | None = None     # the kernel's (kernel/configs/optimize); None: the configuration's -O2

    @property
    def project_dir(self) -> Path | None:
        if len(self.sources) == 1 and self.sources[0].is_dir():
            return self.sources[0].resolve()
        return None


@dataclass
class Program:
    """What one build mode made: a UKL object to link into the kernel, or
    an ordinary executable (and the build's log, for a project)."""
    name: str
    ukl_object: Path | None = None
    executable: Path | None = None
    log: Path | None = None


def _from_project(spec: BuildSpec, ukl: bool, work: Path, tmp: Path) -> Program:
    project_dir = spec.project_dir
    assert project_dir is not None
    opts = spec.project_opts
    if spec.name and spec.name != project_dir.name and opts.program is None:
        opts.program = spec.name
    res = project.build(project_dir, "base" if ukl else "linux", opts)
    prog = res.program
    if prog is None:
        raise UklError(f"{project_dir.name} is built as a library: it has no application",
                       "build an application that uses it")
    if not ukl:
        return Program(prog.name, executable=prog, log=res.log)
    obj = tmp / f"{prog.name}.ukl.o"
    cc.extract(prog, obj)
    return Program(prog.name, ukl_object=obj, log=res.log)


def _from_sources(spec: BuildSpec, srcs: list[Path], ukl: bool, work: Path, tmp: Path) -> Program:
    name = spec.name or app.default_name(srcs)
    if not ukl:
        exe = work / name
        app.build_static(srcs, exe, spec.freestanding, spec.cflags)
        return Program(name, executable=exe)
    obj = tmp / f"{name}.ukl.o"
    if spec.freestanding:
        app.build_ukl_object(srcs, obj, work, spec.cflags)
    else:
        app.build_libc_object(srcs, obj, work, spec.cflags)
    return Program(name, ukl_object=obj)


def add_etc(spec: initramfs.Spec) -> None:
    """The minimal /etc every image has (guest/etc): users root and nobody,
    their groups, hosts, nsswitch.conf and services, so that servers that
    look up users, hosts or ports work."""
    for f in sorted(ETC_DIR.iterdir()):
        spec.file(f"/etc/{f.name}", f, "0644")


def add_files(spec: initramfs.Spec, files: list[tuple[Path, str]], overlays: list[Path]) -> None:
    """--overlay trees, then --file SRC:DEST, over what the image has."""
    for top in overlays:
        if not top.is_dir():
            raise UklError(f"--overlay {top}: not a directory", "name a directory whose tree goes into the image")
        for path in sorted(top.rglob("*")):
            dest = "/" + path.relative_to(top).as_posix()
            mode = f"{path.lstat().st_mode & 0o7777:04o}"
            if path.is_symlink():
                spec.slink(dest, str(path.readlink()))
            elif path.is_dir():
                spec.dir(dest, mode)
            elif path.is_file():
                spec.file(dest, path, mode)
            else:
                raise UklError(f"--overlay {top}: {path} is neither a file, a directory nor a symbolic link",
                               "device nodes and sockets cannot be added")
    for src, dest in files:
        if not src.is_file():
            raise UklError(f"--file {src}:{dest}: {src} is not a file", "name an existing file")
        spec.parents(dest)
        spec.file(dest, src, f"{src.stat().st_mode & 0o7777:04o}")


def assemble(out: Path, kimg: kernel.KernelImage, config: str, name: str, starter: Path, ukl: bool,
             userspace: bool = False, files: list[tuple[Path, str]] | None = None,
             overlays: list[Path] | None = None, perf: bool = False) -> Manifest:
    """Write a bootable result to OUT (a fresh directory): the kernel, an
    initramfs with our init, /etc, the application at /ukl/NAME (ukl) or
    /bin/NAME, the userspace (with perf if PERF) and the user's files, and
    the manifest."""
    src, _ = sources.linux_tree()
    spec = initramfs.runtime_skeleton()
    spec.file("/init", app.init_binary())
    add_etc(spec)
    if userspace or perf:
        add_userspace(spec, perf)
    exec_path = f"/ukl/{name}" if ukl else f"/bin/{name}"
    spec.parents(exec_path)
    spec.file(exec_path, starter)
    with tempfile.TemporaryDirectory(prefix="ukl-image-") as td:
        app_path = Path(td) / "app-path"
        app_path.write_text(exec_path + "\n")
        spec.file(protocol.APP_PATH_FILE, app_path, "0644")
        add_files(spec, files or [], overlays or [])
        initramfs.write(spec, out / "initramfs.cpio")
    shutil.copy(kimg.bzimage, out / "bzImage")
    man = Manifest(config=config, app=name, kernel_release=kimg.release, kernel_key=kimg.key,
                   linux_version=src.version, vmlinux=_relative_to_cache(kimg.vmlinux), userspace=userspace or perf,
                   user_files=bool(files or overlays), machine=kernel.config_machine(config))
    (out / MANIFEST).write_text(json.dumps(asdict(man), indent=2) + "\n")
    return man


# An application's name (--name): its file /ukl/NAME in the image, a word
# of the kernel command line (rdinit=/ukl/NAME under --pid1), a kallsyms
# prefix and a container's: letters, digits and _ . + -, not a leading . or -
APP_NAME = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9_.+-]{0,63}")


def check_app_name(name: str | None) -> None:
    if name is not None and not APP_NAME.fullmatch(name):
        raise UklError(f"--name {name!r} is not an application name",
                       "use up to 64 letters, digits, '_', '.', '+' or '-', not starting with '.' or '-'")


def build(spec: BuildSpec) -> Manifest:
    if spec.project_dir is None:
        if spec.project_opts.configure_args or spec.project_opts.make_args or spec.project_opts.system != "auto":
            raise UklError("--configure-args, --make-args and --build-system apply to a directory",
                           "name the project's directory")
        srcs = app.check_sources(spec.sources)
    elif spec.freestanding or spec.cflags:
        raise UklError("--freestanding and --cflags apply to C files, not to a directory",
                       "name the C files, or pass CFLAGS to the project's own build")
    check_app_name(spec.name)
    kernel.fragments(spec.config)  # validates the name before any work
    kernel.need_compressor(spec.config, spec.compression)
    for src, _dest in spec.files:
        if not src.is_file():
            raise UklError(f"--file {src}: not a file", "name an existing file")
    for top in spec.overlays:
        if not top.is_dir():
            raise UklError(f"--overlay {top}: not a directory", "name a directory whose tree goes into the image")
    ukl = kernel.is_ukl(spec.config)
    tmp = _prepare_outdir(spec.outdir)
    try:
        with tempfile.TemporaryDirectory(prefix="ukl-build-") as td:
            work = Path(td)
            if spec.project_dir is not None:
                prog = _from_project(spec, ukl, work, tmp)
            else:
                prog = _from_sources(spec, srcs, ukl, work, tmp)
            starter = work / f"{prog.name}.start"
            if prog.ukl_object is not None:
                # The application is linked into the kernel; exec of a file
                # that starts with the UKL magic starts it.
                kimg = kernel.build(spec.config, app=prog.ukl_object, compression=spec.compression,
                                    optimize=spec.optimize)
                starter.write_bytes(UKL_MAGIC + prog.name.encode() + b"\n")
            else:
                assert prog.executable is not None
                kimg = kernel.build(spec.config, compression=spec.compression, optimize=spec.optimize)
                shutil.copy(prog.executable, starter)
            man = assemble(tmp, kimg, spec.config, prog.name, starter, ukl, spec.userspace, spec.files,
                           spec.overlays, spec.perf)
            man.args, man.forwards, man.recipe = spec.args, [list(f) for f in spec.forwards], spec.recipe
            (tmp / MANIFEST).write_text(json.dumps(asdict(man), indent=2) + "\n")
            if prog.log is not None:
                shutil.copy(prog.log, tmp / "build.log")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (tmp / PARTIAL_MARK).unlink()
    shutil.rmtree(spec.outdir, ignore_errors=True)
    tmp.rename(spec.outdir)
    return man


def kernel_has(man: Manifest, function: str, unknown: bool | None = True) -> bool | None:
    """Is FUNCTION in the image's kernel (its System.map)? UNKNOWN where it
    cannot tell (no System.map)."""
    smap = man.vmlinux_path().parent / "System.map"
    try:
        text = smap.read_text()
    except OSError:
        return unknown
    return re.search(rf" {re.escape(function)}$", text, re.M) is not None


def has_network_device(man: Manifest) -> bool:
    """Does the image's kernel have the virtio network driver (its probe function)?"""
    return bool(kernel_has(man, "virtnet_probe"))


def configures_ip(outdir: Path, man: Manifest) -> bool:
    """Does the image's kernel configure eth0 itself from ip= (IP_PNP)?
    From its System.map, or where that is gone (a cleaned cache, an image
    copied from elsewhere) from the kernel in the bzImage, whose messages
    name IP-Config; False where neither can tell."""
    found = kernel_has(man, "ip_auto_config_setup", unknown=None)
    if found is not None:
        return found
    try:
        return b"IP-Config: " in bzimage.payload((outdir / "bzImage").read_bytes(), str(outdir / "bzImage"))
    except (OSError, UklError):
        return False


def machine_of(man: Manifest) -> str | None:
    """The one QEMU machine the image's kernel is for (None: any): the
    manifest's, or for an image built before manifests said, its
    configuration's."""
    return man.machine or kernel.config_machine(man.config)


def has_block_device(man: Manifest) -> bool:
    """Does the image's kernel have the virtio disk driver?"""
    return bool(kernel_has(man, "virtblk_probe"))


def _relative_to_cache(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(cache_dir()))
    except ValueError:
        return str(path)


def load(outdir: Path) -> Manifest:
    mf = outdir / MANIFEST
    if not mf.is_file():
        raise UklError(f"{outdir} is not a ukl build output (no {MANIFEST})",
                       "build one with `./ukl build SOURCE.c -o OUTDIR`")
    try:
        data = json.loads(mf.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("schema", 1) > SCHEMA:
            raise UklError(f"{mf} was written by a newer ukl (schema {data['schema']})", "update this checkout")
        known = {f.name for f in fields(Manifest)}
        return Manifest(**{k: v for k, v in data.items() if k in known})
    except (TypeError, ValueError) as e:
        raise UklError(f"{mf} is damaged: {e}", "rebuild with `./ukl build`") from None
