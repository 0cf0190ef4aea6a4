"""`ukl run`: boot an image; the checks about a run."""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from ukltool.apps import recipes
from ukltool.build import image, initramfs
from ukltool.cli.cluster import recipe_nodes
from ukltool.cli.common import add_command, boot_opts, forward_arg, icount_option, option_list, timeout_option
from ukltool.linux import kernel, profiles
from ukltool.plugin import insnclass
from ukltool.run import cores, netns, remote, vm
from ukltool.util import ui
from ukltool.util.errors import UklError

EPILOG_RUN = f"""exit status: the application's status; 128+N when it was killed by
signal N; {vm.EXIT_TIMEOUT} on timeout; {vm.EXIT_KERNEL_FAILURE} when the kernel panicked, oopsed, hit BUG or
WARNING (the lines are shown); {vm.EXIT_NO_STATUS} when the VM ended without reporting a status;
{vm.EXIT_SHADOW_DIED} when the --remote shadow process ended (see OUTDIR/shadow.log)."""


# a unicast MAC address (the first octet's low bit clear)
MAC = re.compile(r"[0-9a-fA-F][02468aceACE](:[0-9a-fA-F]{2}){5}")


def run_smp(smp: int | None, icount: bool) -> int:
    """Virtual CPUs for `ukl run`: 2, or 1 with --icount (-icount with
    sleep=off cannot bring up a second CPU); --smp 2 --icount is refused."""
    if smp is None:
        return 1 if icount else 2
    if smp < 1:
        raise UklError(f"--smp {smp}: a VM needs at least one CPU", "give --smp 1 or more")
    if icount and smp > 1:
        raise UklError(f"--smp {smp} with --icount: QEMU's -icount sleep=off cannot start a second CPU",
                       "leave out --smp, or drop --icount")
    return smp


