"""`ukl pkg OUTDIR --oci FILE.tar`: an image built by `ukl build` as an OCI
image archive (image layout in a tar file) that containerd runs with urunc.

The archive holds one layer: the kernel with the application linked in
(/ukl/bzImage, or /ukl/vmlinux for Firecracker), the initramfs
(/ukl/initramfs.cpio) and /urunc.json. urunc reads its settings from
annotations named com.urunc.unikernel.* or, since containerd does not pass
an image's annotations to the runtime, from /urunc.json in the container's
root file system; in both places every value is base64-encoded
(urunc's pkg/unikontainers/config.go decodes each one). urunc's `linux`
type boots the kernel with `rdinit=ARGV0 -- ARGS`, ARGV0 and ARGS being the
container's process arguments, so the image's entrypoint is our init
(/init in the initramfs), or the application itself as PID 1 (--start),
and its command the application's arguments.

Reproducible: fixed times, owners and order, gzip without a time stamp,
so the same OUTDIR gives the same digests."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ukltool.build import image, protocol
from ukltool.linux import bzimage, kernel
from ukltool.run import vm
from ukltool.util import ui
from ukltool.util.errors import UklError

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"  # the OCI image layout's name of a manifest
CONTAINERD_NAME = "io.containerd.image.name"     # the name `ctr image import` gives the image
URUNC_JSON = "urunc.json"
ANNOT = "com.urunc.unikernel."
# urunc's monitors (pkg/unikontainers/hypervisors/vmm.go), and which of
# them boot a Linux kernel (its `linux` unikernel type)
URUNC_MONITORS = ("qemu", "firecracker", "hvt", "spt", "hedge")
HYPERVISORS = ("qemu", "firecracker")
KERNEL = {"qemu": "/ukl/bzImage", "firecracker": "/ukl/vmlinux"}
INITRD = "/ukl/initramfs.cpio"
INIT = "/init"   # ukl-init in the initramfs (guest/init.c)
ENV = ["PATH=/bin:/sbin:/usr/bin:/usr/sbin", "LANG=C"]  # what ukl-init gives the application
EPOCH = "1970-01-01T00:00:00Z"


# The distribution reference grammar (github.com/distribution/reference):
#   name := [domain '/'] path-component ['/' path-component]*
#   domain := host [':' port], host := domain-name | IPv4 | '[' IPv6 ']'
#   path-component := [a-z0-9]+ (separator [a-z0-9]+)*, separator := [_.] | __ | -+
#   tag := [\w][\w.-]{0,127}; the name at most 255 characters
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_REMAINDER = re.compile(rf"(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)(?::(?P<tag>{_TAG}))?")
DEFAULT_DOMAIN = "docker.io"


def normalize_reference(ref: str) -> str:
    """REF as containerd's CRI (and so Kubernetes) names it: a domain
    (docker.io unless the first component is one: it has a '.' or a ':',
    is localhost or has capitals), library/ for a one-component Docker Hub
    name, and a tag (latest unless given). A digest is refused: the
    archive's content fixes it."""
    if "@" in ref:
        raise UklError(f"--tag {ref!r}: a digest names existing content; ukl pkg makes new content",
                       "give a name and a tag, e.g. --tag localhost/ukl/hello:1.0")
    first, slash, rest = ref.partition("/")
    if slash and (any(c in first for c in ".:") or first == "localhost" or first != first.lower()):
        domain: str | None = first
    else:
        domain, rest = None, ref
    m = _REMAINDER.fullmatch(rest)
    ok = m is not None and (domain is None or re.fullmatch(_DOMAIN, domain) is not None)
    name_len = len(ref) - (len(m["tag"]) + 1 if m and m["tag"] else 0)
    if m is None or not ok or name_len > 255:
        raise UklError(f"--tag {ref!r} is not a valid image reference",
                       "use [DOMAIN/]PATH[:TAG]: lower-case letters, digits and separators (. _ __ -) in the path, "
                       "a tag of up to 128 letters, digits, '_', '.' or '-' (e.g. localhost/ukl/hello:1.0)")
    path = m["path"]
    if domain is None:
        domain = DEFAULT_DOMAIN
        if "/" not in path:
            path = f"library/{path}"
    return f"{domain}/{path}:{m['tag'] or 'latest'}"


def default_tag(app: str) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", app.lower()).strip("-") or "app"
    return f"localhost/ukl/{name}:latest"


