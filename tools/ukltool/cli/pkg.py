"""`ukl pkg`: an image as an OCI archive or a Firecracker directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from ukltool.build import image
from ukltool.cli.common import add_command
from ukltool.run import ocipkg
from ukltool.util import ui
from ukltool.util.errors import UklError


def pkg_parser(sub: argparse._SubParsersAction) -> None:
    pk = add_command(sub, "pkg", "package a build result: an OCI image for containerd/urunc, or Firecracker",
                     "Package OUTDIR (a `ukl build` result) as an OCI image archive that containerd imports (`ctr "
                     "image import FILE.tar`) and runs with the urunc runtime: one layer with the kernel, the "
                     "initramfs and /urunc.json; the application's arguments, environment and ports in the image "
                     "configuration. The same OUTDIR gives the same archive, byte for byte. docs/deploy.md shows the "
                     "way to `ctr run` and Kubernetes.",
                     ("ukl pkg out/hello --oci hello.tar",
                      "ukl pkg out/redis --oci redis.tar --tag docker.io/library/redis:latest",
                      "ukl pkg out/hello --firecracker out/hello-fc"), listed=False)
    pk.add_argument("outdir", type=Path, metavar="OUTDIR")
    pk.add_argument("--oci", type=Path, metavar="FILE.tar",
                    help="write an OCI image layout archive (a device or FIFO is written into, not replaced)")
    pk.add_argument("--firecracker", type=Path, metavar="DIR",
                    help="write DIR for Firecracker: the uncompressed kernel (vmlinux), the initramfs and "
                    "vm-config.json (`firecracker --no-api --config-file vm-config.json` in DIR; needs KVM: "
                    "docs/deploy.md)")
    pk.add_argument("--tag", metavar="REF",
                    help="the image's name, [DOMAIN/]PATH[:TAG] (default localhost/ukl/APP:latest); written "
                    "normalized as containerd's CRI names it (docker.io/library/redis:latest for redis)")
    pk.add_argument("--hypervisor", default="qemu", metavar="NAME",
                    help="the monitor urunc starts: qemu (default; boots bzImage) or firecracker (boots the "
                    "uncompressed vmlinux; needs KVM)")
    pk.add_argument("--start", choices=ocipkg.STARTS, default="auto",
                    help="what the kernel starts: init, which starts the application and reports its exit "
                    "status (urunc's exitStatus), or pid1, the application itself with eth0 configured by the "
                    "kernel from urunc's ip= (UKL images; no status report); auto (default): pid1 for a server "
                    "(an image with forwarded ports) where the image allows it, else init")
    pk.set_defaults(func=cmd_pkg)


def _started(outdir: Path, start: str) -> str:
    """What the kernel starts in the package, said for the user."""
    if ocipkg.pid1_start(outdir, image.load(outdir), start):
        return ("the application as PID 1 (no init: nothing mounted, only /dev/console in /dev, no exit "
                "status for urunc; --start init keeps init)")
    return "init, which starts the application"


def cmd_pkg(a: argparse.Namespace) -> int:
    if a.oci is None and a.firecracker is None:
        raise UklError("ukl pkg: say what to write", f"for example: ukl pkg {a.outdir} --oci image.tar")
    if a.firecracker is not None:
        if a.oci is not None or a.tag is not None:
            raise UklError("--firecracker writes a directory for Firecracker itself: no --oci or --tag with it",
                           "run ukl pkg once for each (an OCI image for Firecracker: --oci with "
                           "--hypervisor firecracker)")
        ocipkg.firecracker_dir(a.outdir, a.firecracker, a.start)
        ui.info(f"wrote {a.firecracker}, starting {_started(a.outdir, a.start)}: run `firecracker --no-api "
                f"--config-file {ocipkg.FIRECRACKER_CONFIG}` in it with a tap device {ocipkg.FIRECRACKER_TAP} "
                "(Firecracker needs KVM)")
        return 0
    pkg = ocipkg.package(a.outdir, a.oci, a.tag, a.hypervisor, a.start)
    ui.info(f"wrote {a.oci}: {pkg.reference} ({pkg.manifest.digest}), starting {_started(a.outdir, a.start)}; "
            f"import it with `ctr image import {a.oci}`")
    return 0