def run_parser(sub: argparse._SubParsersAction) -> None:
    r = add_command(sub, "run", "boot a build result in QEMU",
                    "Boot OUTDIR in QEMU, show the application's output and exit with its status. The application's "
                    "arguments follow `--`.\n\n" + EPILOG_RUN,
                    ("ukl run out/hello -- x y",
                     "ukl run out/redis --forward 6379:6379 --timeout 3600",
                     "ukl run out/us --sh 'ps; $UKL_APP x y'",
                     "ukl run out/hello --machine microvm --direct --pid1 -- x y",
                     "ukl run out/hello --machine microvm --direct --pid1 --no-initramfs"), listed=False)
    r.add_argument("outdir", type=Path, metavar="OUTDIR")
    timeout_option(r, 120.0)
    icount_option(r)
    r.add_argument("--append", action="append", default=[], metavar="ARGS", help="extra kernel command line")
    r.add_argument("--opts", metavar="OPTS",
                   help="UKL options for this boot, comma-separated, instead of those of the profile the image "
                   "was built for (for example --opts byp,byp-every=32; --opts '' for none): "
                   + option_list() + " (`ukl configs` describes them)")
    r.add_argument("--smp", type=int, default=None,
                   help="virtual CPUs (default 2; 1 with --icount, under which QEMU cannot start a second CPU)")
    r.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                   help="KVM or TCG (default auto: $UKL_ACCEL, else KVM where a test boot with it works, "
                   "decided once per QEMU and host kernel)")
    r.add_argument("--machine", choices=vm.MACHINES, default=None,
                   help="QEMU's machine: pc (the default: firmware, ACPI, PCI) or microvm (no PCI: virtio-mmio "
                   "devices; no --remote; the default for a kernel specialized for it)")
    r.add_argument("--direct", action="store_true",
                   help="boot the uncompressed kernel through its PVH entry: no firmware and no decompression "
                   "(the x86/HVM direct boot ABI, as Firecracker boots)")
    r.add_argument("--pid1", action="store_true",
                   help="the kernel starts the application itself, as PID 1: no init program, nothing mounted; "
                   "with --forward or --tap the kernel configures eth0 from ip= (UKL configurations; not "
                   "--userspace images)")
    r.add_argument("--no-initramfs", action="store_true",
                   help="with --pid1: load no initramfs; the kernel makes the application's file itself "
                   "(ukl.init=) and the application sees an empty root (no /etc, no /tmp; not for images "
                   "built with --file or --overlay)")
    r.add_argument("--core", type=Path, metavar="DIR",
                   help="let the application dump core (RLIMIT_CORE unlimited) and bring each core out into DIR "
                   "(made if needed; existing files are kept): `gdb VMLINUX DIR/core.NAME.PID`, the command "
                   "printed (docs/guide/debugging.md); not with --pid1")
    r.add_argument("--log", type=Path, help="console log file (default OUTDIR/console.log)")
    r.add_argument("-v", "--verbose", action="store_true", help="show the kernel's boot messages")
    r.add_argument("--count-insns", type=Path, metavar="FILE",
                   help="count what the guest executes with ukl's QEMU plugin (TCG only) and write its JSON "
                   "report to FILE: instructions per class, in all and per region the guest's code marks "
                   "(guest/bench/region.h), each region counting every vCPU")
    g = r.add_argument_group("network")
    g.add_argument("--forward", action="append", type=forward_arg, default=[], metavar="HOST:GUEST",
                   help="forward 127.0.0.1:HOST on the host to GUEST in the guest (TCP)")
    g.add_argument("--tap", metavar="IFNAME",
                   help="connect the guest's eth0 (10.0.2.15/24, gateway 10.0.2.2) to the existing tap device "
                   "IFNAME instead of QEMU's user network; --forward does not apply")
    g.add_argument("--mac", metavar="MAC",
                   help="eth0's MAC address (default QEMU's 52:54:00:12:34:56; guests on one network need their own)")
    g = r.add_argument_group("shell (busybox: the image's own with --userspace, else the test layer, which "
                             "this boot alone loads)")
    sh = g.add_mutually_exclusive_group()
    sh.add_argument("--sh", metavar="COMMANDS",
                    help="run this shell command line in the guest instead of the application and exit with its "
                    "status ($UKL_APP names the application)")
    sh.add_argument("--shell", action="store_true", help="an interactive shell on the serial console")
    g = r.add_argument_group("remote system calls")
    g.add_argument("--remote", type=Path, metavar="DIR",
                   help="remote system calls (runtime/ukl.h ukl_remote_*): a shadow process on the host, "
                   "confined to DIR and running as its owner, executes the application's calls on remote "
                   "files; its log is OUTDIR/shadow.log")
    g.add_argument("--remote-idle-us", type=int, default=1000, metavar="US",
                   help="the shadow polls this long after a request before it sleeps (default 1000; -1: "
                   "always poll, for latency measurements)")
    g.add_argument("--remote-notify", choices=["poll", "irq"], default="poll",
                   help="how a thread waits for the host's answer until it calls ukl_remote_poll() or "
                   "ukl_remote_irq(): spinning (default), or sleeping until the host's interrupt; "
                   "the host then sleeps between requests too")
    r.add_argument("args", nargs="*", metavar="ARGS", help="the application's arguments (put them after --)")
    r.set_defaults(func=cmd_run)


def check_pid1_run(a: argparse.Namespace, man: image.Manifest, sh: str | None,
                   forwards: list[tuple[int, int]]) -> None:
    """--pid1 is for an application that needs no init work."""
    why = None
    if not kernel.is_ukl(man.config):
        why = (f"it was built for '{man.config}', where the application is an ordinary program and the exit of "
               "PID 1 panics", "build it for a UKL configuration (--config base)")
    elif man.userspace:
        why = ("a --userspace image keeps its init (the shell and tools run beside the application)",
               "run it without --pid1")
    elif sh is not None:
        why = ("--sh and --shell need init, which starts the shell", "run it without --pid1")
    elif (forwards or a.tap) and not image.configures_ip(a.outdir, man):
        why = ("its kernel cannot configure eth0 from ip= (it has no IP_PNP: built before ukl gave it that), "
               "and with no init nothing else does", "rebuild it, or run it without --pid1")
    elif a.remote is not None:
        why = ("remote system calls are not supported with the application as PID 1", "run it without --pid1")
    elif a.no_initramfs and man.user_files:
        why = ("it carries files (--file or --overlay) that only its initramfs holds, or it was built before "
               "ukl recorded that", "run it without --no-initramfs, or rebuild it (without the files)")
    elif a.no_initramfs and man.recipe in recipes.names() and recipes.load(man.recipe).reads_etc:
        why = (f"its recipe says {man.recipe} reads the image's /etc (reads_etc), which only its initramfs holds",
               "run it without --no-initramfs")
    if why:
        raise UklError(f"--pid1: {a.outdir}: {why[0]}", why[1])
    own_ip = [w for w in a.append if w.startswith("ip=")]
    if forwards and own_ip and not own_ip[-1].startswith(f"ip={netns.GUEST_IP}:"):
        ui.warn(f"--append {own_ip[-1]}: QEMU forwards the ports to {netns.GUEST_IP}, which eth0 will not have")