def check_hypervisor(name: str) -> str:
    if name in HYPERVISORS:
        return name
    if name in URUNC_MONITORS:
        raise UklError(f"--hypervisor {name}: urunc's {name} monitor runs solo5 unikernels, not a Linux kernel",
                       f"choose one of {', '.join(HYPERVISORS)}")
    raise UklError(f"--hypervisor {name!r}: not a monitor urunc knows",
                   f"choose one of {', '.join(HYPERVISORS)} (urunc's monitors that boot Linux)")


STARTS = ("auto", "pid1", "init")


def pid1_refusal(outdir: Path, man: image.Manifest) -> str | None:
    """Why the kernel cannot start the application of OUTDIR as PID 1 in a
    container (None: it can)."""
    if not kernel.is_ukl(man.config):
        return f"it was built for '{man.config}', where the application is an ordinary program"
    if man.userspace:
        return "it carries a userspace (--userspace), which init runs beside the application"
    if _ports(man) and not image.configures_ip(outdir, man):
        return "its kernel cannot configure eth0 from urunc's ip= (no IP_PNP: built before ukl gave it that)"
    if any(" " in a for a in man.args):
        # urunc quotes such an argument and the kernel splits it at the
        # blank; only ukl-init joins the words again
        return "an argument has a blank, which reaches the application whole only through init"
    return None


def pid1_start(outdir: Path, man: image.Manifest, start: str) -> bool:
    """Does the container start the application as PID 1 (no init)? START
    auto: where the image allows it and serves ports (a server, whose
    status nobody waits for: under urunc only init reports a container's
    exit status); pid1 or init: as asked."""
    if start not in STARTS:
        raise UklError(f"--start {start!r}: not one of {', '.join(STARTS)}", "give --start auto, pid1 or init")
    why = pid1_refusal(outdir, man)
    if start == "pid1" and why:
        raise UklError(f"--start pid1: {why}", "package it with --start init (or auto)")
    return start == "pid1" or (start == "auto" and why is None and bool(_ports(man)))


def entrypoint(man: image.Manifest, pid1: bool) -> str:
    """What the kernel starts (rdinit=): init, or the application itself."""
    return f"/ukl/{man.app}" if pid1 else INIT


def urunc_values(hypervisor: str, args: list[str], initrd: bool, start: str = INIT) -> dict[str, str]:
    """urunc's settings, plain; encode() gives them as urunc reads them.
    START: the entrypoint (init, or the application as PID 1)."""
    vals = {
        "unikernelType": "linux",
        "unikernelVersion": "",
        "hypervisor": hypervisor,
        "binary": KERNEL[hypervisor],
        # used by urunc only when the container has no process arguments
        "cmdline": " ".join([start, *args]),
        # urunc treats a missing value as true (and wants devmapper)
        "useDMBlock": "false",
    }
    if initrd:
        vals["initrd"] = INITRD
        if hypervisor == "qemu" and start == INIT:
            # ukl-init writes "status N" on ttyS1: with urunc's patch
            # (deploy/urunc/patches/0003) it is the container's status
            vals["exitStatus"] = "serial"
    return {ANNOT + k: v for k, v in vals.items()}


# What reaches ukl-init through urunc's kernel command line intact. urunc
# (pkg/unikontainers/unikernels/linux.go) writes "panic=-1 console=ttyS0
# root=/dev/ram0 rw ip=ADDR::GW:MASK:urunc:eth0:off ENV... rdinit=/init --
# ARGS", an argument with spaces in single quotes; the kernel splits it at
# blanks, passes at most MAX_INIT_ARGS words to init (a UKL kernel 128:
# not counted on here) and as many unknown NAME=VALUE words as its
# environment (more panic the kernel), and cuts the line at
# COMMAND_LINE_SIZE - 1 bytes, the arguments first.
URUNC_PREFIX = len("panic=-1 console=ttyS0 root=/dev/ram0 rw "
                   "ip=255.255.255.255::255.255.255.255:255.255.255.255:urunc:eth0:off rdinit=/init -- ")
ORCHESTRATOR_ROOM = 512  # what containerd or Kubernetes adds: HOSTNAME=, the pod's variables


def check_urunc_args(args: list[str]) -> list[str]:
    """Refuse the image's arguments that urunc cannot pass to init as they
    are (docs/deploy.md, "What urunc passes"); return warnings for empty
    ones, which vanish (Redis's `--save ""` still means no snapshots)."""
    hint = "give the application its settings in a file (ukl build --file), or run it with `ukl run`"
    for a in args:
        if a and (a != " ".join(a.split()) or "'" in a or not a.isprintable()):
            raise UklError(f"the argument {a!r} does not survive urunc's kernel command line (runs of blanks "
                           "and other whitespace collapse to one space, single quotes split it)", hint)
    warnings = [f"argument {i} is empty: under urunc it vanishes (the kernel command line has no empty words), "
                "so the application gets one argument fewer" for i, a in enumerate(args, 1) if a == ""]
    words = sum(len(a.split()) for a in args)
    if words + 1 > protocol.MAX_INIT_ARGS:
        raise UklError(f"{len(args)} arguments make {words} words on the kernel command line; the kernel "
                       f"passes init at most {protocol.MAX_INIT_ARGS - 1}", hint)
    line = URUNC_PREFIX + len(" ".join(ENV)) + 1 + sum(len(a) + (3 if " " in a else 1) for a in args)
    if line > vm.COMMAND_LINE_SIZE - 1 - ORCHESTRATOR_ROOM:
        raise UklError(f"the arguments make a kernel command line of about {line} bytes under urunc; Linux "
                       f"keeps {vm.COMMAND_LINE_SIZE - 1}, and {ORCHESTRATOR_ROOM} are left for what containerd "
                       "and Kubernetes add", hint)
    return warnings


def encode(values: dict[str, str]) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}


def decode(values: dict[str, str]) -> dict[str, str]:
    return {k: base64.b64decode(v, validate=True).decode() for k, v in values.items()}


@dataclass
class Blob:
    media_type: str
    data: bytes
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self) -> dict[str, object]:
        d: dict[str, object] = {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data)}
        if self.annotations:
            d["annotations"] = dict(sorted(self.annotations.items()))
        return d


def _json(obj: object) -> bytes:
    return json.dumps(obj, indent=2, sort_keys=True).encode() + b"\n"