def run_machine(asked: str | None, man: image.Manifest, outdir: Path, remote: bool) -> str:
    """The machine to boot OUTDIR's image on: ASKED, else the one its kernel
    was specialized for, else pc. A kernel for microvm alone has no PCI,
    which -M pc's ACPI tables and network device and the remote-call ring
    need."""
    only = image.machine_of(man)
    if only is None:
        return asked or "pc"
    if asked not in (None, only) or remote:
        what = "--remote (its ring is a PCI device)" if remote else f"--machine {asked}"
        raise UklError(f"{what}: the kernel of {outdir} was specialized for -M {only} alone (no PCI)",
                       f"run it under --machine {only}, or rebuild without --machine {only}")
    if asked is None:
        ui.info(f"booting under -M {only}: the image's kernel was specialized for it")
    return only


def cmd_run(a: argparse.Namespace) -> int:
    man = image.load(a.outdir)  # refuses what is not a build result
    sh = "" if a.shell else a.sh
    if sh is not None and a.args:
        raise UklError("application arguments cannot be combined with --sh or --shell",
                       f"start the application in the command line: --sh '/ukl/{man.app} ARGS'")
    if a.shell and not sys.stdin.isatty():
        raise UklError("--shell needs a terminal on standard input", "use --sh 'COMMANDS' in scripts")
    log = a.log or a.outdir / "console.log"
    app_args = a.args if a.args or sh is not None else man.args
    nodes = recipe_nodes(man)
    if nodes and sh is None and not a.tap:
        ui.warn(f"{man.recipe} runs on {nodes} guests: `ukl cluster {a.outdir}` boots them; this is one alone")
    if a.tap and a.forward:
        raise UklError("--forward and --tap cannot be combined: a tap device gives the guest its own address",
                       "connect to 10.0.2.15 through the tap device instead")
    if a.tap and not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", a.tap):
        raise UklError(f"--tap {a.tap!r} is not a network interface name QEMU can take",
                       "name it with up to 15 letters, digits, '_', '.' or '-'")
    if a.tap and not Path(f"/sys/class/net/{a.tap}/tun_flags").is_file():
        raise UklError(f"--tap {a.tap}: no tap device of that name in this network namespace",
                       f"create it first: ip tuntap add dev {a.tap} mode tap; ip link set {a.tap} up")
    if a.mac is not None and not MAC.fullmatch(a.mac):
        raise UklError(f"--mac {a.mac!r} is not a unicast MAC address",
                       "write six hex pairs with colons, the first even: 52:54:00:12:34:57")
    if a.remote is not None and not a.remote.is_dir():
        raise UklError(f"--remote {a.remote}: not a directory",
                       "name an existing directory on the host for the application's remote files")
    if a.remote_idle_us < -1:
        raise UklError(f"--remote-idle-us {a.remote_idle_us}: must be -1 (always poll) or at least 0",
                       "for example --remote-idle-us 1000")
    forwards = [] if a.tap else a.forward or [(f[0], f[1]) for f in man.forwards]
    if (a.tap or a.forward) and not image.has_network_device(man):
        raise UklError(f"{'--tap' if a.tap else '--forward'}: the kernel of {a.outdir} has no network device "
                       "(a specialized kernel gets one where the application's code can listen or reach "
                       "another address)",
                       "rebuild with --specialize --kconfig nic:WHY to add it, or without --specialize")
    a.machine = run_machine(a.machine, man, a.outdir, a.remote is not None)
    vm.check_machine(vm.RunSpec(bzimage=a.outdir / "bzImage", initrds=[], log=log, machine=a.machine,
                                remote=a.remote))
    if a.pid1:
        check_pid1_run(a, man, sh, forwards)
    if a.core is not None:
        check_core_run(a, man)
    plugins = [] if a.count_insns is None else [count_insns_option(a.count_insns)]
    append = list(a.append)
    if a.opts is not None:
        opts = boot_opts(a.opts, man, a.outdir)
        append.append(f"{profiles.KERNEL_PARAM}={','.join(opts)}")
    with tempfile.TemporaryDirectory(prefix="ukl-args-") as td:
        extra = initramfs.args_archive(app_args, Path(td), sh)
        disk = cores.make_disk(Path(td) / "cores.img", remote.parse_memory(vm.RunSpec.memory)) \
            if a.core is not None else None
        initrds = image.boot_initrds(a.outdir, man, [extra], sh is not None)
        res = vm.boot(vm.RunSpec(bzimage=a.outdir / "bzImage", initrds=initrds,
                                 log=log, timeout=a.timeout, icount=a.icount, append=append,
                                 forwards=forwards, tap=a.tap, smp=run_smp(a.smp, a.icount), verbose=a.verbose,
                                 interactive=a.shell, accel=None if a.accel == "auto" else a.accel,
                                 remote=a.remote.resolve() if a.remote else None,
                                 remote_idle_us=a.remote_idle_us, remote_notify=a.remote_notify,
                                 side_dir=a.outdir, machine=a.machine, direct=a.direct,
                                 pid1=f"/ukl/{man.app}" if a.pid1 else None, pid1_args=list(app_args),
                                 initramfs=not a.no_initramfs, core_disk=disk, mac=a.mac, config=man.config,
                                 plugins=plugins))
        if disk is not None:
            show_cores(disk, a.core, man, a.outdir)
    if res.failures:
        ui.err.print(f"[bold red]ukl: the kernel failed[/] (log: {log}):")
        for line in res.failures[:40]:
            ui.err.print(f"  {line}", markup=False)
    elif res.timed_out:
        ui.err.print(f"[bold red]ukl: timed out[/] after {a.timeout:.0f}s (log: {log})")
    elif res.code == vm.EXIT_SHADOW_DIED:
        ui.err.print(f"[bold red]ukl: the remote shadow process ended[/] (log: {a.outdir / 'shadow.log'})")
    elif res.status is None:
        ui.err.print(f"[bold red]ukl: the VM ended without reporting a status[/] (log: {log})")
    return res.code