def _tar(entries: Iterable[tuple[str, bytes | None, int]]) -> bytes:
    """A tar stream of (path, data or None for a directory, mode), in
    order, owned by 0:0, dated 0."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data, mode in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname, ti.mode = 0, 0, 0, "", "", mode
            if data is None:
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            else:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _gzip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return buf.getvalue()


def _ports(man: image.Manifest) -> list[int]:
    """The ports the application serves: the guest sides of the image's
    --forward pairs, which `ukl build` records, a recipe's [image] forward
    included."""
    return sorted({guest for _host, guest in man.forwards})


@dataclass
class Package:
    reference: str
    layer: Blob
    config: Blob
    manifest: Blob
    index: bytes
    urunc: dict[str, str]   # plain values


def _kernel_bytes(outdir: Path, hypervisor: str) -> bytes:
    """What the hypervisor boots: the bzImage (QEMU), or the uncompressed
    kernel with its PVH entry, taken out of the bzImage (Firecracker boots
    an ELF file)."""
    bz = outdir / "bzImage"
    if not bz.is_file():
        raise UklError(f"{outdir} has no kernel (bzImage)", f"rebuild it with `ukl build ... -o {outdir}`")
    if hypervisor == "qemu":
        return bz.read_bytes()
    return bzimage.direct_kernel(bz.read_bytes(), str(bz))[0]


def build(outdir: Path, tag: str | None = None, hypervisor: str = "qemu", start: str = "auto",
          warn: bool = True) -> Package:
    """The archive's parts for the image in OUTDIR; START: see pid1_start();
    WARN: say what urunc changes in its arguments."""
    man = image.load(outdir)  # refuses what is not a build result
    hypervisor = check_hypervisor(hypervisor)
    if hypervisor == "qemu" and image.machine_of(man) == "microvm":
        # urunc's qemu monitor gives x86 guests QEMU's default machine (pc)
        # and a virtio-net-pci device (pkg/unikontainers/hypervisors/qemu.go)
        raise UklError(f"the kernel of {outdir} was specialized for -M microvm alone (it has no PCI), but urunc's "
                       "qemu monitor boots -M pc with its network device on PCI",
                       "package it with --hypervisor firecracker, or rebuild without --machine microvm")
    entry = entrypoint(man, pid1_start(outdir, man, start))
    ref = normalize_reference(tag if tag is not None else default_tag(man.app))
    kernel_data = _kernel_bytes(outdir, hypervisor)
    initrd = outdir / "initramfs.cpio"
    has_initrd = initrd.is_file()
    for w in check_urunc_args(list(man.args)):
        if warn:
            ui.warn(w)
    values = urunc_values(hypervisor, list(man.args), has_initrd, entry)
    encoded = encode(values)
    entries: list[tuple[str, bytes | None, int]] = [("ukl", None, 0o755),
                                                    (KERNEL[hypervisor].lstrip("/"), kernel_data, 0o644)]
    if has_initrd:
        entries.append((INITRD.lstrip("/"), initrd.read_bytes(), 0o644))
    entries.append((URUNC_JSON, _json(encoded), 0o644))
    raw = _tar(entries)
    layer = Blob(MEDIA_LAYER, _gzip(raw))
    labels = {"org.opencontainers.image.title": man.app,
              "org.opencontainers.image.description":
                  f"{man.app} linked into Linux {man.kernel_release} (UKL configuration {man.config})",
              "dev.ukl.config": man.config, "dev.ukl.kernel-release": man.kernel_release,
              "dev.ukl.linux-version": man.linux_version}
    cfg: dict[str, object] = {"Entrypoint": [entry], "Cmd": list(man.args), "Env": list(ENV), "Labels": labels,
                              "WorkingDir": "/"}
    ports = _ports(man)
    if ports:
        cfg["ExposedPorts"] = {f"{p}/tcp": {} for p in ports}
    config = Blob(MEDIA_CONFIG, _json({
        "created": EPOCH, "architecture": "amd64", "os": "linux", "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
        "history": [{"created": EPOCH, "created_by": f"ukl pkg --oci (hypervisor {hypervisor})"}],
    }))
    manifest = Blob(MEDIA_MANIFEST, _json({
        "schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": config.descriptor(),
        "layers": [layer.descriptor()], "annotations": dict(sorted(encoded.items())),
    }), annotations={REF_NAME: ref, CONTAINERD_NAME: ref})
    index = _json({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [manifest.descriptor()]})
    return Package(ref, layer, config, manifest, index, values)


def archive_bytes(pkg: Package) -> bytes:
    entries: list[tuple[str, bytes | None, int]] = [("blobs", None, 0o755), ("blobs/sha256", None, 0o755)]
    for blob in sorted((pkg.config, pkg.layer, pkg.manifest), key=lambda b: b.digest):
        entries.append((f"blobs/sha256/{blob.digest.split(':', 1)[1]}", blob.data, 0o644))
    entries += [("index.json", pkg.index, 0o644),
                ("oci-layout", _json({"imageLayoutVersion": "1.0.0"}), 0o644)]
    return _tar(entries)


def write(data: bytes, target: Path) -> None:
    """DATA at TARGET: a new or regular file is replaced at once (a
    temporary file beside it, renamed), so that a failure leaves nothing
    half-written; a device, FIFO or socket (or a link to one) is written
    into and stays what it is; a directory is refused."""
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise UklError(f"--oci {target}: {e.strerror}", "name a file in an existing directory") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UklError(f"--oci {target} is a directory", "name the archive file, e.g. --oci image.tar")
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            with open(target, "wb") as fh:
                fh.write(data)
        except OSError as e:
            raise UklError(f"cannot write {target}: {e.strerror}", "check the --oci path") from None
        return
    real = target.resolve() if target.is_symlink() else target
    if not real.parent.is_dir():
        raise UklError(f"--oci {target}: {real.parent} is not a directory", "create it first or choose another path")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".ukl-partial", dir=real.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), 0o644)
        os.replace(tmp, real)
    except OSError as e:
        raise UklError(f"cannot write {target}: {e.strerror}", "check the --oci path and the free space") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def package(outdir: Path, target: Path, tag: str | None = None, hypervisor: str = "qemu",
            start: str = "auto") -> Package:
    pkg = build(outdir, tag, hypervisor, start)
    write(archive_bytes(pkg), target)
    return pkg


# `ukl pkg OUTDIR --firecracker DIR`: the files Firecracker boots, and its
# configuration (`firecracker --no-api --config-file vm-config.json` in DIR).
FIRECRACKER_CONFIG = "vm-config.json"
FIRECRACKER_TAP = "tap0"
GUEST_MAC = "06:00:0a:00:02:0f"


def _cmdline_word(arg: str) -> str:
    """ARG as one word of init's arguments on the kernel command line."""
    return vm.init_arg_word(arg, "change the image's arguments (ukl build ... then ukl pkg)")


def firecracker_config(man: image.Manifest, initrd: bool, pid1: bool = False) -> dict[str, object]:
    args = " ".join(_cmdline_word(a) for a in man.args)
    # ip=: eth0 gets the address `ukl run` gives it (from the kernel where
    # it has IP_PNP, else from ukl-init); reboot=k: Firecracker ends when
    # the guest resets through the keyboard controller
    boot = (f"console=ttyS0 reboot=k panic=-1 pci=off ip=10.0.2.15::10.0.2.2:255.255.255.0::eth0:off "
            f"{' '.join(ENV)} rdinit={entrypoint(man, pid1)} --" + (f" {args}" if args else ""))
    source: dict[str, object] = {"kernel_image_path": "vmlinux", "boot_args": boot}
    if initrd:
        source["initrd_path"] = "initramfs.cpio"
    return {"boot-source": source,
            "machine-config": {"vcpu_count": 1, "mem_size_mib": 256, "smt": False},
            "drives": [],
            "network-interfaces": [{"iface_id": "eth0", "guest_mac": GUEST_MAC,
                                    "host_dev_name": FIRECRACKER_TAP}]}


FIRECRACKER_MARK = ".ukl-pkg-firecracker"  # what ukl pkg wrote in DIR, a name a line


def _firecracker_owned(target: Path) -> set[str]:
    """The names ukl pkg wrote in TARGET, from its mark; an empty set for a
    new or empty DIR. Refuses a DIR that holds a file of its names it did not write
    or that ukl pkg did not write: the user's files are never replaced."""
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise UklError(f"--firecracker {target} exists and is not a directory", "name a new or an earlier DIR")
    if not target.exists():
        if not target.parent.is_dir():
            raise UklError(f"--firecracker {target}: {target.parent} is not a directory", "create it first")
        return set()
    mark = target / FIRECRACKER_MARK
    try:
        names = set(os.listdir(target))
        if not names:
            return set()
        # (a DIR an earlier ukl pkg wrote, before the mark, is refused too:
        # its vmlinux and vm-config.json cannot be told from the user's)
        if mark.is_symlink() or not mark.is_file():
            raise UklError(f"--firecracker {target} is not empty and was not written by ukl pkg",
                           "choose another DIR or empty it")
        owned = {n for n in mark.read_text(errors="replace").splitlines() if n in FIRECRACKER_FILES}
    except OSError as e:
        raise UklError(f"--firecracker {target}: cannot read it: {e.strerror}", "check its permissions") from None
    for n in FIRECRACKER_FILES:
        f = target / n
        if n in names and (n not in owned or f.is_symlink() or not f.is_file()):
            raise UklError(f"--firecracker {target}: {n} there was not written by ukl pkg",
                           "move it away or choose another DIR")
    return owned


FIRECRACKER_FILES = ("vmlinux", "initramfs.cpio", FIRECRACKER_CONFIG)


def firecracker_dir(outdir: Path, target: Path, start: str = "auto") -> Path:
    """DIR with vmlinux (the uncompressed kernel: Firecracker boots an ELF),
    the initramfs and vm-config.json. A new DIR is written beside it and
    renamed; an earlier one gets each file replaced atomically. Only the
    files ukl pkg wrote there (its mark lists them) are ever replaced or
    removed: whatever else the user keeps in DIR stays."""
    man = image.load(outdir)
    vmlinux = _kernel_bytes(outdir, "firecracker")
    initrd = outdir / "initramfs.cpio"
    owned = _firecracker_owned(target)
    fc = firecracker_config(man, initrd.is_file(), pid1_start(outdir, man, start))
    files: dict[str, bytes] = {"vmlinux": vmlinux, FIRECRACKER_CONFIG: _json(fc)}
    if initrd.is_file():
        files["initramfs.cpio"] = initrd.read_bytes()
    mark = "".join(f"{n}\n" for n in sorted(files)).encode()
    if not target.exists():
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        except OSError as e:
            raise UklError(f"cannot write {target}: {e.strerror}", "check the path and its permissions") from None
        try:
            for n, data in files.items():
                (tmp / n).write_bytes(data)
            (tmp / FIRECRACKER_MARK).write_bytes(mark)
            tmp.chmod(0o755)
            os.rename(tmp, target)  # fails if DIR appeared meanwhile with something in it
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise UklError(f"cannot write {target}: {e.strerror}", "check the path and the free space") from None
        return target
    try:
        # the mark first lists every name this run may leave behind
        _replace_file(target / FIRECRACKER_MARK, "".join(f"{n}\n" for n in sorted(owned | set(files))).encode())
        for n, data in files.items():
            _replace_file(target / n, data)
        for n in owned - set(files):  # an earlier image's initramfs
            (target / n).unlink(missing_ok=True)
        _replace_file(target / FIRECRACKER_MARK, mark)
    except OSError as e:
        raise UklError(f"cannot write {target}: {e.strerror}", "check the path and the free space") from None
    return target


def _replace_file(path: Path, data: bytes) -> None:
    """PATH's content becomes DATA at once: a temporary file beside it, renamed over it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