def count_insns_option(report: Path) -> str:
    """The plugin option for --count-insns REPORT: machine-wide regions.
    REPORT is written as REPORT.partial and renamed, so it may not be a
    folder or a special file."""
    if not report.parent.is_dir():
        raise UklError(f"--count-insns {report}: {report.parent} is not a directory", "make it first")
    if report.is_symlink() or (report.exists() and not report.is_file()):
        raise UklError(f"--count-insns {report}: it exists and is not a plain file",
                       "name a new file, or a report written before")
    return insnclass.option(insnclass.build(), report.resolve(), machine=True)


def check_core_run(a: argparse.Namespace, man: image.Manifest) -> None:
    if a.pid1:
        raise UklError("--core needs ukl's init, which brings the cores out: not with --pid1",
                       "run without --pid1")
    cores.check_dest(a.core)
    if not image.has_block_device(man):
        raise UklError(f"--core: the kernel of {a.outdir} has no virtio disk driver, through which the cores "
                       "come out", "rebuild it with --specialize --kconfig VIRTIO_BLK:WHY, or without --specialize")


def show_cores(disk: Path, dest: Path, man: image.Manifest, outdir: Path) -> None:
    saved, finished = cores.extract(disk, dest)
    for c in saved:
        ui.err.print(f"ukl: core: {c.path} ({c.size} bytes)", markup=False)
    if not finished:
        ui.err.print("ukl: the guest did not finish writing its cores (it ended before the application did)",
                     markup=False)
    elif not saved:
        ui.err.print("ukl: no core was dumped", markup=False)
    if saved and kernel.is_ukl(man.config):
        ui.err.print(f"ukl: debug with: gdb {man.vmlinux_path()} {saved[0].path}", markup=False)
    elif saved:  # an ordinary process: its program is in the initramfs
        ui.err.print(f"ukl: debug with: gdb PROGRAM {saved[0].path} (PROGRAM: /bin/{man.app} of "
                     f"{outdir / 'initramfs.cpio'})", markup=False)
